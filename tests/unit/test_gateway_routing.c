/*
 * The gateway's request handling without a connection (http_handle): route matching, 404,
 * 405, 401, 413 and 500, query and header lookup, the error envelopes; the real route table;
 * and the request parsing of gateway.c and the route handlers up to the point where they
 * need PostgreSQL. The pool here has one connection that can never connect, so a request
 * that passes its checks answers 500 "database unavailable" instead of a 400.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chatstate.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"
#include "outformat.h"
#include "routes.h"

#define TEST_TOKEN    "good-token"
#define TEST_USER_ID  "00000000-0000-4000-8000-0000000000aa"
#define TEST_CHAT_ID  "00000000-0000-4000-8000-000000000001"
#define TEST_CONNINFO "host=/nonexistent/chatfleet-test dbname=chatfleet connect_timeout=1"

/* A NULL-terminated list of query arguments or headers. */
typedef struct {
    const char *name;
    const char *value;
} kv_t;

typedef struct {
    const kv_t *query;
    const kv_t *headers;
} table_t;

/* What the recording handler saw. */
static struct {
    int calls;
    const http_route_t *route;
    char params[HTTP_MAX_PARAMS][HTTP_PATH_MAX_BYTES];
    int nparams;
    char user_id[ID_UUID_LEN + 1];
} s_seen;

static int s_auth_calls;
static gateway_t s_gw;

static const char *s_lookup(void *ctx, http_kind_t kind, const char *name) {
    const table_t *t = ctx;
    const kv_t *kv = kind == HTTP_QUERY ? t->query : t->headers;
    for (; kv && kv->name; kv++) {
        if (kind == HTTP_QUERY ? !strcmp(kv->name, name) : !strcasecmp(kv->name, name)) {
            return kv->value;
        }
    }
    return NULL;
}

static int s_auth(void *app, const char *token, char user_id[ID_UUID_LEN + 1]) {
    (void)app;
    s_auth_calls++;
    if (strcmp(token, TEST_TOKEN) != 0) {
        return -1;
    }
    snprintf(user_id, ID_UUID_LEN + 1, "%s", TEST_USER_ID);
    return 0;
}

static void s_record(void *app, http_req_t *req, http_resp_t *resp) {
    (void)app;
    s_seen.calls++;
    s_seen.route = req->route;
    s_seen.nparams = 0;
    for (int i = 0; i < HTTP_MAX_PARAMS && req->params[i]; i++) {
        snprintf(s_seen.params[i], sizeof s_seen.params[i], "%s", req->params[i]);
        s_seen.nparams++;
    }
    snprintf(s_seen.user_id, sizeof s_seen.user_id, "%s", req->user_id);
    http_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

static void s_silent(void *app, http_req_t *req, http_resp_t *resp) {
    (void)app;
    (void)req;
    (void)resp;
    s_seen.calls++;
}

static const http_route_t s_table[] = {
    {"GET", "/open", s_record, true},
    {"GET", "/items", s_record, false},
    {"POST", "/items", s_record, false},
    {"GET", "/items/special", s_record, false},
    {"GET", "/items/{}", s_record, false},
    {"DELETE", "/items/{}", s_record, false},
    {"GET", "/items/{}/parts/{}", s_record, false},
    {"GET", "/four/{}/{}/{}/{}", s_record, true},
    {"GET", "/five/{}/{}/{}/{}/{}", s_record, true},
    {"GET", "/long/{}", s_record, true},
    {"GET", "/silent", s_silent, true},
};

static const http_router_t s_test_router = {s_table, sizeof s_table / sizeof s_table[0], s_auth,
                                            NULL};

/* Handles one request; returns its status and the body parsed by the strict parser (a new
 * reference, or NULL when there is no body). req_out, when given, receives the request. */
static int s_handle(const http_router_t *router, const char *method, const char *path,
                    const kv_t *query, const kv_t *headers, const char *body, bool too_large,
                    json_t **json, http_req_t *req_out) {
    memset(&s_seen, 0, sizeof s_seen);
    s_auth_calls = 0;
    table_t t = {query, headers};
    http_req_t req = {.lookup = s_lookup,
                      .lookup_ctx = &t,
                      .method = method,
                      .path = path,
                      .body = body ? body : "",
                      .body_len = body ? strlen(body) : 0,
                      .body_too_large = too_large};
    http_resp_t resp = {0};
    http_handle(router, &req, &resp);
    *json = NULL;
    if (resp.body) {
        jsonstrict_error_t err;
        if (jsonstrict_parse(resp.body, strlen(resp.body), NULL, json, &err) != 0) {
            fail_msg("%s %s: the body is not strict JSON (%s): %s", method, path, err.message,
                     resp.body);
        }
    }
    if (resp.raw) {
        fail_msg("%s %s: an unexpected ready response", method, path);
    }
    if (req_out) {
        *req_out = req;
    }
    free(resp.body);
    return resp.status;
}

/* Asserts that got (consumed) equals the JSON text want. */
static void s_expect_json(json_t *got, const char *want) {
    json_t *w = json_loads(want, 0, NULL);
    assert_non_null(w);
    if (!json_equal(got, w)) {
        char *g = got ? json_dumps(got, JSON_SORT_KEYS) : NULL;
        fail_msg("want %s, got %s", want, g ? g : "(no body)");
    }
    json_decref(w);
    json_decref(got);
}

/* Asserts a 400 validation envelope naming field with detail (NULL: any detail). */
static void s_expect_invalid(json_t *got, const char *field, const char *detail) {
    json_t *v = json_array_get(json_object_get(got, "validations"), 0);
    char *g = json_dumps(got, JSON_SORT_KEYS);
    if (!json_is_string(json_object_get(got, "message")) ||
        strcmp(json_string_value(json_object_get(got, "message")), "Invalid request.") != 0 ||
        json_array_size(json_object_get(got, "validations")) != 1 ||
        !json_is_string(json_object_get(v, "field")) ||
        strcmp(json_string_value(json_object_get(v, "field")), field) != 0 ||
        (detail && (!json_is_string(json_object_get(v, "detail")) ||
                    strcmp(json_string_value(json_object_get(v, "detail")), detail) != 0)) ||
        !json_equal(json_object_get(v, "detail"), json_object_get(got, "detail"))) {
        fail_msg("want field %s detail %s, got %s", field, detail ? detail : "(any)",
                 g ? g : "(no body)");
    }
    free(g);
    json_decref(got);
}

static const kv_t s_bearer[] = {{"Authorization", "Bearer " TEST_TOKEN}, {NULL, NULL}};

/* ---- matching ---------------------------------------------------------------------------- */

static void test_pattern_captures_each_segment_in_order(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/items/i7/parts/p9", NULL, s_bearer, NULL,
                              false, &j, NULL),
                     200);
    s_expect_json(j, "{\"ok\":true}");
    assert_int_equal(s_seen.calls, 1);
    assert_string_equal(s_seen.route->pattern, "/items/{}/parts/{}");
    assert_int_equal(s_seen.nparams, 2);
    assert_string_equal(s_seen.params[0], "i7");
    assert_string_equal(s_seen.params[1], "p9");
}

static void test_empty_segment_and_trailing_slash_match_no_route(void **u) {
    (void)u;
    static const char *const paths[] = {
        "/items/", "/items//parts/p", "/items/i/parts/", "/open/", "/items/i/", "//items", "",
        "open"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        json_t *j;
        http_req_t req;
        assert_int_equal(
            s_handle(&s_test_router, "GET", paths[i], NULL, s_bearer, NULL, false, &j, &req), 404);
        s_expect_json(j, "{\"message\":\"Not found.\"}");
        assert_int_equal(s_seen.calls, 0);
        assert_null(req.route);
    }
}

static void test_fixed_route_listed_first_wins_over_a_pattern(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/items/special", NULL, s_bearer, NULL, false, &j, NULL),
        200);
    json_decref(j);
    assert_string_equal(s_seen.route->pattern, "/items/special");
    assert_int_equal(s_seen.nparams, 0);
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/items/specials", NULL, s_bearer, NULL, false, &j, NULL),
        200);
    json_decref(j);
    assert_string_equal(s_seen.route->pattern, "/items/{}");
    assert_string_equal(s_seen.params[0], "specials");
}

static void test_pattern_with_more_params_than_the_cap_never_matches(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/four/a/b/c/d", NULL, NULL, NULL, false, &j, NULL), 200);
    json_decref(j);
    assert_int_equal(s_seen.nparams, HTTP_MAX_PARAMS);
    assert_string_equal(s_seen.params[3], "d");
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/five/a/b/c/d/e", NULL, NULL, NULL, false, &j, NULL), 404);
    s_expect_json(j, "{\"message\":\"Not found.\"}");
    assert_int_equal(s_seen.calls, 0);
}

static void test_path_at_the_length_cap_is_not_found(void **u) {
    (void)u;
    char path[HTTP_PATH_MAX_BYTES + 1];
    memset(path, 'x', sizeof path);
    memcpy(path, "/long/", 6);
    path[HTTP_PATH_MAX_BYTES - 1] = '\0'; /* the longest path that still matches */
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", path, NULL, NULL, NULL, false, &j, NULL), 200);
    json_decref(j);
    assert_int_equal(strlen(s_seen.params[0]), HTTP_PATH_MAX_BYTES - 1 - 6);
    path[HTTP_PATH_MAX_BYTES - 1] = 'x';
    path[HTTP_PATH_MAX_BYTES] = '\0';
    assert_int_equal(s_handle(&s_test_router, "GET", path, NULL, NULL, NULL, false, &j, NULL), 404);
    s_expect_json(j, "{\"message\":\"Not found.\"}");
    assert_int_equal(s_seen.calls, 0);
}

static void test_other_method_on_a_known_path_is_405_before_auth(void **u) {
    (void)u;
    json_t *j;
    http_req_t req;
    assert_int_equal(
        s_handle(&s_test_router, "PUT", "/items/i1", NULL, NULL, NULL, false, &j, &req), 405);
    s_expect_json(j, "{\"message\":\"Method not allowed.\"}");
    assert_int_equal(s_seen.calls, 0);
    assert_int_equal(s_auth_calls, 0);
    assert_null(req.route);
    /* Methods are compared exactly. */
    assert_int_equal(s_handle(&s_test_router, "get", "/open", NULL, NULL, NULL, false, &j, NULL),
                     405);
    json_decref(j);
    assert_int_equal(s_handle(&s_test_router, "GET", "/nothing", NULL, NULL, NULL, false, &j, NULL),
                     404);
    s_expect_json(j, "{\"message\":\"Not found.\"}");
}

/* ---- authentication ------------------------------------------------------------------------ */

static void test_authed_route_refuses_a_missing_or_bad_bearer_with_401(void **u) {
    (void)u;
    static const kv_t none[] = {{NULL, NULL}};
    static const kv_t basic[] = {{"Authorization", "Basic " TEST_TOKEN}, {NULL, NULL}};
    static const kv_t wrong[] = {{"Authorization", "Bearer wrong"}, {NULL, NULL}};
    static const kv_t lower[] = {{"Authorization", "bearer " TEST_TOKEN}, {NULL, NULL}};
    static const kv_t spaced[] = {{"Authorization", "Bearer  " TEST_TOKEN}, {NULL, NULL}};
    static const kv_t empty[] = {{"Authorization", "Bearer "}, {NULL, NULL}};
    const kv_t *cases[] = {none, basic, wrong, lower, spaced, empty};
    const int auth_calls[] = {0, 0, 1, 0, 1, 1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j;
        http_req_t req;
        assert_int_equal(
            s_handle(&s_test_router, "GET", "/items/i1", NULL, cases[i], NULL, false, &j, &req),
            401);
        s_expect_json(j, "{\"message\":\"Unauthorized.\","
                         "\"detail\":\"a valid Bearer token is required\"}");
        assert_int_equal(s_seen.calls, 0);
        assert_int_equal(s_auth_calls, auth_calls[i]);
        assert_string_equal(req.user_id, "");
        /* The route is known (it names the request in metrics) though it did not run. */
        assert_non_null(req.route);
        assert_string_equal(req.route->pattern, "/items/{}");
    }
}

static void test_good_bearer_runs_the_handler_as_its_user(void **u) {
    (void)u;
    static const kv_t lower_name[] = {{"authorization", "Bearer " TEST_TOKEN}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(
        s_handle(&s_test_router, "POST", "/items", NULL, lower_name, "{}", false, &j, NULL), 200);
    json_decref(j);
    assert_int_equal(s_seen.calls, 1);
    assert_int_equal(s_auth_calls, 1);
    assert_string_equal(s_seen.user_id, TEST_USER_ID);
}

static void test_open_route_runs_without_asking_for_a_token(void **u) {
    (void)u;
    static const kv_t wrong[] = {{"Authorization", "Bearer wrong"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/open", NULL, wrong, NULL, false, &j, NULL),
                     200);
    json_decref(j);
    assert_int_equal(s_seen.calls, 1);
    assert_int_equal(s_auth_calls, 0);
    assert_string_equal(s_seen.user_id, "");
}

/* ---- 413, 500 ------------------------------------------------------------------------------ */

static void test_body_too_large_is_413_before_routing_and_auth(void **u) {
    (void)u;
    static const char *const paths[] = {"/items", "/nothing"};
    for (size_t i = 0; i < 2; i++) {
        json_t *j;
        http_req_t req;
        assert_int_equal(
            s_handle(&s_test_router, "POST", paths[i], NULL, NULL, "{}", true, &j, &req), 413);
        s_expect_json(j, "{\"message\":\"Request body too large.\","
                         "\"detail\":\"the body exceeds 1048576 bytes\"}");
        assert_int_equal(s_seen.calls, 0);
        assert_int_equal(s_auth_calls, 0);
        assert_null(req.route);
    }
}

static void test_handler_that_sets_no_status_answers_500(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/silent", NULL, NULL, NULL, false, &j, NULL),
                     500);
    s_expect_json(j, "{\"message\":\"Internal error.\","
                     "\"detail\":\"the handler produced no response\"}");
    assert_int_equal(s_seen.calls, 1);
}

/* ---- lookup and envelopes ------------------------------------------------------------------ */

static void test_query_and_header_lookup(void **u) {
    (void)u;
    static const kv_t query[] = {{"limit", "5"}, {"flag", NULL}, {NULL, NULL}};
    static const kv_t headers[] = {{"Last-Event-ID", "9"}, {NULL, NULL}};
    table_t t = {query, headers};
    http_req_t req = {.lookup = s_lookup, .lookup_ctx = &t};
    assert_string_equal(http_query(&req, "limit"), "5");
    assert_null(http_query(&req, "flag"));
    assert_null(http_query(&req, "Limit"));
    assert_null(http_query(&req, "Last-Event-ID"));
    assert_string_equal(http_header(&req, "last-event-id"), "9");
    assert_null(http_header(&req, "limit"));
    http_req_t bare = {0};
    assert_null(http_query(&bare, "limit"));
    assert_null(http_header(&bare, "Authorization"));
}

/* Parses resp's body with the strict parser and frees it. */
static json_t *s_body(http_resp_t *resp) {
    json_t *v = NULL;
    assert_non_null(resp->body);
    assert_int_equal(jsonstrict_parse(resp->body, strlen(resp->body), NULL, &v, NULL), 0);
    free(resp->body);
    resp->body = NULL;
    return v;
}

static void test_error_envelope_shapes(void **u) {
    (void)u;
    http_resp_t resp = {0};
    http_error(&resp, 409, "Conflict.", NULL);
    assert_int_equal(resp.status, 409);
    s_expect_json(s_body(&resp), "{\"message\":\"Conflict.\"}");
    http_error(&resp, 503, "Busy, try again.", "retry");
    assert_int_equal(resp.status, 503);
    s_expect_json(s_body(&resp), "{\"message\":\"Busy, try again.\",\"detail\":\"retry\"}");
    http_invalid(&resp, "content[0].text", "must be a string");
    assert_int_equal(resp.status, 400);
    s_expect_json(s_body(&resp),
                  "{\"message\":\"Invalid request.\",\"detail\":\"must be a string\","
                  "\"validations\":[{\"field\":\"content[0].text\","
                  "\"detail\":\"must be a string\"}]}");
    /* A later answer replaces an earlier one (ASan sees the first body freed). */
    http_error(&resp, 404, "Not found.", NULL);
    http_json(&resp, 204, NULL);
    assert_int_equal(resp.status, 204);
    assert_null(resp.body);
    http_json(&resp, 200, json_pack("{s:[i]}", "a", 1));
    s_expect_json(s_body(&resp), "{\"a\":[1]}");
}

/* A field cut by a fixed-size buffer in the middle of a UTF-8 character kept the envelope
 * from being built whole (jansson refuses the string): the 400 lost its validations. The
 * envelope drops what is not UTF-8 and keeps the rest. */
static void test_invalid_names_a_field_cut_mid_character(void **u) {
    (void)u;
    char key[301];
    for (int i = 0; i < 150; i++) {
        memcpy(key + 2 * i, "\xc3\xa9", 2); /* é */
    }
    key[300] = '\0';
    json_t *obj = json_object();
    json_object_set_new(obj, key, json_true());
    static const char *const none[] = {NULL};
    http_resp_t resp = {0};
    assert_int_equal(gateway_only_fields(obj, none, "x.", &resp), -1);
    json_decref(obj);
    /* gateway_only_fields keeps 159 bytes: "x.", 78 characters and half of the 79th. */
    char want[160] = "x.";
    memcpy(want + 2, key, 156);
    want[158] = '\0';
    s_expect_invalid(s_body(&resp), want, "unknown field");
    http_invalid(&resp, "a\xc3", "bad \xff\xc3\xa9\xed\xa0\x80 byte\xf0\x9f");
    s_expect_json(s_body(&resp),
                  "{\"message\":\"Invalid request.\",\"detail\":\"bad \xc3\xa9 byte\","
                  "\"validations\":[{\"field\":\"a\",\"detail\":\"bad \xc3\xa9 byte\"}]}");
    http_error(&resp, 404, "Not found.", "chat \xe2\x82");
    s_expect_json(s_body(&resp), "{\"message\":\"Not found.\",\"detail\":\"chat \"}");
}

/* ---- the real route table ------------------------------------------------------------------ */

static void test_route_table_patterns_are_well_formed(void **u) {
    (void)u;
    int n = 0;
    http_route_t *routes = routes_all(&n);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        const char *p = routes[i].pattern;
        const char *m = routes[i].method;
        if (strcmp(m, "GET") && strcmp(m, "POST") && strcmp(m, "PATCH") && strcmp(m, "DELETE")) {
            fail_msg("%s %s: unexpected method", m, p);
        }
        assert_non_null(routes[i].fn);
        assert_true(strlen(p) < HTTP_PATH_MAX_BYTES);
        if (p[0] != '/' || (p[1] && p[strlen(p) - 1] == '/') || strstr(p, "//")) {
            fail_msg("%s %s: want /segment/... without an empty segment", m, p);
        }
        int params = 0;
        for (const char *c = p; *c; c++) {
            if (*c == '{' || *c == '}') {
                /* A parameter is a whole segment: "/{}" followed by "/" or the end. */
                if (*c == '}' || c[-1] != '/' || c[1] != '}' || (c[2] && c[2] != '/')) {
                    fail_msg("%s %s: a brace outside a whole \"{}\" segment", m, p);
                }
                params++;
                c++;
            }
        }
        assert_in_range(params, 0, HTTP_MAX_PARAMS);
    }
    free(routes);
}

static void test_route_table_has_no_duplicate_method_and_pattern(void **u) {
    (void)u;
    int n = 0;
    http_route_t *routes = routes_all(&n);
    for (int i = 0; i < n; i++) {
        for (int k = i + 1; k < n; k++) {
            if (!strcmp(routes[i].method, routes[k].method) &&
                !strcmp(routes[i].pattern, routes[k].pattern)) {
                fail_msg("%s %s twice", routes[i].method, routes[i].pattern);
            }
        }
    }
    free(routes);
}

/* The real table with every handler replaced by the recorder (patterns, order and open flags
 * as they are). */
static http_router_t s_recording_router(http_route_t **routes) {
    int n = 0;
    *routes = routes_all(&n);
    for (int i = 0; i < n; i++) {
        (*routes)[i].fn = s_record;
    }
    return (http_router_t){*routes, n, s_auth, NULL};
}

static void test_every_route_is_reached_by_a_path_of_its_own(void **u) {
    (void)u;
    http_route_t *routes;
    http_router_t r = s_recording_router(&routes);
    for (int i = 0; i < r.nroutes; i++) {
        char path[HTTP_PATH_MAX_BYTES] = "";
        size_t o = 0;
        for (const char *c = routes[i].pattern; *c && o + ID_UUID_LEN + 1 < sizeof path; c++) {
            if (c[0] == '{' && c[1] == '}') {
                o += (size_t)snprintf(path + o, sizeof path - o, "%s", TEST_CHAT_ID);
                c++;
            } else {
                path[o++] = *c;
                path[o] = '\0';
            }
        }
        json_t *j;
        if (s_handle(&r, routes[i].method, path, NULL, s_bearer, NULL, false, &j, NULL) != 200 ||
            s_seen.route != &routes[i]) {
            fail_msg("%s %s: reached %s", routes[i].method, path,
                     s_seen.route ? s_seen.route->pattern : "no route");
        }
        json_decref(j);
    }
    free(routes);
}

static void test_real_paths_resolve_to_their_routes(void **u) {
    (void)u;
    static const struct {
        const char *method;
        const char *path;
        int status;
        const char *pattern; /* the route that ran, or NULL */
        const char *param0;
        const char *param1;
    } cases[] = {
        {"GET", "/healthz", 200, "/healthz", NULL, NULL},
        {"GET", "/api/v2/chats/models", 200, "/api/v2/chats/models", NULL, NULL},
        {"GET", "/api/v2/chats/watch", 200, "/api/v2/chats/watch", NULL, NULL},
        {"GET", "/api/v2/chats/c1", 200, "/api/v2/chats/{}", "c1", NULL},
        {"PATCH", "/api/v2/chats/c1", 200, "/api/v2/chats/{}", "c1", NULL},
        {"GET", "/api/v2/chats/c1/stream", 200, "/api/v2/chats/{}/stream", "c1", NULL},
        {"PATCH", "/api/v2/chats/c1/messages/42", 200, "/api/v2/chats/{}/messages/{}", "c1", "42"},
        {"DELETE", "/api/v2/chats/c1/queue/7", 200, "/api/v2/chats/{}/queue/{}", "c1", "7"},
        {"POST", "/api/v2/chats/c1/queue/7/promote", 200, "/api/v2/chats/{}/queue/{}/promote", "c1",
         "7"},
        {"POST", "/a2a", 200, "/a2a", NULL, NULL},
        {"PUT", "/api/v2/chats", 405, NULL, NULL, NULL},
        {"DELETE", "/api/v2/chats/c1", 405, NULL, NULL, NULL},
        {"GET", "/api/v2/chats/", 404, NULL, NULL, NULL},
        {"GET", "/api/v2/chat", 404, NULL, NULL, NULL},
        {"GET", "/api/v2/chats/c1/messages/42/extra", 404, NULL, NULL, NULL},
        {"POST", "/api/v2/chats/c1/queue//promote", 404, NULL, NULL, NULL},
    };
    http_route_t *routes;
    http_router_t r = s_recording_router(&routes);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j;
        int status =
            s_handle(&r, cases[i].method, cases[i].path, NULL, s_bearer, NULL, false, &j, NULL);
        json_decref(j);
        if (status != cases[i].status) {
            fail_msg("%s %s: want %d, got %d", cases[i].method, cases[i].path, cases[i].status,
                     status);
        }
        if (!cases[i].pattern) {
            assert_int_equal(s_seen.calls, 0);
            continue;
        }
        assert_string_equal(s_seen.route->pattern, cases[i].pattern);
        assert_string_equal(s_seen.route->method, cases[i].method);
        assert_int_equal(s_seen.nparams, (cases[i].param0 != NULL) + (cases[i].param1 != NULL));
        if (cases[i].param0) {
            assert_string_equal(s_seen.params[0], cases[i].param0);
        }
        if (cases[i].param1) {
            assert_string_equal(s_seen.params[1], cases[i].param1);
        }
    }
    free(routes);
}

static void test_only_probes_metrics_and_the_agent_card_are_open(void **u) {
    (void)u;
    static const char *const open[] = {"/healthz", "/readyz", "/metrics",
                                       "/.well-known/agent-card.json"};
    http_route_t *routes;
    http_router_t r = s_recording_router(&routes);
    for (int i = 0; i < r.nroutes; i++) {
        bool want_open = false;
        for (size_t k = 0; k < sizeof open / sizeof open[0]; k++) {
            want_open |= !strcmp(routes[i].pattern, open[k]);
        }
        if (routes[i].open != want_open) {
            fail_msg("%s %s: open is %d", routes[i].method, routes[i].pattern, routes[i].open);
        }
        if (!want_open) {
            json_t *j;
            assert_int_equal(s_handle(&r, routes[i].method, routes[i].pattern, NULL, NULL, NULL,
                                      false, &j, NULL),
                             401);
            json_decref(j);
        }
    }
    free(routes);
}

/* ---- gateway.c parsing --------------------------------------------------------------------- */

static int s_body_parse(const char *text, bool empty_ok, json_t **out) {
    http_req_t req = {.body = text, .body_len = strlen(text)};
    http_resp_t resp = {0};
    json_t *v = gateway_body(&req, &resp, empty_ok);
    *out = v ? v : s_body(&resp);
    return v ? 0 : resp.status;
}

static void test_body_errors_name_the_byte_offset_and_the_field(void **u) {
    (void)u;
    json_t *v;
    assert_int_equal(s_body_parse("", true, &v), 0);
    s_expect_json(v, "{}");
    assert_int_equal(s_body_parse("", false, &v), 400);
    s_expect_invalid(v, "body", "value expected (at byte 0)");
    assert_int_equal(s_body_parse("{\"content\":[{\"type\":\"text\",\"text\":\"a\"},]}", false, &v),
                     400);
    s_expect_invalid(v, "content[1]", "invalid number (at byte 39)");
    assert_int_equal(s_body_parse("{\"a\":1,\"a\":2}", false, &v), 400);
    s_expect_invalid(v, "a", "duplicate object key (at byte 7)");
    assert_int_equal(
        s_body_parse("{\"content\":[{\"type\":\"text\",\"text\":\"\\ud800\"}]}", false, &v), 400);
    s_expect_invalid(v, "content[0].text", "unpaired high surrogate \\uD800 (at byte 35)");
    assert_int_equal(s_body_parse("{\"a\":{\"b\":[0,1,tru]}}", false, &v), 400);
    s_expect_invalid(v, "a.b[2]", "invalid literal (at byte 15)");
    assert_int_equal(s_body_parse("[1]", false, &v), 400);
    s_expect_invalid(v, "body", "the body must be a JSON object");
    assert_int_equal(s_body_parse(" {\"a\" : [1]} ", false, &v), 0);
    s_expect_json(v, "{\"a\":[1]}");
}

static void test_unknown_fields_are_named_with_their_prefix(void **u) {
    (void)u;
    static const char *const allowed[] = {"name", "description", NULL};
    json_t *obj = json_pack("{s:s,s:s}", "name", "n", "description", "d");
    http_resp_t resp = {0};
    assert_int_equal(gateway_only_fields(obj, allowed, "dynamic_tools[2].", &resp), 0);
    assert_int_equal(resp.status, 0);
    json_object_set_new(obj, "extra", json_null());
    assert_int_equal(gateway_only_fields(obj, allowed, "dynamic_tools[2].", &resp), -1);
    s_expect_invalid(s_body(&resp), "dynamic_tools[2].extra", "unknown field");
    assert_int_equal(gateway_only_fields(obj, allowed, "", &resp), -1);
    s_expect_invalid(s_body(&resp), "extra", "unknown field");
    json_decref(obj);
}

static void test_content_parts_are_checked_one_by_one(void **u) {
    (void)u;
    static const struct {
        const char *content; /* JSON text, or NULL for a missing member */
        bool empty_ok;
        const char *field;
        const char *detail;
    } bad[] = {
        {NULL, true, "content", "is required"},
        {"{}", true, "content", "must be an array of parts"},
        {"[]", false, "content", "must hold at least one part"},
        {"[{\"type\":\"text\",\"text\":\"a\"},3]", true, "content[1]",
         "a part is an object with a string \"type\""},
        {"[{\"text\":\"a\"}]", true, "content[0]", "a part is an object with a string \"type\""},
        {"[{\"type\":\"image\"}]", true, "content[0].type",
         "only \"text\" input parts are supported"},
        {"[{\"type\":\"text\",\"text\":\"a\",\"lang\":\"en\"}]", true, "content[0].lang",
         "unknown field"},
        {"[{\"type\":\"text\",\"text\":1}]", true, "content[0].text", "must be a string"},
        {"[{\"type\":\"text\"}]", true, "content[0].text", "must be a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *c = bad[i].content ? json_loads(bad[i].content, 0, NULL) : NULL;
        http_resp_t resp = {0};
        assert_null(gateway_content(c, "content", bad[i].empty_ok, &resp));
        s_expect_invalid(s_body(&resp), bad[i].field, bad[i].detail);
        json_decref(c);
    }
    json_t *c = json_loads("[{\"text\":\"hi\",\"type\":\"text\"}]", 0, NULL);
    http_resp_t resp = {0};
    char *text = gateway_content(c, "content", false, &resp);
    assert_non_null(text);
    assert_int_equal(resp.status, 0);
    json_t *back = json_loads(text, 0, NULL);
    assert_true(json_equal(back, c));
    json_decref(back);
    free(text);
    json_decref(c);
    c = json_array();
    text = gateway_content(c, "content", true, &resp);
    assert_string_equal(text, "[]");
    free(text);
    json_decref(c);
}

static int s_format(const char *body_text, const char *tools_text, gateway_format_t *f,
                    json_t **err) {
    json_t *body = json_loads(body_text, 0, NULL);
    json_t *tools = tools_text ? json_loads(tools_text, 0, NULL) : NULL;
    assert_non_null(body);
    http_resp_t resp = {0};
    int rc = gateway_format(body, tools, f, &resp);
    *err = rc ? s_body(&resp) : NULL;
    assert_int_equal(rc == 0, resp.status == 0);
    json_decref(tools);
    json_decref(body);
    return rc;
}

static void test_response_format_is_read_and_its_errors_named(void **u) {
    (void)u;
    gateway_format_t f;
    json_t *e;
    assert_int_equal(s_format("{}", NULL, &f, &e), 0);
    assert_false(f.given);
    assert_int_equal(s_format("{\"response_format\":null}", NULL, &f, &e), 0);
    assert_false(f.given);
    assert_int_equal(s_format("{\"response_format\":{\"type\":\"text\"}}", NULL, &f, &e), 0);
    assert_true(f.given);
    assert_false(f.structured);
    assert_null(f.json);
    static const char schema[] =
        "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"answer\","
        "\"schema\":{\"type\":\"object\",\"required\":[\"n\"]}}}}";
    assert_int_equal(s_format(schema, "[{\"name\":\"lookup\"}]", &f, &e), 0);
    assert_true(f.given && f.structured);
    assert_non_null(f.json);
    assert_true(id_uuid_valid(f.request_id));
    gateway_format_clear(&f);
    assert_null(f.json);

    assert_int_equal(s_format("{\"response_format\":5}", NULL, &f, &e), -1);
    s_expect_invalid(e, "response_format", NULL);
    assert_int_equal(s_format("{\"response_format\":{\"type\":\"xml\"}}", NULL, &f, &e), -1);
    s_expect_invalid(e, "response_format.type", "must be \"text\" or \"json_schema\"");
    assert_int_equal(
        s_format("{\"response_format\":{\"type\":\"text\",\"strict\":true}}", NULL, &f, &e), -1);
    s_expect_invalid(e, "response_format.strict", "unknown field");
    assert_int_equal(s_format("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                              "{\"name\":\"no spaces\",\"schema\":{}}}}",
                              NULL, &f, &e),
                     -1);
    s_expect_invalid(e, "response_format.json_schema.name", "must match ^[A-Za-z0-9_-]{1,64}$");
    assert_int_equal(s_format(schema, "[{\"name\":\"" OUTFORMAT_FINALIZER "\"}]", &f, &e), -1);
    s_expect_invalid(e, "response_format", NULL);
    assert_null(f.json);
}

static void test_state_machine_errors_map_to_statuses(void **u) {
    (void)u;
    static const struct {
        cs_rc_t rc;
        const char *message;
        int status;
        const char *want;
    } cases[] = {
        {CS_NOT_FOUND, "no chat", 404,
         "{\"message\":\"Resource not found.\",\"detail\":\"no chat\"}"},
        {CS_INVALID_STATE, "x", 409, "{\"message\":\"Chat is in an invalid state.\"}"},
        {CS_CONFLICT, "busy", 409, "{\"message\":\"Conflict.\",\"detail\":\"busy\"}"},
        {CS_FENCED, "fenced", 409, "{\"message\":\"Conflict.\",\"detail\":\"fenced\"}"},
        {CS_QUEUE_FULL, "full", 429,
         "{\"message\":\"Message queue is full.\",\"detail\":\"full\"}"},
        {CS_RETRY, "again", 503, "{\"message\":\"Busy, try again.\",\"detail\":\"again\"}"},
        {CS_DB, "lost", 500, "{\"message\":\"Internal error.\"}"},
        {CS_BAD_INPUT, "results[0].tool_call_id: no such call", 400,
         "{\"message\":\"Invalid request.\",\"detail\":\"no such call\",\"validations\":"
         "[{\"field\":\"results[0].tool_call_id\",\"detail\":\"no such call\"}]}"},
        {CS_BAD_INPUT, "results", 400,
         "{\"message\":\"Invalid request.\",\"detail\":\"results\",\"validations\":"
         "[{\"field\":\"results\",\"detail\":\"results\"}]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cs_error_t err = {.rc = cases[i].rc};
        snprintf(err.message, sizeof err.message, "%s", cases[i].message);
        http_resp_t resp = {0};
        gateway_cs_error(&resp, &err);
        assert_int_equal(resp.status, cases[i].status);
        s_expect_json(s_body(&resp), cases[i].want);
    }
}

/* ---- route handlers up to the database ----------------------------------------------------- */

static http_route_t *s_real_routes;
static http_router_t s_real;

/* One request through the real table and handlers, as the test user. */
static int s_real_call(const char *method, const char *path, const kv_t *query, const kv_t *headers,
                       const char *body, json_t **j) {
    return s_handle(&s_real, method, path, query, headers ? headers : s_bearer, body, false, j,
                    NULL);
}

/* Asserts the answer of a request that passed its checks and needed the database. */
static void s_expect_unavailable(const char *method, const char *path, const kv_t *query,
                                 const kv_t *headers, const char *body) {
    json_t *j;
    assert_int_equal(s_real_call(method, path, query, headers, body, &j), 500);
    s_expect_json(j, "{\"message\":\"Internal error.\",\"detail\":\"database unavailable\"}");
}

static void test_chat_list_limit_cursor_and_archived_are_checked(void **u) {
    (void)u;
    static const struct {
        kv_t query[4];
        const char *field;
        const char *detail;
    } bad[] = {
        {{{"limit", "0"}, {NULL, NULL}}, "limit", "must be between 1 and 200"},
        {{{"limit", "201"}, {NULL, NULL}}, "limit", "must be between 1 and 200"},
        {{{"limit", "ten"}, {NULL, NULL}}, "limit", "must be between 1 and 200"},
        {{{"limit", "-5"}, {NULL, NULL}}, "limit", "must be between 1 and 200"},
        {{{"after_id", "42"}, {NULL, NULL}}, "after_id", "must be a chat id"},
        {{{"archived", "yes"}, {NULL, NULL}}, "archived", "must be true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j;
        assert_int_equal(s_real_call("GET", "/api/v2/chats", bad[i].query, NULL, NULL, &j), 400);
        s_expect_invalid(j, bad[i].field, bad[i].detail);
    }
    static const kv_t good[] = {
        {"limit", "200"}, {"archived", "true"}, {"after_id", TEST_CHAT_ID}, {NULL, NULL}};
    s_expect_unavailable("GET", "/api/v2/chats", good, NULL, NULL);
}

static void test_message_list_ids_and_limit_are_checked(void **u) {
    (void)u;
    static const struct {
        kv_t query[3];
        const char *field;
        const char *detail;
    } bad[] = {
        {{{"before_id", "0"}, {NULL, NULL}}, "before_id", "must be a positive message id"},
        {{{"before_id", "5x"}, {NULL, NULL}}, "before_id", "must be a positive message id"},
        {{{"after_id", "-3"}, {NULL, NULL}}, "after_id", "must be a positive message id"},
        {{{"after_id", ""}, {NULL, NULL}}, "after_id", "must be a positive message id"},
        {{{"limit", "0"}, {NULL, NULL}}, "limit", "must be between 1 and 200"},
        {{{"limit", "201"}, {NULL, NULL}}, "limit", "must be between 1 and 200"},
        {{{"after_id", "5"}, {"before_id", "5"}, {NULL, NULL}},
         "after_id",
         "must be less than before_id"},
    };
    const char *path = "/api/v2/chats/" TEST_CHAT_ID "/messages";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j;
        assert_int_equal(s_real_call("GET", path, bad[i].query, NULL, NULL, &j), 400);
        s_expect_invalid(j, bad[i].field, bad[i].detail);
    }
    static const kv_t good[] = {
        {"before_id", "9"}, {"after_id", "2"}, {"limit", "200"}, {NULL, NULL}};
    s_expect_unavailable("GET", path, good, NULL, NULL);
}

static void test_stream_cursor_and_last_event_id_are_checked(void **u) {
    (void)u;
    const char *path = "/api/v2/chats/" TEST_CHAT_ID "/stream";
    static const kv_t neg[] = {{"after_id", "-1"}, {NULL, NULL}};
    static const kv_t lei[] = {
        {"Authorization", "Bearer " TEST_TOKEN}, {"Last-Event-ID", "x"}, {NULL, NULL}};
    static const kv_t lei_ok[] = {
        {"Authorization", "Bearer " TEST_TOKEN}, {"last-event-id", "12"}, {NULL, NULL}};
    static const kv_t after_ok[] = {{"after_id", "0"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_real_call("GET", path, neg, NULL, NULL, &j), 400);
    s_expect_invalid(j, "after_id", "Invalid after_id parameter.");
    assert_int_equal(s_real_call("GET", path, NULL, lei, NULL, &j), 400);
    s_expect_invalid(j, "Last-Event-ID", "Invalid after_id parameter.");
    s_expect_unavailable("GET", path, after_ok, lei_ok, NULL);
}

static void test_bodies_are_checked_before_the_database(void **u) {
    (void)u;
    char msgs[128];
    char results[128];
    char chat[128];
    snprintf(msgs, sizeof msgs, "/api/v2/chats/%s/messages", TEST_CHAT_ID);
    snprintf(results, sizeof results, "/api/v2/chats/%s/tool-results", TEST_CHAT_ID);
    snprintf(chat, sizeof chat, "/api/v2/chats/%s", TEST_CHAT_ID);
    static const char text[] = "\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]";
    const struct {
        const char *method;
        const char *path;
        const char *body;
        const char *field;
        const char *detail;
    } bad[] = {
        {"POST", "/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":tru}]}",
         "content[0].text", "invalid literal (at byte 34)"},
        {"POST", "/api/v2/chats", "", "body", "value expected (at byte 0)"},
        {"POST", msgs, "{\"content\":[],\"x\":1}", "x", "unknown field"},
        {"POST", msgs, "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"model\":\"m\"}",
         "model", "changing the model per message is not supported yet"},
        {"POST", msgs,
         "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"busy_behavior\":\"l\"}",
         "busy_behavior", "must be \"queue\" or \"interrupt\""},
        {"POST", msgs, "{\"content\":[]}", "content", "must hold at least one part"},
        {"POST", msgs, "{\"content\":[{\"type\":\"image\"}]}", "content[0].type",
         "only \"text\" input parts are supported"},
        {"POST", results, "{\"results\":[]}", "results", "must be a non-empty array"},
        {"POST", results, "{\"results\":[{\"tool_call_id\":1,\"output\":1}]}",
         "results[0].tool_call_id", "must be a string"},
        {"POST", results, "{\"results\":[{\"tool_call_id\":\"a\"}]}", "results[0].output",
         "is required"},
        {"POST", results, "{\"results\":[{\"tool_call_id\":\"a\",\"output\":1,\"x\":1}]}",
         "results[0].x", "unknown field"},
        {"PATCH", chat, "{\"archived\":\"yes\"}", "archived",
         "archived is a boolean; title a string of 1 to 200 bytes"},
        {"PATCH", chat, "{\"title\":\"\"}", "title",
         "archived is a boolean; title a string of 1 to 200 bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j;
        int status = s_real_call(bad[i].method, bad[i].path, NULL, NULL, bad[i].body, &j);
        if (status != 400) {
            fail_msg("%s %s %s: want 400, got %d", bad[i].method, bad[i].path, bad[i].body, status);
        }
        s_expect_invalid(j, bad[i].field, bad[i].detail);
    }
    char good[128];
    snprintf(good, sizeof good, "{%s}", text);
    s_expect_unavailable("POST", msgs, NULL, NULL, good);
    s_expect_unavailable("POST", "/api/v2/chats", NULL, NULL, good);
}

static void test_agent_card_names_the_host_it_was_asked_on(void **u) {
    (void)u;
    static const kv_t host[] = {{"Host", "example.test:8080"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_real_call("GET", "/.well-known/agent-card.json", NULL, host, NULL, &j), 200);
    json_t *url =
        json_object_get(json_array_get(json_object_get(j, "supportedInterfaces"), 0), "url");
    assert_string_equal(json_string_value(url), "http://example.test:8080/a2a");
    json_decref(j);
}

static int s_setup(void **u) {
    (void)u;
    log_init("test_gateway_routing", "error");
    s_gw.pool = pool_new_unverified(TEST_CONNINFO, 1);
    s_gw.sink = hint_sink_log;
    s_gw.max_queue = 10;
    int n = 0;
    s_real_routes = routes_all(&n);
    s_real = (http_router_t){s_real_routes, n, s_auth, &s_gw};
    return 0;
}

static int s_teardown(void **u) {
    (void)u;
    free(s_real_routes);
    pool_destroy(&s_gw.pool);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pattern_captures_each_segment_in_order),
        cmocka_unit_test(test_empty_segment_and_trailing_slash_match_no_route),
        cmocka_unit_test(test_fixed_route_listed_first_wins_over_a_pattern),
        cmocka_unit_test(test_pattern_with_more_params_than_the_cap_never_matches),
        cmocka_unit_test(test_path_at_the_length_cap_is_not_found),
        cmocka_unit_test(test_other_method_on_a_known_path_is_405_before_auth),
        cmocka_unit_test(test_authed_route_refuses_a_missing_or_bad_bearer_with_401),
        cmocka_unit_test(test_good_bearer_runs_the_handler_as_its_user),
        cmocka_unit_test(test_open_route_runs_without_asking_for_a_token),
        cmocka_unit_test(test_body_too_large_is_413_before_routing_and_auth),
        cmocka_unit_test(test_handler_that_sets_no_status_answers_500),
        cmocka_unit_test(test_query_and_header_lookup),
        cmocka_unit_test(test_error_envelope_shapes),
        cmocka_unit_test(test_invalid_names_a_field_cut_mid_character),
        cmocka_unit_test(test_route_table_patterns_are_well_formed),
        cmocka_unit_test(test_route_table_has_no_duplicate_method_and_pattern),
        cmocka_unit_test(test_every_route_is_reached_by_a_path_of_its_own),
        cmocka_unit_test(test_real_paths_resolve_to_their_routes),
        cmocka_unit_test(test_only_probes_metrics_and_the_agent_card_are_open),
        cmocka_unit_test(test_body_errors_name_the_byte_offset_and_the_field),
        cmocka_unit_test(test_unknown_fields_are_named_with_their_prefix),
        cmocka_unit_test(test_content_parts_are_checked_one_by_one),
        cmocka_unit_test(test_response_format_is_read_and_its_errors_named),
        cmocka_unit_test(test_state_machine_errors_map_to_statuses),
        cmocka_unit_test(test_chat_list_limit_cursor_and_archived_are_checked),
        cmocka_unit_test(test_message_list_ids_and_limit_are_checked),
        cmocka_unit_test(test_stream_cursor_and_last_event_id_are_checked),
        cmocka_unit_test(test_bodies_are_checked_before_the_database),
        cmocka_unit_test(test_agent_card_names_the_host_it_was_asked_on),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
