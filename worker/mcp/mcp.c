/* mcp: one MCP server over stdio; see mcp.h. The protocol is the MCP specification's
 * (modelcontextprotocol.io, "Base Protocol", "Lifecycle", "Transports: stdio", "Tools",
 * "Cancellation"); what the worker makes of it is ARCHITECTURE.md §7.9. */
#include "mcp.h"
#include "jsonnumber.h"
#include "dynbuf.h"
#include "id.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "log.h"
#include "mcphttp.h"
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_WBUF_MAX_BYTES   (16 * 1024 * 1024) /* requests not yet taken by the server */
#define S_READ_CHUNK_BYTES (64 * 1024)        /* one read of the server's stdout (a pipe's size) */

typedef enum { S_DOWN = 0, S_HANDSHAKE, S_READY } s_state_t;

/* A tools/call, queued until the server is ready, then sent. */
typedef struct s_req {
    uint64_t id;
    char *tool;
    json_t *args;
    int64_t deadline;
    bool sent;
    mcp_done_fn *done;
    void *arg;
    struct s_req *next;
} s_req_t;

/* A done callback to run once the lock is released. */
typedef struct s_end {
    mcp_done_fn *done;
    void *arg;
    json_t *result;
    bool is_error;
    struct s_end *next;
} s_end_t;

struct mcp {
    char name[32];
    char *command;
    char *argv[MCP_ARGS_MAX + 2];
    char **env; /* the sandbox's arrays, owned copies (sandbox points into them) */
    char **ro_paths;
    char **rw_paths;
    sandbox_conf_t sandbox;
    char *url;       /* Streamable HTTP, or NULL: stdio */
    mcphttp_t *http; /* the HTTP transport (url set) */
    int64_t call_timeout_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    int wake[2];
    /* Everything below is under mu. */
    bool stop;
    s_req_t *calls;
    uint64_t next_id;
    json_t *tools;
    mcp_stats_t stats;
    s_end_t *ends;   /* to run after the lock is released */
    json_t *cancels; /* ids of sent calls mcp_cancel took, for the I/O thread to announce */
    /* The child and the handshake (the I/O thread's, under mu too). */
    s_state_t state;
    pid_t pid;
    int to_fd;     /* the server's stdin */
    int from_fd;   /* the server's stdout */
    dynbuf_t rbuf; /* the server's partial line; one that fills MCP_LINE_MAX_BYTES is garbage */
    dynbuf_t wbuf; /* lines for its stdin, at most S_WBUF_MAX_BYTES */
    int64_t restart_at;
    int64_t backoff;
    int64_t handshake_deadline;
    uint64_t init_id;
    uint64_t list_id;
    int pages;
    json_t *listing;
    char last_failure[160];
};

static void s_end(mcp_t *self, mcp_done_fn *done, void *arg, json_t *result, bool is_error) {
    s_end_t *e = mem_calloc(1, sizeof *e);
    *e = (s_end_t){done, arg, result, is_error, self->ends};
    self->ends = e;
}

/* {"error": text}, text bounded. New reference. */
static json_t *s_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *s_error(const char *fmt, ...) {
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return json_pack("{s:s}", "error", text);
}

/* Sends msg: one POST over HTTP, or a line appended to the write buffer of the stdin pipe. */
static void s_send(mcp_t *self, json_t *msg) {
    json_object_set_new(msg, "jsonrpc", json_string("2.0"));
    uint64_t id = json_object_get(msg, "method") && json_is_integer(json_object_get(msg, "id"))
                      ? (uint64_t)json_integer_value(json_object_get(msg, "id"))
                      : 0;
    char *text = jsonout_dumps(msg);
    json_decref(msg);
    if (self->http) {
        if (self->state != S_DOWN) {
            mcphttp_post(self->http, text, id);
        }
        free(text);
        return;
    }
    /* A line whole or not at all: when the server is down or not reading (the buffer is
     * full), the message is dropped and its calls will time out. */
    if (self->to_fd >= 0) {
        (void)dynbuf_addf(&self->wbuf, "%s\n", text);
    }
    free(text);
}

static void s_flush(mcp_t *self) {
    while (self->to_fd >= 0 && self->wbuf.len > 0) {
        ssize_t w = write(self->to_fd, self->wbuf.data, self->wbuf.len);
        if (w <= 0) {
            return; /* EAGAIN: poll says when; an error shows as EOF on the other pipe */
        }
        dynbuf_consume(&self->wbuf, (size_t)w);
    }
}

static void s_close_child(mcp_t *self) {
    if (self->http) {
        mcphttp_reset(self->http);
    }
    if (self->pid > 0) {
        kill(-self->pid, SIGKILL); /* its process group: an npx wrapper's children too */
        int st;
        while (waitpid(self->pid, &st, 0) < 0 && errno == EINTR) {
        }
    }
    if (self->to_fd >= 0) {
        close(self->to_fd);
    }
    if (self->from_fd >= 0) {
        close(self->from_fd);
    }
    self->pid = 0;
    self->stats.pid = 0;
    self->to_fd = -1;
    self->from_fd = -1;
    dynbuf_reset(&self->rbuf);
    dynbuf_reset(&self->wbuf);
}

/* The server failed: every call it had taken ends with an error, and it restarts after the
 * backoff. Calls not yet sent wait for the restart within their deadlines. */
static void s_down(mcp_t *self, const char *why) {
    log_warn("mcp_down", "server=%s pid=%d reason=\"%s\" restart_in_ms=%lld", self->name,
             (int)self->pid, why, (long long)self->backoff);
    snprintf(self->last_failure, sizeof self->last_failure, "%s", why);
    s_close_child(self);
    s_req_t **pp = &self->calls;
    while (*pp) {
        s_req_t *r = *pp;
        if (!r->sent) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        s_end(self, r->done, r->arg,
              s_error("MCP server %s failed during the call: %s", self->name, why), true);
        free(r->tool);
        json_decref(r->args);
        free(r);
    }
    json_decref(self->tools);
    self->tools = json_array();
    json_decref(self->listing);
    self->listing = NULL;
    self->state = S_DOWN;
    self->restart_at = id_now_ms() + self->backoff;
    self->backoff = self->backoff * 2 > MCP_BACKOFF_MAX_MS ? MCP_BACKOFF_MAX_MS : self->backoff * 2;
}

/* A pipe whose ends are closed on exec (the child gets only its dup2 copies). */
static int s_pipe(int fds[2], bool nonblock) {
    if (pipe(fds) != 0) {
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        if (nonblock) {
            fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        }
    }
    return 0;
}

/* Starts the server's process with pipes on its stdin and stdout (sandbox.h says how). */
static int s_spawn(mcp_t *self, char *why, size_t size) {
    int in[2];
    int out[2];
    if (s_pipe(in, false) != 0) {
        snprintf(why, size, "cannot start %s: %s", self->command, strerror(errno));
        return -1;
    }
    if (s_pipe(out, false) != 0) {
        snprintf(why, size, "cannot start %s: %s", self->command, strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t pid = 0;
    int rc = sandbox_spawn(&self->sandbox, self->name, self->command,
                           (const char *const *)self->argv + 1, in[0], out[1], &pid, why, size);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
    fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
    self->pid = pid;
    self->stats.pid = (int)pid;
    self->to_fd = in[1];
    self->from_fd = out[0];
    return 0;
}

/* Starts the server and its handshake: initialize first (MCP "Lifecycle"). */
static void s_start(mcp_t *self) {
    self->stats.starts++;
    char why[160];
    if (self->http) {
        log_info("mcp_started", "server=%s url=%s", self->name, self->url);
    } else if (s_spawn(self, why, sizeof why) != 0) {
        s_down(self, why);
        return;
    }
    if (!self->http) {
        log_info("mcp_started", "server=%s pid=%d command=%s", self->name, (int)self->pid,
                 self->command);
    }
    self->state = S_HANDSHAKE;
    self->handshake_deadline = id_now_ms() + MCP_HANDSHAKE_MS;
    self->init_id = ++self->next_id;
    s_send(self,
           json_pack("{s:I, s:s, s:{s:s, s:{}, s:{s:s, s:s}}}", "id", (json_int_t)self->init_id,
                     "method", "initialize", "params", "protocolVersion", MCP_PROTOCOL_VERSION,
                     "capabilities", "clientInfo", "name", "chatfleet-worker", "version", "1"));
}

static void s_list_page(mcp_t *self, const char *cursor) {
    self->list_id = ++self->next_id;
    json_t *msg = json_pack("{s:I, s:s}", "id", (json_int_t)self->list_id, "method", "tools/list");
    if (cursor) {
        json_object_set_new(msg, "params", json_pack("{s:s}", "cursor", cursor));
    }
    s_send(self, msg);
}

/* A tools/list page: its tools are kept, the next page is asked for while nextCursor says
 * there is one, and the last page makes the server ready. */
static void s_on_list(mcp_t *self, const json_t *msg) {
    const json_t *result = json_object_get(msg, "result");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(result, "tools"), i, t) {
        if (json_array_size(self->listing) < MCP_TOOLS_MAX && json_is_object(t) &&
            json_is_string(json_object_get(t, "name"))) {
            json_array_append(self->listing, t);
        }
    }
    const char *cursor = json_string_value(json_object_get(result, "nextCursor"));
    if (cursor && ++self->pages < MCP_LIST_PAGES_MAX) {
        s_list_page(self, cursor);
        return;
    }
    json_decref(self->tools);
    self->tools = self->listing;
    self->listing = NULL;
    if (self->state == S_HANDSHAKE) {
        self->state = S_READY;
        self->stats.ready++;
        self->backoff = MCP_BACKOFF_MIN_MS;
    }
    log_info("mcp_ready", "server=%s pid=%d tools=%zu pages=%d", self->name, (int)self->pid,
             json_array_size(self->tools), self->pages + 1);
}

static void s_list_start(mcp_t *self) {
    json_decref(self->listing);
    self->listing = json_array();
    self->pages = 0;
    s_list_page(self, NULL);
}

/* The model's view of a tools/call result: its content and structured content, size-capped;
 * a JSON-RPC error or an oversized result becomes {"error"}. New reference. */
static json_t *s_result(const mcp_t *self, const json_t *msg, bool *is_error) {
    const json_t *err = json_object_get(msg, "error");
    const json_t *res = json_object_get(msg, "result");
    if (err || !json_is_object(res)) {
        const char *m = json_string_value(json_object_get(err, "message"));
        *is_error = true;
        char text[256];
        snprintf(text, sizeof text, "MCP server %s refused the call: %lld %.160s", self->name,
                 (long long)json_integer_value(json_object_get(err, "code")),
                 m ? m : "(no message)");
        return json_pack("{s:s}", "error", text);
    }
    json_t *out = json_object();
    json_t *content = json_object_get(res, "content");
    json_object_set(out, "content", json_is_array(content) ? content : json_array());
    json_t *sc = json_object_get(res, "structuredContent");
    if (json_is_object(sc)) {
        json_object_set(out, "structuredContent", sc);
    }
    *is_error = json_is_true(json_object_get(res, "isError"));
    char *text = jsonout_dumps(out);
    size_t n = strlen(text);
    free(text);
    if (n > MCP_RESULT_MAX_BYTES) {
        json_decref(out);
        *is_error = true;
        return s_error("the result of MCP server %s is too large: %zu bytes (the cap is %d)",
                       self->name, n, MCP_RESULT_MAX_BYTES);
    }
    return out;
}

static void s_on_response(mcp_t *self, const json_t *msg, uint64_t id) {
    if (id == self->init_id && self->state == S_HANDSHAKE) {
        if (!json_is_object(json_object_get(msg, "result"))) {
            s_down(self, "initialize failed");
            return;
        }
        if (self->http) {
            mcphttp_set_protocol(self->http,
                                 json_string_value(json_object_get(json_object_get(msg, "result"),
                                                                   "protocolVersion")));
        }
        s_send(self, json_pack("{s:s}", "method", "notifications/initialized"));
        s_list_start(self);
        return;
    }
    if (id == self->list_id && self->listing) {
        s_on_list(self, msg);
        return;
    }
    for (s_req_t **pp = &self->calls; *pp; pp = &(*pp)->next) {
        s_req_t *r = *pp;
        if (r->id == id && r->sent) {
            *pp = r->next;
            bool is_error = false;
            json_t *result = s_result(self, msg, &is_error);
            s_end(self, r->done, r->arg, result, is_error);
            free(r->tool);
            json_decref(r->args);
            free(r);
            return;
        }
    }
    /* A late answer to a call that was cancelled or timed out: nothing waits for it. */
}

/* One message from the server. Returns -1 when it is not JSON-RPC. */
static int s_on_line(mcp_t *self, const char *line, size_t len) {
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = MCP_LINE_MAX_BYTES;
    lim.max_string_bytes = MCP_LINE_MAX_BYTES;
    lim.max_values = 1 << 20;
    lim.max_items = 1 << 16;
    json_t *msg = NULL;
    jsonstrict_error_t e;
    if (jsonstrict_parse(line, len, &lim, &msg, &e) != 0 || !json_is_object(msg)) {
        char why[160];
        snprintf(why, sizeof why, "garbage from the server: %s at byte %zu",
                 msg ? "not an object" : jsonstrict_code_name(e.code), msg ? (size_t)0 : e.offset);
        json_decref(msg);
        s_down(self, why);
        return -1;
    }
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *id = json_object_get(msg, "id");
    if (method && id) {
        /* A request of the server's (ping, roots, sampling): only ping is served. */
        json_t *reply = json_pack("{s:O}", "id", id);
        if (!strcmp(method, "ping")) {
            json_object_set_new(reply, "result", json_object());
        } else {
            json_object_set_new(reply, "error",
                                json_pack("{s:i, s:s}", "code", -32601, "message",
                                          "method not supported by this client"));
        }
        s_send(self, reply);
    } else if (method) {
        if (!strcmp(method, "notifications/tools/list_changed") && self->state == S_READY) {
            s_list_start(self);
        }
    } else if (json_is_integer(id) && json_integer_value(id) > 0) {
        s_on_response(self, msg, (uint64_t)json_integer_value(id));
    }
    json_decref(msg);
    return 0;
}

static void s_read(mcp_t *self) {
    char chunk[S_READ_CHUNK_BYTES];
    for (;;) {
        size_t room = MCP_LINE_MAX_BYTES - self->rbuf.len;
        ssize_t n = read(self->from_fd, chunk, room < sizeof chunk ? room : sizeof chunk);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            s_down(self, "the server exited");
            return;
        }
        if (n < 0) {
            return;
        }
        int rc = dynbuf_add(&self->rbuf, chunk, (size_t)n);
        ASSERT(rc == 0); /* n fits: it was read into the room left */
        const char *buf = self->rbuf.data;
        size_t start = 0;
        const char *nl;
        while ((nl = memchr(buf + start, '\n', self->rbuf.len - start))) {
            size_t len = (size_t)(nl - (buf + start));
            if (len > 0 && s_on_line(self, buf + start, len) != 0) {
                return; /* the server is down and its buffers are emptied */
            }
            start += len + 1;
        }
        dynbuf_consume(&self->rbuf, start);
        if (self->rbuf.len >= MCP_LINE_MAX_BYTES) {
            s_down(self, "garbage from the server: a message over the size cap");
            return;
        }
    }
}

/* Tells the server a request it was sent is cancelled (MCP "Cancellation"), and drops its
 * HTTP transfer. I/O thread. */
static void s_announce_cancel(mcp_t *self, uint64_t id, const char *reason) {
    if (self->http) {
        mcphttp_abort(self->http, id);
    }
    s_send(self, json_pack("{s:s, s:{s:I, s:s}}", "method", "notifications/cancelled", "params",
                           "requestId", (json_int_t)id, "reason", reason));
}

/* Sends the calls that waited for the server, and ends those past their deadline. Returns
 * the nearest deadline left. */
static int64_t s_tick(mcp_t *self, int64_t now) {
    int64_t next = INT64_MAX;
    s_req_t **pp = &self->calls;
    while (*pp) {
        s_req_t *r = *pp;
        if (r->deadline <= now) {
            *pp = r->next;
            self->stats.timeouts++;
            if (r->sent) {
                s_announce_cancel(self, r->id, "timed out");
            }
            json_t *e = r->sent ? s_error("MCP server %s did not answer within %lld ms", self->name,
                                          (long long)self->call_timeout_ms)
                                : s_error("MCP server %s is not available: %s", self->name,
                                          self->last_failure[0] ? self->last_failure : "starting");
            log_warn("mcp_call_timeout", "server=%s tool=%s sent=%d", self->name, r->tool, r->sent);
            s_end(self, r->done, r->arg, e, true);
            free(r->tool);
            json_decref(r->args);
            free(r);
            continue;
        }
        if (!r->sent && self->state == S_READY) {
            r->sent = true;
            self->stats.calls++;
            log_info("mcp_call", "server=%s pid=%d tool=%s id=%llu", self->name, (int)self->pid,
                     r->tool, (unsigned long long)r->id);
            s_send(self, json_pack("{s:I, s:s, s:{s:s, s:O}}", "id", (json_int_t)r->id, "method",
                                   "tools/call", "params", "name", r->tool, "arguments", r->args));
        }
        next = r->deadline < next ? r->deadline : next;
        pp = &r->next;
    }
    return next;
}

static void s_run_ends(mcp_t *self) {
    s_end_t *e = self->ends;
    self->ends = NULL;
    pthread_mutex_unlock(&self->mu);
    while (e) {
        s_end_t *next = e->next;
        e->done(e->arg, e->result, e->is_error);
        free(e);
        e = next;
    }
    pthread_mutex_lock(&self->mu);
}

static void s_drain(mcp_t *self) {
    char drain[64];
    while (read(self->wake[0], drain, sizeof drain) > 0) {
    }
}

static void s_on_http_message(void *arg, const char *text, size_t len) {
    (void)s_on_line(arg, text, len); /* a failure resets the transport, which drops the rest */
}

/* One turn of the loop over HTTP: waits for transfers or a wake-up, then moves them on. */
static void s_http_turn(mcp_t *self, int wait_ms) {
    pthread_mutex_unlock(&self->mu);
    mcphttp_wait(self->http, self->wake[0], wait_ms);
    pthread_mutex_lock(&self->mu);
    s_drain(self);
    char why[160];
    if (self->state != S_DOWN &&
        mcphttp_perform(self->http, s_on_http_message, self, why, sizeof why) != 0) {
        s_down(self, why);
    }
}

static void *s_thread(void *arg) {
    mcp_t *self = arg;
    pthread_mutex_lock(&self->mu);
    while (!self->stop) {
        int64_t now = id_now_ms();
        if (self->state == S_DOWN && now >= self->restart_at) {
            s_start(self);
        }
        if (self->state == S_HANDSHAKE && now >= self->handshake_deadline) {
            s_down(self, "the handshake timed out");
        }
        size_t k;
        json_t *id;
        json_array_foreach(self->cancels, k, id) {
            s_announce_cancel(self, (uint64_t)json_integer_value(id), "the turn was cancelled");
        }
        json_array_clear(self->cancels);
        int64_t next = s_tick(self, now);
        if (self->state == S_DOWN && self->restart_at < next) {
            next = self->restart_at;
        }
        if (self->state == S_HANDSHAKE && self->handshake_deadline < next) {
            next = self->handshake_deadline;
        }
        s_flush(self);
        s_run_ends(self);
        if (self->stop) {
            break;
        }
        int64_t wait = next == INT64_MAX ? 1000 : next - id_now_ms();
        int wait_ms = (int)(wait < 0 ? 0 : wait > 1000 ? 1000 : wait);
        if (self->http) {
            s_http_turn(self, wait_ms);
            continue;
        }
        struct pollfd fds[3] = {{.fd = self->wake[0], .events = POLLIN},
                                {.fd = self->from_fd, .events = POLLIN},
                                {.fd = self->wbuf.len > 0 ? self->to_fd : -1, .events = POLLOUT}};
        pthread_mutex_unlock(&self->mu);
        (void)poll(fds, 3, wait_ms);
        pthread_mutex_lock(&self->mu);
        if (fds[0].revents) {
            s_drain(self);
        }
        if (self->from_fd >= 0 && fds[1].revents) {
            s_read(self);
        }
    }
    s_close_child(self);
    while (self->calls) {
        s_req_t *r = self->calls;
        self->calls = r->next;
        s_end(self, r->done, r->arg, s_error("MCP server %s is shutting down", self->name), true);
        free(r->tool);
        json_decref(r->args);
        free(r);
    }
    s_run_ends(self);
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

static void s_wake(mcp_t *self) {
    char c = 1;
    (void)!write(self->wake[1], &c, 1);
}

/* A copy of a NULL-terminated array of strings (NULL: NULL). */
static char **s_strv_dup(const char *const *v) {
    size_t n = 0;
    while (v && v[n]) {
        n++;
    }
    if (!v) {
        return NULL;
    }
    char **out = mem_calloc(n + 1, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        out[i] = mem_strdup(v[i]);
    }
    return out;
}

static void s_strv_free(char **v) {
    for (size_t i = 0; v && v[i]; i++) {
        free(v[i]);
    }
    free(v);
}

mcp_t *mcp_new(const mcp_conf_t *conf) {
    mcp_t *self = mem_calloc(1, sizeof *self);
    snprintf(self->name, sizeof self->name, "%s", conf->name);
    self->cancels = json_array();
    if (conf->url) {
        self->url = mem_strdup(conf->url);
        self->http = mcphttp_new(conf->url, conf->headers);
    }
    self->command = mem_strdup(conf->command ? conf->command : "");
    self->argv[0] = mem_strdup(self->command);
    for (int i = 0; conf->args && conf->args[i] && i < MCP_ARGS_MAX; i++) {
        self->argv[i + 1] = mem_strdup(conf->args[i]);
    }
    self->env = s_strv_dup(conf->sandbox.env);
    self->ro_paths = s_strv_dup(conf->sandbox.ro_paths);
    self->rw_paths = s_strv_dup(conf->sandbox.rw_paths);
    self->sandbox = (sandbox_conf_t){.mode = conf->sandbox.mode,
                                     .env = (const char *const *)self->env,
                                     .ro_paths = (const char *const *)self->ro_paths,
                                     .rw_paths = (const char *const *)self->rw_paths,
                                     .network = conf->sandbox.network};
    self->call_timeout_ms = conf->call_timeout_ms;
    self->tools = json_array();
    self->to_fd = -1;
    self->from_fd = -1;
    dynbuf_init(&self->rbuf, MCP_LINE_MAX_BYTES);
    dynbuf_init(&self->wbuf, S_WBUF_MAX_BYTES);
    self->backoff = MCP_BACKOFF_MIN_MS;
    pthread_mutex_init(&self->mu, NULL);
    if (s_pipe(self->wake, true) != 0 || pthread_create(&self->thread, NULL, s_thread, self) != 0) {
        log_error("mcp_start_failed", "server=%s", self->name);
        self->thread = 0;
        mcp_destroy(&self);
        return NULL;
    }
    return self;
}

void mcp_destroy(mcp_t **self_p) {
    mcp_t *self = self_p ? *self_p : NULL;
    if (!self) {
        return;
    }
    if (self->thread) {
        pthread_mutex_lock(&self->mu);
        self->stop = true;
        pthread_mutex_unlock(&self->mu);
        s_wake(self);
        pthread_join(self->thread, NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (self->wake[i] > 0) {
            close(self->wake[i]);
        }
    }
    for (int i = 0; self->argv[i]; i++) {
        free(self->argv[i]);
    }
    if (!self->http && self->command[0]) {
        sandbox_scratch_remove(self->name);
    }
    s_strv_free(self->env);
    s_strv_free(self->ro_paths);
    s_strv_free(self->rw_paths);
    free(self->command);
    free(self->url);
    mcphttp_destroy(&self->http);
    json_decref(self->cancels);
    dynbuf_free(&self->rbuf);
    dynbuf_free(&self->wbuf);
    json_decref(self->tools);
    json_decref(self->listing);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

json_t *mcp_tools(mcp_t *self) {
    pthread_mutex_lock(&self->mu);
    json_t *copy = jsonnumber_deep_copy(self->tools);
    pthread_mutex_unlock(&self->mu);
    return copy;
}

uint64_t mcp_call(mcp_t *self, const char *tool, const json_t *args, int64_t deadline_ms,
                  mcp_done_fn *done, void *arg) {
    s_req_t *r = mem_calloc(1, sizeof *r);
    r->tool = mem_strdup(tool);
    r->args = json_is_object(args) ? jsonnumber_deep_copy(args) : json_object();
    r->deadline = deadline_ms;
    r->done = done;
    r->arg = arg;
    pthread_mutex_lock(&self->mu);
    r->id = ++self->next_id;
    s_req_t **pp = &self->calls;
    while (*pp) {
        pp = &(*pp)->next;
    }
    *pp = r;
    uint64_t id = r->id;
    pthread_mutex_unlock(&self->mu);
    s_wake(self);
    return id;
}

bool mcp_cancel(mcp_t *self, uint64_t id) {
    pthread_mutex_lock(&self->mu);
    bool found = false;
    for (s_req_t **pp = &self->calls; *pp; pp = &(*pp)->next) {
        s_req_t *r = *pp;
        if (r->id == id) {
            *pp = r->next;
            if (r->sent) {
                json_array_append_new(self->cancels, json_integer((json_int_t)id));
            }
            free(r->tool);
            json_decref(r->args);
            free(r);
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&self->mu);
    if (found) {
        s_wake(self);
    }
    return found;
}

void mcp_stats(mcp_t *self, mcp_stats_t *out) {
    pthread_mutex_lock(&self->mu);
    *out = self->stats;
    pthread_mutex_unlock(&self->mu);
}
