/* mockprov: a scripted mock provider server over libmicrohttpd; see mockprov.h. */
#include "mockprov.h"
#include "id.h"
#include "mem.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_SLEEP_STEP_MS 5 /* delays and holds wake this often to notice a stopping server */

typedef struct {
    char *data;
    size_t len;
    int delay_ms;
} s_chunk_t;

struct mockprov_reply {
    int status;
    json_t *headers; /* [[name, value]] */
    s_chunk_t *chunks;
    size_t count;
    int hold_ms;
    bool abort;
    mockprov_reply_t *next; /* queue link */
};

struct mockprov {
    struct MHD_Daemon *daemon;
    int port;
    char url[64];
    atomic_bool stopping;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    mockprov_reply_t *head; /* queue, FIFO */
    mockprov_reply_t *tail;
    mockprov_reply_t *dflt;
    mockprov_reply_t *retired; /* earlier defaults, freed at destroy */
    json_t *requests;          /* the records, oldest first */
};

/* One connection's request: the body as it uploads. */
typedef struct {
    char *body;
    size_t len;
} s_conn_t;

/* One response being written. */
typedef struct {
    mockprov_t *server;
    mockprov_reply_t *reply;
    bool owned; /* a queued reply is freed with its stream; the default one is not */
    size_t chunk;
    size_t off;
    bool waited;
    bool held;
} s_stream_t;

/* --- Replies. --- */

mockprov_reply_t *mockprov_reply_new(int status, const char *content_type) {
    mockprov_reply_t *r = mem_calloc(1, sizeof *r);
    r->status = status;
    r->headers = json_array();
    if (content_type) {
        mockprov_reply_header(r, "Content-Type", content_type);
    }
    return r;
}

static void s_reply_free(mockprov_reply_t *r) {
    if (!r) {
        return;
    }
    for (size_t i = 0; i < r->count; i++) {
        free(r->chunks[i].data);
    }
    free(r->chunks);
    json_decref(r->headers);
    free(r);
}

void mockprov_reply_header(mockprov_reply_t *r, const char *name, const char *value) {
    json_array_append_new(r->headers, json_pack("[s, s]", name, value));
}

void mockprov_reply_chunk(mockprov_reply_t *r, const char *data, size_t len, int delay_ms) {
    r->chunks = mem_realloc(r->chunks, (r->count + 1) * sizeof *r->chunks);
    s_chunk_t *c = &r->chunks[r->count++];
    c->data = mem_alloc(len ? len : 1);
    memcpy(c->data, data, len);
    c->len = len;
    c->delay_ms = delay_ms;
}

void mockprov_reply_body(mockprov_reply_t *r, const char *body, size_t piece, int delay_ms) {
    size_t len = strlen(body);
    if (piece == 0) {
        piece = len ? len : 1;
    }
    for (size_t off = 0; off < len; off += piece) {
        mockprov_reply_chunk(r, body + off, len - off < piece ? len - off : piece, delay_ms);
    }
}

void mockprov_reply_hold(mockprov_reply_t *r, int hold_ms) {
    r->hold_ms = hold_ms;
}

void mockprov_reply_abort(mockprov_reply_t *r) {
    r->abort = true;
}

void mockprov_push(mockprov_t *self, mockprov_reply_t **r_p) {
    mockprov_reply_t *r = *r_p;
    *r_p = NULL;
    pthread_mutex_lock(&self->lock);
    if (self->tail) {
        self->tail->next = r;
    } else {
        self->head = r;
    }
    self->tail = r;
    pthread_mutex_unlock(&self->lock);
}

void mockprov_set_default(mockprov_t *self, mockprov_reply_t **r_p) {
    mockprov_reply_t *r = r_p ? *r_p : NULL;
    if (r_p) {
        *r_p = NULL;
    }
    pthread_mutex_lock(&self->lock);
    /* A stream may still be writing the old default: it is kept until destroy. */
    if (self->dflt) {
        self->dflt->next = self->retired;
        self->retired = self->dflt;
    }
    self->dflt = r;
    pthread_mutex_unlock(&self->lock);
}

int mockprov_pending(mockprov_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = 0;
    for (mockprov_reply_t *r = self->head; r; r = r->next) {
        n++;
    }
    pthread_mutex_unlock(&self->lock);
    return n;
}

/* --- Serving. --- */

static void s_sleep_ms(mockprov_t *self, int ms) {
    for (int waited = 0; waited < ms && !atomic_load(&self->stopping);) {
        int step = ms - waited < S_SLEEP_STEP_MS ? ms - waited : S_SLEEP_STEP_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000L};
        nanosleep(&ts, NULL);
        waited += step;
    }
}

static ssize_t s_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    s_stream_t *s = cls;
    mockprov_reply_t *r = s->reply;
    while (s->chunk < r->count && !atomic_load(&s->server->stopping)) {
        s_chunk_t *c = &r->chunks[s->chunk];
        if (!s->waited && c->delay_ms > 0) {
            s_sleep_ms(s->server, c->delay_ms);
        }
        s->waited = true;
        size_t n = c->len - s->off < max ? c->len - s->off : max;
        memcpy(buf, c->data + s->off, n);
        s->off += n;
        if (s->off == c->len) {
            s->chunk++;
            s->off = 0;
            s->waited = false;
        }
        if (n > 0) {
            return (ssize_t)n;
        }
    }
    if (!s->held && r->hold_ms > 0) {
        s->held = true;
        s_sleep_ms(s->server, r->hold_ms);
    }
    if (r->abort || atomic_load(&s->server->stopping)) {
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void s_stream_free(void *cls) {
    s_stream_t *s = cls;
    if (s->owned) {
        s_reply_free(s->reply);
    }
    free(s);
}

static enum MHD_Result s_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
    json_t *headers = cls;
    char name[128];
    size_t n = 0;
    for (; key[n] && n + 1 < sizeof name; n++) {
        name[n] = (char)tolower((unsigned char)key[n]);
    }
    name[n] = '\0';
    json_object_set_new(headers, name, json_string(value ? value : ""));
    return MHD_YES;
}

static void s_record(mockprov_t *self, struct MHD_Connection *conn, const char *url,
                     const char *method, s_conn_t *c) {
    json_t *headers = json_object();
    MHD_get_connection_values(conn, MHD_HEADER_KIND, s_header, headers);
    const char *text = c->body ? c->body : "";
    json_t *body = json_loadb(text, c->len, 0, NULL);
    json_t *rec = json_pack("{s:s, s:s, s:o, s:s%, s:o}", "method", method, "path", url, "headers",
                            headers, "body_text", text, c->len, "body", body ? body : json_null());
    if (!rec) { /* a body that is not UTF-8: keep the record, without its text */
        rec = json_pack("{s:s, s:s, s:o, s:s, s:n}", "method", method, "path", url, "headers",
                        json_object(), "body_text", "", "body");
    }
    pthread_mutex_lock(&self->lock);
    json_array_append_new(self->requests, rec);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
}

/* The next reply, or the default one, or a 500 built here. */
static s_stream_t *s_next_stream(mockprov_t *self) {
    s_stream_t *s = mem_calloc(1, sizeof *s);
    s->server = self;
    pthread_mutex_lock(&self->lock);
    if (self->head) {
        s->reply = self->head;
        self->head = self->head->next;
        if (!self->head) {
            self->tail = NULL;
        }
        s->reply->next = NULL;
        s->owned = true;
    } else if (self->dflt) {
        s->reply = self->dflt;
    }
    pthread_mutex_unlock(&self->lock);
    if (!s->reply) {
        s->reply = mockprov_reply_new(500, "application/json");
        mockprov_reply_body(s->reply,
                            "{\"error\":{\"type\":\"mockprov\",\"message\":\"no "
                            "scripted reply\"}}",
                            0, 0);
        s->owned = true;
    }
    return s;
}

static enum MHD_Result s_respond(mockprov_t *self, struct MHD_Connection *conn) {
    s_stream_t *s = s_next_stream(self);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, s_reader, s, s_stream_free);
    if (!resp) {
        s_stream_free(s);
        return MHD_NO;
    }
    int status = s->reply->status;
    size_t i;
    json_t *h;
    json_array_foreach(s->reply->headers, i, h) {
        MHD_add_response_header(resp, json_string_value(json_array_get(h, 0)),
                                json_string_value(json_array_get(h, 1)));
    }
    /* The response (and through it the stream) is released by MHD once written. */
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_size, void **con_cls) {
    mockprov_t *self = cls;
    s_conn_t *c = *con_cls;
    if (!c) {
        *con_cls = mem_calloc(1, sizeof(s_conn_t));
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t room = MOCKPROV_BODY_MAX_BYTES - c->len;
        size_t n = *upload_size < room ? *upload_size : room;
        c->body = mem_realloc(c->body, c->len + n + 1);
        memcpy(c->body + c->len, upload_data, n);
        c->len += n;
        c->body[c->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    s_record(self, conn, url, method, c);
    return s_respond(self, conn);
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                        enum MHD_RequestTerminationCode toe) {
    s_conn_t *c = *con_cls;
    if (c) {
        free(c->body);
        free(c);
        *con_cls = NULL;
    }
}

mockprov_t *mockprov_new(void) {
    mockprov_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    id_cond_init(&self->cond);
    self->requests = json_array();
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    self->daemon =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
                         NULL, s_handler, self, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_NOTIFY_COMPLETED, s_completed, self, MHD_OPTION_END);
    const union MHD_DaemonInfo *info =
        self->daemon ? MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info || info->port == 0) {
        mockprov_destroy(&self);
        return NULL;
    }
    self->port = info->port;
    snprintf(self->url, sizeof self->url, "http://127.0.0.1:%d", self->port);
    return self;
}

void mockprov_destroy(mockprov_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    mockprov_t *self = *self_p;
    atomic_store(&self->stopping, true);
    if (self->daemon) {
        MHD_stop_daemon(self->daemon);
    }
    while (self->head) {
        mockprov_reply_t *r = self->head;
        self->head = r->next;
        s_reply_free(r);
    }
    s_reply_free(self->dflt);
    while (self->retired) {
        mockprov_reply_t *r = self->retired;
        self->retired = r->next;
        s_reply_free(r);
    }
    json_decref(self->requests);
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

const char *mockprov_url(const mockprov_t *self) {
    return self->url;
}

int mockprov_port(const mockprov_t *self) {
    return self->port;
}

int mockprov_request_count(mockprov_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = (int)json_array_size(self->requests);
    pthread_mutex_unlock(&self->lock);
    return n;
}

int mockprov_wait_requests(mockprov_t *self, int n, int timeout_ms) {
    struct timespec deadline = id_timespec_at(id_now_ms() + timeout_ms);
    pthread_mutex_lock(&self->lock);
    int rc = 0;
    while ((int)json_array_size(self->requests) < n && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&self->cond, &self->lock, &deadline);
    }
    int ok = (int)json_array_size(self->requests) >= n ? 0 : -1;
    pthread_mutex_unlock(&self->lock);
    return ok;
}

json_t *mockprov_request(mockprov_t *self, int index) {
    pthread_mutex_lock(&self->lock);
    json_t *r = json_incref(json_array_get(self->requests, (size_t)index));
    pthread_mutex_unlock(&self->lock);
    return r;
}

/* One chunk of an OpenAI Chat Completions stream. */
#define S_OA_CHUNK(delta, finish)                                                                  \
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","      \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":" finish "}]}\n\n"

static void s_push_sse(mockprov_t *self, const char *body) {
    mockprov_reply_t *r = mockprov_reply_new(200, "text/event-stream");
    mockprov_reply_body(r, body, 0, 0);
    mockprov_push(self, &r);
}

void mockprov_push_openai_text(mockprov_t *self, const char *text) {
    char *body = mem_printf(S_OA_CHUNK("{\"role\":\"assistant\",\"content\":\"%s\"}", "null")
                                S_OA_CHUNK("{}", "\"stop\"") "data: [DONE]\n\n",
                            text);
    s_push_sse(self, body);
    free(body);
}

void mockprov_push_openai_call(mockprov_t *self, const char *id, const char *name,
                               const char *args) {
    json_t *delta = json_pack("{s:s, s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "role", "assistant",
                              "tool_calls", "index", 0, "id", id, "type", "function", "function",
                              "name", name, "arguments", args);
    char *d = json_dumps(delta, JSON_COMPACT);
    char *body = mem_printf(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,"
        "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,"
        "\"finish_reason\":null}]}\n\n" S_OA_CHUNK("{}", "\"tool_calls\"") "data: [DONE]\n\n",
        d);
    s_push_sse(self, body);
    free(body);
    free(d);
    json_decref(delta);
}
