/* http: routing and body handling on libmicrohttpd; see http.h. */
#include "http.h"
#include "jsonstrict.h"
#include "log.h"
#include "jsonout.h"
#include "mem.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct http {
    struct MHD_Daemon *daemon;
    http_router_t router;
    int port;
    metrics_t *metrics;
};

typedef struct {
    char *body;
    size_t len;
    bool too_large;
    int64_t started_ms;
} upload_t;

const char *http_query(const http_req_t *req, const char *name) {
    return req->lookup ? req->lookup(req->lookup_ctx, HTTP_QUERY, name) : NULL;
}

const char *http_header(const http_req_t *req, const char *name) {
    return req->lookup ? req->lookup(req->lookup_ctx, HTTP_HEADER, name) : NULL;
}

/* The server's lookup: the connection's arguments and headers, as MHD decoded them. */
static const char *s_lookup(void *ctx, http_kind_t kind, const char *name) {
    return MHD_lookup_connection_value(
        ctx, kind == HTTP_QUERY ? MHD_GET_ARGUMENT_KIND : MHD_HEADER_KIND, name);
}

void http_json(http_resp_t *resp, int status, json_t *body) {
    free(resp->body);
    resp->status = status;
    resp->body = body ? jsonout_dumps(body) : NULL;
    json_decref(body);
}

/* A JSON string of s without its bytes that are not UTF-8: a field or detail cut to a
 * fixed-size buffer can end inside a character, and jansson refuses such a string whole. */
static json_t *s_string(const char *s) {
    size_t len = strlen(s);
    char *clean = mem_alloc(len + 1);
    size_t o = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t n = jsonstrict_utf8_len(u + i, u + len);
        memcpy(clean + o, s + i, n);
        o += n;
        i += n ? n : 1;
    }
    clean[o] = '\0';
    json_t *v = json_string(clean);
    free(clean);
    return v;
}

static void s_envelope(http_resp_t *resp, int status, const char *message, const char *detail,
                       const char *field) {
    json_t *e = json_object();
    json_object_set_new(e, "message", s_string(message));
    if (detail) {
        json_object_set_new(e, "detail", s_string(detail));
    }
    if (field) {
        json_t *v = json_object();
        json_object_set_new(v, "field", s_string(field));
        json_object_set_new(v, "detail", s_string(detail ? detail : ""));
        json_object_set_new(e, "validations", json_pack("[o]", v)); /* steals v */
    }
    http_json(resp, status, e);
}

void http_text(http_resp_t *resp, int status, char *text, const char *content_type) {
    resp->status = status;
    resp->raw = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp->raw, "Content-Type", content_type);
}

void http_error(http_resp_t *resp, int status, const char *message, const char *detail) {
    s_envelope(resp, status, message, detail, NULL);
}

void http_invalid(http_resp_t *resp, const char *field, const char *detail) {
    s_envelope(resp, 400, "Invalid request.", detail, field);
}

/* Matches path against pattern, capturing "{}" segments; true on a match. */
static bool s_match(const char *pattern, const char *path, const char **params, char *scratch,
                    size_t scratch_len) {
    size_t n = strlen(path);
    if (n >= scratch_len) {
        return false;
    }
    memcpy(scratch, path, n + 1);
    int np = 0;
    char *p = scratch;
    const char *q = pattern;
    while (*q && *p) {
        if (q[0] == '{' && q[1] == '}') {
            char *end = strchr(p, '/');
            if (end == p || np == HTTP_MAX_PARAMS) {
                return false;
            }
            params[np++] = p;
            q += 2;
            if (end) {
                *end = '\0';
                p = end + 1;
                if (*q != '/') {
                    return false;
                }
                q++;
            } else {
                p += strlen(p);
            }
            continue;
        }
        if (*q != *p) {
            return false;
        }
        q++;
        p++;
    }
    return *q == '\0' && *p == '\0';
}

static enum MHD_Result s_send(struct MHD_Connection *conn, http_resp_t *resp) {
    if (resp->raw) {
        enum MHD_Result ok = MHD_queue_response(conn, (unsigned)resp->status, resp->raw);
        MHD_destroy_response(resp->raw);
        return ok;
    }
    const char *body = resp->body ? resp->body : "";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (resp->body) {
        MHD_add_response_header(r, "Content-Type", "application/json");
    }
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ok;
}

static void s_dispatch(const http_router_t *router, http_req_t *req, http_resp_t *resp) {
    char scratch[HTTP_PATH_MAX_BYTES];
    bool path_matched = false;
    for (int i = 0; i < router->nroutes; i++) {
        const http_route_t *rt = &router->routes[i];
        if (!s_match(rt->pattern, req->path, req->params, scratch, sizeof scratch)) {
            continue;
        }
        path_matched = true;
        if (strcmp(rt->method, req->method) != 0) {
            continue;
        }
        req->route = rt;
        if (!rt->open) {
            const char *h = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
            int auth = h && strncmp(h, "Bearer ", 7) == 0
                           ? router->auth(router->app, h + 7, req->user_id)
                           : HTTP_AUTH_DENIED;
            if (auth == HTTP_AUTH_UNAVAILABLE) {
                http_error(resp, 503, "Service unavailable.", "the token could not be checked");
                return;
            }
            if (auth != 0) {
                http_error(resp, 401, "Unauthorized.", "a valid Bearer token is required");
                return;
            }
        }
        rt->fn(router->app, req, resp);
        return;
    }
    if (path_matched) {
        http_error(resp, 405, "Method not allowed.", NULL);
    } else {
        http_error(resp, 404, "Not found.", NULL);
    }
}

void http_handle(const http_router_t *router, http_req_t *req, http_resp_t *resp) {
    req->route = NULL;
    if (req->body_too_large) {
        char d[64];
        snprintf(d, sizeof d, "the body exceeds %d bytes", HTTP_BODY_MAX_BYTES);
        http_error(resp, 413, "Request body too large.", d);
    } else {
        s_dispatch(router, req, resp);
    }
    /* The parameters pointed into s_dispatch's copy of the path. */
    memset(req->params, 0, sizeof req->params);
    if (resp->status == 0) {
        http_error(resp, 500, "Internal error.", "the handler produced no response");
    }
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **req_cls) {
    (void)version;
    http_t *self = cls;
    upload_t *up = *req_cls;
    if (!up) {
        up = mem_calloc(1, sizeof *up);
        up->started_ms = id_now_ms();
        *req_cls = up;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > HTTP_BODY_MAX_BYTES) {
            up->too_large = true;
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!up->too_large && up->len + *upload_size <= HTTP_BODY_MAX_BYTES) {
            up->body = mem_realloc(up->body, up->len + *upload_size + 1);
            memcpy(up->body + up->len, upload, *upload_size);
            up->len += *upload_size;
            up->body[up->len] = '\0';
        } else {
            up->too_large = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    http_resp_t resp = {0};
    http_req_t req = {.lookup = s_lookup,
                      .lookup_ctx = conn,
                      .method = method,
                      .path = url,
                      .body = up->body ? up->body : "",
                      .body_len = up->len,
                      .body_too_large = up->too_large};
    http_handle(&self->router, &req, &resp);
    enum MHD_Result ok = s_send(conn, &resp);
    int64_t ms = id_now_ms() - up->started_ms;
    if (self->metrics) {
        char label[96];
        snprintf(label, sizeof label, "%s %s", req.route ? req.route->method : method,
                 req.route ? req.route->pattern : "unmatched");
        metrics_request(self->metrics, label, resp.status, (double)ms / 1000.0);
    }
    log_info("http_request", "method=%s path=%s status=%d ms=%lld user_id=%s", method, url,
             resp.status, (long long)ms, req.user_id[0] ? req.user_id : "-");
    free(resp.body);
    return ok;
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                        enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)conn;
    (void)code;
    upload_t *up = *req_cls;
    if (up) {
        free(up->body);
        free(up);
        *req_cls = NULL;
    }
}

http_t *http_new(const char *listen, const http_route_t *routes, int nroutes, http_auth_fn auth,
                 void *app, metrics_t *metrics) {
    char host[64];
    int port = 0;
    const char *colon = strrchr(listen, ':');
    if (!colon || colon - listen >= (int)sizeof host || sscanf(colon + 1, "%d", &port) != 1 ||
        port < 0 || port > 65535) {
        log_error("http_listen_invalid", "listen=%s reason=\"want host:port\"", listen);
        return NULL;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        log_error("http_listen_invalid", "listen=%s reason=\"host is not an IPv4 address\"",
                  listen);
        return NULL;
    }
    http_t *self = mem_calloc(1, sizeof *self);
    self->router = (http_router_t){routes, nroutes, auth, app};
    self->metrics = metrics;
    /* A thread per connection: a stream blocks in its content reader until it has something
     * to send, and ordinary requests block on PostgreSQL; poll(), not select(), so more than
     * FD_SETSIZE connections can be open. */
    self->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
        NULL, s_access, self, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, self, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNECTIONS_MAX,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)HTTP_THREAD_STACK_BYTES, MHD_OPTION_END);
    if (!self->daemon) {
        log_error("http_start_failed", "listen=%s", listen);
        free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : port;
    log_info("http_listening", "listen=%s:%d mode=thread-per-connection", host, self->port);
    return self;
}

void http_destroy(http_t **self_p) {
    http_t *self = *self_p;
    if (!self) {
        return;
    }
    MHD_stop_daemon(self->daemon);
    free(self);
    *self_p = NULL;
}

int http_port(const http_t *self) {
    return self->port;
}
