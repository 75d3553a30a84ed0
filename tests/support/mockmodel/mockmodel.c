/* mockmodel: the evented OpenAI-wire mock model server; see mockmodel.h. */
#include "mockmodel.h"
#include "log.h"
#include "mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define S_EVENTS_MAX       512
#define S_IN_FIRST_BYTES   4096
#define S_OUT_FIRST_BYTES  4096
#define S_MODEL_MAX_BYTES  64   /* the request's model name echoed back, cut at this size */
#define S_MODEL_JSON_BYTES 400  /* that name as a JSON literal: 6 bytes per byte at worst */
#define S_EVENT_MAX_BYTES  2048 /* one SSE event's JSON */
#define S_BURST_MAX_BYTES  8192 /* the bytes one timer writes (a delta, or the closing events) */
#define S_ACCEPT_PAUSE_MS  100  /* the listener rests this long when the process is out of fds */
#define S_NO_TIMER         ((size_t)-1)
#define S_NS_PER_MS        1000000LL

typedef enum {
    S_READ,    /* reading (or waiting for) the next request */
    S_REPLY,   /* a chat reply in progress, paced by the timer heap */
    S_STALL,   /* a stalled request: read, never answered */
    S_CLOSING, /* the last response is queued; close once it is flushed */
} s_state_t;

typedef struct s_conn {
    int fd;
    uint64_t id;
    s_state_t state;
    bool dead; /* closed; freed at the end of the loop pass (events may still name it) */
    uint32_t events;
    struct s_conn *prev;
    struct s_conn *next;
    struct s_conn *next_dead;
    /* Input: request bytes, bounded by the configured request cap; NULL when empty. */
    char *in;
    size_t in_len;
    size_t in_cap;
    /* Output the socket did not take yet, bounded by MOCKMODEL_OUT_MAX_BYTES. */
    char *out;
    size_t out_off;
    size_t out_len;
    size_t out_cap;
    bool sent_continue; /* "100 Continue" already sent for the request being read */
    bool close_after;   /* the request asked for Connection: close, or was HTTP/1.0 */
    /* The reply in progress. */
    bool chunked;
    bool streaming;
    int64_t start_ns;
    int64_t duration_ns;
    int chunks;
    int sent;
    size_t heap_idx;
    int64_t deadline_ns;
    uint64_t reply_id;
    int64_t created;
    int64_t prompt_tokens;
    char model[S_MODEL_JSON_BYTES];
} s_conn_t;

struct mockmodel {
    mockmodel_config_t cfg;
    char *listen;
    int lfd;
    int port;
    int ep;
    int stop_tag; /* its address marks the stop fd's epoll events */
    bool listen_paused;
    int64_t listen_resume_ns;
    int64_t accept_logged_ns;
    s_conn_t **heap;
    size_t heap_len;
    size_t heap_cap;
    s_conn_t *all;
    s_conn_t *dead;
    uint64_t next_id;
    uint64_t next_reply;
    mockmodel_stats_t st;
    mockmodel_stats_t logged;
    int64_t next_log_ns;
};

/* The parts of a request head the server acts on. */
typedef struct {
    char method[16];
    char path[256];
    bool http10;
    bool close;
    bool expect_continue;
    bool has_length;
    size_t content_length;
    int64_t hdr_duration_ms; /* -1: no header */
    int64_t hdr_chunks;
    int64_t hdr_stall;
    const char *err; /* why the head was refused */
} s_req_t;

/* A bounded output burst: the bytes of one response part, sent with one send(2). */
typedef struct {
    char data[S_BURST_MAX_BYTES];
    size_t len;
} s_burst_t;

static int64_t s_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* --- The timer heap: a binary min-heap of replies by their next deadline. --- */

static void s_heap_put(mockmodel_t *m, size_t i, s_conn_t *c) {
    m->heap[i] = c;
    c->heap_idx = i;
}

static void s_heap_up(mockmodel_t *m, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (m->heap[p]->deadline_ns <= m->heap[i]->deadline_ns) {
            break;
        }
        s_conn_t *t = m->heap[p];
        s_heap_put(m, p, m->heap[i]);
        s_heap_put(m, i, t);
        i = p;
    }
}

static void s_heap_down(mockmodel_t *m, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1;
        size_t r = l + 1;
        size_t min = i;
        if (l < m->heap_len && m->heap[l]->deadline_ns < m->heap[min]->deadline_ns) {
            min = l;
        }
        if (r < m->heap_len && m->heap[r]->deadline_ns < m->heap[min]->deadline_ns) {
            min = r;
        }
        if (min == i) {
            return;
        }
        s_conn_t *t = m->heap[min];
        s_heap_put(m, min, m->heap[i]);
        s_heap_put(m, i, t);
        i = min;
    }
}

static void s_timer_clear(mockmodel_t *m, s_conn_t *c) {
    size_t i = c->heap_idx;
    if (i == S_NO_TIMER) {
        return;
    }
    c->heap_idx = S_NO_TIMER;
    m->heap_len--;
    if (i == m->heap_len) {
        return;
    }
    s_conn_t *last = m->heap[m->heap_len];
    s_heap_put(m, i, last);
    s_heap_up(m, i);
    s_heap_down(m, last->heap_idx);
}

static void s_timer_set(mockmodel_t *m, s_conn_t *c, int64_t deadline_ns) {
    s_timer_clear(m, c);
    if (m->heap_len == m->heap_cap) {
        m->heap_cap = m->heap_cap ? 2 * m->heap_cap : 1024;
        m->heap = mem_realloc(m->heap, m->heap_cap * sizeof *m->heap);
    }
    c->deadline_ns = deadline_ns;
    s_heap_put(m, m->heap_len++, c);
    s_heap_up(m, c->heap_idx);
}

/* --- Connections. --- */

static void s_peak(int64_t now, int64_t *peak) {
    if (now > *peak) {
        *peak = now;
    }
}

static void s_watch(mockmodel_t *m, s_conn_t *c) {
    uint32_t want = EPOLLRDHUP;
    /* A full input buffer stops reading until the reply in progress ends (pipelined
     * requests wait in it); a closing connection reads nothing more. */
    if (c->state != S_CLOSING && c->in_len < m->cfg.max_request_bytes) {
        want |= EPOLLIN;
    }
    if (c->out_len > c->out_off) {
        want |= EPOLLOUT;
    }
    if (want == c->events) {
        return;
    }
    struct epoll_event ev = {.events = want, .data.ptr = c};
    if (epoll_ctl(m->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0) {
        c->events = want;
    } else {
        log_error("epoll_mod_failed", "conn=%llu errno=%d", (unsigned long long)c->id, errno);
    }
}

/* Closes c now and frees it at the end of the loop pass. why (NULL: an ordinary close) is
 * logged for errors, and for everything with --verbose. */
static void s_close(mockmodel_t *m, s_conn_t *c, const char *why) {
    if (c->dead) {
        return;
    }
    c->dead = true;
    if (c->state == S_REPLY) {
        m->st.replies_active--;
        m->st.replies_aborted++;
        if (m->cfg.verbose) {
            log_info("reply_aborted", "conn=%llu reply=%llu sent=%d chunks=%d",
                     (unsigned long long)c->id, (unsigned long long)c->reply_id, c->sent,
                     c->chunks);
        }
    } else if (c->state == S_STALL) {
        m->st.stalled--;
    }
    if (why && m->cfg.verbose) {
        log_info("conn_closed", "conn=%llu reason=%s", (unsigned long long)c->id, why);
    }
    s_timer_clear(m, c);
    if (c->prev) {
        c->prev->next = c->next;
    } else {
        m->all = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }
    if (c->state == S_CLOSING) {
        /* Closing with unread input makes the kernel send a reset, which can destroy the
         * response still on its way (a 431 after a huge head): read what has arrived. */
        char scratch[4096];
        for (int i = 0; i < 16 && recv(c->fd, scratch, sizeof scratch, 0) > 0; i++) {
        }
    }
    close(c->fd); /* also leaves the epoll set: the fd is never duplicated */
    m->st.open--;
    free(c->in);
    free(c->out);
    c->in = NULL;
    c->out = NULL;
    c->next_dead = m->dead;
    m->dead = c;
}

/* Sends len bytes, buffering what the socket does not take. Closes c when the client is
 * gone or has let more than MOCKMODEL_OUT_MAX_BYTES pile up. */
static void s_send(mockmodel_t *m, s_conn_t *c, const char *data, size_t len) {
    if (c->dead || len == 0) {
        return;
    }
    if (c->out_len == c->out_off) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                s_close(m, c, "send_failed");
                return;
            }
            n = 0;
        }
        data += n;
        len -= (size_t)n;
        if (len == 0) {
            return;
        }
    }
    size_t pending = c->out_len - c->out_off;
    if (pending + len > MOCKMODEL_OUT_MAX_BYTES) {
        log_warn("client_not_reading", "conn=%llu pending=%zu", (unsigned long long)c->id,
                 pending + len);
        s_close(m, c, "client_not_reading");
        return;
    }
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, pending);
        c->out_len = pending;
        c->out_off = 0;
    }
    if (c->out_len + len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : S_OUT_FIRST_BYTES;
        while (cap < c->out_len + len) {
            cap *= 2;
        }
        c->out = mem_realloc(c->out, cap);
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    s_watch(m, c);
}

static void s_flush(mockmodel_t *m, s_conn_t *c) {
    while (c->out_len > c->out_off) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                break;
            }
            s_close(m, c, "send_failed");
            return;
        }
        c->out_off += (size_t)n;
    }
    if (c->out_len == c->out_off) {
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_off = c->out_cap = 0;
        if (c->state == S_CLOSING) {
            s_close(m, c, NULL);
            return;
        }
    }
    s_watch(m, c);
}

/* After a response's last byte is queued: keep the connection for the next request, or
 * close it (at once, or once the output is flushed). */
static void s_response_done(mockmodel_t *m, s_conn_t *c) {
    if (c->dead) {
        return;
    }
    if (!c->close_after) {
        c->state = S_READ;
        return;
    }
    c->state = S_CLOSING;
    if (c->out_len == c->out_off) {
        s_close(m, c, NULL);
    } else {
        s_watch(m, c);
    }
}

static void s_burst(s_burst_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_burst(s_burst_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, sizeof b->data - b->len, fmt, ap);
    va_end(ap);
    /* Every burst is built from bounded parts (S_EVENT_MAX_BYTES, the escaped model name). */
    ASSERT(n >= 0 && (size_t)n < sizeof b->data - b->len);
    b->len += (size_t)n;
}

/* Appends one SSE event ("data: JSON\n\n"), as one HTTP chunk when the reply is chunked. */
static void s_event(s_burst_t *b, bool chunked, const char *json) {
    if (chunked) {
        s_burst(b, "%zx\r\ndata: %s\n\n\r\n", strlen(json) + 8, json);
    } else {
        s_burst(b, "data: %s\n\n", json);
    }
}

/* One chat.completion.chunk of c's reply whose choices (or more members) are `rest`. */
static void s_chunk(s_burst_t *b, const s_conn_t *c, const char *rest) {
    char json[S_EVENT_MAX_BYTES];
    int n = snprintf(json, sizeof json,
                     "{\"id\":\"chatcmpl-mock-%llu\",\"object\":\"chat.completion.chunk\","
                     "\"created\":%lld,\"model\":%s,%s}",
                     (unsigned long long)c->reply_id, (long long)c->created, c->model, rest);
    ASSERT(n > 0 && (size_t)n < sizeof json);
    s_event(b, c->chunked, json);
}

static void s_respond(mockmodel_t *m, s_conn_t *c, int status, const char *reason,
                      const char *ctype, const char *body) {
    size_t blen = strlen(body);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status,
                     reason, ctype, blen, c->close_after ? "Connection: close\r\n" : "");
    ASSERT(n > 0 && (size_t)n < sizeof head);
    s_send(m, c, head, (size_t)n);
    s_send(m, c, body, blen);
    s_response_done(m, c);
}

/* An error in the OpenAI shape ({"error":{"message","type","param","code"}}). close: the
 * request's end is unknown (a bad head), so the connection cannot carry another. */
static void s_error(mockmodel_t *m, s_conn_t *c, int status, const char *reason,
                    const char *message, bool close) {
    m->st.errors++;
    char q[256];
    log_info("bad_request", "conn=%llu status=%d reason=%s", (unsigned long long)c->id, status,
             log_quote(message, q, sizeof q));
    json_t *err = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", message, "type",
                            "invalid_request_error", "param", "code");
    char *body = json_dumps(err, JSON_COMPACT);
    json_decref(err);
    c->close_after = c->close_after || close;
    s_respond(m, c, status, reason, "application/json", body ? body : "{}");
    free(body);
}

static void s_stats_reply(mockmodel_t *m, s_conn_t *c) {
    const mockmodel_stats_t *s = &m->st;
    char body[1024];
    int n = snprintf(body, sizeof body,
                     "{\"open\":%lld,\"peak_open\":%lld,\"accepted\":%lld,\"requests\":%lld,"
                     "\"replies_active\":%lld,\"peak_replies\":%lld,\"replies_completed\":%lld,"
                     "\"replies_aborted\":%lld,\"stalled\":%lld,\"errors\":%lld}\n",
                     (long long)s->open, (long long)s->peak_open, (long long)s->accepted,
                     (long long)s->requests, (long long)s->replies_active,
                     (long long)s->peak_replies, (long long)s->replies_completed,
                     (long long)s->replies_aborted, (long long)s->stalled, (long long)s->errors);
    ASSERT(n > 0 && (size_t)n < sizeof body);
    s_respond(m, c, 200, "OK", "application/json", body);
}

/* --- The chat reply. --- */

static int64_t s_deadline(const s_conn_t *c, int k) {
    return c->start_ns + c->duration_ns * k / c->chunks;
}

/* Text delta k of a reply: "tok1", " tok2", ... so the whole text is "tok1 tok2 ... tokN". */
static void s_delta(int k, char *out, size_t size) {
    snprintf(out, size, "%stok%d", k > 1 ? " " : "", k);
}

static void s_reply_done(mockmodel_t *m, s_conn_t *c);

/* The whole non-streaming reply (a chat.completion object), when its duration has passed. */
static void s_plain_reply(mockmodel_t *m, s_conn_t *c) {
    size_t cap = (size_t)c->chunks * 16 + 1;
    char *text = mem_alloc(cap);
    size_t len = 0;
    for (int k = 1; k <= c->chunks; k++) {
        s_delta(k, text + len, cap - len);
        len += strlen(text + len);
    }
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-mock-%llu", (unsigned long long)c->reply_id);
    /* "o" steals the model's reference; "s" copies the text. */
    json_t *model = json_loads(c->model, JSON_DECODE_ANY, NULL);
    json_t *doc =
        json_pack("{s:s, s:s, s:I, s:o, s:[{s:i, s:{s:s, s:s}, s:s}], s:{s:I, s:i, s:I}}", "id", id,
                  "object", "chat.completion", "created", (json_int_t)c->created, "model",
                  model ? model : json_string("mock"), "choices", "index", 0, "message", "role",
                  "assistant", "content", text, "finish_reason", "stop", "usage", "prompt_tokens",
                  (json_int_t)c->prompt_tokens, "completion_tokens", c->chunks, "total_tokens",
                  (json_int_t)(c->prompt_tokens + c->chunks));
    free(text);
    char *body = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    ASSERT(body);
    size_t blen = strlen(body);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\nx-request-id: mock-%llu\r\n%s\r\n",
                     blen, (unsigned long long)c->reply_id,
                     c->close_after ? "Connection: close\r\n" : "");
    ASSERT(n > 0 && (size_t)n < sizeof head);
    s_send(m, c, head, (size_t)n);
    s_send(m, c, body, blen);
    free(body);
    s_reply_done(m, c);
}

/* A timer fired: the next text delta, and after the last one the finish chunk, the usage
 * chunk, [DONE] and the end of the chunked body, in one write. */
static void s_on_timer(mockmodel_t *m, s_conn_t *c) {
    if (!c->streaming) {
        s_plain_reply(m, c);
        return;
    }
    c->sent++;
    s_burst_t b = {.len = 0};
    char delta[32];
    char rest[128];
    s_delta(c->sent, delta, sizeof delta);
    snprintf(rest, sizeof rest,
             "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,"
             "\"finish_reason\":null}]",
             delta);
    s_chunk(&b, c, rest);
    bool last = c->sent >= c->chunks;
    if (last) {
        s_chunk(&b, c,
                "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                "\"finish_reason\":\"stop\"}]");
        snprintf(rest, sizeof rest,
                 "\"choices\":[],\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%d,"
                 "\"total_tokens\":%lld}",
                 (long long)c->prompt_tokens, c->chunks, (long long)(c->prompt_tokens + c->chunks));
        s_chunk(&b, c, rest);
        s_event(&b, c->chunked, "[DONE]");
        if (c->chunked) {
            s_burst(&b, "0\r\n\r\n");
        }
    }
    s_send(m, c, b.data, b.len);
    if (c->dead) {
        return;
    }
    if (last) {
        s_reply_done(m, c);
    } else {
        s_timer_set(m, c, s_deadline(c, c->sent + 1));
    }
}

static void s_parse(mockmodel_t *m, s_conn_t *c);

static void s_reply_done(mockmodel_t *m, s_conn_t *c) {
    if (c->dead) {
        return;
    }
    m->st.replies_active--;
    m->st.replies_completed++;
    if (m->cfg.verbose) {
        log_info("reply_done", "conn=%llu reply=%llu chunks=%d ms=%lld", (unsigned long long)c->id,
                 (unsigned long long)c->reply_id, c->chunks,
                 (long long)((s_now_ns() - c->start_ns) / S_NS_PER_MS));
    }
    s_response_done(m, c);
    /* Requests pipelined behind this one waited in the input buffer. */
    if (!c->dead && c->state == S_READ) {
        s_parse(m, c);
    }
}

/* Reads the directives in one text: [mock:duration MS], [mock:chunks N], [mock:stall].
 * Returns NULL, or why a directive was refused. */
static const char *s_directives(const char *text, int64_t *duration_ms, int64_t *chunks,
                                bool *stall) {
    for (const char *p = strstr(text, "[mock:"); p; p = strstr(p + 1, "[mock:")) {
        const char *d = p + 6;
        if (!strncmp(d, "stall]", 6)) {
            *stall = true;
            continue;
        }
        int64_t *target = NULL;
        if (!strncmp(d, "duration ", 9)) {
            target = duration_ms;
            d += 9;
        } else if (!strncmp(d, "chunks ", 7)) {
            target = chunks;
            d += 7;
        } else {
            return "unknown [mock:...] directive";
        }
        char *end = NULL;
        errno = 0;
        long long v = strtoll(d, &end, 10);
        if (errno || end == d || *end != ']' || v < 0) {
            return "a [mock:...] directive's value must be a non-negative integer";
        }
        *target = v;
    }
    return NULL;
}

/* Applies the directives in the last user message's text (a string, or text parts). */
static const char *s_message_directives(const json_t *messages, int64_t *duration_ms,
                                        int64_t *chunks, bool *stall) {
    for (size_t i = json_array_size(messages); i-- > 0;) {
        const json_t *msg = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (!role || strcmp(role, "user")) {
            continue;
        }
        const json_t *content = json_object_get(msg, "content");
        if (json_is_string(content)) {
            return s_directives(json_string_value(content), duration_ms, chunks, stall);
        }
        size_t k;
        const json_t *part;
        json_array_foreach(content, k, part) {
            const char *text = json_string_value(json_object_get(part, "text"));
            const char *why = text ? s_directives(text, duration_ms, chunks, stall) : NULL;
            if (why) {
                return why;
            }
        }
        return NULL;
    }
    return NULL;
}

/* The model name as a JSON literal, cut to S_MODEL_MAX_BYTES on a character boundary. */
static void s_model_json(const char *model, char out[S_MODEL_JSON_BYTES]) {
    size_t n = strlen(model);
    if (n > S_MODEL_MAX_BYTES) {
        n = S_MODEL_MAX_BYTES;
        while (n > 0 && ((unsigned char)model[n] & 0xC0) == 0x80) {
            n--;
        }
    }
    json_t *s = json_stringn(model, n);
    char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    snprintf(out, S_MODEL_JSON_BYTES, "%s", q ? q : "\"mock\"");
    free(q);
    json_decref(s);
}

static void s_chat(mockmodel_t *m, s_conn_t *c, const s_req_t *rq, const char *body, size_t blen) {
    json_error_t jerr;
    json_t *doc = json_loadb(body, blen, 0, &jerr);
    const json_t *messages = json_object_get(doc, "messages");
    if (!json_is_object(doc) || !json_is_array(messages) || json_array_size(messages) == 0) {
        json_decref(doc);
        s_error(m, c, 400, "Bad Request",
                "the body must be a JSON object with a non-empty messages array", false);
        return;
    }
    int64_t duration_ms = m->cfg.duration_ms;
    int64_t chunks = m->cfg.chunks;
    bool stall = m->cfg.stall;
    const char *why = s_message_directives(messages, &duration_ms, &chunks, &stall);
    if (rq->hdr_duration_ms >= 0) {
        duration_ms = rq->hdr_duration_ms;
    }
    if (rq->hdr_chunks >= 0) {
        chunks = rq->hdr_chunks;
    }
    if (rq->hdr_stall >= 0) {
        stall = rq->hdr_stall != 0;
    }
    if (!why &&
        (duration_ms > MOCKMODEL_DURATION_MAX_MS || chunks < 1 || chunks > MOCKMODEL_CHUNKS_MAX)) {
        why = "duration or chunks out of range";
    }
    if (why) {
        json_decref(doc);
        s_error(m, c, 400, "Bad Request", why, false);
        return;
    }
    const char *model = json_string_value(json_object_get(doc, "model"));
    s_model_json(model ? model : "mock", c->model);
    c->streaming = json_is_true(json_object_get(doc, "stream"));
    json_decref(doc);
    if (stall) {
        c->state = S_STALL;
        m->st.stalled++;
        if (m->cfg.verbose) {
            log_info("request_stalled", "conn=%llu", (unsigned long long)c->id);
        }
        return;
    }
    c->state = S_REPLY;
    c->chunked = !rq->http10;
    c->start_ns = s_now_ns();
    c->duration_ns = duration_ms * S_NS_PER_MS;
    c->chunks = (int)chunks;
    c->sent = 0;
    c->reply_id = ++m->next_reply;
    c->created = (int64_t)time(NULL);
    c->prompt_tokens = (int64_t)(blen / 4 + 1);
    m->st.replies_active++;
    s_peak(m->st.replies_active, &m->st.peak_replies);
    if (m->cfg.verbose) {
        log_info("reply_started", "conn=%llu reply=%llu duration_ms=%lld chunks=%d stream=%s",
                 (unsigned long long)c->id, (unsigned long long)c->reply_id, (long long)duration_ms,
                 c->chunks, c->streaming ? "true" : "false");
    }
    if (!c->streaming) {
        s_timer_set(m, c, c->start_ns + c->duration_ns);
        return;
    }
    s_burst_t b = {.len = 0};
    s_burst(&b,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "%sx-request-id: mock-%llu\r\n\r\n",
            c->chunked ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n",
            (unsigned long long)c->reply_id);
    s_chunk(&b, c,
            "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
            "\"logprobs\":null,\"finish_reason\":null}]");
    s_send(m, c, b.data, b.len);
    if (!c->dead) {
        s_timer_set(m, c, s_deadline(c, 1));
    }
}

/* --- Request heads. --- */

/* The length of the head up to and including its blank line, or 0 when not all here. */
static size_t s_head_len(const char *buf, size_t len) {
    for (size_t i = 3; i < len; i++) {
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
            return i + 1;
        }
    }
    return 0;
}

static bool s_name_is(const char *name, size_t nlen, const char *want) {
    return nlen == strlen(want) && !strncasecmp(name, want, nlen);
}

/* A non-negative decimal header value (no sign, no spaces); -1 when it is not one. */
static int64_t s_header_num(const char *v, size_t vlen) {
    if (vlen == 0 || vlen > 18) {
        return -1;
    }
    int64_t n = 0;
    for (size_t i = 0; i < vlen; i++) {
        if (v[i] < '0' || v[i] > '9') {
            return -1;
        }
        n = n * 10 + (v[i] - '0');
    }
    return n;
}

/* True when the comma-separated header value holds token (case-insensitive). */
static bool s_has_token(const char *v, size_t vlen, const char *token) {
    size_t tlen = strlen(token);
    for (size_t i = 0; i + tlen <= vlen; i++) {
        if (!strncasecmp(v + i, token, tlen) && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + tlen == vlen || v[i + tlen] == ',' || v[i + tlen] == ' ')) {
            return true;
        }
    }
    return false;
}

static int s_header(s_req_t *rq, const char *name, size_t nlen, const char *v, size_t vlen) {
    if (s_name_is(name, nlen, "content-length")) {
        int64_t n = s_header_num(v, vlen);
        if (n < 0 || (rq->has_length && (size_t)n != rq->content_length)) {
            rq->err = "bad Content-Length";
            return -1;
        }
        rq->has_length = true;
        rq->content_length = (size_t)n;
    } else if (s_name_is(name, nlen, "transfer-encoding")) {
        rq->err = "request bodies must carry a Content-Length (no transfer coding)";
        return -1;
    } else if (s_name_is(name, nlen, "connection")) {
        rq->close = rq->close || s_has_token(v, vlen, "close");
    } else if (s_name_is(name, nlen, "expect")) {
        rq->expect_continue = s_has_token(v, vlen, "100-continue");
    } else if (s_name_is(name, nlen, "x-mock-duration-ms")) {
        rq->hdr_duration_ms = s_header_num(v, vlen);
        rq->err = rq->hdr_duration_ms < 0 ? "bad x-mock-duration-ms" : NULL;
    } else if (s_name_is(name, nlen, "x-mock-chunks")) {
        rq->hdr_chunks = s_header_num(v, vlen);
        rq->err = rq->hdr_chunks < 0 ? "bad x-mock-chunks" : NULL;
    } else if (s_name_is(name, nlen, "x-mock-stall")) {
        rq->hdr_stall = s_header_num(v, vlen);
        rq->err = rq->hdr_stall < 0 ? "bad x-mock-stall" : NULL;
    }
    return rq->err ? -1 : 0;
}

/* Parses the head buf[0..len), a NUL-terminated string that ends with CRLF CR (the last LF
 * replaced by the NUL, so that no search runs past the head). Returns 0, or -1 with
 * rq->err. */
static int s_parse_head(const char *buf, size_t len, s_req_t *rq) {
    memset(rq, 0, sizeof *rq);
    rq->hdr_duration_ms = rq->hdr_chunks = rq->hdr_stall = -1;
    const char *end = buf + len - 2; /* the final CRLF */
    const char *eol = strstr(buf, "\r\n");
    if (!eol) {
        rq->err = "a NUL byte in the request line";
        return -1;
    }
    const char *sp1 = memchr(buf, ' ', (size_t)(eol - buf));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || (size_t)(sp1 - buf) >= sizeof rq->method ||
        (size_t)(sp2 - sp1 - 1) >= sizeof rq->path || sp2 == sp1 + 1) {
        rq->err = "bad request line";
        return -1;
    }
    memcpy(rq->method, buf, (size_t)(sp1 - buf));
    memcpy(rq->path, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    const char *ver = sp2 + 1;
    size_t vlen = (size_t)(eol - ver);
    if (vlen != 8 || strncmp(ver, "HTTP/1.", 7) || (ver[7] != '0' && ver[7] != '1')) {
        rq->err = "only HTTP/1.0 and HTTP/1.1";
        return -1;
    }
    rq->http10 = ver[7] == '0';
    for (const char *line = eol + 2; line < end;) {
        const char *le = strstr(line, "\r\n");
        if (!le) {
            rq->err = "a NUL byte in a header";
            return -1;
        }
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon || colon == line) {
            rq->err = "bad header line";
            return -1;
        }
        const char *v = colon + 1;
        const char *ve = le;
        while (v < ve && (*v == ' ' || *v == '\t')) {
            v++;
        }
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) {
            ve--;
        }
        if (s_header(rq, line, (size_t)(colon - line), v, (size_t)(ve - v)) != 0) {
            return -1;
        }
        line = le + 2;
    }
    rq->close = rq->close || rq->http10;
    return 0;
}

static void s_dispatch(mockmodel_t *m, s_conn_t *c, s_req_t *rq, const char *body, size_t blen) {
    char *q = strchr(rq->path, '?');
    if (q) {
        *q = '\0';
    }
    bool get = !strcmp(rq->method, "GET");
    bool post = !strcmp(rq->method, "POST");
    if (!strcmp(rq->path, "/v1/chat/completions") || !strcmp(rq->path, "/chat/completions")) {
        if (post) {
            s_chat(m, c, rq, body, blen);
        } else {
            s_error(m, c, 405, "Method Not Allowed", "use POST", false);
        }
    } else if (!strcmp(rq->path, "/stats")) {
        if (get) {
            s_stats_reply(m, c);
        } else {
            s_error(m, c, 405, "Method Not Allowed", "use GET", false);
        }
    } else if (!strcmp(rq->path, "/healthz") && get) {
        s_respond(m, c, 200, "OK", "text/plain", "ok\n");
    } else {
        s_error(m, c, 404, "Not Found", "no such endpoint", false);
    }
}

/* Answers every complete request in the input buffer, in order, until one starts a reply
 * that takes time (or stalls); the rest wait in the buffer. */
static void s_parse(mockmodel_t *m, s_conn_t *c) {
    while (!c->dead && c->state == S_READ && c->in_len > 0) {
        size_t hlen = s_head_len(c->in, c->in_len);
        if (hlen == 0 || hlen > MOCKMODEL_HEADER_MAX_BYTES) {
            if (hlen > 0 || c->in_len > MOCKMODEL_HEADER_MAX_BYTES) {
                s_error(m, c, 431, "Request Header Fields Too Large",
                        "request line and headers over 16 KiB", true);
            }
            break;
        }
        s_req_t rq;
        c->in[hlen - 1] = '\0';
        int rc = s_parse_head(c->in, hlen, &rq);
        c->in[hlen - 1] = '\n';
        if (rc != 0) {
            s_error(m, c, 400, "Bad Request", rq.err, true);
            break;
        }
        if (!rq.has_length && !strcmp(rq.method, "POST")) {
            s_error(m, c, 411, "Length Required", "a POST needs a Content-Length", true);
            break;
        }
        if (rq.content_length > m->cfg.max_request_bytes - hlen) {
            s_error(m, c, 413, "Payload Too Large", "request over the server's cap", true);
            break;
        }
        size_t total = hlen + rq.content_length;
        if (c->in_len < total) {
            if (rq.expect_continue && !c->sent_continue && !rq.http10) {
                c->sent_continue = true;
                s_send(m, c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
            }
            break;
        }
        c->sent_continue = false;
        m->st.requests++;
        c->close_after = rq.close;
        s_dispatch(m, c, &rq, c->in + hlen, rq.content_length);
        if (c->dead) {
            return;
        }
        c->in_len -= total;
        if (c->in_len == 0) {
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        } else {
            memmove(c->in, c->in + total, c->in_len);
        }
    }
    if (!c->dead) {
        s_watch(m, c);
    }
}

static void s_on_readable(mockmodel_t *m, s_conn_t *c) {
    bool eof = false;
    while (c->in_len < m->cfg.max_request_bytes) {
        if (c->in_len == c->in_cap) {
            size_t cap = c->in_cap ? 2 * c->in_cap : S_IN_FIRST_BYTES;
            c->in_cap = cap < m->cfg.max_request_bytes ? cap : m->cfg.max_request_bytes;
            c->in = mem_realloc(c->in, c->in_cap);
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n == 0) {
            eof = true;
        } else if (errno == EINTR) {
            continue;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            s_close(m, c, "recv_failed");
            return;
        }
        break;
    }
    if (c->in_len == 0 && c->in) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
    if (c->state == S_READ) {
        s_parse(m, c);
    }
    if (c->dead) {
        return;
    }
    if (eof) {
        /* The client is gone: a reply in progress is aborted, a stall ends, and a partial
         * request is dropped. */
        s_close(m, c, c->in_len ? "eof_mid_request" : NULL);
        return;
    }
    s_watch(m, c);
}

static void s_accept(mockmodel_t *m) {
    for (;;) {
        int fd = accept(m->lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return;
            }
            /* Out of descriptors (or memory): rest the listener instead of spinning on it;
             * the backlog holds the clients meanwhile. */
            int64_t now = s_now_ns();
            if (now - m->accept_logged_ns >= 1000 * S_NS_PER_MS) {
                log_warn("accept_failed", "errno=%d reason=\"%s\" open=%lld pause_ms=%d", errno,
                         strerror(errno), (long long)m->st.open, S_ACCEPT_PAUSE_MS);
                m->accept_logged_ns = now;
            }
            epoll_ctl(m->ep, EPOLL_CTL_DEL, m->lfd, NULL);
            m->listen_paused = true;
            m->listen_resume_ns = now + S_ACCEPT_PAUSE_MS * S_NS_PER_MS;
            return;
        }
        int one = 1;
        if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
            log_warn("accept_setup_failed", "errno=%d", errno);
            close(fd);
            continue;
        }
        s_conn_t *c = mem_calloc(1, sizeof *c);
        c->fd = fd;
        c->id = ++m->next_id;
        c->state = S_READ;
        c->heap_idx = S_NO_TIMER;
        c->events = EPOLLIN | EPOLLRDHUP;
        struct epoll_event ev = {.events = c->events, .data.ptr = c};
        if (epoll_ctl(m->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            log_warn("epoll_add_failed", "errno=%d", errno);
            close(fd);
            free(c);
            continue;
        }
        c->next = m->all;
        if (m->all) {
            m->all->prev = c;
        }
        m->all = c;
        m->st.open++;
        m->st.accepted++;
        s_peak(m->st.open, &m->st.peak_open);
    }
}

/* --- The server. --- */

mockmodel_t *mockmodel_new(const mockmodel_config_t *cfg) {
    if (cfg->chunks < 1 || cfg->chunks > MOCKMODEL_CHUNKS_MAX || cfg->duration_ms < 0 ||
        cfg->duration_ms > MOCKMODEL_DURATION_MAX_MS ||
        cfg->max_request_bytes <= MOCKMODEL_HEADER_MAX_BYTES) {
        log_error("config_invalid",
                  "reason=\"chunks 1..%d, duration 0..%d ms, request cap over "
                  "%d bytes\"",
                  MOCKMODEL_CHUNKS_MAX, MOCKMODEL_DURATION_MAX_MS, MOCKMODEL_HEADER_MAX_BYTES);
        return NULL;
    }
    const char *listen_at = cfg->listen ? cfg->listen : "127.0.0.1:0";
    const char *colon = strrchr(listen_at, ':');
    char host[64];
    struct sockaddr_in a = {.sin_family = AF_INET};
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || (size_t)(colon - listen_at) >= sizeof host || !end || *end || end == colon + 1 ||
        port < 0 || port > 65535) {
        log_error("config_invalid", "listen=%s reason=\"want HOST:PORT\"", listen_at);
        return NULL;
    }
    memcpy(host, listen_at, (size_t)(colon - listen_at));
    host[colon - listen_at] = '\0';
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        log_error("config_invalid", "listen=%s reason=\"not an IPv4 address\"", listen_at);
        return NULL;
    }
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    socklen_t alen = sizeof a;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 65535) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        log_error("listen_failed", "listen=%s errno=%d reason=\"%s\"", listen_at, errno,
                  strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }
    mockmodel_t *self = mem_calloc(1, sizeof *self);
    self->cfg = *cfg;
    self->listen = mem_strdup(listen_at);
    self->cfg.listen = self->listen;
    self->lfd = fd;
    self->port = ntohs(a.sin_port);
    self->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = self};
    if (self->ep < 0 || epoll_ctl(self->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        log_error("epoll_failed", "errno=%d", errno);
        mockmodel_destroy(&self);
        return NULL;
    }
    return self;
}

static void s_free_dead(mockmodel_t *m) {
    while (m->dead) {
        s_conn_t *c = m->dead;
        m->dead = c->next_dead;
        free(c);
    }
}

void mockmodel_destroy(mockmodel_t **self_p) {
    mockmodel_t *self = self_p ? *self_p : NULL;
    if (!self) {
        return;
    }
    while (self->all) {
        s_close(self, self->all, NULL);
    }
    s_free_dead(self);
    if (self->lfd >= 0) {
        close(self->lfd);
    }
    if (self->ep >= 0) {
        close(self->ep);
    }
    free(self->heap);
    free(self->listen);
    free(self);
    *self_p = NULL;
}

int mockmodel_port(const mockmodel_t *self) {
    return self->port;
}

mockmodel_stats_t mockmodel_stats(const mockmodel_t *self) {
    return self->st;
}

static void s_log_stats(mockmodel_t *m, const char *event) {
    const mockmodel_stats_t *s = &m->st;
    log_info(event,
             "open=%lld peak_open=%lld accepted=%lld requests=%lld replies_active=%lld "
             "peak_replies=%lld completed=%lld aborted=%lld stalled=%lld errors=%lld",
             (long long)s->open, (long long)s->peak_open, (long long)s->accepted,
             (long long)s->requests, (long long)s->replies_active, (long long)s->peak_replies,
             (long long)s->replies_completed, (long long)s->replies_aborted, (long long)s->stalled,
             (long long)s->errors);
    m->logged = *s;
}

/* The epoll timeout: until the next reply deadline, the listener's resumption or the next
 * stats line, rounded up so that no deadline is met early. */
static int s_timeout_ms(const mockmodel_t *m, int64_t now) {
    int64_t until = m->next_log_ns;
    if (m->heap_len > 0 && m->heap[0]->deadline_ns < until) {
        until = m->heap[0]->deadline_ns;
    }
    if (m->listen_paused && m->listen_resume_ns < until) {
        until = m->listen_resume_ns;
    }
    if (until <= now) {
        return 0;
    }
    return (int)((until - now + S_NS_PER_MS - 1) / S_NS_PER_MS);
}

int mockmodel_run(mockmodel_t *self, int stop_fd) {
    if (stop_fd >= 0) {
        struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &self->stop_tag};
        if (epoll_ctl(self->ep, EPOLL_CTL_ADD, stop_fd, &sev) != 0) {
            log_error("epoll_failed", "errno=%d", errno);
            return -1;
        }
    }
    struct epoll_event evs[S_EVENTS_MAX];
    bool stopping = false;
    self->next_log_ns = s_now_ns() + MOCKMODEL_STATS_LOG_MS * S_NS_PER_MS;
    while (!stopping) {
        int n = epoll_wait(self->ep, evs, S_EVENTS_MAX, s_timeout_ms(self, s_now_ns()));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            log_error("epoll_wait_failed", "errno=%d", errno);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            if (p == &self->stop_tag) {
                stopping = true;
            } else if (p == self) {
                s_accept(self);
            } else {
                s_conn_t *c = p;
                if (c->dead) {
                    continue;
                }
                if (e & (EPOLLERR | EPOLLHUP)) {
                    s_close(self, c, (e & EPOLLERR) ? "socket_error" : "hangup");
                    continue;
                }
                if (e & EPOLLIN) {
                    s_on_readable(self, c);
                } else if (e & EPOLLRDHUP) {
                    /* Not reading (the input buffer is full or the connection is closing):
                     * the client's close still ends it. */
                    s_close(self, c, "client_closed");
                    continue;
                }
                if (!c->dead && (e & EPOLLOUT)) {
                    s_flush(self, c);
                }
            }
        }
        int64_t now = s_now_ns();
        while (self->heap_len > 0 && self->heap[0]->deadline_ns <= now) {
            s_conn_t *c = self->heap[0];
            s_timer_clear(self, c);
            s_on_timer(self, c);
        }
        if (self->listen_paused && now >= self->listen_resume_ns) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = self};
            if (epoll_ctl(self->ep, EPOLL_CTL_ADD, self->lfd, &ev) == 0) {
                self->listen_paused = false;
            } else {
                self->listen_resume_ns = now + S_ACCEPT_PAUSE_MS * S_NS_PER_MS;
            }
        }
        if (now >= self->next_log_ns) {
            if (memcmp(&self->logged, &self->st, sizeof self->st)) {
                s_log_stats(self, "stats");
            }
            self->next_log_ns = now + MOCKMODEL_STATS_LOG_MS * S_NS_PER_MS;
        }
        s_free_dead(self);
    }
    s_log_stats(self, "stopping");
    return 0;
}
