/* ssefan: many SSE clients on one epoll; see ssefan.h. */
#define _GNU_SOURCE /* strcasestr */
#include "ssefan.h"
#include "id.h"
#include "mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define SSEFAN_READ_BYTES  65536 /* one recv; shared by every connection */
#define SSEFAN_EVENTS_MAX  512   /* epoll events taken per wait */
#define SSEFAN_NAME_BYTES  64    /* an event name longer than this is truncated */
#define SSEFAN_SIZE_BYTES  32    /* a chunk-size line longer than this fails the connection */
#define SSEFAN_TOKEN_BYTES 512   /* the bearer token */

typedef enum { B_SIZE = 0, B_DATA, B_CRLF, B_END } body_state_t;

typedef struct {
    int fd;
    ssefan_state_t state;
    int status;
    int64_t first_part_us;
    int counts[SSEFAN_NAMES_MAX];
    char *path;
    char *out; /* the request while it is being sent */
    size_t out_len;
    size_t out_off;
    char *head; /* the response head while it is being read (SSEFAN_HEAD_MAX_BYTES) */
    size_t head_len;
    bool chunked;
    body_state_t body;
    size_t chunk_left;
    char size_line[SSEFAN_SIZE_BYTES];
    size_t size_len;
    char *line; /* the SSE line being read (SSEFAN_LINE_MAX_BYTES) */
    size_t line_len;
    size_t line_cap;
    char *data; /* the event's joined data lines (bounded by the line bound per line) */
    size_t data_len;
    size_t data_cap;
    bool has_data;
    char event[SSEFAN_NAME_BYTES];
} conn_t;

struct ssefan {
    int ep;
    struct sockaddr_in addr;
    char host[64];
    char token[SSEFAN_TOKEN_BYTES];
    bool has_token;
    conn_t *conns;
    int n;
    int cap;
    int next_queued; /* conns below this have left SSEFAN_QUEUED */
    int connecting;
    int connecting_max; /* SSEFAN_CONNECTING_MAX unless ssefan_set_pace said otherwise */
    char names[SSEFAN_NAMES_MAX][SSEFAN_NAME_BYTES];
    int nnames;
    ssefan_event_fn *fn;
    void *ctx;
    int parsed; /* events in the current poll */
    char *rbuf;
};

int64_t ssefan_now_us(void) {
    return id_now_us();
}

long ssefan_raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return -1;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0) {
            return -1;
        }
    }
    return rl.rlim_cur == RLIM_INFINITY ? 1L << 30 : (long)rl.rlim_cur;
}

ssefan_t *ssefan_new(const char *base_url, const char *token) {
    const char *p = base_url && !strncmp(base_url, "http://", 7) ? base_url + 7 : NULL;
    const char *colon = p ? strrchr(p, ':') : NULL;
    if (!colon || (size_t)(colon - p) >= sizeof((ssefan_t *)0)->host) {
        return NULL;
    }
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (port <= 0 || port > 65535 || (*end && *end != '/')) {
        return NULL;
    }
    ssefan_t *self = mem_calloc(1, sizeof *self);
    memcpy(self->host, p, (size_t)(colon - p));
    self->addr.sin_family = AF_INET;
    self->addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, self->host, &self->addr.sin_addr) != 1 ||
        (token && strlen(token) >= sizeof self->token)) {
        free(self);
        return NULL;
    }
    if (token) {
        snprintf(self->token, sizeof self->token, "%s", token);
        self->has_token = true;
    }
    self->ep = epoll_create1(EPOLL_CLOEXEC);
    if (self->ep < 0) {
        free(self);
        return NULL;
    }
    self->rbuf = mem_alloc(SSEFAN_READ_BYTES);
    self->connecting_max = SSEFAN_CONNECTING_MAX;
    ssefan_raise_nofile();
    return self;
}

static void s_release(ssefan_t *self, conn_t *c, ssefan_state_t state) {
    if (c->fd >= 0) {
        close(c->fd); /* also leaves the epoll set */
        c->fd = -1;
    }
    if (c->state == SSEFAN_CONNECTING) {
        self->connecting--;
    }
    c->state = state;
    free(c->out);
    free(c->head);
    free(c->line);
    free(c->data);
    c->out = c->head = c->line = c->data = NULL;
    c->line_cap = c->data_cap = 0;
}

void ssefan_destroy(ssefan_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    ssefan_t *self = *self_p;
    for (int i = 0; i < self->n; i++) {
        s_release(self, &self->conns[i], SSEFAN_CLOSED);
        free(self->conns[i].path);
    }
    free(self->conns);
    free(self->rbuf);
    close(self->ep);
    free(self);
    *self_p = NULL;
}

void ssefan_set_pace(ssefan_t *self, int connecting_max) {
    self->connecting_max = connecting_max > 0 ? connecting_max : 1;
}

void ssefan_set_handler(ssefan_t *self, ssefan_event_fn *fn, void *ctx) {
    self->fn = fn;
    self->ctx = ctx;
}

int ssefan_open(ssefan_t *self, const char *path) {
    if (self->n == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 64;
        self->conns = mem_realloc(self->conns, (size_t)self->cap * sizeof *self->conns);
    }
    conn_t *c = &self->conns[self->n];
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->path = mem_strdup(path);
    return self->n++;
}

static void s_connect(ssefan_t *self, int i) {
    conn_t *c = &self->conns[i];
    c->state = SSEFAN_CONNECTING;
    self->connecting++;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        s_release(self, c, SSEFAN_FAILED);
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&self->addr, sizeof self->addr) != 0 &&
        errno != EINPROGRESS) {
        s_release(self, c, SSEFAN_FAILED);
        return;
    }
    if (self->has_token) {
        c->out = mem_printf("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n"
                            "Authorization: Bearer %s\r\n\r\n",
                            c->path, self->host, ntohs(self->addr.sin_port), self->token);
    } else {
        c->out = mem_printf("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n\r\n",
                            c->path, self->host, ntohs(self->addr.sin_port));
    }
    c->out_len = strlen(c->out);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)i};
    if (epoll_ctl(self->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        s_release(self, c, SSEFAN_FAILED);
    }
}

static int s_name(ssefan_t *self, const char *name) {
    for (int i = 0; i < self->nnames; i++) {
        if (!strcmp(self->names[i], name)) {
            return i;
        }
    }
    if (self->nnames == SSEFAN_NAMES_MAX) {
        return -1;
    }
    snprintf(self->names[self->nnames], SSEFAN_NAME_BYTES, "%s", name);
    return self->nnames++;
}

static void s_dispatch(ssefan_t *self, int i, int64_t now_us) {
    conn_t *c = &self->conns[i];
    const char *name = c->event[0] ? c->event : "message";
    int k = s_name(self, name);
    if (k >= 0) {
        c->counts[k]++;
    }
    if (!c->first_part_us && !strcmp(name, "message_part")) {
        c->first_part_us = now_us;
    }
    self->parsed++;
    if (self->fn) {
        self->fn(self->ctx, i, name, c->data ? c->data : "", c->data_len, now_us);
    }
    c->event[0] = '\0';
    c->data_len = 0;
    c->has_data = false;
    if (c->data) {
        c->data[0] = '\0';
    }
}

/* One complete SSE line (without its newline). */
static void s_line(ssefan_t *self, int i, int64_t now_us) {
    conn_t *c = &self->conns[i];
    size_t n = c->line_len;
    const char *l = c->line ? c->line : "";
    if (n && l[n - 1] == '\r') {
        n--;
    }
    if (n == 0) {
        if (c->has_data || c->event[0]) {
            s_dispatch(self, i, now_us);
        }
        return;
    }
    if (l[0] == ':') {
        return; /* a comment (keep-alive) */
    }
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = n - (size_t)(v - l);
    if (vl && *v == ' ') {
        v++;
        vl--;
    }
    if (fl == 5 && !memcmp(l, "event", 5)) {
        size_t k = vl < SSEFAN_NAME_BYTES - 1 ? vl : SSEFAN_NAME_BYTES - 1;
        memcpy(c->event, v, k);
        c->event[k] = '\0';
    } else if (fl == 4 && !memcmp(l, "data", 4)) {
        size_t need = c->data_len + vl + 2;
        if (need > c->data_cap) {
            c->data_cap = need * 2;
            c->data = mem_realloc(c->data, c->data_cap);
        }
        if (c->has_data) {
            c->data[c->data_len++] = '\n';
        }
        memcpy(c->data + c->data_len, v, vl);
        c->data_len += vl;
        c->data[c->data_len] = '\0';
        c->has_data = true;
    }
}

/* Body bytes (chunked framing removed) into the SSE parser; -1 on a line over the bound. */
static int s_sse(ssefan_t *self, int i, const char *p, size_t n, int64_t now_us) {
    conn_t *c = &self->conns[i];
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        if (c->line_len + take + 1 > c->line_cap) {
            if (c->line_len + take + 1 > SSEFAN_LINE_MAX_BYTES) {
                return -1;
            }
            c->line_cap = (c->line_len + take + 1) * 2;
            c->line = mem_realloc(c->line, c->line_cap);
        }
        memcpy(c->line + c->line_len, p, take);
        c->line_len += take;
        c->line[c->line_len] = '\0';
        p += take;
        n -= take;
        if (nl) {
            s_line(self, i, now_us);
            c->line_len = 0;
            p++;
            n--;
        }
        if (c->state != SSEFAN_OPEN) {
            return 0; /* the callback closed it */
        }
    }
    return 0;
}

/* Response body bytes; -1 on a framing error, 1 when the body has ended. */
static int s_body(ssefan_t *self, int i, const char *p, size_t n, int64_t now_us) {
    conn_t *c = &self->conns[i];
    if (!c->chunked) {
        return s_sse(self, i, p, n, now_us);
    }
    while (n > 0 && c->state == SSEFAN_OPEN) {
        if (c->body == B_SIZE || c->body == B_CRLF) {
            char ch = *p++;
            n--;
            if (ch != '\n') {
                if (c->body == B_SIZE) {
                    if (c->size_len + 1 >= sizeof c->size_line) {
                        return -1;
                    }
                    c->size_line[c->size_len++] = ch;
                }
                continue;
            }
            if (c->body == B_CRLF) {
                c->body = B_SIZE;
                continue;
            }
            c->size_line[c->size_len] = '\0';
            c->size_len = 0;
            char *end = NULL;
            unsigned long long sz = strtoull(c->size_line, &end, 16);
            if (end == c->size_line) {
                return -1;
            }
            if (sz == 0) {
                c->body = B_END;
                return 1;
            }
            c->chunk_left = (size_t)sz;
            c->body = B_DATA;
        } else if (c->body == B_DATA) {
            size_t take = n < c->chunk_left ? n : c->chunk_left;
            if (s_sse(self, i, p, take, now_us) != 0) {
                return -1;
            }
            p += take;
            n -= take;
            c->chunk_left -= take;
            if (c->chunk_left == 0) {
                c->body = B_CRLF;
            }
        } else {
            return 1;
        }
    }
    return 0;
}

/* Response head bytes; returns how many were taken, or -1 on a bad head. */
static long s_head(ssefan_t *self, int i, const char *p, size_t n) {
    conn_t *c = &self->conns[i];
    if (!c->head) {
        c->head = mem_alloc(SSEFAN_HEAD_MAX_BYTES + 1);
    }
    size_t room = SSEFAN_HEAD_MAX_BYTES - c->head_len;
    size_t take = n < room ? n : room;
    size_t old = c->head_len;
    memcpy(c->head + old, p, take);
    c->head_len += take;
    c->head[c->head_len] = '\0';
    char *end = strstr(c->head, "\r\n\r\n");
    if (!end) {
        return c->head_len == SSEFAN_HEAD_MAX_BYTES ? -1 : (long)take;
    }
    size_t used = (size_t)(end + 4 - c->head) - old;
    *end = '\0';
    if (strncmp(c->head, "HTTP/1.", 7) != 0 || strlen(c->head) < 12) {
        return -1;
    }
    c->status = (int)strtol(c->head + 9, NULL, 10);
    for (char *h = strstr(c->head, "\r\n"); h; h = strstr(h + 2, "\r\n")) {
        if (!strncasecmp(h + 2, "Transfer-Encoding:", 18) && strcasestr(h + 20, "chunked")) {
            c->chunked = true;
        }
    }
    free(c->head);
    c->head = NULL;
    self->connecting--;
    c->state = SSEFAN_OPEN;
    return (long)used;
}

static void s_readable(ssefan_t *self, int i) {
    conn_t *c = &self->conns[i];
    for (;;) {
        ssize_t r = recv(c->fd, self->rbuf, SSEFAN_READ_BYTES, 0);
        if (r == 0) {
            s_release(self, c, c->state == SSEFAN_OPEN ? SSEFAN_CLOSED : SSEFAN_FAILED);
            return;
        }
        if (r < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                s_release(self, c, c->state == SSEFAN_OPEN ? SSEFAN_CLOSED : SSEFAN_FAILED);
            }
            return;
        }
        int64_t now = ssefan_now_us();
        const char *p = self->rbuf;
        size_t n = (size_t)r;
        if (c->state == SSEFAN_CONNECTING) {
            long used = s_head(self, i, p, n);
            if (used < 0) {
                s_release(self, c, SSEFAN_FAILED);
                return;
            }
            p += used;
            n -= (size_t)used;
        }
        if (c->state == SSEFAN_OPEN && n > 0) {
            int rc = s_body(self, i, p, n, now);
            if (rc != 0) {
                s_release(self, c, rc > 0 ? SSEFAN_CLOSED : SSEFAN_FAILED);
                return;
            }
        }
        if (c->state != SSEFAN_OPEN && c->state != SSEFAN_CONNECTING) {
            return;
        }
    }
}

static void s_writable(ssefan_t *self, int i) {
    conn_t *c = &self->conns[i];
    if (!c->out) {
        return;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        s_release(self, c, SSEFAN_FAILED);
        return;
    }
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return;
            }
            s_release(self, c, SSEFAN_FAILED);
            return;
        }
        c->out_off += (size_t)w;
    }
    free(c->out);
    c->out = NULL;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
    if (epoll_ctl(self->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
        s_release(self, c, SSEFAN_FAILED);
    }
}

int ssefan_poll(ssefan_t *self, int timeout_ms) {
    self->parsed = 0;
    int64_t deadline = ssefan_now_us() + (int64_t)timeout_ms * 1000;
    struct epoll_event evs[SSEFAN_EVENTS_MAX];
    for (;;) {
        while (self->next_queued < self->n && self->connecting < self->connecting_max) {
            int i = self->next_queued++;
            if (self->conns[i].state == SSEFAN_QUEUED) {
                s_connect(self, i);
            }
        }
        int64_t left_us = deadline - ssefan_now_us();
        int wait_ms = left_us > 0 ? (int)((left_us + 999) / 1000) : 0;
        int k = epoll_wait(self->ep, evs, SSEFAN_EVENTS_MAX, wait_ms);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        for (int e = 0; e < k; e++) {
            int i = (int)evs[e].data.u64;
            conn_t *c = &self->conns[i];
            if (c->fd < 0) {
                continue;
            }
            if (evs[e].events & EPOLLOUT) {
                s_writable(self, i);
            }
            if (c->fd >= 0 && (evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                s_readable(self, i);
            }
        }
        /* A full batch: more may be ready (a poll drains what is ready, timeout 0 too). */
        if (k < SSEFAN_EVENTS_MAX && ssefan_now_us() >= deadline) {
            return self->parsed;
        }
    }
}

void ssefan_close(ssefan_t *self, int conn) {
    if (conn >= 0 && conn < self->n) {
        conn_t *c = &self->conns[conn];
        if (c->state != SSEFAN_FAILED) {
            s_release(self, c, SSEFAN_CLOSED);
        }
    }
}

int ssefan_size(const ssefan_t *self) {
    return self->n;
}

ssefan_state_t ssefan_state(const ssefan_t *self, int conn) {
    return conn >= 0 && conn < self->n ? self->conns[conn].state : SSEFAN_FAILED;
}

int ssefan_status(const ssefan_t *self, int conn) {
    return conn >= 0 && conn < self->n ? self->conns[conn].status : 0;
}

int ssefan_count(const ssefan_t *self, int conn, const char *name) {
    if (conn < 0 || conn >= self->n) {
        return 0;
    }
    for (int k = 0; k < self->nnames; k++) {
        if (!strcmp(self->names[k], name)) {
            return self->conns[conn].counts[k];
        }
    }
    return 0;
}

int64_t ssefan_first_part_us(const ssefan_t *self, int conn) {
    return conn >= 0 && conn < self->n ? self->conns[conn].first_part_us : 0;
}

int ssefan_in_state(const ssefan_t *self, ssefan_state_t state) {
    int n = 0;
    for (int i = 0; i < self->n; i++) {
        n += self->conns[i].state == state;
    }
    return n;
}
