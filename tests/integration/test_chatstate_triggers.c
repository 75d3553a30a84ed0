/*
 * The version triggers of common/chat/sql/0001_schema.sql on a real PostgreSQL
 * (ARCHITECTURE.md §5.1). Each test writes with plain SQL inside a transaction that first advances
 * snapshot_version, which is exactly what a chatstate bundle looks like to the triggers, so
 * the triggers are tested on their own and not through the state machine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "id.h"
#include "log.h"
#include "mem.h"
#include "testdb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQLSTATE_UNIQUE_VIOLATION "23505"
#define SQLSTATE_RAISE_EXCEPTION  "P0001"

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

/* Runs one statement (or several) that must succeed. */
static void s_exec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void s_exec(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char err[512];
    if (testdb_try(s_conn, sql, err, sizeof err) != 0) {
        fail_msg("statement failed: %s: %s", sql, err);
    }
    free(sql);
}

/* The first column of the first row as a number; the query must return a non-NULL value. */
static int64_t s_int(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int64_t s_int(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char *text = testdb_scalar(s_conn, sql);
    if (!text) {
        fail_msg("no value from %s", sql);
    }
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        fail_msg("not a number from %s: %s", sql, text);
    }
    free(text);
    free(sql);
    return (int64_t)v;
}

/* True when the query returns SQL NULL (or no row). */
static bool s_is_null(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool s_is_null(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char *text = testdb_scalar(s_conn, sql);
    bool null = text == NULL;
    free(text);
    free(sql);
    return null;
}

/* A chat row written directly (snapshot_version 1, nothing else set), as a test subject. */
static void s_new_chat(char id[ID_UUID_LEN + 1], const char *status) {
    assert_int_equal(id_uuid_new(id), 0);
    s_exec("INSERT INTO chats (id, owner_id, status) VALUES ('%s', '%s', '%s')", id, s_owner,
           status);
}

/* One bundle as the triggers see it: BEGIN, advance snapshot_version, body, COMMIT.
 * Returns the bundle's snapshot_version. */
static int64_t s_bundle(const char *chat, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int64_t s_bundle(const char *chat, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = mem_vprintf(fmt, ap);
    va_end(ap);
    s_exec("BEGIN");
    int64_t snap = s_int("UPDATE chats SET snapshot_version = snapshot_version + 1"
                         " WHERE id = '%s' RETURNING snapshot_version",
                         chat);
    char err[512];
    if (testdb_try(s_conn, body, err, sizeof err) != 0) {
        s_exec("ROLLBACK");
        fail_msg("bundle body failed: %s: %s", body, err);
    }
    s_exec("COMMIT");
    free(body);
    return snap;
}

/* Runs body inside a bundle and expects it to fail with sqlstate and a message containing
 * needle; the bundle is rolled back. */
static void s_bundle_rejected(const char *chat, const char *sqlstate, const char *needle,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void s_bundle_rejected(const char *chat, const char *sqlstate, const char *needle,
                              const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = mem_vprintf(fmt, ap);
    va_end(ap);
    s_exec("BEGIN");
    s_exec("UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = '%s'", chat);
    PGresult *res = PQexec(s_conn, body);
    ExecStatusType st = PQresultStatus(res);
    bool failed = st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK;
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorMessage(res);
    if (!failed) {
        PQclear(res);
        s_exec("ROLLBACK");
        fail_msg("expected %s to be rejected, it succeeded", body);
    }
    assert_non_null(state);
    assert_string_equal(state, sqlstate);
    if (needle && !strstr(msg, needle)) {
        fail_msg("rejection of %s does not mention '%s': %s", body, needle, msg);
    }
    PQclear(res);
    s_exec("ROLLBACK");
    free(body);
}

/* Inserts one ordinary assistant message in its own bundle; returns its id. */
static int64_t s_insert_message(const char *chat) {
    s_exec("BEGIN");
    s_exec("UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = '%s'", chat);
    int64_t id = s_int("INSERT INTO chat_messages (chat_id, role, content) VALUES ('%s',"
                       " 'assistant', '[{\"type\":\"text\",\"text\":\"hello\"}]') RETURNING id",
                       chat);
    s_exec("COMMIT");
    return id;
}

#define CHAT_INT(col, chat) s_int("SELECT " col " FROM chats WHERE id = '%s'", chat)
#define MSG_REVISION(id)                                                                           \
    s_int("SELECT revision FROM chat_messages WHERE id = %lld", (long long)(id))

static int s_group_setup(void **state) {
    (void)state;
    log_init("test_chatstate_triggers", "warn");
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    return testdb_user_new(s_conn, "trigger-owner", s_owner);
}

static int s_group_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

/* --- Message revision and history_version. --- */

static void test_insert_sets_revision_and_history_version_to_bundle_snapshot(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    assert_int_equal(CHAT_INT("history_version", chat), 0);

    int64_t snap = s_bundle(chat,
                            "INSERT INTO chat_messages (chat_id, role, content) VALUES"
                            " ('%s', 'user', '[]'), ('%s', 'assistant', '[]')",
                            chat, chat);
    assert_int_equal(snap, 2);
    assert_int_equal(s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                           " AND revision = %lld",
                           chat, (long long)snap),
                     2);
    assert_int_equal(CHAT_INT("history_version", chat), snap);

    /* A later bundle stamps only its own rows. */
    int64_t later = s_bundle(chat,
                             "INSERT INTO chat_messages (chat_id, role, content) VALUES"
                             " ('%s', 'user', '[]')",
                             chat);
    assert_int_equal(later, snap + 1);
    assert_int_equal(s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                           " AND revision = %lld",
                           chat, (long long)snap),
                     2);
    assert_int_equal(s_int("SELECT max(revision) FROM chat_messages WHERE chat_id = '%s'", chat),
                     later);
    assert_int_equal(CHAT_INT("history_version", chat), later);
}

static void test_meaningful_update_sets_revision_and_history_version(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    int64_t id = s_insert_message(chat);
    int64_t inserted = MSG_REVISION(id);

    int64_t snap = s_bundle(chat,
                            "UPDATE chat_messages SET content = '[{\"type\":\"text\",\"text\":"
                            "\"edited\"}]' WHERE id = %lld",
                            (long long)id);
    assert_true(snap > inserted);
    assert_int_equal(MSG_REVISION(id), snap);
    assert_int_equal(CHAT_INT("history_version", chat), snap);

    /* A soft delete is a meaningful update too. */
    int64_t del =
        s_bundle(chat, "UPDATE chat_messages SET deleted = true WHERE id = %lld", (long long)id);
    assert_int_equal(MSG_REVISION(id), del);
    assert_int_equal(CHAT_INT("history_version", chat), del);
}

static void test_insert_and_meaningful_update_reset_generation_attempt(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    int64_t id = s_insert_message(chat);

    s_bundle(chat, "UPDATE chats SET generation_attempt = 3 WHERE id = '%s'", chat);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 3);
    s_insert_message(chat);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 0);

    s_bundle(chat, "UPDATE chats SET generation_attempt = 4 WHERE id = '%s'", chat);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 4);
    s_bundle(chat, "UPDATE chat_messages SET compressed = true WHERE id = %lld", (long long)id);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 0);

    /* Within one bundle: history already at this snapshot, then an attempt is recorded, then
     * history changes again; the attempt still resets. */
    int64_t snap = s_bundle(chat,
                            "INSERT INTO chat_messages (chat_id, role, content) VALUES ('%s',"
                            " 'user', '[]'); UPDATE chats SET generation_attempt = 2 WHERE id ="
                            " '%s'; UPDATE chat_messages SET deleted = true WHERE id = %lld",
                            chat, chat, (long long)id);
    assert_int_equal(CHAT_INT("history_version", chat), snap);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 0);
}

static void test_noop_update_keeps_revision_history_version_and_generation_attempt(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    int64_t id = s_insert_message(chat);
    int64_t revision = MSG_REVISION(id);
    int64_t history = CHAT_INT("history_version", chat);
    int64_t attempt_snap =
        s_bundle(chat, "UPDATE chats SET generation_attempt = 5 WHERE id = '%s'", chat);

    int64_t snap = s_bundle(chat,
                            "UPDATE chat_messages SET content = content WHERE chat_id = '%s';"
                            " UPDATE chat_messages SET deleted = deleted, role = role"
                            " WHERE chat_id = '%s'",
                            chat, chat);
    assert_true(snap > attempt_snap);
    assert_int_equal(MSG_REVISION(id), revision);
    assert_int_equal(CHAT_INT("history_version", chat), history);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 5);
    assert_int_equal(CHAT_INT("snapshot_version", chat), snap);
}

/* --- Queue version. --- */

static int64_t s_enqueue(const char *chat) {
    s_exec("BEGIN");
    s_exec("UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = '%s'", chat);
    int64_t id = s_int("INSERT INTO chat_queued_messages (chat_id, content, created_by) VALUES"
                       " ('%s', '[]', '%s') RETURNING id",
                       chat, s_owner);
    s_exec("COMMIT");
    return id;
}

static void test_queue_version_follows_insert_tracked_updates_and_delete(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    assert_int_equal(CHAT_INT("queue_version", chat), 0);

    int64_t q = s_enqueue(chat);
    int64_t ins = CHAT_INT("snapshot_version", chat);
    assert_int_equal(CHAT_INT("queue_version", chat), ins);

    char mc[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(mc), 0);
    s_exec("INSERT INTO model_configs (id, name, provider, model) VALUES ('%s', 'mc-%s',"
           " 'fake', 'fake-1')",
           mc, mc);
    const char *tracked[] = {
        "content = '[{\"type\":\"text\",\"text\":\"changed\"}]'",
        "position = position + 1000",
        NULL, /* model_config_id, filled below */
        "created_by = gen_random_uuid()",
    };
    char *mc_set = mem_printf("model_config_id = '%s'", mc);
    tracked[2] = mc_set;
    for (size_t i = 0; i < sizeof tracked / sizeof tracked[0]; i++) {
        int64_t snap = s_bundle(chat, "UPDATE chat_queued_messages SET %s WHERE id = %lld",
                                tracked[i], (long long)q);
        if (CHAT_INT("queue_version", chat) != snap) {
            fail_msg("update of %s did not set queue_version to %lld", tracked[i], (long long)snap);
        }
    }
    free(mc_set);

    /* Untracked columns leave queue_version where it was. */
    int64_t before = CHAT_INT("queue_version", chat);
    int64_t snap = s_bundle(chat,
                            "UPDATE chat_queued_messages SET response_format = '{\"type\":"
                            "\"json\"}', structured_output_request_id = gen_random_uuid(),"
                            " created_at = now() - interval '1 hour' WHERE id = %lld",
                            (long long)q);
    assert_true(snap > before);
    assert_int_equal(CHAT_INT("queue_version", chat), before);

    /* Non-queue work leaves it alone too. */
    s_insert_message(chat);
    assert_int_equal(CHAT_INT("queue_version", chat), before);

    int64_t del = s_bundle(chat, "DELETE FROM chat_queued_messages WHERE id = %lld", (long long)q);
    assert_int_equal(CHAT_INT("queue_version", chat), del);
}

/* --- Retry state version. --- */

static void test_retry_state_version_follows_recorded_retry_state(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    assert_int_equal(CHAT_INT("retry_state_version", chat), 0);
    int64_t snap =
        s_bundle(chat, "UPDATE chats SET retry_state = '{\"attempt\":1}' WHERE id = '%s'", chat);
    assert_int_equal(CHAT_INT("retry_state_version", chat), snap);
    assert_false(s_is_null("SELECT retry_state FROM chats WHERE id = '%s'", chat));

    /* Writing the same value again is not a change. */
    s_bundle(chat, "UPDATE chats SET retry_state = '{\"attempt\":1}' WHERE id = '%s'", chat);
    assert_int_equal(CHAT_INT("retry_state_version", chat), snap);
}

static void test_generation_attempt_change_clears_retry_state(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    s_bundle(chat, "UPDATE chats SET retry_state = '{\"attempt\":1}' WHERE id = '%s'", chat);
    int64_t snap = s_bundle(
        chat, "UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = '%s'", chat);
    assert_true(s_is_null("SELECT retry_state FROM chats WHERE id = '%s'", chat));
    assert_int_equal(CHAT_INT("retry_state_version", chat), snap);

    /* Already clear: a further attempt change is no retry-state change. */
    s_bundle(chat, "UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = '%s'",
             chat);
    assert_int_equal(CHAT_INT("retry_state_version", chat), snap);

    /* A history change resets a non-zero attempt, which clears the retry state with it. */
    s_bundle(chat, "UPDATE chats SET retry_state = '{\"attempt\":2}' WHERE id = '%s'", chat);
    assert_true(CHAT_INT("generation_attempt", chat) > 0);
    assert_false(s_is_null("SELECT retry_state FROM chats WHERE id = '%s'", chat));
    s_insert_message(chat);
    int64_t hist = CHAT_INT("snapshot_version", chat);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 0);
    assert_true(s_is_null("SELECT retry_state FROM chats WHERE id = '%s'", chat));
    assert_int_equal(CHAT_INT("retry_state_version", chat), hist);
}

static void test_leaving_running_clears_retry_state(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    s_bundle(chat, "UPDATE chats SET retry_state = '{\"attempt\":1}' WHERE id = '%s'", chat);

    /* Staying in running keeps it. */
    int64_t kept = CHAT_INT("retry_state_version", chat);
    s_bundle(chat, "UPDATE chats SET status = 'running' WHERE id = '%s'", chat);
    assert_false(s_is_null("SELECT retry_state FROM chats WHERE id = '%s'", chat));
    assert_int_equal(CHAT_INT("retry_state_version", chat), kept);

    const char *leave[] = {"interrupting", "requires_action", "error", "waiting"};
    for (size_t i = 0; i < sizeof leave / sizeof leave[0]; i++) {
        s_bundle(chat, "UPDATE chats SET status = 'running' WHERE id = '%s'", chat);
        s_bundle(chat, "UPDATE chats SET retry_state = '{\"attempt\":%zu}' WHERE id = '%s'", i + 2,
                 chat);
        int64_t snap =
            s_bundle(chat, "UPDATE chats SET status = '%s' WHERE id = '%s'", leave[i], chat);
        if (!s_is_null("SELECT retry_state FROM chats WHERE id = '%s'", chat)) {
            fail_msg("retry_state survived running -> %s", leave[i]);
        }
        assert_int_equal(CHAT_INT("retry_state_version", chat), snap);
    }
}

/* --- Direct writes of trigger-owned columns. --- */

static void test_direct_writes_of_revision_and_retry_state_version_are_rejected(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    int64_t id = s_insert_message(chat);
    int64_t revision = MSG_REVISION(id);
    int64_t count = s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);

    s_bundle_rejected(chat, SQLSTATE_RAISE_EXCEPTION, "revision must be assigned by trigger",
                      "INSERT INTO chat_messages (chat_id, role, content, revision)"
                      " VALUES ('%s', 'user', '[]', 42)",
                      chat);
    s_bundle_rejected(chat, SQLSTATE_RAISE_EXCEPTION, "revision must be assigned by trigger",
                      "UPDATE chat_messages SET revision = revision + 1 WHERE id = %lld",
                      (long long)id);
    s_bundle_rejected(chat, SQLSTATE_RAISE_EXCEPTION, "revision must be assigned by trigger",
                      "UPDATE chat_messages SET revision = 1000, content = '[]' WHERE id = %lld",
                      (long long)id);
    s_bundle_rejected(chat, SQLSTATE_RAISE_EXCEPTION,
                      "retry_state_version must be assigned by trigger",
                      "UPDATE chats SET retry_state_version = 99 WHERE id = '%s'", chat);

    assert_int_equal(MSG_REVISION(id), revision);
    assert_int_equal(s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat), count);
    assert_int_equal(CHAT_INT("retry_state_version", chat), 0);
}

/* --- The structured-output receipt exemption and the one-receipt index. --- */

#define RECEIPT_META "'{\"type\":\"structured-output-outcome\",\"outcome\":\"completed\"}'"

static void test_receipt_insert_gets_revision_but_keeps_history_version_and_attempt(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    s_insert_message(chat);
    s_bundle(chat, "UPDATE chats SET generation_attempt = 2 WHERE id = '%s'", chat);
    int64_t history = CHAT_INT("history_version", chat);

    s_exec("BEGIN");
    int64_t snap = s_int("UPDATE chats SET snapshot_version = snapshot_version + 1"
                         " WHERE id = '%s' RETURNING snapshot_version",
                         chat);
    int64_t id =
        s_int("INSERT INTO chat_messages (chat_id, role, visibility, content,"
              " structured_output_request_id, structured_output) VALUES ('%s',"
              " 'assistant', 'user', '[]', gen_random_uuid(), " RECEIPT_META ") RETURNING id",
              chat);
    s_exec("COMMIT");

    assert_int_equal(MSG_REVISION(id), snap);
    assert_true(snap > history);
    assert_int_equal(CHAT_INT("history_version", chat), history);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 2);
}

static void test_receipt_in_mixed_insert_batch_advances_history_version(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    s_insert_message(chat);
    s_bundle(chat, "UPDATE chats SET generation_attempt = 2 WHERE id = '%s'", chat);

    int64_t snap = s_bundle(chat,
                            "INSERT INTO chat_messages (chat_id, role, visibility, content,"
                            " structured_output_request_id, structured_output) VALUES"
                            " ('%s', 'assistant', 'user', '[]', gen_random_uuid(), " RECEIPT_META
                            "), ('%s', 'assistant', 'both', '[]', NULL, NULL)",
                            chat, chat);
    assert_int_equal(CHAT_INT("history_version", chat), snap);
    assert_int_equal(CHAT_INT("generation_attempt", chat), 0);
    assert_int_equal(s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                           " AND revision = %lld",
                           chat, (long long)snap),
                     2);
}

static void test_outcome_discriminator_with_other_role_or_visibility_is_not_exempt(void **state) {
    (void)state;
    const char *shapes[][2] = {
        {"assistant", "both"}, {"assistant", "model"}, {"tool", "user"}, {"user", "user"}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char chat[ID_UUID_LEN + 1];
        s_new_chat(chat, "running");
        s_insert_message(chat);
        s_bundle(chat, "UPDATE chats SET generation_attempt = 2 WHERE id = '%s'", chat);
        int64_t snap = s_bundle(chat,
                                "INSERT INTO chat_messages (chat_id, role, visibility, content,"
                                " structured_output_request_id, structured_output) VALUES"
                                " ('%s', '%s', '%s', '[]', gen_random_uuid(), " RECEIPT_META ")",
                                chat, shapes[i][0], shapes[i][1]);
        if (CHAT_INT("history_version", chat) != snap ||
            CHAT_INT("generation_attempt", chat) != 0) {
            fail_msg("role %s visibility %s with the outcome discriminator was exempted",
                     shapes[i][0], shapes[i][1]);
        }
    }
}

static void test_second_receipt_for_same_request_is_rejected(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    s_new_chat(chat, "running");
    char req[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(req), 0);

    /* The structured user message carries the same request id: not a receipt, no conflict. */
    s_bundle(chat,
             "INSERT INTO chat_messages (chat_id, role, content, structured_output_request_id,"
             " structured_output) VALUES ('%s', 'user', '[]', '%s',"
             " '{\"type\":\"structured-output-request\"}')",
             chat, req);
    s_bundle(chat,
             "INSERT INTO chat_messages (chat_id, role, visibility, content,"
             " structured_output_request_id, structured_output) VALUES ('%s', 'assistant',"
             " 'user', '[]', '%s', " RECEIPT_META ")",
             chat, req);
    int64_t count = s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);
    int64_t snap = CHAT_INT("snapshot_version", chat);

    s_bundle_rejected(chat, SQLSTATE_UNIQUE_VIOLATION, "chat_messages_one_receipt",
                      "INSERT INTO chat_messages (chat_id, role, visibility, content,"
                      " structured_output_request_id, structured_output) VALUES ('%s',"
                      " 'assistant', 'user', '[]', '%s',"
                      " '{\"type\":\"structured-output-outcome\",\"outcome\":\"failed\"}')",
                      chat, req);

    /* Also from a different chat: one receipt per request, ever. */
    char other[ID_UUID_LEN + 1];
    s_new_chat(other, "running");
    s_bundle_rejected(other, SQLSTATE_UNIQUE_VIOLATION, "chat_messages_one_receipt",
                      "INSERT INTO chat_messages (chat_id, role, visibility, content,"
                      " structured_output_request_id, structured_output) VALUES ('%s',"
                      " 'assistant', 'user', '[]', '%s', " RECEIPT_META ")",
                      other, req);

    assert_int_equal(s_int("SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat), count);
    assert_int_equal(CHAT_INT("snapshot_version", chat), snap);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_sets_revision_and_history_version_to_bundle_snapshot),
        cmocka_unit_test(test_meaningful_update_sets_revision_and_history_version),
        cmocka_unit_test(test_insert_and_meaningful_update_reset_generation_attempt),
        cmocka_unit_test(test_noop_update_keeps_revision_history_version_and_generation_attempt),
        cmocka_unit_test(test_queue_version_follows_insert_tracked_updates_and_delete),
        cmocka_unit_test(test_retry_state_version_follows_recorded_retry_state),
        cmocka_unit_test(test_generation_attempt_change_clears_retry_state),
        cmocka_unit_test(test_leaving_running_clears_retry_state),
        cmocka_unit_test(test_direct_writes_of_revision_and_retry_state_version_are_rejected),
        cmocka_unit_test(test_receipt_insert_gets_revision_but_keeps_history_version_and_attempt),
        cmocka_unit_test(test_receipt_in_mixed_insert_batch_advances_history_version),
        cmocka_unit_test(test_outcome_discriminator_with_other_role_or_visibility_is_not_exempt),
        cmocka_unit_test(test_second_receipt_for_same_request_is_rejected),
    };
    return cmocka_run_group_tests_name("chatstate_triggers", tests, s_group_setup,
                                       s_group_teardown);
}
