/*
 * hookcons: see hookcons.h. One request at a time, which is all the tests need: the worker's
 * dispatches queue in the listen backlog.
 */
#include "hookcons.h"

#include "hooks.h"
#include "id.h"
#include "mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define S_REQ_MAX     (256 * 1024) /* a request's bytes, head and body */
#define S_ANSWERS_MAX 8

typedef struct {
    char event[32]; /* "" = the default */
    int status;
    char body[512];
    bool hang;
} s_answer_t;

struct hookcons {
    pthread_mutex_t mu;
    pthread_t thread;
    int fd;
    int port;
    bool stop;
    s_answer_t answers[S_ANSWERS_MAX];
    int n_answers;
    int hung[HOOKCONS_SEEN_MAX];
    int n_hung;
    char *heads[HOOKCONS_SEEN_MAX];
    char *bodies[HOOKCONS_SEEN_MAX];
    int seen;
};

/* The value of header name in head (a copy), or NULL. */
static char *s_header(const char *head, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = head; p && *p;) {
        if (!strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') {
                v++;
            }
            return mem_strndup(v, strcspn(v, "\r\n"));
        }
        const char *next = strstr(p, "\r\n");
        p = next ? next + 2 : NULL;
    }
    return NULL;
}

static const s_answer_t *s_pick(hookcons_t *c, const char *body) {
    json_t *v = json_loads(body, 0, NULL);
    const char *ev = json_string_value(json_object_get(v, "event"));
    const s_answer_t *dflt = NULL;
    const s_answer_t *own = NULL;
    for (int i = 0; i < c->n_answers; i++) {
        if (!c->answers[i].event[0]) {
            dflt = &c->answers[i];
        } else if (ev && !strcmp(ev, c->answers[i].event)) {
            own = &c->answers[i];
        }
    }
    json_decref(v);
    return own ? own : dflt;
}

static void s_serve(hookcons_t *c, int fd) {
    char *buf = mem_alloc(S_REQ_MAX + 1);
    size_t len = 0;
    char *body = NULL;
    size_t want = 0;
    while (len < S_REQ_MAX) {
        ssize_t n = read(fd, buf + len, S_REQ_MAX - len);
        if (n <= 0) {
            break;
        }
        len += (size_t)n;
        buf[len] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end && !body) {
            char *cl = s_header(buf, "Content-Length");
            want = cl ? (size_t)strtoul(cl, NULL, 10) : 0;
            free(cl);
            body = end + 4;
        }
        if (body && (size_t)(buf + len - body) >= want) {
            break;
        }
    }
    if (!body) {
        free(buf);
        close(fd);
        return;
    }
    char *text = mem_strndup(body, want);
    body[0] = 0; /* buf is now the head */
    pthread_mutex_lock(&c->mu);
    const s_answer_t *a = s_pick(c, text);
    s_answer_t ans = a ? *a : (s_answer_t){.status = 200, .body = "{}"};
    if (c->seen < HOOKCONS_SEEN_MAX) {
        c->heads[c->seen] = mem_strdup(buf);
        c->bodies[c->seen] = text;
        c->seen++;
    } else {
        free(text);
    }
    if (ans.hang && c->n_hung < HOOKCONS_SEEN_MAX) {
        c->hung[c->n_hung++] = fd; /* never answered; closed by hookcons_destroy */
        pthread_mutex_unlock(&c->mu);
        free(buf);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    char *resp = mem_printf("HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                            ans.status, strlen(ans.body), ans.body);
    ssize_t w = write(fd, resp, strlen(resp));
    (void)w; /* a client that left needs no answer */
    free(resp);
    free(buf);
    close(fd);
}

static void *s_main(void *arg) {
    hookcons_t *c = arg;
    for (;;) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, 50);
        pthread_mutex_lock(&c->mu);
        bool stop = c->stop;
        pthread_mutex_unlock(&c->mu);
        if (stop) {
            return NULL;
        }
        if (r == 1) {
            int fd = accept(c->fd, NULL, NULL);
            if (fd >= 0) {
                (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* best effort, as for the listener */
                /* A client stopped mid-request (a SIGSTOPped worker) holds up no other. */
                struct timeval tv = {.tv_sec = 2};
                (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                s_serve(c, fd);
            }
        }
    }
}

hookcons_t *hookcons_new(int port) {
    hookcons_t *c = mem_calloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* no child inherits it */
    ASSERT(c->fd >= 0);
    int one = 1;
    setsockopt(c->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* The port of a consumer just stopped may still be held for a moment: retry a while. */
    int64_t deadline = id_now_ms() + 10000;
    while (bind(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (id_now_ms() > deadline) {
            fprintf(stderr, "hookcons: bind to port %d: %s\n", port, strerror(errno));
            ASSERT(0);
        }
        usleep(100 * 1000);
    }
    ASSERT(listen(c->fd, 64) == 0);
    socklen_t al = sizeof a;
    ASSERT(getsockname(c->fd, (struct sockaddr *)&a, &al) == 0);
    c->port = ntohs(a.sin_port);
    ASSERT(pthread_create(&c->thread, NULL, s_main, c) == 0);
    return c;
}

void hookcons_destroy(hookcons_t **self_p) {
    hookcons_t *c = self_p ? *self_p : NULL;
    if (!c) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    close(c->fd);
    for (int i = 0; i < c->n_hung; i++) {
        close(c->hung[i]);
    }
    for (int i = 0; i < c->seen; i++) {
        free(c->heads[i]);
        free(c->bodies[i]);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
    *self_p = NULL;
}

int hookcons_port(const hookcons_t *self) {
    return self->port;
}

void hookcons_answer(hookcons_t *self, const char *event, int status, const char *body, bool hang) {
    pthread_mutex_lock(&self->mu);
    int i = 0;
    while (i < self->n_answers && strcmp(self->answers[i].event, event ? event : "")) {
        i++;
    }
    ASSERT(i < S_ANSWERS_MAX);
    if (i == self->n_answers) {
        self->n_answers++;
    }
    s_answer_t *a = &self->answers[i];
    snprintf(a->event, sizeof a->event, "%s", event ? event : "");
    a->status = status;
    snprintf(a->body, sizeof a->body, "%s", body);
    a->hang = hang;
    pthread_mutex_unlock(&self->mu);
}

int hookcons_seen(hookcons_t *self) {
    pthread_mutex_lock(&self->mu);
    int n = self->seen;
    pthread_mutex_unlock(&self->mu);
    return n;
}

char *hookcons_body(hookcons_t *self, int i) {
    pthread_mutex_lock(&self->mu);
    char *b = i < self->seen ? mem_strdup(self->bodies[i]) : NULL;
    pthread_mutex_unlock(&self->mu);
    return b;
}

char *hookcons_header(hookcons_t *self, int i, const char *name) {
    pthread_mutex_lock(&self->mu);
    char *h = i < self->seen ? s_header(self->heads[i], name) : NULL;
    pthread_mutex_unlock(&self->mu);
    return h;
}

/* True when ev's sent_at is RFC 3339 UTC with milliseconds within five minutes of this host's
 * wall clock (what a consumer's replay check reads), and the old monotonic field is gone. */
static bool s_sent_at_ok(const json_t *ev) {
    const char *at = json_string_value(json_object_get(ev, "sent_at"));
    struct tm tm = {0};
    int ms = -1, end = 0;
    if (!at || strlen(at) != ID_RFC3339_MS_LEN || json_object_get(ev, "sent_at_ms") ||
        sscanf(at, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &end) != 7 ||
        end != ID_RFC3339_MS_LEN || ms < 0) {
        return false;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t sent = timegm(&tm);
    time_t now = time(NULL);
    return sent > now - 300 && sent < now + 300;
}

json_t *hookcons_events(hookcons_t *self, int from, const char *chat, const char *secret) {
    json_t *out = json_array();
    int n = hookcons_seen(self);
    for (int i = from; out && i < n; i++) {
        char *body = hookcons_body(self, i);
        char *sig = hookcons_header(self, i, HOOKS_SIGNATURE_HEADER);
        char want[100];
        json_t *v = json_loads(body, 0, NULL);
        if (!sig || hooks_sign(secret, body, strlen(body), want, sizeof want) != 0 ||
            strcmp(sig, want) || !json_is_object(v) || !s_sent_at_ok(v)) {
            json_decref(out);
            out = NULL;
        } else if (json_is_string(json_object_get(v, "chat_id")) &&
                   !strcmp(json_string_value(json_object_get(v, "chat_id")), chat)) {
            json_array_append(out, v);
        }
        json_decref(v);
        free(body);
        free(sig);
    }
    return out;
}

const char *hookcons_str(const json_t *ev, const char *key, bool in_data) {
    const json_t *from = in_data ? json_object_get(ev, "data") : ev;
    const char *v = json_string_value(json_object_get(from, key));
    return v ? v : "";
}
