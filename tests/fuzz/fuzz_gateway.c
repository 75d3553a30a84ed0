/*
 * libFuzzer target for the gateway's request handling: the input is an HTTP request as text
 * (the request line "METHOD TARGET", header lines "Name: value", an empty line, the body),
 * split and percent-decoded the way libmicrohttpd hands it to the server, and run through
 * http_handle() with the real route table and handlers. Authentication accepts one token,
 * FUZZ_TOKEN; the database pool has one connection that can never connect, so a handler that
 * gets as far as PostgreSQL must answer an error. On every input: a status in 100..599, a
 * body (when there is one) that the strict JSON parser accepts, and for a status of 400 or
 * more an error envelope {"message", "detail"?, "validations"?: [{"field", "detail"}]}.
 */
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "feed.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"
#include "routes.h"

#define FUZZ_TOKEN    "fuzz-token"
#define FUZZ_USER_ID  "00000000-0000-4000-8000-00000000f022"
#define FUZZ_CONNINFO "host=/nonexistent/chatfleet-fuzz dbname=chatfleet connect_timeout=1"
#define FUZZ_BUS      "inproc://fuzz-gateway-bus" /* no publisher: the hub never hears a hint */
#define FUZZ_POLL_MS  (3600 * 1000)               /* the hub's poller stays quiet during runs */
#define FUZZ_ARGS_MAX 32 /* query arguments and headers kept per request (more are dropped) */

typedef struct {
    char *name;
    char *value; /* NULL for a query argument without "=" (as libmicrohttpd reports it) */
} fuzz_kv_t;

typedef struct {
    fuzz_kv_t query[FUZZ_ARGS_MAX];
    int nquery;
    fuzz_kv_t headers[FUZZ_ARGS_MAX];
    int nheaders;
} fuzz_lookup_t;

static gateway_t s_gw;
static http_router_t s_router;
static bool s_trace; /* FUZZ_GATEWAY_TRACE=1: each request and its answer on stderr */

static void s_check(bool cond, const char *what, const http_resp_t *resp) {
    if (!cond) {
        fprintf(stderr, "fuzz_gateway: property violated: %s (status %d, body %s)\n", what,
                resp->status, resp->body ? resp->body : "(none)");
        abort();
    }
}

static int s_auth(void *app, const char *token, char user_id[ID_UUID_LEN + 1]) {
    (void)app;
    if (strcmp(token, FUZZ_TOKEN) != 0) {
        return -1;
    }
    snprintf(user_id, ID_UUID_LEN + 1, "%s", FUZZ_USER_ID);
    return 0;
}

static const char *s_lookup(void *ctx, http_kind_t kind, const char *name) {
    fuzz_lookup_t *l = ctx;
    fuzz_kv_t *kv = kind == HTTP_QUERY ? l->query : l->headers;
    int n = kind == HTTP_QUERY ? l->nquery : l->nheaders;
    for (int i = 0; i < n; i++) {
        if (kind == HTTP_QUERY ? !strcmp(kv[i].name, name) : !strcasecmp(kv[i].name, name)) {
            return kv[i].value;
        }
    }
    return NULL;
}

static int s_hex(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A new string of text[0..n) percent-decoded ('+' as a space in query arguments); a decoded
 * NUL ends it, as it ends the C string libmicrohttpd passes on. */
static char *s_decode(const char *text, size_t n, bool plus) {
    char *out = mem_calloc(1, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '%' && i + 2 < n && s_hex(text[i + 1]) >= 0 && s_hex(text[i + 2]) >= 0) {
            out[o++] = (char)(s_hex(text[i + 1]) * 16 + s_hex(text[i + 2]));
            i += 2;
        } else {
            out[o++] = plus && text[i] == '+' ? ' ' : text[i];
        }
    }
    out[o] = '\0';
    return out;
}

/* The query string's arguments: "a=1&b&c=%41". */
static void s_parse_query(const char *q, size_t n, fuzz_lookup_t *l) {
    for (size_t i = 0; i < n && l->nquery < FUZZ_ARGS_MAX;) {
        const char *arg = q + i;
        const char *amp = memchr(arg, '&', n - i);
        size_t len = amp ? (size_t)(amp - arg) : n - i;
        if (len > 0) {
            const char *eq = memchr(arg, '=', len);
            fuzz_kv_t *kv = &l->query[l->nquery++];
            kv->name = s_decode(arg, eq ? (size_t)(eq - arg) : len, true);
            kv->value = eq ? s_decode(eq + 1, len - (size_t)(eq - arg) - 1, true) : NULL;
        }
        i += len + 1;
    }
}

/* One header line "Name: value" (leading blanks of the value skipped); others are dropped. */
static void s_parse_header(const char *line, size_t n, fuzz_lookup_t *l) {
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line || l->nheaders >= FUZZ_ARGS_MAX) {
        return;
    }
    const char *v = colon + 1;
    while (v < line + n && (*v == ' ' || *v == '\t')) {
        v++;
    }
    fuzz_kv_t *kv = &l->headers[l->nheaders++];
    kv->name = mem_strndup(line, (size_t)(colon - line));
    kv->value = mem_strndup(v, (size_t)(line + n - v));
}

/* The length of the line at text (without its "\n" or "\r\n"); *next is where the next starts
 * (NULL when the input ends first). */
static size_t s_line(const char *text, size_t n, const char **next) {
    const char *nl = memchr(text, '\n', n);
    size_t len = nl ? (size_t)(nl - text) : n;
    *next = nl ? nl + 1 : NULL;
    return len > 0 && text[len - 1] == '\r' ? len - 1 : len;
}

/* The error envelope of http_error and http_invalid, exactly. */
static void s_check_envelope(json_t *v, const http_resp_t *resp) {
    s_check(json_is_object(v), "an error body that is not an object", resp);
    s_check(json_is_string(json_object_get(v, "message")), "an error without a message", resp);
    json_t *detail = json_object_get(v, "detail");
    json_t *validations = json_object_get(v, "validations");
    s_check(!detail || json_is_string(detail), "an error detail that is not a string", resp);
    s_check(json_object_size(v) == 1 + (detail != NULL) + (validations != NULL),
            "an error envelope with other members", resp);
    if (!strcmp(json_string_value(json_object_get(v, "message")), "Invalid request.")) {
        s_check(resp->status == 400 && json_array_size(validations) == 1,
                "a validation error without its one validation", resp);
    }
    if (validations) {
        json_t *f = json_array_get(validations, 0);
        s_check(json_array_size(validations) == 1 && json_object_size(f) == 2 &&
                    json_is_string(json_object_get(f, "field")) &&
                    json_is_string(json_object_get(f, "detail")),
                "a validation that is not {\"field\", \"detail\"}", resp);
    }
}

/* At exit, before CZMQ's own handler (registered earlier, so run later) ends its context. */
static void s_teardown(void) {
    hub_close_all(s_gw.hub);
    workpool_destroy(&s_gw.streams); /* a watch's job may still run */
    hub_destroy(&s_gw.hub);
    pool_destroy(&s_gw.pool);
    metrics_destroy(&s_gw.metrics);
    idcache_destroy(&s_gw.models);
    free((http_route_t *)s_router.routes);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* Every request that reaches the pool logs a lost connection at warn level. */
    log_init("fuzz_gateway", "error");
    s_trace = getenv("FUZZ_GATEWAY_TRACE") != NULL;
    s_gw.pool = pool_new_unverified(FUZZ_CONNINFO, 1);
    s_gw.sink = hint_sink_log;
    s_gw.max_queue = 10;
    s_gw.chat_settings =
        (cs_settings_t){.lease_stale_ms = 30000, .requires_action_deadline_ms = 300000};
    s_gw.public_url = "https://chat.example.test";
    s_gw.hub = hub_new(FUZZ_BUS, FUZZ_POLL_MS, 100, &feed_hub_ops);
    ASSERT(s_gw.hub);
    s_gw.streams = workpool_new("fuzz_streams", 1);
    ASSERT(s_gw.streams);
    pthread_mutex_init(&s_gw.relay_lock, NULL);
    s_gw.relay_endpoint = "inproc://fuzz-gateway-relay";
    s_gw.metrics = metrics_new();
    s_gw.models = idcache_new(GATEWAY_MODEL_CACHE_MS);
    int n = 0;
    http_route_t *routes = routes_all(&n);
    s_router = (http_router_t){routes, n, s_auth, &s_gw, NULL, NULL};
    atexit(s_teardown);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *next = NULL;
    size_t len = s_line(text, size, &next);
    const char *sp = memchr(text, ' ', len);
    char *method = mem_strndup(text, sp ? (size_t)(sp - text) : len);
    const char *target = sp ? sp + 1 : text + len;
    size_t target_len = (size_t)(text + len - target);
    const char *qmark = memchr(target, '?', target_len);
    char *path = s_decode(target, qmark ? (size_t)(qmark - target) : target_len, false);
    fuzz_lookup_t l = {0};
    if (qmark) {
        s_parse_query(qmark + 1, (size_t)(target + target_len - qmark - 1), &l);
    }
    while (next) {
        const char *line = next;
        len = s_line(line, size - (size_t)(line - text), &next);
        if (len == 0) {
            break;
        }
        s_parse_header(line, len, &l);
    }
    size_t body_len = next ? size - (size_t)(next - text) : 0;
    char *body = mem_calloc(1, body_len + 1);
    memcpy(body, next ? next : "", body_len);
    /* The server refuses to collect a body whose declared length is over the cap. */
    const char *cl = s_lookup(&l, HTTP_HEADER, "Content-Length");
    http_req_t req = {.lookup = s_lookup,
                      .lookup_ctx = &l,
                      .method = method,
                      .path = path,
                      .body = body,
                      .body_len = body_len,
                      .body_too_large = cl && strtoull(cl, NULL, 10) > HTTP_BODY_MAX_BYTES};
    http_resp_t resp = {0};
    http_handle(&s_router, &req, &resp);

    if (s_trace) {
        fprintf(stderr, "fuzz_gateway: %s %s -> %d %s\n", method, path, resp.status,
                resp.body  ? resp.body
                : resp.raw ? "(a ready response)"
                           : "");
    }
    s_check(resp.status >= 100 && resp.status <= 599, "a status outside 100..599", &resp);
    s_check(resp.status < 400 || resp.body, "an error without a body", &resp);
    if (resp.body) {
        json_t *v = NULL;
        jsonstrict_error_t err;
        s_check(jsonstrict_parse(resp.body, strlen(resp.body), NULL, &v, &err) == 0,
                "a body the strict parser refuses", &resp);
        if (resp.status >= 400) {
            s_check_envelope(v, &resp);
        }
        json_decref(v);
    }
    /* A ready response (/metrics, an event stream) is destroyed unsent, as on a closed
     * connection: a stream's feed leaves the hub and frees its owner. */
    if (resp.raw) {
        MHD_destroy_response(resp.raw);
    }
    free(resp.body);
    for (int i = 0; i < l.nquery; i++) {
        free(l.query[i].name);
        free(l.query[i].value);
    }
    for (int i = 0; i < l.nheaders; i++) {
        free(l.headers[i].name);
        free(l.headers[i].value);
    }
    free(body);
    free(path);
    free(method);
    return 0;
}
