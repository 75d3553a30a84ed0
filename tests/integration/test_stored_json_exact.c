/*
 * The JSON a client or a model wrote is stored and read back with its number text unchanged
 * (issue 41; migration 0021_exact_json.sql; ARCHITECTURE.md §3, "Stored JSON"). Rows are
 * written through the state machine's own transitions (create with dynamic tools and a
 * structured request, a step with a tool call, a tool result, a queued structured request, a
 * receipt, a promotion), then read back by the column's text and by the gateway's own read SQL
 * (GATEWAY_MESSAGE_JSON, GATEWAY_QUEUED_JSON, the chat projection, the pending calls): each
 * must hold the numbers exactly as written. Under jsonb every one of them fails: 1e300 comes
 * back as 301 digits, 1E2 as 100 and -0 as 0 (1.50 and the long integer survive it: numeric
 * keeps a scale and any number of digits).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "gateway.h"
#include "mem.h"
#include "testdb.h"

/* The numbers, as one JSON array without spaces: found verbatim in a read, or the read
 * rewrote them. */
#define S_NUMS "[1e300,1E2,-0,1.50,12345678910111213141516171819202122232425262728293031]"
#define S_RID  "33333333-3333-4333-8333-333333333333"
#define S_RID2 "44444444-4444-4444-8444-444444444444"
#define S_FORMAT                                                                                   \
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"array\","    \
    "\"examples\":[" S_NUMS "]}}}"
#define S_TOOLS                                                                                    \
    "[{\"name\":\"ask\",\"description\":\"Ask\",\"input_schema\":{\"type\":\"object\","            \
    "\"properties\":{\"n\":{\"type\":\"array\",\"default\":" S_NUMS "}}}}]"
#define S_CALL                                                                                     \
    "[{\"type\":\"tool-call\",\"tool_call_id\":\"c1\",\"tool_name\":\"ask\",\"args\":{"            \
    "\"n\":" S_NUMS "}}]"

extern const char *const gateway_chat_json_sql;

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

/* The first value of the SQL that fmt makes from chat (as %1$s); caller frees. */
static char *s_read(const char *fmt, const char *chat) {
    char *sql = mem_printf(fmt, chat);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    return v;
}

/* Fails unless the read (what names it) holds S_NUMS verbatim. */
static void s_expect_exact(const char *what, const char *fmt, const char *chat) {
    char *got = s_read(fmt, chat);
    if (!got || !strstr(got, S_NUMS)) {
        fail_msg("%s: want %s verbatim, got %s", what, S_NUMS, got ? got : "NULL");
    }
    free(got);
}

static chatstate_t *s_begin(const char *chat) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    if (!cs) {
        fail_msg("begin: %s", err.message);
    }
    return cs;
}

static void s_commit(chatstate_t **cs) {
    cs_error_t err;
    if (chatstate_commit(cs, NULL, NULL, &err) != 0) {
        fail_msg("commit: %s", err.message);
    }
}

static void s_fence(cs_fence_t *f, const char *status) {
    snprintf(f->worker_id, sizeof f->worker_id, "%s", CHATSETUP_WORKER);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", CHATSETUP_RUNNER);
    f->status = status;
    f->history_version = -1;
    f->generation_attempt = -1;
}

/* A chat with S_TOOLS whose first message is a structured request of S_FORMAT, owned by the
 * test's worker, waiting for the answer to a call of ask with args {"n": S_NUMS}. */
static void s_chat_in_requires_action(char chat[ID_UUID_LEN + 1]) {
    cs_message_t first = {.role = "user",
                          .content = CHATSETUP_USER_MSG,
                          .so_request_id = S_RID,
                          .response_format = S_FORMAT};
    cs_create_t c = {
        .owner_id = s_owner, .dynamic_tools = S_TOOLS, .messages = &first, .message_count = 1};
    cs_error_t err;
    if (chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err) != 0) {
        fail_msg("create: %s", err.message);
    }
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_acquire(cs, CHATSETUP_WORKER, CHATSETUP_RUNNER, &err), 0);
    s_commit(&cs);
    cs = s_begin(chat);
    cs_fence_t f;
    s_fence(&f, "running");
    cs_message_t call = {.role = "assistant", .content = S_CALL};
    assert_int_equal(chatstate_commit_step(cs, &f, &call, 1, &err), 0);
    assert_int_equal(chatstate_enter_requires_action(cs, &f, &err), 0);
    s_commit(&cs);
}

static void test_dynamic_tools_and_a_structured_request_keep_their_number_text(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    s_chat_in_requires_action(chat);
    s_expect_exact("chats.dynamic_tools", "SELECT dynamic_tools::text FROM chats WHERE id = '%s'",
                   chat);
    char *q =
        mem_printf("SELECT (%s)::text FROM chats c WHERE c.id = '%%s'", gateway_chat_json_sql);
    s_expect_exact("the chat projection", q, chat);
    free(q);
    s_expect_exact("the request's structured_output",
                   "SELECT structured_output::text FROM chat_messages WHERE chat_id = '%s'"
                   " AND role = 'user' AND structured_output_request_id IS NOT NULL",
                   chat);
    /* The worker reads the governing request's response_format this way (worker/turn). */
    s_expect_exact("the request's response_format",
                   "SELECT (structured_output -> 'response_format')::text FROM chat_messages"
                   " WHERE chat_id = '%s' AND role = 'user'",
                   chat);
}

static void test_a_tool_call_and_its_result_keep_their_number_text(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    s_chat_in_requires_action(chat);
    s_expect_exact("the call's content",
                   "SELECT content::text FROM chat_messages WHERE chat_id = '%s'"
                   " AND role = 'assistant'",
                   chat);
    s_expect_exact("the call in GATEWAY_MESSAGE_JSON",
                   "SELECT (" GATEWAY_MESSAGE_JSON ")::text FROM chat_messages m"
                   " WHERE m.chat_id = '%s' AND m.role = 'assistant'",
                   chat);
    char *q =
        mem_printf("SELECT string_agg(args::text, ',') FROM (%s) p", chatstate_client_calls_sql);
    const char *p[] = {chat};
    PGresult *res = PQexecParams(s_conn, q, 1, NULL, p, NULL, NULL, 0);
    free(q);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    if (!strstr(PQgetvalue(res, 0, 0), S_NUMS)) {
        fail_msg("the pending call's args: got %s", PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    cs_tool_result_t r = {.tool_call_id = "c1", .output = "{\"n\":" S_NUMS "}"};
    cs_error_t err;
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_complete_requires_action(cs, &r, 1, NULL, 0, &err), 0);
    s_commit(&cs);
    s_expect_exact("the tool result's content",
                   "SELECT content::text FROM chat_messages WHERE chat_id = '%s' AND role = 'tool'",
                   chat);
    s_expect_exact("the tool result in GATEWAY_MESSAGE_JSON",
                   "SELECT (" GATEWAY_MESSAGE_JSON ")::text FROM chat_messages m"
                   " WHERE m.chat_id = '%s' AND m.role = 'tool'",
                   chat);
}

static void test_a_queued_request_its_promotion_and_a_receipt_keep_their_number_text(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    s_chat_in_requires_action(chat);
    cs_error_t err;
    cs_tool_result_t r = {.tool_call_id = "c1", .output = "{}"};
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_complete_requires_action(cs, &r, 1, NULL, 0, &err), 0);
    s_commit(&cs);
    /* The gateway admits only text and file parts today; the store must not depend on it. */
    cs_message_t m = {.role = "user",
                      .content = "[{\"type\":\"text\",\"text\":\"again\",\"n\":" S_NUMS "}]",
                      .so_request_id = S_RID2,
                      .response_format = S_FORMAT};
    int64_t mid = 0;
    int64_t qid = 0;
    cs = s_begin(chat);
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    s_commit(&cs);
    assert_true(qid > 0);
    s_expect_exact("the queued content",
                   "SELECT content::text FROM chat_queued_messages WHERE chat_id = '%s'", chat);
    s_expect_exact("the queued response_format",
                   "SELECT response_format::text FROM chat_queued_messages WHERE chat_id = '%s'",
                   chat);
    s_expect_exact("the queued row in GATEWAY_QUEUED_JSON",
                   "SELECT (" GATEWAY_QUEUED_JSON ")::text FROM chat_queued_messages q"
                   " WHERE q.chat_id = '%s'",
                   chat);
    /* The first request's receipt and the turn's end, which promotes the queued request. */
    cs = s_begin(chat);
    cs_fence_t f;
    s_fence(&f, "running");
    bool written = false;
    assert_int_equal(
        chatstate_receipt(cs, S_RID, "succeeded", NULL, "{\"v\":" S_NUMS "}", &written, &err), 0);
    assert_true(written);
    assert_int_equal(chatstate_finish_turn(cs, &f, NULL, 0, &err), 0);
    s_commit(&cs);
    s_expect_exact("the receipt's structured_output",
                   "SELECT structured_output::text FROM chat_messages WHERE chat_id = '%s'"
                   " AND structured_output_request_id = '" S_RID "'"
                   " AND structured_output ->> 'type' = 'structured-output-outcome'",
                   chat);
    s_expect_exact("the receipt in GATEWAY_MESSAGE_JSON",
                   "SELECT (" GATEWAY_MESSAGE_JSON ")::text FROM chat_messages m"
                   " WHERE m.chat_id = '%s' AND m.structured_output_request_id = '" S_RID "'"
                   " AND m.structured_output ->> 'type' = 'structured-output-outcome'",
                   chat);
    s_expect_exact("the promoted content",
                   "SELECT content::text FROM chat_messages WHERE chat_id = '%s'"
                   " AND queued_message_id IS NOT NULL",
                   chat);
    s_expect_exact("the promoted request's structured_output",
                   "SELECT structured_output::text FROM chat_messages WHERE chat_id = '%s'"
                   " AND queued_message_id IS NOT NULL",
                   chat);
    s_expect_exact("the promoted row in GATEWAY_MESSAGE_JSON",
                   "SELECT (" GATEWAY_MESSAGE_JSON ")::text FROM chat_messages m"
                   " WHERE m.chat_id = '%s' AND m.queued_message_id IS NOT NULL",
                   chat);
    /* The projection drops the receipt's discriminator and keeps the rest of it. */
    char *so = s_read("SELECT (" GATEWAY_MESSAGE_JSON ") -> 'structured_output' ->> 'status'"
                      " || '/' || ((" GATEWAY_MESSAGE_JSON ") -> 'structured_output' -> 'type'"
                      " IS NULL) FROM chat_messages m WHERE m.chat_id = '%s'"
                      " AND m.structured_output ->> 'type' = 'structured-output-outcome'",
                      chat);
    assert_non_null(so);
    assert_string_equal(so, "succeeded/true");
    free(so);
}

static int s_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    return testdb_user_new(s_conn, "exact", s_owner);
}

static int s_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamic_tools_and_a_structured_request_keep_their_number_text),
        cmocka_unit_test(test_a_tool_call_and_its_result_keep_their_number_text),
        cmocka_unit_test(test_a_queued_request_its_promotion_and_a_receipt_keep_their_number_text),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
