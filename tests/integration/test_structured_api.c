/*
 * Structured output at the API and in the state machine: response_format validation with
 * exact field paths, request UUIDs through the queue and promotion, and the cancellation
 * receipts that queue deletion, edits and interrupts write at once (one per UUID, never
 * moving the fence of unrelated work). A real gateway on a real PostgreSQL.
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

#define FORMAT                                                                                     \
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"answer\",\"schema\":{\"type\":"         \
    "\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}}"
#define TEXT(t) "{\"type\":\"text\",\"text\":\"" t "\"}"

static testdb_t *s_db;
static PGconn *s_conn;
static pid_t s_gw;
static char s_base[64];
static char *s_token;

static json_t *s_call(const char *method, const char *path, const char *body, long want) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    proc_http_t r;
    if (proc_http(method, url, s_token, body, &r) != 0 || r.status != want) {
        fail_msg("%s %s: want %ld, got %ld: %s", method, path, want, r.status, r.body);
    }
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : json_null();
    proc_http_free(&r);
    return v;
}

static void s_rejects(const char *body, const char *field) {
    json_t *e = s_call("POST", "/api/v2/chats", body, 400);
    const char *got = json_string_value(
        json_object_get(json_array_get(json_object_get(e, "validations"), 0), "field"));
    if (!got || strcmp(got, field) != 0) {
        fail_msg("%s: want field %s, got %s", body, field, got ? got : "(none)");
    }
    json_decref(e);
}

static void test_response_format_errors_name_the_field(void **u) {
    (void)u;
    char body[1024];
    const struct {
        const char *format;
        const char *field;
    } cases[] = {
        {"{}", "response_format"},
        {"{\"type\":\"xml\"}", "response_format.type"},
        {"{\"type\":\"text\",\"json_schema\":{}}", "response_format.json_schema"},
        {"{\"type\":\"json_schema\"}", "response_format.json_schema"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a b\",\"schema\":{}}}",
         "response_format.json_schema.name"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":{},"
         "\"strict\":true}}",
         "response_format.json_schema.strict"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":[]}}",
         "response_format.json_schema.schema"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":{\"properties\":"
         "{\"x\":{\"$ref\":\"#\"}}}}}",
         "response_format.json_schema.schema.properties.x.$ref"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":{\"type\":"
         "\"string\",\"format\":\"no-such-format\"}}}",
         "response_format.json_schema.schema.format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "{\"content\":[" TEXT("q") "],\"response_format\":%s}",
                 cases[i].format);
        s_rejects(body, cases[i].field);
    }
    s_rejects(
        "{\"content\":[" TEXT("q") "],\"response_format\":" FORMAT
                                   ",\"dynamic_tools\":[{\"name\":\"submit_structured_output\"}]}",
        "response_format");
    /* A property called $ref is data, not a reference. */
    json_decref(
        s_call("POST", "/api/v2/chats",
               "{\"content\":[" TEXT(
                   "q") "],\"response_format\":{\"type\":\"json_schema\","
                        "\"json_schema\":{\"name\":\"a\",\"schema\":{\"properties\":{\"$ref\":"
                        "{\"const\":{\"$id\":1}}}}}}}",
               201));
    s_rejects("{\"content\":[],\"response_format\":" FORMAT "}", "response_format");
}

static char *s_scalar(const char *fmt, const char *a) {
    char *sql = mem_printf(fmt, a, a);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    return v;
}

static json_t *s_messages(const char *chat) {
    char path[128];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    json_t *m = s_call("GET", path, NULL, 200);
    return m;
}

/* The receipts in a messages listing, keyed by request id. */
static json_t *s_receipt(json_t *listing, const char *request_id) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(listing, "messages"), i, m) {
        json_t *so = json_object_get(m, "structured_output");
        if (so && !strcmp(json_string_value(json_object_get(so, "request_id")), request_id)) {
            return so;
        }
    }
    return NULL;
}

static char *s_new_chat(const char *body) {
    json_t *c = s_call("POST", "/api/v2/chats", body, 201);
    char *id = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    return id;
}

static void test_queue_deletion_cancels_at_once_and_leaves_the_fence(void **u) {
    (void)u;
    char *chat = s_new_chat("{\"content\":[" TEXT("plain turn") "]}");
    /* A worker owns it and is mid-attempt: history_version and attempt are its fence. */
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_acquire(cs, "11111111-1111-4111-8111-111111111111",
                                       "22222222-2222-4222-8222-222222222222", &err),
                     0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    cs_fence_t f = {.worker_id = "11111111-1111-4111-8111-111111111111",
                    .runner_id = "22222222-2222-4222-8222-222222222222",
                    .status = "running",
                    .history_version = -1,
                    .generation_attempt = -1};
    int64_t attempt = 0;
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    char *fence0 = s_scalar("SELECT history_version || '/' || generation_attempt FROM chats"
                            " WHERE id = '%s'",
                            chat);
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    json_t *q = s_call(
        "POST", path, "{\"content\":[" TEXT("structured") "],\"response_format\":" FORMAT "}", 200);
    json_t *qm = json_object_get(q, "queued_message");
    const char *rid = json_string_value(json_object_get(qm, "structured_output_request_id"));
    assert_non_null(rid);
    char *request_id = mem_strdup(rid);
    char qpath[200];
    snprintf(qpath, sizeof qpath, "/api/v2/chats/%s/queue/%lld", chat,
             (long long)json_integer_value(json_object_get(qm, "id")));
    json_decref(q);
    json_decref(s_call("DELETE", qpath, NULL, 204));
    json_t *listing = s_messages(chat);
    json_t *so = s_receipt(listing, request_id);
    assert_non_null(so);
    assert_string_equal(json_string_value(json_object_get(so, "status")), "canceled");
    assert_string_equal(json_string_value(json_object_get(json_object_get(so, "error"), "code")),
                        "queue_deleted");
    /* The reference shape: {"request_id","status","error":{"code","message"}}, the message a
     * fixed sentence (sanitized), nothing else. */
    assert_int_equal(json_object_size(so), 3);
    assert_string_equal(json_string_value(json_object_get(so, "request_id")), request_id);
    assert_int_equal(json_object_size(json_object_get(so, "error")), 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(so, "error"), "message")),
                        "The queued request was deleted.");
    json_decref(listing);
    char *fence1 = s_scalar("SELECT history_version || '/' || generation_attempt FROM chats"
                            " WHERE id = '%s'",
                            chat);
    assert_string_equal(fence0, fence1); /* the receipt-only insert left the fence alone */
    /* The running worker's next write still passes its fence. */
    cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    f.generation_attempt = attempt;
    cs_message_t a = {.role = "assistant", .content = "[" TEXT("done") "]"};
    assert_int_equal(chatstate_commit_step(cs, &f, &a, 1, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    free(fence0);
    free(fence1);
    free(request_id);
    free(chat);
}

static const char *s_request_of_last_user(json_t *listing) {
    size_t i;
    json_t *m;
    const char *rid = NULL;
    json_array_foreach(json_object_get(listing, "messages"), i, m) {
        if (!strcmp(json_string_value(json_object_get(m, "role")), "user") && !rid) {
            rid = json_string_value(json_object_get(m, "structured_output_request_id"));
            return rid ? rid : "";
        }
    }
    return "";
}

static void test_edit_preserves_replaces_and_clears_with_superseded_receipts(void **u) {
    (void)u;
    char *chat = s_new_chat("{\"content\":[" TEXT("first") "],\"response_format\":" FORMAT "}");
    json_t *l0 = s_messages(chat);
    char *r0 = mem_strdup(s_request_of_last_user(l0));
    json_int_t first = json_integer_value(
        json_object_get(json_array_get(json_object_get(l0, "messages"), 0), "id"));
    json_decref(l0);
    assert_true(strlen(r0) == 36);
    char path[200];
    /* Omitted format: preserved under a fresh UUID; the old request is superseded. */
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages/%lld", chat, (long long)first);
    json_t *e = s_call("PATCH", path, "{\"content\":[" TEXT("second") "]}", 200);
    json_int_t second = json_integer_value(json_object_get(json_object_get(e, "message"), "id"));
    const char *r1 = json_string_value(
        json_object_get(json_object_get(e, "message"), "structured_output_request_id"));
    assert_non_null(r1);
    assert_string_not_equal(r0, r1);
    char *r1c = mem_strdup(r1);
    json_decref(e);
    json_t *l1 = s_messages(chat);
    json_t *so = s_receipt(l1, r0);
    assert_non_null(so);
    assert_string_equal(json_string_value(json_object_get(json_object_get(so, "error"), "code")),
                        "superseded");
    json_decref(l1);
    /* Explicit text: cleared. */
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages/%lld", chat, (long long)second);
    e = s_call("PATCH", path,
               "{\"content\":[" TEXT("third") "],\"response_format\":{\"type\":\"text\"}}", 200);
    assert_null(json_object_get(json_object_get(e, "message"), "structured_output_request_id"));
    json_int_t third = json_integer_value(json_object_get(json_object_get(e, "message"), "id"));
    json_decref(e);
    json_t *l2 = s_messages(chat);
    assert_non_null(s_receipt(l2, r1c));
    json_decref(l2);
    /* A json_schema: replaced, fresh UUID. */
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages/%lld", chat, (long long)third);
    e = s_call("PATCH", path, "{\"content\":[" TEXT("fourth") "],\"response_format\":" FORMAT "}",
               200);
    assert_non_null(json_object_get(json_object_get(e, "message"), "structured_output_request_id"));
    json_decref(e);
    /* Exactly one receipt per UUID, ever. */
    char *dups = s_scalar("SELECT count(*) - count(DISTINCT structured_output_request_id)"
                          " FROM chat_messages WHERE chat_id = '%s'"
                          " AND structured_output ->> 'type' = 'structured-output-outcome'",
                          chat);
    assert_string_equal(dups, "0");
    free(dups);
    free(r1c);
    free(r0);
    free(chat);
}

static void test_interrupt_and_promotion_carry_and_close_the_request(void **u) {
    (void)u;
    char *chat = s_new_chat("{\"content\":[" TEXT("busy") "]}");
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    json_t *q = s_call("POST", path,
                       "{\"content\":[" TEXT("later") "],\"response_format\":" FORMAT "}", 200);
    char *rid = mem_strdup(json_string_value(
        json_object_get(json_object_get(q, "queued_message"), "structured_output_request_id")));
    json_decref(q);
    /* Unowned: the interrupt finishes at once and promotes the structured message. */
    char ipath[160];
    snprintf(ipath, sizeof ipath, "/api/v2/chats/%s/interrupt", chat);
    json_decref(s_call("POST", ipath, NULL, 200));
    json_t *l = s_messages(chat);
    assert_string_equal(s_request_of_last_user(l), rid);
    assert_null(s_receipt(l, rid)); /* promoted, still open */
    json_decref(l);
    /* Interrupting the structured turn itself closes it: canceled, interrupted. */
    json_decref(s_call("POST", ipath, NULL, 200));
    l = s_messages(chat);
    json_t *so = s_receipt(l, rid);
    assert_non_null(so);
    assert_string_equal(json_string_value(json_object_get(json_object_get(so, "error"), "code")),
                        "interrupted");
    json_decref(l);
    free(rid);
    free(chat);
}

static int s_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    char bin[512];
    snprintf(bin, sizeof bin, "%s/api-gateway/chatfleet-gateway", getenv("CHATFLEET_BUILD_DIR"));
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *uenv[] = {url, NULL};
    char *uargv[] = {bin, "user-add", "structured", NULL};
    s_token = proc_output(uargv, uenv);
    ASSERT(s_token);
    s_token[strcspn(s_token, "\n")] = '\0';
    int port = proc_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    char *listen = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port);
    char *env[] = {url, listen, NULL};
    char *argv[] = {bin, "serve", NULL};
    s_gw = proc_spawn(argv, env, "test_structured_api.log");
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
    free(s_token);
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return rc == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_response_format_errors_name_the_field),
        cmocka_unit_test(test_queue_deletion_cancels_at_once_and_leaves_the_fence),
        cmocka_unit_test(test_edit_preserves_replaces_and_clears_with_superseded_receipts),
        cmocka_unit_test(test_interrupt_and_promotion_carry_and_close_the_request),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
