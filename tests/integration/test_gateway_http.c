/*
 * The gateway's REST API end to end: a real chatfleet-gateway process on a real PostgreSQL,
 * driven over HTTP. Auth, isolation between users, every route's accepted and rejected
 * outcomes that do not need a worker, the queue cap, body limits and field paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "mem.h"
#include "proc.h"
#include "testdb.h"

static testdb_t *s_db;
static pid_t s_gw;
static char s_base[64];
static char *s_alice;
static char *s_bob;
static char s_gw_bin[512];

static json_t *s_call(const char *method, const char *path, const char *token, const char *body,
                      long want) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    proc_http_t r;
    if (proc_http(method, url, token, body, &r) != 0) {
        fail_msg("%s %s: no response", method, path);
    }
    if (r.status != want) {
        fail_msg("%s %s: want %ld, got %ld: %s", method, path, want, r.status, r.body);
    }
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : json_null();
    proc_http_free(&r);
    return v;
}

static void s_expect_field(json_t *err, const char *field) {
    json_t *v = json_object_get(json_array_get(json_object_get(err, "validations"), 0), "field");
    if (!json_is_string(v) || strcmp(json_string_value(v), field) != 0) {
        char *d = json_dumps(err, 0);
        fail_msg("want field %s in %s", field, d);
    }
}

static char *s_create(const char *token, const char *text) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    json_t *c = s_call("POST", "/api/v2/chats", token, body, 201);
    free(body);
    char *id = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    return id;
}

static void test_auth_is_required(void **u) {
    (void)u;
    json_decref(s_call("GET", "/api/v2/chats", NULL, NULL, 401));
    json_decref(s_call("GET", "/api/v2/chats", "cf_not_a_token", NULL, 401));
    json_decref(s_call("GET", "/healthz", NULL, NULL, 200));
    json_decref(s_call("GET", "/readyz", NULL, NULL, 200));
}

static void test_metrics_count_requests_by_route_and_status(void **u) {
    (void)u;
    json_decref(s_call("GET", "/api/v2/chats", NULL, NULL, 401));
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", s_base);
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    const char *key = "chatfleet_http_requests_total{route=\"GET /api/v2/chats\",status=\"401\"} ";
    const char *at = strstr(r.body, key);
    assert_non_null(at);
    assert_true(strtoll(at + strlen(key), NULL, 10) >= 3); /* two above, one here */
    assert_non_null(strstr(
        r.body, "chatfleet_http_request_seconds_bucket{route=\"GET /api/v2/chats\",le=\"+Inf\"}"));
    assert_non_null(strstr(r.body, "chatfleet_open_streams 0"));
    proc_http_free(&r);
}

static void test_another_users_chat_is_404_on_every_route(void **u) {
    (void)u;
    char *id = s_create(s_alice, "private");
    static const struct {
        const char *method;
        const char *fmt;
        const char *body;
    } routes[] = {
        {"GET", "/api/v2/chats/%s", NULL},
        {"PATCH", "/api/v2/chats/%s", "{\"archived\":true}"},
        {"GET", "/api/v2/chats/%s/messages", NULL},
        {"POST", "/api/v2/chats/%s/messages", "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}"},
        {"PATCH", "/api/v2/chats/%s/messages/1",
         "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}"},
        {"DELETE", "/api/v2/chats/%s/queue/1", NULL},
        {"POST", "/api/v2/chats/%s/queue/1/promote", NULL},
        {"POST", "/api/v2/chats/%s/interrupt", NULL},
        {"POST", "/api/v2/chats/%s/tool-results",
         "{\"results\":[{\"tool_call_id\":\"a\",\"output\":1}]}"},
        {"POST", "/api/v2/chats/%s/compact", NULL},
        {"POST", "/api/v2/chats/%s/clear", NULL},
        {"POST", "/api/v2/chats/%s/reconcile-invalid", NULL},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char *path = mem_printf(routes[i].fmt, id);
        json_decref(s_call(routes[i].method, path, s_bob, routes[i].body, 404));
        free(path);
    }
    json_t *list = s_call("GET", "/api/v2/chats", s_bob, NULL, 200);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);
    free(id);
}

static void test_create_get_list_and_messages(void **u) {
    (void)u;
    char *id = s_create(s_alice, "first words");
    char *path = mem_printf("/api/v2/chats/%s", id);
    json_t *c = s_call("GET", path, s_alice, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(c, "status")), "running");
    assert_string_equal(json_string_value(json_object_get(c, "title")), "first words");
    json_decref(c);
    json_t *list = s_call("GET", "/api/v2/chats?limit=200", s_alice, NULL, 200);
    bool found = false;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        found |= !strcmp(json_string_value(json_object_get(e, "id")), id);
    }
    assert_true(found);
    json_decref(list);
    char *mpath = mem_printf("/api/v2/chats/%s/messages", id);
    json_t *m = s_call("GET", mpath, s_alice, NULL, 200);
    assert_int_equal(json_array_size(json_object_get(m, "messages")), 1);
    assert_false(json_is_true(json_object_get(m, "has_more")));
    json_decref(m);
    free(mpath);
    free(path);
    free(id);
}

static void test_queue_cap_delete_and_unowned_interrupt(void **u) {
    (void)u;
    char *id = s_create(s_alice, "busy");
    char *mpath = mem_printf("/api/v2/chats/%s/messages", id);
    const char *msg = "{\"content\":[{\"type\":\"text\",\"text\":\"more\"}]}";
    json_t *r1 = s_call("POST", mpath, s_alice, msg, 200);
    assert_true(json_is_true(json_object_get(r1, "queued")));
    json_int_t q1 =
        json_integer_value(json_object_get(json_object_get(r1, "queued_message"), "id"));
    json_decref(r1);
    json_decref(s_call("POST", mpath, s_alice, msg, 200));
    json_t *full = s_call("POST", mpath, s_alice, msg, 429); /* CHATFLEET_QUEUE_MAX=2 */
    json_decref(full);
    char *qpath = mem_printf("/api/v2/chats/%s/queue/%lld", id, (long long)q1);
    json_decref(s_call("DELETE", qpath, s_alice, NULL, 204));
    json_decref(s_call("DELETE", qpath, s_alice, NULL, 404));
    /* Nobody owns the chat, so the interrupt finishes at once and promotes the head. */
    char *ipath = mem_printf("/api/v2/chats/%s/interrupt", id);
    json_t *c = s_call("POST", ipath, s_alice, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(c, "status")), "running");
    json_decref(c);
    c = s_call("POST", ipath, s_alice, NULL, 200); /* R0 unowned -> W */
    assert_string_equal(json_string_value(json_object_get(c, "status")), "waiting");
    json_decref(c);
    json_decref(s_call("POST", ipath, s_alice, NULL, 409)); /* W: nothing to interrupt */
    json_t *m = s_call("GET", mpath, s_alice, NULL, 200);
    assert_int_equal(json_array_size(json_object_get(m, "messages")), 2);
    assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), 0);
    json_decref(m);
    free(ipath);
    free(qpath);
    free(mpath);
    free(id);
}

static void test_edit_soft_deletes_the_suffix_and_clears_the_queue(void **u) {
    (void)u;
    char *id = s_create(s_alice, "original");
    char *mpath = mem_printf("/api/v2/chats/%s/messages", id);
    json_decref(
        s_call("POST", mpath, s_alice, "{\"content\":[{\"type\":\"text\",\"text\":\"q\"}]}", 200));
    json_t *m = s_call("GET", mpath, s_alice, NULL, 200);
    json_int_t first = json_integer_value(
        json_object_get(json_array_get(json_object_get(m, "messages"), 0), "id"));
    json_decref(m);
    char *epath = mem_printf("/api/v2/chats/%s/messages/%lld", id, (long long)first);
    json_t *e = s_call("PATCH", epath, s_alice,
                       "{\"content\":[{\"type\":\"text\",\"text\":\"replacement\"}]}", 200);
    assert_int_equal(
        json_integer_value(json_array_get(json_object_get(e, "deleted_message_ids"), 0)), first);
    json_t *msg = json_object_get(e, "message");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(msg, "content"), 0), "text")),
                        "replacement");
    json_decref(e);
    m = s_call("GET", mpath, s_alice, NULL, 200);
    assert_int_equal(json_array_size(json_object_get(m, "messages")), 1);
    assert_int_equal(json_array_size(json_object_get(m, "queued_messages")), 0);
    json_decref(m);
    json_decref(s_call("PATCH", epath, s_alice,
                       "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}", 404));
    free(epath);
    free(mpath);
    free(id);
}

/* Puts the chat into requires_action with a pending dynamic call, as a worker would. */
static void s_requires_action(const char *chat) {
    PGconn *conn = testdb_connect(s_db);
    cs_error_t err;
    cs_fence_t f = {.worker_id = "11111111-1111-4111-8111-111111111111",
                    .runner_id = "22222222-2222-4222-8222-222222222222",
                    .status = "running",
                    .history_version = -1,
                    .generation_attempt = -1};
    chatstate_t *cs = chatstate_begin(conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    cs_message_t call = {.role = "assistant",
                         .content = "[{\"type\":\"tool-call\",\"tool_call_id\":\"c1\","
                                    "\"tool_name\":\"ask\",\"args\":{}}]"};
    assert_int_equal(chatstate_acquire(cs, f.worker_id, f.runner_id, &err), 0);
    assert_int_equal(chatstate_commit_step(cs, &f, &call, 1, &err), 0);
    assert_int_equal(chatstate_enter_requires_action(cs, &f, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    PQfinish(conn);
}

static void test_tool_results_are_validated(void **u) {
    (void)u;
    char *id = s_create(s_alice, "tools");
    char *path = mem_printf("/api/v2/chats/%s/tool-results", id);
    const char *good = "{\"results\":[{\"tool_call_id\":\"c1\",\"output\":{\"v\":1}}]}";
    json_decref(s_call("POST", path, s_alice, good, 409)); /* running: no pending action */
    s_requires_action(id);
    json_t *e = s_call("POST", path, s_alice,
                       "{\"results\":[{\"tool_call_id\":\"zz\",\"output\":1}]}", 400);
    s_expect_field(e, "results[0].tool_call_id");
    json_decref(e);
    e = s_call("POST", path, s_alice,
               "{\"results\":[{\"tool_call_id\":\"c1\",\"output\":1},"
               "{\"tool_call_id\":\"c1\",\"output\":2}]}",
               400);
    s_expect_field(e, "results[1].tool_call_id");
    json_decref(e);
    e = s_call("POST", path, s_alice, "{\"results\":[]}", 400);
    s_expect_field(e, "results");
    json_decref(e);
    e = s_call("POST", path, s_alice, "{\"results\":[{\"tool_call_id\":\"c1\"}]}", 400);
    s_expect_field(e, "results[0].output");
    json_decref(e);
    e = s_call("POST", path, s_alice, "{\"results\":[{\"tool_call_id\":\"c1\",\"output\":}]}", 400);
    s_expect_field(e, "results[0].output");
    json_decref(e);
    json_decref(s_call("POST", path, s_alice, good, 204));
    char *cpath = mem_printf("/api/v2/chats/%s", id);
    json_t *c = s_call("GET", cpath, s_alice, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(c, "status")), "running");
    json_decref(c);
    free(cpath);
    free(path);
    free(id);
}

static void test_bad_bodies_name_the_field(void **u) {
    (void)u;
    json_t *e = s_call("POST", "/api/v2/chats", s_alice,
                       "{\"content\":[{\"type\":\"text\",\"text\":\"a\"}],\"strict\":true}", 400);
    s_expect_field(e, "strict");
    json_decref(e);
    e = s_call("POST", "/api/v2/chats", s_alice,
               "{\"content\":[{\"type\":\"text\",\"text\":\"a\",\"text\":\"b\"}]}", 400);
    s_expect_field(e, "content[0].text");
    json_decref(e);
    e = s_call("POST", "/api/v2/chats", s_alice, "{\"content\":[{\"type\":\"image\"}]}", 400);
    s_expect_field(e, "content[0].type");
    json_decref(e);
    e = s_call("POST", "/api/v2/chats", s_alice,
               "{\"content\":[],\"dynamic_tools\":[{\"name\":\"bad name\"}]}", 400);
    s_expect_field(e, "dynamic_tools[0].name");
    json_decref(e);
    e = s_call("POST", "/api/v2/chats", s_alice, "{\"content\":[],\"model\":\"nope\"}", 400);
    s_expect_field(e, "model");
    json_decref(e);
    size_t big = 1024 * 1024 + 16;
    char *huge = mem_alloc(big + 1);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    huge[big] = '\0';
    json_decref(s_call("POST", "/api/v2/chats", s_alice, huge, 413));
    free(huge);
    json_t *c = s_call("POST", "/api/v2/chats", s_alice, "{\"content\":[]}", 201);
    assert_string_equal(json_string_value(json_object_get(c, "status")), "waiting");
    json_decref(c);
}

static void test_archive_only_when_idle(void **u) {
    (void)u;
    char *id = s_create(s_alice, "archive me");
    char *path = mem_printf("/api/v2/chats/%s", id);
    json_decref(s_call("PATCH", path, s_alice, "{\"archived\":true}", 409)); /* running */
    char *ipath = mem_printf("/api/v2/chats/%s/interrupt", id);
    json_decref(s_call("POST", ipath, s_alice, NULL, 200));
    json_decref(s_call("PATCH", path, s_alice, "{\"archived\":true,\"title\":\"kept\"}", 204));
    json_t *c = s_call("GET", path, s_alice, NULL, 200);
    assert_true(json_is_true(json_object_get(c, "archived")));
    assert_string_equal(json_string_value(json_object_get(c, "title")), "kept");
    json_decref(c);
    json_t *e = s_call("PATCH", path, s_alice, "{\"archived\":\"yes\"}", 400);
    s_expect_field(e, "archived");
    json_decref(e);
    json_decref(s_call("PATCH", path, s_alice, "{\"archived\":false}", 204));
    free(ipath);
    free(path);
    free(id);
}

static char *s_user_add(const char *name) {
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *env[] = {url, NULL};
    char *argv[] = {s_gw_bin, "user-add", (char *)name, NULL};
    char *out = proc_output(argv, env);
    free(url);
    ASSERT(out);
    out[strcspn(out, "\n")] = '\0';
    return out;
}

static int s_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    snprintf(s_gw_bin, sizeof s_gw_bin, "%s/api-gateway/chatfleet-gateway",
             getenv("CHATFLEET_BUILD_DIR"));
    s_alice = s_user_add("alice");
    s_bob = s_user_add("bob");
    int port = proc_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *listen = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port);
    char *env[] = {url, listen, "CHATFLEET_QUEUE_MAX=2", NULL};
    char *argv[] = {s_gw_bin, "serve", NULL};
    s_gw = proc_spawn(argv, env, "test_gateway_http.log");
    free(url);
    free(listen);
    char health[96];
    snprintf(health, sizeof health, "%s/healthz", s_base);
    ASSERT(proc_wait_http(health, 10000) == 0);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int rc = proc_stop(s_gw, 5000);
    free(s_alice);
    free(s_bob);
    testdb_destroy(&s_db);
    return rc == 0 ? 0 : -1; /* a clean SIGTERM shutdown is part of the contract */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_is_required),
        cmocka_unit_test(test_metrics_count_requests_by_route_and_status),
        cmocka_unit_test(test_another_users_chat_is_404_on_every_route),
        cmocka_unit_test(test_create_get_list_and_messages),
        cmocka_unit_test(test_queue_cap_delete_and_unowned_interrupt),
        cmocka_unit_test(test_edit_soft_deletes_the_suffix_and_clears_the_queue),
        cmocka_unit_test(test_tool_results_are_validated),
        cmocka_unit_test(test_bad_bodies_name_the_field),
        cmocka_unit_test(test_archive_only_when_idle),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
