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

#include "a2a_task.h"
#include "chatstate.h"
#include "gwrequest.h"
#include "log.h"
#include "mem.h"
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
    assert_int_equal(gateway_only_fields(obj, allowed, "dynamic_tools[2]", &resp), 0);
    assert_int_equal(resp.status, 0);
    json_object_set_new(obj, "extra", json_null());
    assert_int_equal(gateway_only_fields(obj, allowed, "dynamic_tools[2]", &resp), -1);
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
         "only \"text\" and \"file\" input parts are supported"},
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
        {{{"limit", "0"}, {NULL, NULL}}, "limit", "must be an integer from 1 to 200"},
        {{{"limit", "201"}, {NULL, NULL}}, "limit", "must be an integer from 1 to 200"},
        {{{"limit", "ten"}, {NULL, NULL}}, "limit", "must be an integer from 1 to 200"},
        {{{"limit", "-5"}, {NULL, NULL}}, "limit", "must be an integer from 1 to 200"},
        {{{"after_id", "42"}, {NULL, NULL}}, "after_id", "must be the id of one of your chats"},
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
        {{{"before_id", "0"}, {NULL, NULL}},
         "before_id",
         "must be an integer from 1 to 9223372036854775807"},
        {{{"before_id", "5x"}, {NULL, NULL}},
         "before_id",
         "must be an integer from 1 to 9223372036854775807"},
        {{{"after_id", "-3"}, {NULL, NULL}},
         "after_id",
         "must be an integer from 1 to 9223372036854775807"},
        {{{"after_id", ""}, {NULL, NULL}},
         "after_id",
         "must be an integer from 1 to 9223372036854775807"},
        {{{"limit", "0"}, {NULL, NULL}}, "limit", "must be an integer from 1 to 200"},
        {{{"limit", "201"}, {NULL, NULL}}, "limit", "must be an integer from 1 to 200"},
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
    gwrequest_expect_invalid(j, "after_id", "must be an integer from 0 to 9223372036854775807");
    assert_int_equal(s_real_call("GET", path, NULL, lei, NULL, &j), 400);
    gwrequest_expect_invalid(j, "Last-Event-ID",
                             "must be an integer from 0 to 9223372036854775807");
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
        {"POST", msgs, "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"model\":1}", "model",
         "must be a model config name"},
        {"POST", msgs,
         "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"busy_behavior\":\"l\"}",
         "busy_behavior", "must be \"queue\" or \"interrupt\""},
        {"POST", msgs, "{\"content\":[]}", "content", "must hold at least one part"},
        {"POST", msgs, "{\"content\":[{\"type\":\"image\"}]}", "content[0].type",
         "only \"text\" and \"file\" input parts are supported"},
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

/* The card names the configured URL (ARCHITECTURE.md §1.1), whatever Host the request says. */
static void test_agent_card_names_the_configured_url_never_the_host(void **u) {
    (void)u;
    static const gwrequest_kv_t host[] = {{"Host", "evil.example:8080"}, {NULL, NULL}};
    json_t *j;
    assert_int_equal(s_real_call("GET", "/.well-known/agent-card.json", NULL, host, NULL, &j), 200);
    json_t *url =
        json_object_get(json_array_get(json_object_get(j, "supportedInterfaces"), 0), "url");
    assert_string_equal(json_string_value(url), GWREQUEST_PUBLIC_URL "/a2a");
    json_decref(j);
}

/* ---- issue 15, item 5: strict numbers, field names, canonical ids -------------------------- */

static void test_numbers_are_ascii_digits_within_range_else_refused(void **u) {
    (void)u;
    static const char *const bad[] = {
        "",
        "1e9",
        "5abc",
        "10abc",
        " 5",
        "+5",
        "-0",
        "5 ",
        "0x10",
        "\t7",
        "5\n",
        "1.0",
        "1,000",
        "\xef\xbc\x95", /* a full-width 5 */
        "9223372036854775808",
        "99999999999999999999",
        "18446744073709551621",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = -7;
        if (gateway_int_parse(bad[i], 0, INT64_MAX, &v) != -1 || v != -7) {
            fail_msg("\"%s\" was read as %lld", bad[i], (long long)v);
        }
    }
    int64_t v = 0;
    assert_int_equal(gateway_int_parse("9223372036854775807", 1, INT64_MAX, &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(gateway_int_parse("007", 1, 200, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(gateway_int_parse("0", 0, 5, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(gateway_int_parse("0", 1, 5, &v), -1);
    assert_int_equal(gateway_int_parse("6", 1, 5, &v), -1);
    assert_int_equal(gateway_int_parse("5", 1, 5, &v), 0);
    assert_int_equal(gateway_int_parse(NULL, 0, 5, &v), -1);
}

/* The hostile client's numbers, on every numeric query parameter: 400 naming it. */
static void test_every_numeric_query_parameter_is_parsed_strictly(void **u) {
    (void)u;
    static const char *const junk[] = {
        "1e9", "5abc", "10abc", "+5", " 5", "9223372036854775808", "99999999999999999999"};
    const char *msgs = "/api/v2/chats/" GWREQUEST_CHAT_ID "/messages";
    static const struct {
        bool messages;
        const char *name;
        const char *detail;
    } params[] = {
        {false, "limit", "must be an integer from 1 to 200"},
        {true, "limit", "must be an integer from 1 to 200"},
        {true, "before_id", "must be an integer from 1 to 9223372036854775807"},
        {true, "after_id", "must be an integer from 1 to 9223372036854775807"},
    };
    for (size_t p = 0; p < sizeof params / sizeof params[0]; p++) {
        for (size_t k = 0; k < sizeof junk / sizeof junk[0]; k++) {
            gwrequest_kv_t q[] = {{params[p].name, junk[k]}, {NULL, NULL}};
            json_t *j;
            int status =
                s_real_call("GET", params[p].messages ? msgs : "/api/v2/chats", q, NULL, NULL, &j);
            if (status != 400) {
                fail_msg("%s=%s: want 400, got %d", params[p].name, junk[k], status);
            }
            gwrequest_expect_invalid(j, params[p].name, params[p].detail);
        }
    }
    static const gwrequest_kv_t widest[] = {
        {"before_id", "9223372036854775807"}, {"after_id", "0001"}, {"limit", "007"}, {NULL, NULL}};
    s_expect_unavailable("GET", msgs, widest, NULL, NULL);
}

static void test_field_paths_of_odd_keys_are_readable_and_unambiguous(void **u) {
    (void)u;
    static const struct {
        const char *key;
        const char *field;
    } keys[] = {
        {"a/b", "[\"a/b\"]"},
        {"x~y", "[\"x~y\"]"},
        {"0", "[\"0\"]"},
        {"a.b", "[\"a.b\"]"},
        {"q\"k", "[\"q\\\"k\"]"},
        {"", "[\"\"]"},
        {"tab\t", "[\"tab\\u0009\"]"},
        {"_ok9", "_ok9"},
        {"caf\xc3\xa9", "[\"caf\xc3\xa9\"]"},
    };
    static const char *const allowed[] = {"name", NULL};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *obj = json_object();
        json_object_set_new(obj, keys[i].key, json_null());
        http_resp_t resp = {0};
        assert_int_equal(gateway_only_fields(obj, allowed, "", &resp), -1);
        gwrequest_expect_invalid(gwrequest_body(&resp), keys[i].field, "unknown field");
        char *nested =
            mem_printf("dynamic_tools[0]%s%s", keys[i].field[0] == '[' ? "" : ".", keys[i].field);
        assert_int_equal(gateway_only_fields(obj, allowed, "dynamic_tools[0]", &resp), -1);
        gwrequest_expect_invalid(gwrequest_body(&resp), nested, "unknown field");
        free(nested);
        json_decref(obj);
    }
    /* A parse error's JSON pointer, unescaped: ~1 is '/', ~0 is '~', and a member "0" is
     * told from an element 0 by the body itself. */
    static const struct {
        const char *body;
        const char *field;
    } parse[] = {
        {"{\"a/b\":{\"c~d\":[1,tru]}}", "[\"a/b\"][\"c~d\"][1]"},
        {"{\"0\":tru}", "[\"0\"]"},
        {"{\"a\":{\"0\":[tru]}}", "a[\"0\"][0]"},
        {"{\"a\":[{\"k]\":1},[tru]]}", "a[1][0]"},
        {"{\"a\":\"x{[\\\"\",\"b\":[tru]}", "b[0]"},
    };
    for (size_t i = 0; i < sizeof parse / sizeof parse[0]; i++) {
        json_t *v;
        assert_int_equal(s_body_parse(parse[i].body, false, &v), 400);
        gwrequest_expect_invalid(v, parse[i].field, NULL);
    }
}

/* Each validation error names the field at fault, never a neighbour. */
static void test_create_and_tool_results_name_the_field_at_fault(void **u) {
    (void)u;
    char longtitle[300];
    memset(longtitle, 'x', 201);
    longtitle[201] = '\0';
    char *too_long = mem_printf("{\"title\":\"%s\"}", longtitle);
    char *prompt = mem_alloc(10100);
    memset(prompt, 'p', 10001);
    prompt[10001] = '\0';
    char *long_prompt = mem_printf("{\"system_prompt\":\"%s\"}", prompt);
    char results[128];
    snprintf(results, sizeof results, "/api/v2/chats/%s/tool-results", GWREQUEST_CHAT_ID);
    const struct {
        const char *path;
        const char *body;
        const char *field;
    } bad[] = {
        {"/api/v2/chats", too_long, "title"},
        {"/api/v2/chats", "{\"title\":5}", "title"},
        {"/api/v2/chats", long_prompt, "system_prompt"},
        {"/api/v2/chats", "{\"system_prompt\":[]}", "system_prompt"},
        {"/api/v2/chats", "{\"content\":[],\"unsafe_dynamic_tools\":5}", "unsafe_dynamic_tools"},
        {"/api/v2/chats", "{\"content\":[],\"unsafe_dynamic_tools\":[{\"name\":\"a b\"}]}",
         "unsafe_dynamic_tools[0].name"},
        {"/api/v2/chats", "{\"content\":[],\"unsafe_dynamic_tools\":[{\"nom\":\"a\"}]}",
         "unsafe_dynamic_tools[0].nom"},
        {"/api/v2/chats", "{\"content\":[],\"dynamic_tools\":[],\"unsafe_dynamic_tools\":[]}",
         "unsafe_dynamic_tools"},
        {"/api/v2/chats", "{\"a/b\":1}", "[\"a/b\"]"},
        {"/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"a\",\"~\":1}]}",
         "content[0][\"~\"]"},
        {results, "{\"results\":[{\"tool_call_id\":\"a\",\"output\":1},3]}", "results[1]"},
        {results, "{\"results\":[{\"tool_call_id\":\"a\",\"output\":1,\"is_error\":1}]}",
         "results[0].is_error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j;
        int status = s_real_call("POST", bad[i].path, NULL, NULL, bad[i].body, &j);
        if (status != 400) {
            fail_msg("%.80s: want 400, got %d", bad[i].body, status);
        }
        gwrequest_expect_invalid(j, bad[i].field, NULL);
    }
    free(long_prompt);
    free(prompt);
    free(too_long);
}

static void test_chat_ids_from_queries_and_bodies_are_canonical_lower_case(void **u) {
    (void)u;
    char out[ID_UUID_LEN + 1];
    assert_int_equal(gateway_chat_id("0A0B0C0D-EEEE-4FFF-8AAA-ABCDEFABCDEF", out), 0);
    assert_string_equal(out, "0a0b0c0d-eeee-4fff-8aaa-abcdefabcdef");
    assert_int_equal(gateway_chat_id("0a0B0c0D-eeee-4fff-8aaa-abcdefabcdef", out), 0);
    assert_string_equal(out, "0a0b0c0d-eeee-4fff-8aaa-abcdefabcdef");
    static const char *const bad[] = {"", "42", "0a0b0c0d-eeee-4fff-8aaa-abcdefabcdeff",
                                      " 0a0b0c0d-eeee-4fff-8aaa-abcdefabcdef",
                                      "0a0b0c0deeee4fff8aaaabcdefabcdef"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(gateway_chat_id(bad[i], out), -1);
        assert_string_equal(out, "");
    }
    assert_int_equal(gateway_chat_id(NULL, out), -1);
    /* The chat list takes an upper-case cursor (to the database, here unreachable). */
    static const gwrequest_kv_t upper[] = {{"after_id", "0A0B0C0D-EEEE-4FFF-8AAA-ABCDEFABCDEF"},
                                           {NULL, NULL}};
    s_expect_unavailable("GET", "/api/v2/chats", upper, NULL, NULL);
}

static void test_a2a_task_ids_have_one_canonical_form(void **u) {
    (void)u;
    static const struct {
        const char *in;
        const char *out; /* NULL: refused */
    } ids[] = {
        {"7", "7"},
        {"007", "7"},
        {"q7", "q7"},
        {"Q7", "q7"},
        {"q007", "q7"},
        {"r7", "r7"},
        {"R07", "r7"},
        {"r0", NULL},
        {"rq7", NULL},
        {"0", NULL},
        {"q0", NULL},
        {"", NULL},
        {"q", NULL},
        {"+7", NULL},
        {" 7", NULL},
        {"7 ", NULL},
        {"q-7", NULL},
        {"qq7", NULL},
        {"x7", NULL},
        {"1e3", NULL},
        {"9223372036854775807", "9223372036854775807"},
        {"9223372036854775808", NULL},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char out[A2A_TASK_ID_MAX] = "";
        int rc = a2a_task_id_canonical(ids[i].in, out);
        if (ids[i].out ? rc != 0 || strcmp(out, ids[i].out) != 0 : rc != -1) {
            fail_msg("\"%s\": got rc %d \"%s\"", ids[i].in, rc, out);
        }
    }
}

/* One A2A call; returns the JSON-RPC error's data (or NULL). */
static json_t *s_a2a_error(const char *params, int *code) {
    char *body = mem_printf("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\","
                            "\"params\":%s}",
                            params);
    json_t *j;
    assert_int_equal(s_real_call("POST", "/a2a", NULL, NULL, body, &j), 200);
    free(body);
    json_t *e = json_object_get(j, "error");
    *code = (int)json_integer_value(json_object_get(e, "code"));
    json_t *data = json_incref(json_object_get(e, "data"));
    json_decref(j);
    return data;
}

static const char *s_data_field(json_t *data) {
    json_t *f = json_object_get(data, "field");
    if (!f) {
        f = json_object_get(json_array_get(json_object_get(data, "validations"), 0), "field");
    }
    return json_string_value(f);
}

/* A2A errors name the place in the JSON-RPC request the client sent: under params, and a
 * bad schema under the extension member it came in, not the REST body built from it. */
static void test_a2a_errors_name_fields_of_the_json_rpc_request(void **u) {
    (void)u;
#define A2A_MSG(extra)                                                                             \
    "{\"message\":{\"role\":\"ROLE_USER\",\"messageId\":\"m\",\"parts\":[{\"text\":\"hi\"}]" extra \
    "}"
#define A2A_EXT "\"extensions\":[\"" A2A_EXTENSION_URI "\"]"
    static const struct {
        const char *params;
        const char *field;
    } bad[] = {
        {"{}", "params.message"},
        {A2A_MSG(",\"contextId\":\"nope\"}"), "params.message.contextId"},
        {A2A_MSG(",\"taskId\":\"1\"}"), "params.message.taskId"},
        {"{\"message\":{\"parts\":[{\"text\":\"a\"},{\"data\":1}]}}", "params.message.parts[1]"},
        {A2A_MSG("}, \"metadata\":{\"kediStructuredOutput\":{\"version\":1}}"),
         "params.message.extensions"},
        {A2A_MSG("," A2A_EXT "}, \"configuration\":{\"acceptedOutputModes\":"
                 "[\"application/json\"]}, \"metadata\":{\"kediStructuredOutput\":"
                 "{\"version\":2}}"),
         "params.metadata.kediStructuredOutput.version"},
    };
    /* An invalid schema is not an error but a failed task naming the schema's field (it needs
     * the database: test_a2a's invalid_schema_json case); a structured request that does not
     * accept application/json is -32005 naming the configuration. */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int code = 0;
        json_t *data = s_a2a_error(bad[i].params, &code);
        const char *f = s_data_field(data);
        if (code != -32602 || !f || strcmp(f, bad[i].field) != 0) {
            char *d = json_dumps(data, 0);
            fail_msg("%s: want -32602 naming %s, got %d %s", bad[i].params, bad[i].field, code,
                     d ? d : "no data");
        }
        json_decref(data);
    }
    int code = 0;
    json_t *data = s_a2a_error(A2A_MSG("," A2A_EXT "}, \"metadata\":{\"kediStructuredOutput\":"
                                       "{\"version\":1,\"schemaJson\":\"{}\"}}"),
                               &code);
    assert_int_equal(code, -32005);
    assert_string_equal(s_data_field(data), "params.configuration.acceptedOutputModes");
    json_decref(data);
#undef A2A_MSG
#undef A2A_EXT
}

static int s_setup(void **u) {
    (void)u;
    log_init("test_gateway_parsing", "error");
    gwrequest_gateway_init(&s_gw);
    int n = 0;
    s_real_routes = routes_all(&n);
    s_real = (http_router_t){s_real_routes, n, gwrequest_auth, &s_gw, NULL, NULL};
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
        cmocka_unit_test(test_agent_card_names_the_configured_url_never_the_host),
        cmocka_unit_test(test_numbers_are_ascii_digits_within_range_else_refused),
        cmocka_unit_test(test_every_numeric_query_parameter_is_parsed_strictly),
        cmocka_unit_test(test_field_paths_of_odd_keys_are_readable_and_unambiguous),
        cmocka_unit_test(test_create_and_tool_results_name_the_field_at_fault),
        cmocka_unit_test(test_chat_ids_from_queries_and_bodies_are_canonical_lower_case),
        cmocka_unit_test(test_a2a_task_ids_have_one_canonical_form),
        cmocka_unit_test(test_a2a_errors_name_fields_of_the_json_rpc_request),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
