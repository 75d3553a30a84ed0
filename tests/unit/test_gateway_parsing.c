/*
 * The gateway's request parsing up to the point where it needs PostgreSQL: the helpers of
 * gateway.c (gateway_body, gateway_only_fields, gateway_content, gateway_format,
 * gateway_cs_error) called directly, and the route handlers' limits, cursors and bodies
 * through http_handle and the real route table. The pool (gwrequest_gateway_init) has one
 * connection that can never connect, so a request that passes its checks answers 500
 * "database unavailable" instead of a 400. Routing itself is tested in test_gateway_routing.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatstate.h"
#include "gwrequest.h"
#include "log.h"
#include "outformat.h"
#include "routes.h"

/* ---- gateway.c parsing --------------------------------------------------------------------- */

static int s_body_parse(const char *text, bool empty_ok, json_t **out) {
    http_req_t req = {.body = text, .body_len = strlen(text)};
    http_resp_t resp = {0};
    json_t *v = gateway_body(&req, &resp, empty_ok);
    *out = v ? v : gwrequest_body(&resp);
    return v ? 0 : resp.status;
}

static void test_body_errors_name_the_byte_offset_and_the_field(void **u) {
    (void)u;
    json_t *v;
    assert_int_equal(s_body_parse("", true, &v), 0);
    gwrequest_expect_json(v, "{}");
    assert_int_equal(s_body_parse("", false, &v), 400);
    gwrequest_expect_invalid(v, "body", "value expected (at byte 0)");
    assert_int_equal(s_body_parse("{\"content\":[{\"type\":\"text\",\"text\":\"a\"},]}", false, &v),
                     400);
    gwrequest_expect_invalid(v, "content[1]", "invalid number (at byte 39)");
    assert_int_equal(s_body_parse("{\"a\":1,\"a\":2}", false, &v), 400);
    gwrequest_expect_invalid(v, "a", "duplicate object key (at byte 7)");
    assert_int_equal(
        s_body_parse("{\"content\":[{\"type\":\"text\",\"text\":\"\\ud800\"}]}", false, &v), 400);
    gwrequest_expect_invalid(v, "content[0].text", "unpaired high surrogate \\uD800 (at byte 35)");
    assert_int_equal(s_body_parse("{\"a\":{\"b\":[0,1,tru]}}", false, &v), 400);
    gwrequest_expect_invalid(v, "a.b[2]", "invalid literal (at byte 15)");
    assert_int_equal(s_body_parse("[1]", false, &v), 400);
    gwrequest_expect_invalid(v, "body", "the body must be a JSON object");
    assert_int_equal(s_body_parse(" {\"a\" : [1]} ", false, &v), 0);
    gwrequest_expect_json(v, "{\"a\":[1]}");
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
    gwrequest_expect_invalid(gwrequest_body(&resp), "dynamic_tools[2].extra", "unknown field");
    assert_int_equal(gateway_only_fields(obj, allowed, "", &resp), -1);
    gwrequest_expect_invalid(gwrequest_body(&resp), "extra", "unknown field");
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
        gwrequest_expect_invalid(gwrequest_body(&resp), bad[i].field, bad[i].detail);
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
    *err = rc ? gwrequest_body(&resp) : NULL;
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
    gwrequest_expect_invalid(e, "response_format", NULL);
    assert_int_equal(s_format("{\"response_format\":{\"type\":\"xml\"}}", NULL, &f, &e), -1);
    gwrequest_expect_invalid(e, "response_format.type", "must be \"text\" or \"json_schema\"");
    assert_int_equal(
        s_format("{\"response_format\":{\"type\":\"text\",\"strict\":true}}", NULL, &f, &e), -1);
    gwrequest_expect_invalid(e, "response_format.strict", "unknown field");
    assert_int_equal(s_format("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                              "{\"name\":\"no spaces\",\"schema\":{}}}}",
                              NULL, &f, &e),
                     -1);
    gwrequest_expect_invalid(e, "response_format.json_schema.name",
                             "must match ^[A-Za-z0-9_-]{1,64}$");
    assert_int_equal(s_format(schema, "[{\"name\":\"" OUTFORMAT_FINALIZER "\"}]", &f, &e), -1);
    gwrequest_expect_invalid(e, "response_format", NULL);
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
        gwrequest_expect_json(gwrequest_body(&resp), cases[i].want);
    }
}

/* ---- route handlers up to the database ----------------------------------------------------- */

static gateway_t s_gw;
static http_route_t *s_real_routes;
static http_router_t s_real;

/* One request through the real table and handlers, as the test user. */
static int s_real_call(const char *method, const char *path, const gwrequest_kv_t *query,
                       const gwrequest_kv_t *headers, const char *body, json_t **j) {
    return gwrequest_handle(&s_real, method, path, query, headers ? headers : gwrequest_bearer,
                            body, false, j, NULL);
}

/* Asserts the answer of a request that passed its checks and needed the database. */
static void s_expect_unavailable(const char *method, const char *path, const gwrequest_kv_t *query,
                                 const gwrequest_kv_t *headers, const char *body) {
    json_t *j;
    assert_int_equal(s_real_call(method, path, query, headers, body, &j), 500);
    gwrequest_expect_json(j,
                          "{\"message\":\"Internal error.\",\"detail\":\"database unavailable\"}");
}

static void test_chat_list_limit_cursor_and_archived_are_checked(void **u) {
    (void)u;
    static const struct {
        gwrequest_kv_t query[4];
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
        gwrequest_expect_invalid(j, bad[i].field, bad[i].detail);
    }
    static const gwrequest_kv_t good[] = {
        {"limit", "200"}, {"archived", "true"}, {"after_id", GWREQUEST_CHAT_ID}, {NULL, NULL}};
    s_expect_unavailable("GET", "/api/v2/chats", good, NULL, NULL);
}

static void test_message_list_ids_and_limit_are_checked(void **u) {
    (void)u;
    static const struct {
        gwrequest_kv_t query[3];
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
    const char *path = "/api/v2/chats/" GWREQUEST_CHAT_ID "/messages";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j;
        assert_int_equal(s_real_call("GET", path, bad[i].query, NULL, NULL, &j), 400);
        gwrequest_expect_invalid(j, bad[i].field, bad[i].detail);
    }
    static const gwrequest_kv_t good[] = {
        {"before_id", "9"}, {"after_id", "2"}, {"limit", "200"}, {NULL, NULL}};
    s_expect_unavailable("GET", path, good, NULL, NULL);
}

static void test_stream_cursor_and_last_event_id_are_checked(void **u) {
    (void)u;
    const char *path = "/api/v2/chats/" GWREQUEST_CHAT_ID "/stream";
    static const gwrequest_kv_t neg[] = {{"after_id", "-1"}, {NULL, NULL}};
    static const gwrequest_kv_t lei[] = {
        {"Authorization", "Bearer " GWREQUEST_TOKEN}, {"Last-Event-ID", "x"}, {NULL, NULL}};
    static const gwrequest_kv_t lei_ok[] = {
        {"Authorization", "Bearer " GWREQUEST_TOKEN}, {"last-event-id", "12"}, {NULL, NULL}};
    static const gwrequest_kv_t after_ok[] = {{"after_id", "0"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_real_call("GET", path, neg, NULL, NULL, &j), 400);
    gwrequest_expect_invalid(j, "after_id", "Invalid after_id parameter.");
    assert_int_equal(s_real_call("GET", path, NULL, lei, NULL, &j), 400);
    gwrequest_expect_invalid(j, "Last-Event-ID", "Invalid after_id parameter.");
    s_expect_unavailable("GET", path, after_ok, lei_ok, NULL);
}

static void test_bodies_are_checked_before_the_database(void **u) {
    (void)u;
    char msgs[128];
    char results[128];
    char chat[128];
    snprintf(msgs, sizeof msgs, "/api/v2/chats/%s/messages", GWREQUEST_CHAT_ID);
    snprintf(results, sizeof results, "/api/v2/chats/%s/tool-results", GWREQUEST_CHAT_ID);
    snprintf(chat, sizeof chat, "/api/v2/chats/%s", GWREQUEST_CHAT_ID);
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
        gwrequest_expect_invalid(j, bad[i].field, bad[i].detail);
    }
    char good[128];
    snprintf(good, sizeof good, "{%s}", text);
    s_expect_unavailable("POST", msgs, NULL, NULL, good);
    s_expect_unavailable("POST", "/api/v2/chats", NULL, NULL, good);
}

static void test_agent_card_names_the_host_it_was_asked_on(void **u) {
    (void)u;
    static const gwrequest_kv_t host[] = {{"Host", "example.test:8080"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_real_call("GET", "/.well-known/agent-card.json", NULL, host, NULL, &j), 200);
    json_t *url =
        json_object_get(json_array_get(json_object_get(j, "supportedInterfaces"), 0), "url");
    assert_string_equal(json_string_value(url), "http://example.test:8080/a2a");
    json_decref(j);
}

static int s_setup(void **u) {
    (void)u;
    log_init("test_gateway_parsing", "error");
    gwrequest_gateway_init(&s_gw);
    int n = 0;
    s_real_routes = routes_all(&n);
    s_real = (http_router_t){s_real_routes, n, gwrequest_auth, &s_gw};
    return 0;
}

static int s_teardown(void **u) {
    (void)u;
    free(s_real_routes);
    gwrequest_gateway_free(&s_gw);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
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
