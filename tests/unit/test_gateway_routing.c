/*
 * The gateway's request handling without a connection (http_handle): route matching, 404,
 * 405, 401, 413 and 500, query and header lookup, the error envelopes; and the real route
 * table, its handlers replaced by a recorder. The request parsing of gateway.c and the route
 * handlers is tested in test_gateway_parsing.c; both drive requests through
 * tests/support/gwrequest.h.
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

#include "gwrequest.h"
#include "log.h"
#include "routes.h"

/* What the recording handler saw. */
static struct {
    int calls;
    const http_route_t *route;
    char params[HTTP_MAX_PARAMS][HTTP_PATH_MAX_BYTES];
    int nparams;
    char user_id[ID_UUID_LEN + 1];
} s_seen;

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
    {"GET", "/open", s_record, true, NULL, NULL},
    {"GET", "/items", s_record, false, NULL, "q limit tag*"},
    {"POST", "/items", s_record, false, NULL, NULL},
    {"GET", "/items/special", s_record, false, NULL, NULL},
    {"GET", "/items/{}", s_record, false, NULL, NULL},
    {"DELETE", "/items/{}", s_record, false, NULL, NULL},
    {"GET", "/items/{}/parts/{}", s_record, false, NULL, NULL},
    {"GET", "/four/{}/{}/{}/{}", s_record, true, NULL, NULL},
    {"GET", "/five/{}/{}/{}/{}/{}", s_record, true, NULL, NULL},
    {"GET", "/long/{}", s_record, true, NULL, NULL},
    {"GET", "/silent", s_silent, true, NULL, NULL},
};

static const http_router_t s_test_router = {
    s_table, sizeof s_table / sizeof s_table[0], gwrequest_auth, NULL, NULL, NULL};

/* gwrequest_handle, after forgetting what the recording handler saw. */
static int s_handle(const http_router_t *router, const char *method, const char *path,
                    const gwrequest_kv_t *query, const gwrequest_kv_t *headers, const char *body,
                    bool too_large, json_t **json, http_req_t *req_out) {
    memset(&s_seen, 0, sizeof s_seen);
    return gwrequest_handle(router, method, path, query, headers, body, too_large, json, req_out);
}

/* ---- matching ---------------------------------------------------------------------------- */

static void test_pattern_captures_each_segment_in_order(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/items/i7/parts/p9", NULL, gwrequest_bearer,
                              NULL, false, &j, NULL),
                     200);
    gwrequest_expect_json(j, "{\"ok\":true}");
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
        assert_int_equal(s_handle(&s_test_router, "GET", paths[i], NULL, gwrequest_bearer, NULL,
                                  false, &j, &req),
                         404);
        gwrequest_expect_json(j, "{\"message\":\"Not found.\"}");
        assert_int_equal(s_seen.calls, 0);
        assert_null(req.route);
    }
}

static void test_fixed_route_listed_first_wins_over_a_pattern(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/items/special", NULL, gwrequest_bearer, NULL,
                              false, &j, NULL),
                     200);
    json_decref(j);
    assert_string_equal(s_seen.route->pattern, "/items/special");
    assert_int_equal(s_seen.nparams, 0);
    assert_int_equal(s_handle(&s_test_router, "GET", "/items/specials", NULL, gwrequest_bearer,
                              NULL, false, &j, NULL),
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
    gwrequest_expect_json(j, "{\"message\":\"Not found.\"}");
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
    gwrequest_expect_json(j, "{\"message\":\"Not found.\"}");
    assert_int_equal(s_seen.calls, 0);
}

static void test_other_method_on_a_known_path_is_405_before_auth(void **u) {
    (void)u;
    json_t *j;
    http_req_t req;
    assert_int_equal(
        s_handle(&s_test_router, "PUT", "/items/i1", NULL, NULL, NULL, false, &j, &req), 405);
    gwrequest_expect_json(j, "{\"message\":\"Method not allowed.\"}");
    assert_int_equal(s_seen.calls, 0);
    assert_int_equal(gwrequest_auth_calls, 0);
    assert_null(req.route);
    /* Methods are compared exactly. */
    assert_int_equal(s_handle(&s_test_router, "get", "/open", NULL, NULL, NULL, false, &j, NULL),
                     405);
    json_decref(j);
    assert_int_equal(s_handle(&s_test_router, "GET", "/nothing", NULL, NULL, NULL, false, &j, NULL),
                     404);
    gwrequest_expect_json(j, "{\"message\":\"Not found.\"}");
}

/* ---- authentication ------------------------------------------------------------------------ */

static void test_authed_route_refuses_a_missing_or_bad_bearer_with_401(void **u) {
    (void)u;
    static const gwrequest_kv_t none[] = {{NULL, NULL}};
    static const gwrequest_kv_t basic[] = {{"Authorization", "Basic " GWREQUEST_TOKEN},
                                           {NULL, NULL}};
    static const gwrequest_kv_t wrong[] = {{"Authorization", "Bearer wrong"}, {NULL, NULL}};
    static const gwrequest_kv_t lower[] = {{"Authorization", "bearer " GWREQUEST_TOKEN},
                                           {NULL, NULL}};
    static const gwrequest_kv_t spaced[] = {{"Authorization", "Bearer  " GWREQUEST_TOKEN},
                                            {NULL, NULL}};
    static const gwrequest_kv_t empty[] = {{"Authorization", "Bearer "}, {NULL, NULL}};
    const gwrequest_kv_t *cases[] = {none, basic, wrong, lower, spaced, empty};
    const int auth_calls[] = {0, 0, 1, 0, 1, 1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j;
        http_req_t req;
        assert_int_equal(
            s_handle(&s_test_router, "GET", "/items/i1", NULL, cases[i], NULL, false, &j, &req),
            401);
        gwrequest_expect_json(j, "{\"message\":\"Unauthorized.\","
                                 "\"detail\":\"a valid Bearer token is required\"}");
        assert_int_equal(s_seen.calls, 0);
        assert_int_equal(gwrequest_auth_calls, auth_calls[i]);
        assert_string_equal(req.user_id, "");
        /* The route is known (it names the request in metrics) though it did not run. */
        assert_non_null(req.route);
        assert_string_equal(req.route->pattern, "/items/{}");
    }
}

/* A token that could not be checked (the database is down, or restarting) is a 503, never a
 * 401 that would tell the client its valid token is wrong. */
static void test_a_token_that_cannot_be_checked_is_503_not_401(void **u) {
    (void)u;
    static const gwrequest_kv_t down[] = {{"Authorization", "Bearer " GWREQUEST_TOKEN_DB_DOWN},
                                          {NULL, NULL}};
    json_t *j;
    http_req_t req;
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/items/i1", NULL, down, NULL, false, &j, &req), 503);
    gwrequest_expect_json(j, "{\"message\":\"Service unavailable.\","
                             "\"detail\":\"the token could not be checked\"}");
    assert_int_equal(s_seen.calls, 0);
    assert_int_equal(gwrequest_auth_calls, 1);
    assert_string_equal(req.user_id, "");
}

static void test_good_bearer_runs_the_handler_as_its_user(void **u) {
    (void)u;
    static const gwrequest_kv_t lower_name[] = {{"authorization", "Bearer " GWREQUEST_TOKEN},
                                                {NULL, NULL}};
    json_t *j;
    assert_int_equal(
        s_handle(&s_test_router, "POST", "/items", NULL, lower_name, "{}", false, &j, NULL), 200);
    json_decref(j);
    assert_int_equal(s_seen.calls, 1);
    assert_int_equal(gwrequest_auth_calls, 1);
    assert_string_equal(s_seen.user_id, GWREQUEST_USER_ID);
}

static void test_open_route_runs_without_asking_for_a_token(void **u) {
    (void)u;
    static const gwrequest_kv_t wrong[] = {{"Authorization", "Bearer wrong"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/open", NULL, wrong, NULL, false, &j, NULL),
                     200);
    json_decref(j);
    assert_int_equal(s_seen.calls, 1);
    assert_int_equal(gwrequest_auth_calls, 0);
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
        gwrequest_expect_json(j, "{\"message\":\"Request body too large.\","
                                 "\"detail\":\"the body exceeds 1048576 bytes\"}");
        assert_int_equal(s_seen.calls, 0);
        assert_int_equal(gwrequest_auth_calls, 0);
        assert_null(req.route);
    }
}

static void test_handler_that_sets_no_status_answers_500(void **u) {
    (void)u;
    json_t *j;
    assert_int_equal(s_handle(&s_test_router, "GET", "/silent", NULL, NULL, NULL, false, &j, NULL),
                     500);
    gwrequest_expect_json(j, "{\"message\":\"Internal error.\","
                             "\"detail\":\"the handler produced no response\"}");
    assert_int_equal(s_seen.calls, 1);
}

/* ---- lookup and envelopes ------------------------------------------------------------------ */

static void test_query_and_header_lookup(void **u) {
    (void)u;
    static const gwrequest_kv_t query[] = {{"limit", "5"}, {"flag", NULL}, {NULL, NULL}};
    static const gwrequest_kv_t headers[] = {{"Last-Event-ID", "9"}, {NULL, NULL}};
    gwrequest_table_t t = {query, headers};
    http_req_t req = {.lookup = gwrequest_lookup, .lookup_ctx = &t};
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

/* A route reads the query parameters it names and no other: an unknown one, a prefix or an
 * extension of a known one, is a 400 naming it before the handler runs; on a route that names
 * none, any is. */
static void test_unknown_query_parameter_is_refused(void **u) {
    (void)u;
    static const struct {
        const char *path;
        const char *name;
        int status;
    } cases[] = {{"/items", "limit", 200},  {"/items", "q", 200},     {"/items", "lim", 400},
                 {"/items", "limits", 400}, {"/items", "bogus", 400}, {"/items/7", "q", 400},
                 {"/items", "", 400}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gwrequest_kv_t query[] = {{"tag", "x"}, {cases[i].name, "1"}, {NULL, NULL}};
        json_t *body = NULL;
        int status = s_handle(&s_test_router, "GET", cases[i].path, query, gwrequest_bearer, NULL,
                              false, &body, NULL);
        if (status != cases[i].status) {
            fail_msg("%s?%s=1: %d, want %d", cases[i].path, cases[i].name, status, cases[i].status);
        }
        if (status == 400) {
            const char *want = !strcmp(cases[i].path, "/items/7") ? "tag"
                               : cases[i].name[0]                 ? cases[i].name
                                                                  : "(empty name)";
            gwrequest_expect_invalid(body, want, "is not a query parameter of this route");
            assert_int_equal(s_seen.calls, 0); /* the handler never ran */
        } else {
            json_decref(body);
        }
    }
}

/* A name given twice is refused unless the route marks it repeatable ("tag*"). */
static void test_a_query_parameter_twice_is_refused_unless_repeatable(void **u) {
    (void)u;
    gwrequest_kv_t twice[] = {{"limit", "1"}, {"limit", "2"}, {NULL, NULL}};
    gwrequest_kv_t tags[] = {{"tag", "a"}, {"tag", "b"}, {"limit", "2"}, {NULL, NULL}};
    gwrequest_kv_t star[] = {{"tag*", "a"}, {NULL, NULL}};
    json_t *body = NULL;
    assert_int_equal(s_handle(&s_test_router, "GET", "/items", twice, gwrequest_bearer, NULL, false,
                              &body, NULL),
                     400);
    gwrequest_expect_invalid(body, "limit", "is given more than once");
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/items", tags, gwrequest_bearer, NULL, false, &body, NULL),
        200);
    json_decref(body);
    assert_int_equal(
        s_handle(&s_test_router, "GET", "/items", star, gwrequest_bearer, NULL, false, &body, NULL),
        400);
    gwrequest_expect_invalid(body, "tag*", "is not a query parameter of this route");
}

static void test_error_envelope_shapes(void **u) {
    (void)u;
    http_resp_t resp = {0};
    http_error(&resp, 409, "Conflict.", NULL);
    assert_int_equal(resp.status, 409);
    gwrequest_expect_json(gwrequest_body(&resp), "{\"message\":\"Conflict.\"}");
    http_error(&resp, 503, "Busy, try again.", "retry");
    assert_int_equal(resp.status, 503);
    gwrequest_expect_json(gwrequest_body(&resp),
                          "{\"message\":\"Busy, try again.\",\"detail\":\"retry\"}");
    http_invalid(&resp, "content[0].text", "must be a string");
    assert_int_equal(resp.status, 400);
    gwrequest_expect_json(gwrequest_body(&resp),
                          "{\"message\":\"Invalid request.\",\"detail\":\"must be a string\","
                          "\"validations\":[{\"field\":\"content[0].text\","
                          "\"detail\":\"must be a string\"}]}");
    /* A later answer replaces an earlier one (ASan sees the first body freed). */
    http_error(&resp, 404, "Not found.", NULL);
    http_json(&resp, 204, NULL);
    assert_int_equal(resp.status, 204);
    assert_null(resp.body);
    http_json(&resp, 200, json_pack("{s:[i]}", "a", 1));
    gwrequest_expect_json(gwrequest_body(&resp), "{\"a\":[1]}");
}

/* A field cut by a fixed-size buffer in the middle of a UTF-8 character kept the envelope
 * from being built whole (jansson refuses the string): the 400 lost its validations. The
 * envelope drops what is not UTF-8 and keeps the rest; gateway_only_fields no longer cuts
 * (a non-ASCII key is named whole, quoted, as fieldpath.h says). */
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
    assert_int_equal(gateway_only_fields(obj, none, "x", &resp), -1);
    json_decref(obj);
    char want[320];
    snprintf(want, sizeof want, "x[\"%s\"]", key);
    gwrequest_expect_invalid(gwrequest_body(&resp), want, "unknown field");
    http_invalid(&resp, "a\xc3", "bad \xff\xc3\xa9\xed\xa0\x80 byte\xf0\x9f");
    gwrequest_expect_json(gwrequest_body(&resp),
                          "{\"message\":\"Invalid request.\",\"detail\":\"bad \xc3\xa9 byte\","
                          "\"validations\":[{\"field\":\"a\",\"detail\":\"bad \xc3\xa9 byte\"}]}");
    http_error(&resp, 404, "Not found.", "chat \xe2\x82");
    gwrequest_expect_json(gwrequest_body(&resp),
                          "{\"message\":\"Not found.\",\"detail\":\"chat \"}");
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
        if (strcmp(m, "GET") && strcmp(m, "POST") && strcmp(m, "PATCH") && strcmp(m, "PUT") &&
            strcmp(m, "DELETE")) {
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
    return (http_router_t){*routes, n, gwrequest_auth, NULL, NULL, NULL};
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
                o += (size_t)snprintf(path + o, sizeof path - o, "%s", GWREQUEST_CHAT_ID);
                c++;
            } else {
                path[o++] = *c;
                path[o] = '\0';
            }
        }
        json_t *j;
        if (s_handle(&r, routes[i].method, path, NULL, gwrequest_bearer, NULL, false, &j, NULL) !=
                200 ||
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
        int status = s_handle(&r, cases[i].method, cases[i].path, NULL, gwrequest_bearer, NULL,
                              false, &j, NULL);
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

static void test_only_probes_metrics_the_agent_card_and_the_console_files_are_open(void **u) {
    (void)u;
    static const char *const open[] = {"/healthz", "/readyz",
                                       "/metrics", "/.well-known/agent-card.json",
                                       "/console", "/console/{}"};
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

static int s_setup(void **u) {
    (void)u;
    log_init("test_gateway_routing", "error");
    return 0;
}

/* The socket threads' bearer check (httpd.c): only a token the memory check knows is
 * answered there; anything else (no header, another scheme, a token it does not know, no
 * memory check at all) is left to the blocking check, with no user filled in. */
static const char *s_auth_header;

static const char *s_lookup_auth(void *ctx, http_kind_t kind, const char *name) {
    (void)ctx;
    return kind == HTTP_HEADER && !strcasecmp(name, "Authorization") ? s_auth_header : NULL;
}

static int s_known_only(void *app, const char *token, char user_id[ID_UUID_LEN + 1]) {
    (void)app;
    if (strcmp(token, "known")) {
        return HTTP_AUTH_UNAVAILABLE;
    }
    snprintf(user_id, ID_UUID_LEN + 1, "%s", GWREQUEST_USER_ID);
    return 0;
}

static bool s_cached(const http_router_t *r, const char *header, http_req_t *req) {
    s_auth_header = header;
    *req = (http_req_t){.method = "GET", .path = "/", .lookup = s_lookup_auth};
    snprintf(req->user_id, sizeof req->user_id, "%s", "left over");
    return http_authenticate_cached(r, req);
}

static void test_only_a_token_the_memory_check_knows_is_answered_without_blocking(void **u) {
    (void)u;
    http_router_t r = {
        s_table, sizeof s_table / sizeof s_table[0], gwrequest_auth, NULL, s_known_only, NULL};
    http_req_t req;
    assert_true(s_cached(&r, "Bearer known", &req));
    assert_true(req.authed);
    assert_string_equal(req.user_id, GWREQUEST_USER_ID);
    const char *const others[] = {"Bearer unknown", "Basic known", "known", "Bearer ", NULL};
    for (int i = 0; others[i]; i++) {
        assert_false(s_cached(&r, others[i], &req));
        assert_false(req.authed);
        assert_string_equal(req.user_id, "");
    }
    assert_false(s_cached(&r, NULL, &req));
    r.auth_cached = NULL;
    assert_false(s_cached(&r, "Bearer known", &req));
    assert_string_equal(req.user_id, "");
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
        cmocka_unit_test(test_a_token_that_cannot_be_checked_is_503_not_401),
        cmocka_unit_test(test_good_bearer_runs_the_handler_as_its_user),
        cmocka_unit_test(test_open_route_runs_without_asking_for_a_token),
        cmocka_unit_test(test_body_too_large_is_413_before_routing_and_auth),
        cmocka_unit_test(test_handler_that_sets_no_status_answers_500),
        cmocka_unit_test(test_query_and_header_lookup),
        cmocka_unit_test(test_error_envelope_shapes),
        cmocka_unit_test(test_invalid_names_a_field_cut_mid_character),
        cmocka_unit_test(test_unknown_query_parameter_is_refused),
        cmocka_unit_test(test_a_query_parameter_twice_is_refused_unless_repeatable),
        cmocka_unit_test(test_route_table_patterns_are_well_formed),
        cmocka_unit_test(test_route_table_has_no_duplicate_method_and_pattern),
        cmocka_unit_test(test_every_route_is_reached_by_a_path_of_its_own),
        cmocka_unit_test(test_real_paths_resolve_to_their_routes),
        cmocka_unit_test(test_only_probes_metrics_the_agent_card_and_the_console_files_are_open),
        cmocka_unit_test(test_only_a_token_the_memory_check_knows_is_answered_without_blocking),
    };
    return cmocka_run_group_tests(tests, s_setup, NULL);
}
