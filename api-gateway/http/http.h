/*
 * http: request handling, apart from the server (httpd.h runs it). Routes are a table of
 * method + path pattern ("{}" matches one segment; a segment that is a UUID is lower-cased,
 * so an id in any case names the same row); the body is capped (413 beyond it), the bearer
 * token resolved to a user before an authenticated route runs (401 without one), and handlers
 * fill an http_resp_t. http_handle() is the whole handling in one call: unit tests and the
 * fuzz target call it with a table; the server runs its steps (http_find, http_authenticate)
 * at the moments it admits a request.
 */
#ifndef CHATFLEET_HTTP_H
#define CHATFLEET_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "id.h"
#include "ratelimit.h"

#define HTTP_MAX_PARAMS     4
#define HTTP_PATH_MAX_BYTES 1024          /* paths this long or longer match no route (404) */
#define HTTP_BODY_MAX_BYTES (1024 * 1024) /* request bodies above this get 413 */
#define HTTP_RETRY_AFTER_S  1             /* the Retry-After of every 503 at a cap */
#define HTTP_CHUNK_BYTES    (64 * 1024)   /* the pieces a streamed body reaches its sink in */

/* What a request lookup reads: a query-string argument or a header. */
typedef enum { HTTP_QUERY, HTTP_HEADER } http_kind_t;

/* The value of the query argument or header (header names case-insensitive) called name, or
 * NULL when absent; the value lives as long as the request. */
typedef const char *(*http_lookup_fn)(void *ctx, http_kind_t kind, const char *name);

/* Called with each query argument or header in turn, repeated names included: 0 to go on,
 * anything else to stop there. */
typedef int (*http_pair_fn)(void *arg, const char *name, const char *value);

/* Calls fn with each argument of kind in order until it answers non-zero; that answer, else
 * 0. */
typedef int (*http_each_fn)(void *ctx, http_kind_t kind, http_pair_fn fn, void *arg);

typedef struct {
    http_lookup_fn lookup; /* query arguments and headers; NULL: the request has none */
    http_each_fn each;     /* all of them, repeated names included; NULL: none */
    void *lookup_ctx;
    const char *method;
    const char *path;
    const char *body; /* NUL-terminated; body_len bytes */
    size_t body_len;
    bool body_too_large;                 /* the server stopped collecting it: 413 */
    const char *params[HTTP_MAX_PARAMS]; /* the "{}" segments, in order (during the handler) */
    char user_id[ID_UUID_LEN + 1];       /* the authenticated caller ("" on open routes) */
    const struct http_route *route;      /* the matched route, or NULL */
    bool authed;                         /* user_id was checked already (the server does it
                                            before reading the body) */
    struct MHD_Connection *conn;         /* the connection (NULL without a server) */
    const char *version;                 /* the request's, "HTTP/1.1" (NULL without a server) */
    void *stream;                        /* a streamed body's state: the route's sink sets it,
                                            its handler or release frees it */
} http_req_t;

struct MHD_Response;

typedef struct {
    int status;
    char *body;               /* owned; JSON text */
    struct MHD_Response *raw; /* or a ready response (a stream), owned until sent */
    int retry_after_s;        /* > 0: a Retry-After header (503 at a cap) */
} http_resp_t;

typedef void (*http_handler_fn)(void *app, http_req_t *req, http_resp_t *resp);

/* Resolves a bearer token to a user id: 0 when the token is valid, HTTP_AUTH_DENIED when it
 * is not, HTTP_AUTH_UNAVAILABLE when it could not be checked (the database is down: the
 * request gets 503, never a 401 that would tell a client its valid token is wrong). */
#define HTTP_AUTH_DENIED      (-1)
#define HTTP_AUTH_UNAVAILABLE (-2)
typedef int (*http_auth_fn)(void *app, const char *token, char user_id[ID_UUID_LEN + 1]);

/* A streamed body (http_route_t.sink): called on a request thread with each piece of the
 * body in order, HTTP_CHUNK_BYTES each, before the handler, which gets the rest (fewer bytes)
 * in req->body. 0 to go on, or -1 with resp filled: the rest of the body is read and dropped,
 * the handler does not run and resp is the answer. */
typedef int (*http_sink_fn)(void *app, http_req_t *req, const char *data, size_t len,
                            http_resp_t *resp);

/* Frees a req->stream its handler left set (the body went over the cap, the client left, the
 * sink or the handler failed); runs on a request thread, or at shutdown on the server's. */
typedef void (*http_release_fn)(void *app, void *stream);

/* A route's own body rules. */
typedef struct {
    size_t max_bytes;        /* above it 413 */
    http_sink_fn sink;       /* NULL: the handler gets the whole body at once */
    http_release_fn release; /* with sink */
} http_body_t;

typedef struct http_route {
    const char *method;
    const char *pattern;
    http_handler_fn fn;
    bool open;               /* no authentication */
    const http_body_t *body; /* NULL: collected whole, up to HTTP_BODY_MAX_BYTES */
    const char *query;       /* the query parameters it reads, space-separated, each at most
                                once unless its name ends in '*' ("label*"); any other, or one
                                given twice, is refused with 400 before the handler runs
                                (NULL: none; at most 32 names) */
} http_route_t;

/* What request handling needs: the routes (the first match wins), the bearer check and the
 * state every handler is given. */
typedef struct {
    const http_route_t *routes;
    int nroutes;
    http_auth_fn auth;
    void *app;
    /* The bearer check from memory alone, never blocking (NULL: none): 0 when it knows the
     * token is valid, HTTP_AUTH_DENIED when it knows it is not, HTTP_AUTH_UNAVAILABLE when
     * only auth can tell. */
    http_auth_fn auth_cached;
    /* Buckets by client address (an IPv6 one by its /64), one token spent before each
     * blocking check (NULL: no limit): an address out of tokens gets 429 with Retry-After
     * and costs auth nothing, so guessing tokens cannot load the database. */
    ratelimit_t *auth_limit;
} http_router_t;

/* Handles one request into resp (zeroed by the caller): 413 when req->body_too_large; else
 * the first route whose pattern matches the path and whose method is req->method, 405 when
 * only routes of other methods match the path, 404 when none does; on a route that is not
 * open, 401 unless the Authorization header is "Bearer <token>" and auth accepts the token
 * (filling req->user_id); 400 for a query argument the route does not read; then the handler, and
 * 500 when it left no status. req->route is the matched route, a refused one included (NULL on 404,
 * 405 and 413). The caller frees resp->body and sends or destroys resp->raw. */
void http_handle(const http_router_t *router, http_req_t *req, http_resp_t *resp);

/* True when router's auth_cached knows req's bearer token is valid (req->user_id filled and
 * req->authed set); false when only the blocking check can answer. Never blocks. */
bool http_authenticate_cached(const http_router_t *router, http_req_t *req);

/* The steps of http_handle, for the server (httpd.c), which runs them at different times:
 * the route for method and path with its "{}" segments captured into scratch
 * (HTTP_PATH_MAX_BYTES), or NULL with *status 405 or 404; the bearer check (0, or -1 with
 * 401, 429 or 503 in resp); and the responses for an unrouted request and a body over the cap. */
const http_route_t *http_find(const http_router_t *router, const char *method, const char *path,
                              const char **params, char *scratch, int *status);
int http_authenticate(const http_router_t *router, http_req_t *req, http_resp_t *resp);
void http_not_routed(http_resp_t *resp, int status);
void http_too_large(http_resp_t *resp, size_t max_body);

/* The body cap of route (HTTP_BODY_MAX_BYTES unless it sets its own). */
size_t http_max_body(const http_route_t *route);

/* A query-string argument (the first of that name), or NULL. */
const char *http_query(const http_req_t *req, const char *name);

/* Calls fn with each query argument in order (repeated names included) until it answers
 * non-zero; that answer, else 0. */
int http_query_each(const http_req_t *req, http_pair_fn fn, void *arg);

/* 0 when every query argument of req is one its route names (http_route_t.query), given no
 * more often than it allows; else -1 with a 400 naming the first that is not. */
int http_query_known(const http_req_t *req, http_resp_t *resp);

/* A request header (the name is case-insensitive), or NULL. */
const char *http_header(const http_req_t *req, const char *name);

/* Sets a JSON response; steals the reference to body (may be NULL for an empty 204). */
void http_json(http_resp_t *resp, int status, json_t *body);

/* Sets the error envelope {"message", "detail"?, "validations"?: [{"field","detail"}]}. */
void http_error(http_resp_t *resp, int status, const char *message, const char *detail);
void http_invalid(http_resp_t *resp, const char *field, const char *detail);

/* Sets a 503 with Retry-After: HTTP_RETRY_AFTER_S (a cap was reached). */
void http_busy(http_resp_t *resp, const char *detail);

/* Sets a plain-text response (steals text, which must be heap-allocated). */
void http_text(http_resp_t *resp, int status, char *text, const char *content_type);

#endif
