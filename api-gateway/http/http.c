/* http: routing and request handling; the server itself is in httpd.c. See http.h. */
#include "http.h"
#include "jsonstrict.h"
#include "jsonout.h"
#include "mem.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *http_query(const http_req_t *req, const char *name) {
    return req->lookup ? req->lookup(req->lookup_ctx, HTTP_QUERY, name) : NULL;
}

int http_query_each(const http_req_t *req, http_pair_fn fn, void *arg) {
    return req->each ? req->each(req->lookup_ctx, HTTP_QUERY, fn, arg) : 0;
}

typedef struct {
    const char *known;  /* the route's list */
    uint32_t seen;      /* which of its names were given (by position) */
    const char *bad;    /* the first argument refused */
    const char *detail; /* why */
} s_known_t;

static int s_known(void *arg, const char *name, const char *value) {
    (void)value;
    s_known_t *k = arg;
    size_t n = strlen(name);
    int at = 0;
    for (const char *p = k->known; p && *p; at++) {
        size_t w = strcspn(p, " ");
        bool many = w > 0 && p[w - 1] == '*';
        if (w - many == n && !strncmp(p, name, n)) {
            if (!many && at < 32 && (k->seen & (1u << at))) {
                k->bad = name;
                k->detail = "is given more than once";
                return 1;
            }
            k->seen |= at < 32 ? 1u << at : 0;
            return 0;
        }
        p += w + (p[w] == ' ');
    }
    k->bad = name;
    k->detail = "is not a query parameter of this route";
    return 1;
}

int http_query_known(const http_req_t *req, http_resp_t *resp) {
    s_known_t k = {req->route ? req->route->query : NULL, 0, NULL, NULL};
    if (http_query_each(req, s_known, &k) == 0) {
        return 0;
    }
    http_invalid(resp, k.bad[0] ? k.bad : "(empty name)", k.detail);
    return -1;
}

const char *http_header(const http_req_t *req, const char *name) {
    return req->lookup ? req->lookup(req->lookup_ctx, HTTP_HEADER, name) : NULL;
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

void http_busy(http_resp_t *resp, const char *detail) {
    http_error(resp, 503, "Service unavailable.", detail);
    resp->retry_after_s = HTTP_RETRY_AFTER_S;
}

/* Lower-cases seg in place when it is a UUID in any letter case. */
static void s_canon_uuid(char *seg) {
    if (strlen(seg) != ID_UUID_LEN) {
        return;
    }
    for (int i = 0; i < ID_UUID_LEN; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? seg[i] != '-' : !isxdigit((unsigned char)seg[i])) {
            return;
        }
    }
    for (int i = 0; i < ID_UUID_LEN; i++) {
        seg[i] = (char)tolower((unsigned char)seg[i]);
    }
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
                s_canon_uuid(p);
                p = end + 1;
                if (*q != '/') {
                    return false;
                }
                q++;
            } else {
                s_canon_uuid(p);
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

/* The route for method and path (params captured into scratch), or NULL with the status
 * that says why: 405 when only other methods match the path, 404 when nothing does. */
const http_route_t *http_find(const http_router_t *router, const char *method, const char *path,
                              const char **params, char *scratch, int *status) {
    bool path_matched = false;
    for (int i = 0; i < router->nroutes; i++) {
        const http_route_t *rt = &router->routes[i];
        if (!s_match(rt->pattern, path, params, scratch, HTTP_PATH_MAX_BYTES)) {
            continue;
        }
        path_matched = true;
        if (strcmp(rt->method, method) == 0) {
            return rt;
        }
    }
    *status = path_matched ? 405 : 404;
    return NULL;
}

/* The key of req's client for a rate limit: an IPv4 address, an IPv6 address's /64 (one
 * host's usual allocation), or "" without a connection. */
static void s_client_key(const http_req_t *req, char *out, size_t size) {
    out[0] = '\0';
    const union MHD_ConnectionInfo *ci =
        req->conn ? MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS) : NULL;
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    const char *ok = NULL;
    if (sa && sa->sa_family == AF_INET) {
        ok = inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
    } else if (sa && sa->sa_family == AF_INET6 &&
               IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
        /* An IPv4 client of a dual-stack socket: its own address, not the mapped /64 that
         * every IPv4 client shares. */
        ok = inet_ntop(AF_INET, ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr + 12, out,
                       (socklen_t)size);
    } else if (sa && sa->sa_family == AF_INET6) {
        struct in6_addr a = ((const struct sockaddr_in6 *)sa)->sin6_addr;
        memset(a.s6_addr + 8, 0, 8);
        char net[INET6_ADDRSTRLEN];
        ok = inet_ntop(AF_INET6, &a, net, sizeof net);
        if (ok && snprintf(out, size, "%s/64", net) >= (int)size) {
            ok = NULL;
        }
    }
    if (!ok) {
        out[0] = '\0'; /* no key: the address is not limited (never a wrong one's bucket) */
    }
}

int http_authenticate(const http_router_t *router, http_req_t *req, http_resp_t *resp) {
    const char *h = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
    bool bearer = h && strncmp(h, "Bearer ", 7) == 0;
    /* What memory knows (a token verified or found wanting) needs no check: only the rest
     * spends the address's bucket. */
    int known = bearer && router->auth_cached
                    ? router->auth_cached(router->app, h + 7, req->user_id)
                    : HTTP_AUTH_UNAVAILABLE;
    int64_t wait_ms = 0;
    char client[INET6_ADDRSTRLEN + 4] = "";
    if (known == HTTP_AUTH_UNAVAILABLE && bearer && router->auth_limit) {
        s_client_key(req, client, sizeof client);
    }
    if (client[0] && !ratelimit_take(router->auth_limit, client, id_now_ms(), &wait_ms)) {
        http_error(resp, 429, "Too many requests.",
                   "too many token checks from this address; try again later");
        resp->retry_after_s = (int)((wait_ms + 999) / 1000);
        return -1;
    }
    int auth = !bearer                          ? HTTP_AUTH_DENIED
               : known != HTTP_AUTH_UNAVAILABLE ? known
                                                : router->auth(router->app, h + 7, req->user_id);
    if (auth == HTTP_AUTH_UNAVAILABLE) {
        http_error(resp, 503, "Service unavailable.", "the token could not be checked");
        return -1;
    }
    if (auth != 0) {
        req->user_id[0] = '\0';
        http_error(resp, 401, "Unauthorized.", "a valid Bearer token is required");
        return -1;
    }
    req->authed = true;
    return 0;
}

bool http_authenticate_cached(const http_router_t *router, http_req_t *req) {
    const char *h = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
    if (router->auth_cached && h && strncmp(h, "Bearer ", 7) == 0 &&
        router->auth_cached(router->app, h + 7, req->user_id) == 0) {
        req->authed = true;
        return true;
    }
    req->user_id[0] = '\0';
    return false;
}

void http_not_routed(http_resp_t *resp, int status) {
    if (status == 405) {
        http_error(resp, 405, "Method not allowed.", NULL);
    } else {
        http_error(resp, 404, "Not found.", NULL);
    }
}

size_t http_max_body(const http_route_t *route) {
    return route && route->body ? route->body->max_bytes : HTTP_BODY_MAX_BYTES;
}

void http_too_large(http_resp_t *resp, size_t max_body) {
    char d[64];
    snprintf(d, sizeof d, "the body exceeds %zu bytes", max_body);
    http_error(resp, 413, "Request body too large.", d);
}

void http_handle(const http_router_t *router, http_req_t *req, http_resp_t *resp) {
    req->route = NULL;
    char scratch[HTTP_PATH_MAX_BYTES];
    int status = 0;
    const http_route_t *rt = NULL;
    if (req->body_too_large) {
        /* Over the cap of the route it would have gone to (a route's own, else the default). */
        const http_route_t *to =
            http_find(router, req->method, req->path, req->params, scratch, &status);
        http_too_large(resp, http_max_body(to));
    } else if (!(rt = http_find(router, req->method, req->path, req->params, scratch, &status))) {
        http_not_routed(resp, status);
    } else {
        req->route = rt;
        if ((rt->open || req->authed || http_authenticate(router, req, resp) == 0) &&
            http_query_known(req, resp) == 0) {
            rt->fn(router->app, req, resp);
        }
    }
    /* The parameters pointed into this function's copy of the path. */
    memset(req->params, 0, sizeof req->params);
    if (resp->status == 0) {
        http_error(resp, 500, "Internal error.", "the handler produced no response");
    }
}
