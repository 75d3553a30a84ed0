/* httpd: libmicrohttpd in epoll mode with suspend/resume; see httpd.h. */
#include "httpd.h"
#include "dynbuf.h"
#include "log.h"
#include "mem.h"
#include "tally.h"
#include "workpool.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define S_IDLE_TIMEOUT_S 60  /* MHD's own guard: a response no byte of which moves this long */
#define S_HARD_MARGIN    256 /* connections MHD accepts beyond the cap, to answer them 503 */
/* Each connection's memory pool in MHD (request head, response head, send buffer): a held
 * stream's main cost. 16 KiB holds the longest head MHD accepts here with room to send. */
#define S_CONN_MEMORY_BYTES (16 * 1024)

/* Where a connection is, for the deadlines. */
typedef enum {
    C_HEAD, /* waiting for a request head (since accept or the previous response) */
    C_BODY, /* head in, body coming */
    C_BUSY, /* a handler runs or a response is being sent: no deadline of ours */
} c_phase_t;

typedef struct conn {
    int fd;
    char addr[INET6_ADDRSTRLEN];
    c_phase_t phase;
    int64_t since_ms;
    bool served;  /* a request was answered on it (an idle keep-alive cut is routine) */
    bool refused; /* over a cap when accepted: its request gets 503 */
    bool cut;
    struct conn *prev;
    struct conn *next;
} conn_t;

/* Where a request is. The connection is suspended while a job runs. */
typedef enum {
    R_AUTHING, /* the bearer check runs */
    R_AUTHED,  /* it ran: refused (resp set) or the body may come */
    R_BODY,
    R_SINKING, /* a streamed body's sink takes a piece */
    R_RUNNING, /* the handler runs */
    R_DONE,    /* resp is ready to queue */
} r_phase_t;

typedef struct {
    httpd_t *httpd;
    struct MHD_Connection *mhd;
    conn_t *c;
    r_phase_t phase;
    dynbuf_t body; /* the whole body, or a streamed body's next piece (HTTP_CHUNK_BYTES) */
    const http_route_t *route; /* the matched route (req.route is http_handle's to reset) */
    size_t total;              /* body bytes received */
    bool sink_failed;          /* a streamed body's sink answered: the rest is dropped */
    int64_t started_ms;
    http_req_t req;
    http_resp_t resp;
} upload_t;

struct httpd {
    struct MHD_Daemon *daemon;
    http_router_t router;
    httpd_limits_t limits;
    int port;
    char *tls_cert; /* copies of the TLS material, alive as long as the daemon; or NULL */
    char *tls_key;
    char *tls_priorities;
    metrics_t *metrics;
    workpool_t *handlers;
    pthread_mutex_t lock; /* guards everything below */
    conn_t *conns;
    zhashx_t *per_addr; /* address -> open connections from it (int64_t *) */
    int64_t open;
    int64_t refused;
    int64_t cut;
    bool stopping;
    pthread_cond_t stop_cv;
    pthread_t sweeper;
};

typedef struct {
    http_pair_fn fn;
    void *arg;
    int rc;
} s_each_t;

static enum MHD_Result s_pair(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value) {
    (void)kind;
    s_each_t *e = cls;
    e->rc = e->fn(e->arg, key, value ? value : "");
    return e->rc == 0 ? MHD_YES : MHD_NO;
}

static int s_each(void *ctx, http_kind_t kind, http_pair_fn fn, void *arg) {
    s_each_t e = {fn, arg, 0};
    MHD_get_connection_values(ctx, kind == HTTP_QUERY ? MHD_GET_ARGUMENT_KIND : MHD_HEADER_KIND,
                              s_pair, &e);
    return e.rc;
}

static const char *s_lookup(void *ctx, http_kind_t kind, const char *name) {
    return MHD_lookup_connection_value(
        ctx, kind == HTTP_QUERY ? MHD_GET_ARGUMENT_KIND : MHD_HEADER_KIND, name);
}

static void s_addr_text(const struct sockaddr *sa, char *out, size_t size) {
    snprintf(out, size, "-");
    if (sa && sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
    } else if (sa && sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)size);
    }
}

static void s_notify(void *cls, struct MHD_Connection *mhd, void **socket_ctx,
                     enum MHD_ConnectionNotificationCode code) {
    httpd_t *self = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_t *c = mem_calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *fi =
            MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        c->fd = fi ? fi->connect_fd : -1;
        s_addr_text(ai ? ai->client_addr : NULL, c->addr, sizeof c->addr);
        c->phase = C_HEAD;
        c->since_ms = id_now_ms();
        pthread_mutex_lock(&self->lock);
        c->next = self->conns;
        if (self->conns) {
            self->conns->prev = c;
        }
        self->conns = c;
        self->open++;
        int64_t mine = tally_add(self->per_addr, c->addr, 1);
        c->refused =
            self->open > self->limits.max_connections || mine > self->limits.max_per_address;
        pthread_mutex_unlock(&self->lock);
        *socket_ctx = c;
        return;
    }
    conn_t *c = *socket_ctx;
    if (!c) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    if (c->prev) {
        c->prev->next = c->next;
    } else {
        self->conns = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }
    self->open--;
    tally_add(self->per_addr, c->addr, -1);
    pthread_mutex_unlock(&self->lock);
    free(c);
    *socket_ctx = NULL;
}

static void s_phase(httpd_t *self, conn_t *c, c_phase_t phase) {
    if (!c) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    c->phase = phase;
    c->since_ms = id_now_ms();
    pthread_mutex_unlock(&self->lock);
}

/* Cuts the connections whose head or body is overdue. The socket is shut down, not closed:
 * MHD sees the end of the stream on its own thread and closes the connection there. */
static void s_sweep(httpd_t *self) {
    int64_t now = id_now_ms();
    pthread_mutex_lock(&self->lock);
    for (conn_t *c = self->conns; c; c = c->next) {
        int64_t limit = c->phase == C_HEAD   ? self->limits.head_timeout_ms
                        : c->phase == C_BODY ? self->limits.body_timeout_ms
                                             : 0;
        if (c->cut || limit <= 0 || now - c->since_ms <= limit || c->fd < 0) {
            continue;
        }
        c->cut = true;
        shutdown(c->fd, SHUT_RDWR);
        if (c->phase == C_HEAD && c->served) {
            log_debug("http_idle_closed", "addr=%s idle_ms=%lld", c->addr,
                      (long long)(now - c->since_ms));
            continue;
        }
        self->cut++;
        log_info("http_cut", "addr=%s reason=%s ms=%lld", c->addr,
                 c->phase == C_HEAD ? "head_timeout" : "body_timeout",
                 (long long)(now - c->since_ms));
    }
    pthread_mutex_unlock(&self->lock);
}

static void *s_sweeper(void *arg) {
    httpd_t *self = arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stopping) {
        struct timespec ts = id_timespec_at(id_now_ms() + HTTPD_SWEEP_MS);
        pthread_cond_timedwait(&self->stop_cv, &self->lock, &ts);
        if (!self->stopping) {
            pthread_mutex_unlock(&self->lock);
            s_sweep(self);
            pthread_mutex_lock(&self->lock);
        }
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

/* Queues up's response on its connection, logs and counts the request. */
static enum MHD_Result s_respond(httpd_t *self, upload_t *up) {
    http_resp_t *resp = &up->resp;
    struct MHD_Response *r = resp->raw;
    if (!r) {
        const char *body = resp->body ? resp->body : "";
        r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
        if (resp->body) {
            MHD_add_response_header(r, "Content-Type", "application/json");
        }
    }
    if (resp->retry_after_s > 0) {
        char s[16];
        snprintf(s, sizeof s, "%d", resp->retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, s);
    }
    if (up->c && up->c->refused) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    enum MHD_Result ok = MHD_queue_response(up->mhd, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    resp->raw = NULL;
    s_phase(self, up->c, C_BUSY);
    int64_t ms = id_now_ms() - up->started_ms;
    const http_route_t *rt = up->req.route;
    if (self->metrics) {
        char label[96];
        snprintf(label, sizeof label, "%s %s", rt ? rt->method : "-",
                 rt ? rt->pattern : "unmatched");
        metrics_request(self->metrics, label, resp->status, (double)ms / 1000.0);
    }
    /* The path and method are the client's bytes: quoted, so no line can be forged. */
    char qm[48];
    char qp[HTTP_PATH_MAX_BYTES + 64];
    log_info("http_request", "method=%s path=%s status=%d ms=%lld user_id=%s addr=%s",
             log_quote(up->req.method, qm, sizeof qm), log_quote(up->req.path, qp, sizeof qp),
             resp->status, (long long)ms, up->req.user_id[0] ? up->req.user_id : "-",
             up->c ? up->c->addr : "-");
    free(resp->body);
    resp->body = NULL;
    return ok;
}

static void s_run_auth(void *arg) {
    upload_t *up = arg;
    if (http_authenticate(&up->httpd->router, &up->req, &up->resp) != 0 && !up->resp.status) {
        http_error(&up->resp, 500, "Internal error.", "authentication produced no answer");
    }
    up->phase = R_AUTHED;
    MHD_resume_connection(up->mhd);
}

static void s_run_handler(void *arg) {
    upload_t *up = arg;
    up->req.body = dynbuf_str(&up->body);
    up->req.body_len = up->body.len;
    http_handle(&up->httpd->router, &up->req, &up->resp);
    up->phase = R_DONE;
    MHD_resume_connection(up->mhd);
}

static void s_run_sink(void *arg) {
    upload_t *up = arg;
    const http_route_t *rt = up->route;
    if (rt->body->sink(up->httpd->router.app, &up->req, up->body.data, up->body.len, &up->resp) !=
        0) {
        up->sink_failed = true;
    }
    dynbuf_reset(&up->body);
    up->phase = R_BODY;
    s_phase(up->httpd, up->c, C_BODY); /* the body deadline runs again, for the next piece */
    MHD_resume_connection(up->mhd);
}

typedef struct {
    http_release_fn release;
    void *app;
    void *stream;
} release_t;

static void s_run_release(void *arg) {
    release_t *r = arg;
    r->release(r->app, r->stream);
    free(r);
}

/* Suspends the connection and runs fn on a request thread; -1 when stopping (nothing
 * suspended then). */
static int s_post(httpd_t *self, upload_t *up, workpool_fn *fn, r_phase_t phase) {
    pthread_mutex_lock(&self->lock);
    bool stopping = self->stopping;
    if (!stopping) {
        up->phase = phase;
        MHD_suspend_connection(up->mhd);
        workpool_post(self->handlers, fn, up);
    }
    pthread_mutex_unlock(&self->lock);
    if (!stopping) {
        s_phase(self, up->c, C_BUSY);
    }
    return stopping ? -1 : 0;
}

/* The first call, with the head complete: admission, the route, then the bearer check. */
static enum MHD_Result s_first(httpd_t *self, upload_t *up) {
    s_phase(self, up->c, C_BODY);
    if (up->c && up->c->refused) {
        pthread_mutex_lock(&self->lock);
        self->refused++;
        pthread_mutex_unlock(&self->lock);
        http_busy(&up->resp, "too many connections");
        return s_respond(self, up);
    }
    const char *cl = MHD_lookup_connection_value(up->mhd, MHD_HEADER_KIND, "Content-Length");
    char scratch[HTTP_PATH_MAX_BYTES];
    int status = 0;
    const char *params[HTTP_MAX_PARAMS];
    const http_route_t *rt = NULL;
    if (!(rt = http_find(&self->router, up->req.method, up->req.path, params, scratch, &status))) {
        http_not_routed(&up->resp, status);
    } else if (cl && strtoull(cl, NULL, 10) > http_max_body(rt)) {
        http_too_large(&up->resp, http_max_body(rt));
        rt = NULL;
    }
    up->req.route = up->route = rt;
    if (!rt) {
        return s_respond(self, up);
    }
    dynbuf_init(&up->body, rt->body && rt->body->sink ? HTTP_CHUNK_BYTES : http_max_body(rt));
    up->phase = R_BODY;
    /* A token the cache knows is answered here; any other waits for a request thread. */
    if (!rt->open && !http_authenticate_cached(&self->router, &up->req) &&
        s_post(self, up, s_run_auth, R_AUTHING) != 0) {
        http_busy(&up->resp, "the server is stopping");
        return s_respond(self, up);
    }
    return MHD_YES;
}

/* Takes what it can of the body bytes at upload (*upload_size is left at what it did not
 * take): all of them into the body, or dropped once the body is over the cap or a sink
 * answered; a streamed body's full piece goes to its sink on a request thread. */
static enum MHD_Result s_take(httpd_t *self, upload_t *up, const char *upload,
                              size_t *upload_size) {
    const http_route_t *rt = up->route;
    size_t n = *upload_size;
    if (rt->body && rt->body->sink && !up->req.body_too_large && !up->sink_failed) {
        n = HTTP_CHUNK_BYTES - up->body.len < n ? HTTP_CHUNK_BYTES - up->body.len : n;
    }
    up->total += n;
    *upload_size -= n;
    if (up->total > http_max_body(rt)) {
        up->req.body_too_large = true;
    }
    if (up->req.body_too_large || up->sink_failed) {
        dynbuf_reset(&up->body);
        return MHD_YES;
    }
    if (dynbuf_add(&up->body, upload, n) != 0) {
        up->req.body_too_large = true; /* not reached: the cap was checked above */
        return MHD_YES;
    }
    if (rt->body && rt->body->sink && up->body.len == HTTP_CHUNK_BYTES) {
        if (s_post(self, up, s_run_sink, R_SINKING) != 0) {
            up->sink_failed = true;
            http_busy(&up->resp, "the server is stopping");
        }
    }
    return MHD_YES;
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *mhd, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **req_cls) {
    httpd_t *self = cls;
    upload_t *up = *req_cls;
    if (!up) {
        up = mem_calloc(1, sizeof *up);
        up->httpd = self;
        up->mhd = mhd;
        const union MHD_ConnectionInfo *si =
            MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        up->c = si ? si->socket_context : NULL;
        up->started_ms = id_now_ms();
        up->req = (http_req_t){.lookup = s_lookup,
                               .each = s_each,
                               .lookup_ctx = mhd,
                               .method = method,
                               .path = url,
                               .conn = mhd,
                               .version = version};
        *req_cls = up;
        return s_first(self, up);
    }
    switch (up->phase) {
        case R_AUTHED:
            if (up->resp.status) {
                return s_respond(self, up); /* refused before a byte of the body was read */
            }
            up->phase = R_BODY;
            if (*upload_size == 0) {
                return MHD_YES; /* the call that follows the resume; the body comes next */
            }
            /* fall through */
        case R_BODY:
            if (*upload_size > 0) {
                return s_take(self, up, upload, upload_size);
            }
            if (up->sink_failed) {
                return s_respond(self, up);
            }
            if (s_post(self, up, s_run_handler, R_RUNNING) != 0) {
                http_busy(&up->resp, "the server is stopping");
                return s_respond(self, up);
            }
            return MHD_YES;
        case R_DONE:
            return s_respond(self, up);
        case R_AUTHING:
        case R_SINKING:
        case R_RUNNING:
            break; /* suspended: not called */
    }
    return MHD_YES;
}

/* Hands a stream its handler left to the route's release, on a request thread while there
 * are any. */
static void s_release(httpd_t *self, upload_t *up) {
    release_t *r = mem_calloc(1, sizeof *r);
    *r = (release_t){up->route->body->release, self->router.app, up->req.stream};
    up->req.stream = NULL;
    pthread_mutex_lock(&self->lock);
    bool stopping = self->stopping;
    if (!stopping) {
        workpool_post(self->handlers, s_run_release, r);
    }
    pthread_mutex_unlock(&self->lock);
    if (stopping) {
        s_run_release(r);
    }
}

static void s_completed(void *cls, struct MHD_Connection *mhd, void **req_cls,
                        enum MHD_RequestTerminationCode code) {
    (void)code;
    httpd_t *self = cls;
    upload_t *up = *req_cls;
    if (!up) {
        return;
    }
    if (up->c) {
        up->c->served = true;
    }
    /* A kept-alive connection waits for its next head from now on. */
    const union MHD_ConnectionInfo *si =
        MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    s_phase(self, si ? si->socket_context : NULL, C_HEAD);
    if (up->resp.raw) {
        MHD_destroy_response(up->resp.raw);
    }
    if (up->req.stream) {
        s_release(self, up);
    }
    free(up->resp.body);
    dynbuf_free(&up->body);
    free(up);
    *req_cls = NULL;
}

static int s_parse_listen(const char *listen, struct sockaddr_in *addr) {
    char host[64];
    int port = 0;
    const char *colon = strrchr(listen, ':');
    if (!colon || colon - listen >= (int)sizeof host || sscanf(colon + 1, "%d", &port) != 1 ||
        port < 0 || port > 65535) {
        log_error("http_listen_invalid", "listen=%s reason=\"want host:port\"", listen);
        return -1;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    *addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr->sin_addr) != 1) {
        log_error("http_listen_invalid", "listen=%s reason=\"host is not an IPv4 address\"",
                  listen);
        return -1;
    }
    return 0;
}

/* Frees the TLS copies, the key wiped first. */
static void s_tls_free(httpd_t *self) {
    if (self->tls_key) {
        memset(self->tls_key, 0, strlen(self->tls_key));
    }
    free(self->tls_key);
    free(self->tls_cert);
    free(self->tls_priorities);
    self->tls_key = self->tls_cert = self->tls_priorities = NULL;
}

httpd_t *httpd_new(const char *listen, const httpd_limits_t *limits, const httpd_tls_t *tls,
                   const http_router_t *router, metrics_t *metrics) {
    struct sockaddr_in addr;
    if (s_parse_listen(listen, &addr) != 0) {
        return NULL;
    }
    ASSERT(limits->io_threads >= 1 && limits->request_threads >= 1);
    httpd_t *self = mem_calloc(1, sizeof *self);
    self->router = *router;
    self->limits = *limits;
    self->metrics = metrics;
    pthread_mutex_init(&self->lock, NULL);
    id_cond_init(&self->stop_cv);
    self->per_addr = tally_new();
    self->handlers = workpool_new("http_requests", limits->request_threads);
    if (!self->handlers) {
        zhashx_destroy(&self->per_addr);
        free(self);
        return NULL;
    }
    unsigned hard = (unsigned)limits->max_connections + S_HARD_MARGIN;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls_opts[4] = {{MHD_OPTION_END, 0, NULL}};
    if (tls) {
        self->tls_cert = mem_strdup(tls->cert_pem);
        self->tls_key = mem_strdup(tls->key_pem);
        self->tls_priorities = mem_strdup(tls->priorities);
        flags |= MHD_USE_TLS;
        tls_opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, self->tls_cert};
        tls_opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, self->tls_key};
        tls_opts[2] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, self->tls_priorities};
        tls_opts[3] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    }
    self->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, s_access, self, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, self, MHD_OPTION_NOTIFY_CONNECTION, s_notify,
        self, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)S_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, hard, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)S_CONN_MEMORY_BYTES,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(limits->io_threads > 1 ? limits->io_threads : 0),
        MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!self->daemon) {
        if (tls) {
            log_error("http_start_failed",
                      "listen=%s tls=on reason=\"cannot bind, or libmicrohttpd refused the "
                      "certificate, key or priorities (CHATFLEET_HTTP_TLS_CERT, "
                      "CHATFLEET_HTTP_TLS_KEY, CHATFLEET_HTTP_TLS_PRIORITIES); its message is "
                      "above\"",
                      listen);
        } else {
            log_error("http_start_failed", "listen=%s", listen);
        }
        s_tls_free(self);
        workpool_destroy(&self->handlers);
        zhashx_destroy(&self->per_addr);
        free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : ntohs(addr.sin_port);
    ASSERT(pthread_create(&self->sweeper, NULL, s_sweeper, self) == 0);
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr.sin_addr, host, sizeof host);
    log_info(
        "http_listening",
        "listen=%s:%d scheme=%s mode=epoll io_threads=%d request_threads=%d max_connections=%d "
        "max_per_address=%d head_timeout_ms=%lld body_timeout_ms=%lld",
        host, self->port, httpd_scheme(self), limits->io_threads, limits->request_threads,
        limits->max_connections, limits->max_per_address, (long long)limits->head_timeout_ms,
        (long long)limits->body_timeout_ms);
    return self;
}

void httpd_destroy(httpd_t **self_p) {
    httpd_t *self = *self_p;
    if (!self) {
        return;
    }
    /* No job is posted from now on, and the ones queued run (each resumes its connection)
     * before MHD stops: MHD refuses to stop with a connection suspended. */
    pthread_mutex_lock(&self->lock);
    self->stopping = true;
    pthread_cond_broadcast(&self->stop_cv);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->sweeper, NULL);
    workpool_destroy(&self->handlers);
    MHD_stop_daemon(self->daemon);
    zhashx_destroy(&self->per_addr);
    s_tls_free(self);
    pthread_cond_destroy(&self->stop_cv);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

const char *httpd_scheme(const httpd_t *self) {
    return self->tls_cert ? "https" : "http";
}

int httpd_port(const httpd_t *self) {
    return self->port;
}

void httpd_stats(httpd_t *self, httpd_stats_t *out) {
    pthread_mutex_lock(&self->lock);
    out->open = self->open;
    out->refused = self->refused;
    out->cut = self->cut;
    pthread_mutex_unlock(&self->lock);
    out->handlers_queued = workpool_queued(self->handlers);
}
