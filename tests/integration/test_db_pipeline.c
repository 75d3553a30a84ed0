/*
 * Statements sent ahead (common/chat/db.h db_send, ARCHITECTURE.md §4.4) on a real PostgreSQL:
 * they run in order in one round trip with the next read, a failure among them is that read's
 * failure and stops the rest, a failed first prepare is prepared again, a lost connection is
 * reported as one, a chat's create bundle takes two round trips, a turn-ending reply four and
 * a step's reads (worker/turn/history.h) one, a step's bundle started ahead three (its reads
 * riding with the start; a missing chat or a failed start is the first move's failure), a
 * turn-ending reply started ahead three (the start's row checked first: a stale fence, a
 * missing chat, a reply refused before it was sent, each as without it), a title carried into
 * such a landing four (its writes riding with the start instead), an
 * acquisition three, and each chat of an
 * acquisition pass one; a write that returns the row spares its move the load (a turn-ending
 * reply runs seven statements, a generation attempt five), and a released turn end with a
 * message queued promotes it and keeps the chat owned.
 * Round trips are counted from libpq's own protocol trace: every Sync or simple Query the client
 * sends is one wait for the server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "db.h"
#include "history.h"
#include "id.h"
#include "mem.h"
#include "testdb.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A user message's content: the text "hi". */
#define S_HI "[{\"type\":\"text\",\"text\":\"hi\"}]"

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

/* Starts counting the round trips conn makes (its protocol trace into a temporary file). */
static FILE *s_trace_start(PGconn *conn) {
    FILE *f = tmpfile();
    assert_non_null(f);
    PQtrace(conn, f);
    PQsetTraceFlags(conn, PQTRACE_SUPPRESS_TIMESTAMPS);
    return f;
}

#define S_TRACE_LINES_MAX 10000      /* far more than any one bundle's protocol messages */
#define S_TRACE_BYTES_MAX (8L << 20) /* bounds what a line read may allocate */

/* The statements the last traced stretch ran: the Execute and Query messages the client sent. */
static int s_statements;

/* Stops the trace; the number of Sync and Query messages the client sent (s_statements: its
 * statements). */
static int s_trace_round_trips(PGconn *conn, FILE *f) {
    PQuntrace(conn);
    assert_int_equal(fflush(f), 0);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size >= 0 && size < S_TRACE_BYTES_MAX);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    int lines = 0;
    s_statements = 0;
    /* A whole line each, however long its statement. */
    while (lines < S_TRACE_LINES_MAX && getline(&line, &cap, f) >= 0) {
        lines++;
        if (line[0] == 'F' && (strstr(line, "\tSync") || strstr(line, "\tQuery\t"))) {
            n++;
        }
        if (line[0] == 'F' && (strstr(line, "\tExecute\t") || strstr(line, "\tQuery\t"))) {
            s_statements++;
        }
    }
    assert_true(lines < S_TRACE_LINES_MAX);
    assert_int_equal(ferror(f), 0);
    free(line);
    assert_int_equal(fclose(f), 0);
    return n;
}

static void s_must(const char *sql) {
    char err[256];
    if (testdb_try(s_conn, sql, err, sizeof err) != 0) {
        fail_msg("%s: %s", sql, err);
    }
}

/* Fails the test unless the first value of the query (printf-style) is want. */
static void s_expect(const char *want, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_expect(const char *want, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char *got = testdb_scalar(s_conn, sql);
    if (!got || strcmp(got, want) != 0) {
        fail_msg("%s: want %s, got %s", sql, want, got ? got : "(no row or a failed query)");
    }
    free(got);
    free(sql);
}

typedef struct {
    int values[8];
    int count;
} seen_t;

static void s_record(void *ctx, const PGresult *res) {
    seen_t *seen = ctx;
    assert_true(seen->count < 8);
    assert_int_equal(PQntuples(res), 1);
    const char *text = PQgetvalue(res, 0, 0);
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    assert_true(errno == 0 && end != text && *end == '\0' && v >= INT_MIN && v <= INT_MAX);
    seen->values[seen->count++] = (int)v;
}

static void test_statements_sent_ahead_run_in_order_in_one_round_trip(void **state) {
    (void)state;
    s_must("CREATE TABLE ahead_rows (n int)");
    seen_t seen = {0};
    FILE *trace = s_trace_start(s_conn);
    const char *one[] = {"1"};
    const char *two[] = {"2"};
    const char *three[] = {"3"};
    assert_int_equal(db_send(s_conn, "INSERT INTO ahead_rows VALUES ($1::int) RETURNING n", 1, one,
                             s_record, &seen),
                     0);
    assert_int_equal(db_send(s_conn, "INSERT INTO ahead_rows VALUES ($1::int) RETURNING n", 1, two,
                             s_record, &seen),
                     0);
    assert_int_equal(db_send(s_conn, "INSERT INTO ahead_rows VALUES ($1::int) RETURNING n", 1,
                             three, s_record, &seen),
                     0);
    assert_int_equal(seen.count, 0); /* nothing is read before the next read */
    db_err_t e;
    PGresult *res = db_query(s_conn, &e, NULL, 0,
                             "SELECT string_agg(n::text, ',' ORDER BY n) FROM ahead_rows", 0, NULL);
    assert_int_equal(s_trace_round_trips(s_conn, trace), 1);
    assert_non_null(res);
    assert_string_equal(PQgetvalue(res, 0, 0), "1,2,3");
    PQclear(res);
    assert_int_equal(seen.count, 3);
    assert_int_equal(seen.values[0], 1);
    assert_int_equal(seen.values[1], 2);
    assert_int_equal(seen.values[2], 3);
    assert_int_equal(PQpipelineStatus(s_conn), PQ_PIPELINE_OFF);
}

static void test_a_failure_sent_ahead_is_the_next_reads_and_stops_the_rest(void **state) {
    (void)state;
    s_must("CREATE TABLE ahead_stop (n int)");
    seen_t seen = {0};
    assert_int_equal(db_send(s_conn, "BEGIN", 0, NULL, NULL, NULL), 0);
    assert_int_equal(db_send(s_conn, "SELECT 1 / 0", 0, NULL, NULL, NULL), 0);
    assert_int_equal(
        db_send(s_conn, "INSERT INTO ahead_stop VALUES (7) RETURNING n", 0, NULL, s_record, &seen),
        0);
    db_err_t e;
    char msg[200];
    PGresult *res = db_query(s_conn, &e, msg, sizeof msg, "SELECT 42", 0, NULL);
    assert_null(res);
    assert_int_equal(e, DB_ERR_QUERY);
    assert_non_null(strstr(msg, "division by zero"));
    assert_int_equal(seen.count, 0); /* the insert after the failure never ran */
    assert_int_equal(PQtransactionStatus(s_conn), PQTRANS_INERROR);
    s_must("ROLLBACK");
    s_expect("0", "SELECT count(*) FROM ahead_stop");
    /* db_flush reports a failure the same way, and nothing queued is DB_OK. */
    assert_int_equal(db_send(s_conn, "SELECT 1 / 0", 0, NULL, NULL, NULL), 0);
    assert_int_equal(db_flush(s_conn, msg, sizeof msg), DB_ERR_QUERY);
    assert_non_null(strstr(msg, "division by zero"));
    assert_int_equal(db_flush(s_conn, msg, sizeof msg), DB_OK);
}

static void test_a_failed_first_prepare_is_prepared_again(void **state) {
    (void)state;
    const char *sql = "SELECT count(*) FROM ahead_later";
    assert_int_equal(db_send(s_conn, sql, 0, NULL, NULL, NULL), 0);
    char msg[200];
    assert_int_equal(db_flush(s_conn, msg, sizeof msg), DB_ERR_QUERY);
    assert_non_null(strstr(msg, "ahead_later"));
    s_must("CREATE TABLE ahead_later (n int)");
    /* Had the failed prepare been remembered, this would run a statement that is not there. */
    db_err_t e;
    PGresult *res = db_query(s_conn, &e, msg, sizeof msg, sql, 0, NULL);
    if (!res) {
        fail_msg("%s", msg);
    }
    assert_string_equal(PQgetvalue(res, 0, 0), "0");
    PQclear(res);
}

static void test_a_connection_lost_with_statements_waiting_is_a_connection_error(void **state) {
    (void)state;
    PGconn *victim = testdb_connect(s_db);
    char *pid = testdb_scalar(victim, "SELECT pg_backend_pid()");
    assert_non_null(pid);
    assert_int_equal(db_send(victim, "SELECT 1", 0, NULL, NULL, NULL), 0);
    char *kill = mem_printf("SELECT pg_terminate_backend(%s)", pid);
    s_must(kill);
    free(kill);
    free(pid);
    db_err_t e;
    /* The terminated backend may still take the messages; either way nothing succeeds. */
    PGresult *res = db_query(victim, &e, NULL, 0, "SELECT 2", 0, NULL);
    assert_null(res);
    assert_int_equal(e, DB_ERR_CONNECTION);
    PQreset(victim);
    assert_int_equal(PQstatus(victim), CONNECTION_OK);
    res = db_query(victim, &e, NULL, 0, "SELECT 3", 0, NULL);
    assert_non_null(res);
    assert_string_equal(PQgetvalue(res, 0, 0), "3");
    PQclear(res);
    PQfinish(victim);
}

/* A primary demoted under a session (a failover) answers writes as a standby does: the
 * connection must be given up, not kept for the next statement. */
static void test_a_write_refused_as_read_only_makes_the_connection_unusable(void **state) {
    (void)state;
    PGconn *conn = testdb_connect(s_db);
    assert_true(db_usable(conn));
    db_err_t e = db_exec(conn, NULL, 0, "SET default_transaction_read_only = on", 0, NULL);
    assert_int_equal(e, DB_OK);
    e = db_exec(conn, NULL, 0, "CREATE TEMP TABLE ro_probe (x int)", 0, NULL);
    assert_int_equal(e, DB_ERR_CONNECTION);
    assert_int_equal(PQstatus(conn), CONNECTION_OK); /* libpq still has the session */
    assert_false(db_usable(conn));
    PQreset(conn); /* a new session: usable again, the setting gone */
    assert_true(db_usable(conn));
    assert_int_equal(db_exec(conn, NULL, 0, "CREATE TEMP TABLE ro_probe (x int)", 0, NULL), DB_OK);
    PQfinish(conn);
}

static void test_a_chat_create_takes_two_round_trips(void **state) {
    (void)state;
    cs_message_t first = {.role = "user", .content = S_HI};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    cs_error_t err;
    char chat[ID_UUID_LEN + 1];
    FILE *trace = s_trace_start(s_conn);
    int rc = chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err);
    int trips = s_trace_round_trips(s_conn, trace);
    if (rc != 0) {
        fail_msg("create: %s", err.message);
    }
    /* BEGIN, the chat row, the message and the check of the result; COMMIT. */
    assert_int_equal(trips, 2);
    s_expect("1 1",
             "SELECT count(*) || ' ' || max(history_version) FROM chat_messages m"
             " JOIN chats c ON c.id = m.chat_id WHERE c.id = '%s'",
             chat);
}

/* A create under a taken id is refused as a conflict, and the chat that holds the id keeps its
 * messages and versions: the create's messages, sent ahead before the refusal was known, went
 * nowhere (ARCHITECTURE.md §4.4). */
static void test_a_create_under_a_taken_id_changes_nothing(void **state) {
    (void)state;
    cs_message_t first = {.role = "user", .content = S_HI};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    cs_error_t err;
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    cs_message_t again[2] = {first, first};
    cs_create_t dup = {.chat_id = chat,
                       .owner_id = s_owner,
                       .system_prompt = "be brief",
                       .messages = again,
                       .message_count = 2};
    char out[ID_UUID_LEN + 1];
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &dup, NULL, out, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    assert_non_null(strstr(err.message, "already exists"));
    assert_int_equal(PQtransactionStatus(s_conn), PQTRANS_IDLE);
    s_expect("1 1 1",
             "SELECT count(*) || ' ' || max(c.snapshot_version) || ' ' || max(c.history_version)"
             " FROM chat_messages m JOIN chats c ON c.id = m.chat_id WHERE c.id = '%s'",
             chat);
}

/* A new chat with one user message, into chat. */
static void s_new_chat(char chat[ID_UUID_LEN + 1]) {
    cs_message_t first = {.role = "user", .content = S_HI};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    cs_error_t err;
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
}

/* A new chat with the message "hi", acquired by a worker of its own: its id into chat, the
 * owner's fence (status running, any version) into *f. */
static void s_acquired_chat(char chat[ID_UUID_LEN + 1], cs_fence_t *f) {
    char worker[ID_UUID_LEN + 1];
    char runner[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(worker), 0);
    assert_int_equal(id_uuid_new(runner), 0);
    s_new_chat(chat);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_acquire(cs, worker, runner, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    *f = (cs_fence_t){.status = "running", .history_version = -1, .generation_attempt = -1};
    snprintf(f->worker_id, sizeof f->worker_id, "%s", worker);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", runner);
}

/* The moves of one bundle on chat, under fence f: 0 or -1 with err filled. */
typedef int s_moves_fn(chatstate_t *cs, const cs_fence_t *f, void *ctx, cs_error_t *err);

/* How a bundle starts: chatstate_begin or chatstate_begin_ahead. */
typedef chatstate_t *s_begin_fn(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                                cs_error_t *err);

/* The round trips of a bundle on chat, started by begin, that runs moves and commits (fails
 * the test when the bundle fails). */
static int s_trips(s_begin_fn *begin, const char *chat, const cs_fence_t *f, s_moves_fn *moves,
                   void *ctx) {
    cs_error_t err;
    FILE *trace = s_trace_start(s_conn);
    chatstate_t *cs = begin(s_conn, &chatsetup_settings, chat, &err);
    int rc = cs ? moves(cs, f, ctx, &err) : -1;
    rc = rc == 0 ? chatstate_commit(&cs, NULL, NULL, &err) : rc;
    int trips = s_trace_round_trips(s_conn, trace);
    chatstate_destroy(&cs);
    if (rc != 0) {
        fail_msg("bundle: %s", err.message);
    }
    return trips;
}

/* s_trips of a bundle begun with chatstate_begin. */
static int s_bundle_trips(const char *chat, const cs_fence_t *f, s_moves_fn *moves, void *ctx) {
    return s_trips(chatstate_begin, chat, f, moves, ctx);
}

/* Fails the test unless chat's turn ended: waiting, let go, its two messages, no lease. */
static void s_expect_turn_ended(const char *chat) {
    s_expect("waiting true 2 0",
             "SELECT status || ' ' || (worker_id IS NULL AND runner_id IS NULL) || ' ' ||"
             " (SELECT count(*) FROM chat_messages WHERE chat_id = c.id) || ' ' ||"
             " (SELECT count(*) FROM chat_heartbeats WHERE chat_id = c.id)"
             " FROM chats c WHERE id = '%s'",
             chat);
}

/* The owner's SetTitle on chat, in a bundle of its own. */
static void s_user_title(const char *chat, const char *title) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_set_title(cs, title, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
}

static int s_turn_end(chatstate_t *cs, const cs_fence_t *f, void *ctx, cs_error_t *err) {
    (void)ctx;
    cs_message_t reply = {.role = "assistant",
                          .content = "[{\"type\":\"text\",\"text\":\"hello\"}]"};
    if (chatstate_commit_step(cs, f, &reply, 1, err) != 0) {
        return -1;
    }
    return chatstate_finish_turn_release(cs, f, err);
}

static int s_attempt(chatstate_t *cs, const cs_fence_t *f, void *ctx, cs_error_t *err) {
    return chatstate_record_generation_attempt(cs, f, ctx, err);
}

static int s_title(chatstate_t *cs, const cs_fence_t *f, void *ctx, cs_error_t *err) {
    return chatstate_set_generated_title(cs, f, "Greeting", ctx, err);
}

/* The worker's bundle for a reply that ends a turn (stepbundle.c): CommitStep, then FinishTurn
 * released (Abandon in the landing's statement) in one transaction. */
static void test_a_turn_ending_reply_takes_four_round_trips(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    int trips = s_bundle_trips(chat, &f, s_turn_end, NULL);
    /* BEGIN with the load; the reply with the check; the landing, returning the row; COMMIT. */
    assert_int_equal(trips, 4);
    /* BEGIN, the bump, the load, the reply, its check's load, the landing, COMMIT. */
    assert_int_equal(s_statements, 7);
    s_expect_turn_ended(chat);
}

/* Released with a message queued, the turn promotes it: the chat runs on, still owned, with
 * its lease. */
static void test_a_released_turn_end_with_a_queue_keeps_the_chat(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    cs_message_t m = {.role = "user", .content = S_HI, .created_by = s_owner};
    int64_t mid = 0;
    int64_t qid = 0;
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    assert_true(qid > 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    s_bundle_trips(chat, &f, s_turn_end, NULL);
    s_expect("running false 3 1 0",
             "SELECT status || ' ' || (worker_id IS NULL) || ' ' ||"
             " (SELECT count(*) FROM chat_messages WHERE chat_id = c.id) || ' ' ||"
             " (SELECT count(*) FROM chat_heartbeats WHERE chat_id = c.id) || ' ' ||"
             " (SELECT count(*) FROM chat_queued_messages WHERE chat_id = c.id)"
             " FROM chats c WHERE id = '%s'",
             chat);
}

/* RecordGenerationAttempt, the bundle before every model call: BEGIN with the load; the
 * update with the closing load, which reads the new count; COMMIT. */
static void test_a_generation_attempt_takes_three_round_trips(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    int64_t attempt = -1;
    int trips = s_bundle_trips(chat, &f, s_attempt, &attempt);
    assert_int_equal(trips, 3);
    assert_int_equal(s_statements, 5); /* BEGIN, bump, load, the update returning the row, COMMIT */
    assert_int_equal(attempt, 1);
    s_expect("1", "SELECT generation_attempt FROM chats WHERE id = '%s'", chat);
}

/* SetTitle from the title call: BEGIN with the load; the write (sent ahead with its commit
 * setting) with the closing load; COMMIT. A user's title is never replaced. */
static void test_a_generated_title_takes_three_round_trips(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    bool applied = false;
    int trips = s_bundle_trips(chat, &f, s_title, &applied);
    assert_int_equal(trips, 3);
    assert_true(applied);
    s_expect("Greeting generated", "SELECT title || ' ' || title_source FROM chats WHERE id = '%s'",
             chat);
    s_user_title(chat, "Mine");
    assert_int_equal(s_bundle_trips(chat, &f, s_title, &applied), 3);
    assert_false(applied);
    s_expect("Mine user", "SELECT title || ' ' || title_source FROM chats WHERE id = '%s'", chat);
}

static int s_title_outcome(chatstate_t *cs, const cs_fence_t *f, void *ctx, cs_error_t *err) {
    cs_title_outcome_t o = {.title = "Greeting", .usage = "{\"input_tokens\":3}"};
    return chatstate_title_outcome(cs, f, &o, ctx, err);
}

/* A title call's outcome (title and usage): BEGIN with the load; the usage and the title's
 * write, which returns the row the closing load needs; COMMIT. Over a user title the write
 * returns nothing, and the row is loaded. */
static void test_a_title_outcome_returns_the_row_it_writes(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    bool applied = false;
    assert_int_equal(s_bundle_trips(chat, &f, s_title_outcome, &applied), 3);
    assert_int_equal(s_statements, 6); /* BEGIN, bump, load, usage, title, COMMIT */
    assert_true(applied);
    s_expect("Greeting generated 1",
             "SELECT title || ' ' || title_source || ' ' || (SELECT count(*) FROM chat_usage u"
             " WHERE u.chat_id = c.id) FROM chats c WHERE id = '%s'",
             chat);
    s_user_title(chat, "Mine");
    /* The refused write's result read, then the load: one round trip more. */
    assert_int_equal(s_bundle_trips(chat, &f, s_title_outcome, &applied), 4);
    assert_int_equal(s_statements, 7);
    assert_false(applied);
    s_expect("Mine user 2",
             "SELECT title || ' ' || title_source || ' ' || (SELECT count(*) FROM chat_usage u"
             " WHERE u.chat_id = c.id) FROM chats c WHERE id = '%s'",
             chat);
}

static void test_a_steps_reads_take_one_round_trip(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    cs_error_t err;
    chatstate_t *cs;
    /* The step's bundle holds the row lock; its reads (row, model, history, request, summary,
     * the compaction override and the title model by name) go together. */
    cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    compaction_config_t cc = {.model = "no-such-model", .default_threshold = 80};
    history_t h;
    FILE *trace = s_trace_start(s_conn);
    history_rc_t hr = history_read_locked(s_conn, chat, &f, &cc, "no-such-title-model", &h);
    int trips = s_trace_round_trips(s_conn, trace);
    assert_int_equal(hr, HISTORY_OK);
    assert_int_equal(trips, 1);
    assert_int_equal(json_array_size(h.messages), 1);
    assert_true(h.title_fallback);
    assert_null(h.summarizer);
    assert_string_equal(h.request_id, "");
    history_clear(&h);
    /* A fence that no longer matches is seen in the same round trip. */
    f.history_version = 99;
    trace = s_trace_start(s_conn);
    hr = history_read_locked(s_conn, chat, &f, &cc, "", &h);
    assert_int_equal(s_trace_round_trips(s_conn, trace), 1);
    assert_int_equal(hr, HISTORY_FENCED);
    chatstate_destroy(&cs);
}

/* A step's bundle as the worker runs it (worker/env/taskctx.c): started ahead, so that the
 * step's reads go out behind the start in one round trip; then RecordGenerationAttempt, whose
 * update returns the row; COMMIT. */
static void test_a_step_started_ahead_takes_three_round_trips(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    cs_error_t err;
    FILE *trace = s_trace_start(s_conn);
    chatstate_t *cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    history_t h;
    assert_int_equal(history_read_locked(s_conn, chat, &f, NULL, "", &h), HISTORY_OK);
    int64_t attempt = -1;
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    assert_int_equal(s_trace_round_trips(s_conn, trace), 3);
    assert_int_equal(attempt, 1);
    /* The reads ran after the start took the lock: they saw the bumped row. */
    assert_int_equal(json_array_size(h.messages), 1);
    history_clear(&h);
    s_expect("1", "SELECT generation_attempt FROM chats WHERE id = '%s'", chat);

    /* A chat that does not exist is the first read's failure: the reads find no row, and the
     * bundle's first move reports it as not found. */
    char gone[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(gone), 0);
    cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, gone, &err);
    assert_non_null(cs);
    assert_int_equal(history_read_locked(s_conn, gone, &f, NULL, "", &h), HISTORY_NOT_FOUND);
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), -1);
    assert_int_equal(err.rc, CS_NOT_FOUND);
    chatstate_destroy(&cs);

    /* A start that fails (the lock's wait timed out) fails the reads sent behind it, and the
     * move reports the start's failure; nothing is written. */
    PGconn *holder = testdb_connect(s_db);
    assert_non_null(holder);
    char *lock = mem_printf("BEGIN; SELECT 1 FROM chats WHERE id = '%s' FOR UPDATE", chat);
    char why[256];
    assert_int_equal(testdb_try(holder, lock, why, sizeof why), 0);
    free(lock);
    s_must("SET lock_timeout = '50ms'");
    cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(history_read_locked(s_conn, chat, &f, NULL, "", &h), HISTORY_DB);
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), -1);
    assert_true(err.rc == CS_RETRY || err.rc == CS_DB);
    chatstate_destroy(&cs);
    s_must("RESET lock_timeout");
    assert_int_equal(testdb_try(holder, "ROLLBACK", why, sizeof why), 0);
    PQfinish(holder);
    s_expect("1", "SELECT generation_attempt FROM chats WHERE id = '%s'", chat);
}

/* The turn-ending reply as the worker's landing bundle sends it: started ahead, the reply and
 * the load that checks it ride with the start; the landing returning the row; COMMIT. */
static void test_a_turn_ending_reply_started_ahead_takes_three_round_trips(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    assert_int_equal(s_trips(chatstate_begin_ahead, chat, &f, s_turn_end, NULL), 3);
    assert_int_equal(s_statements, 7); /* BEGIN, bump, load, reply, its load, landing, COMMIT */
    s_expect_turn_ended(chat);
}

/* The start's row decides a reply sent behind it: a fence that no longer holds, a chat that
 * does not exist, each as cs_start would say, with nothing written; a reply refused before it
 * was sent keeps its own reason. */
static void test_a_reply_sent_ahead_is_checked_against_the_start(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    cs_message_t reply = {.role = "assistant", .content = S_HI};
    cs_error_t err;
    cs_fence_t stale = f;
    assert_int_equal(id_uuid_new(stale.runner_id), 0);
    chatstate_t *cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_commit_step(cs, &stale, &reply, 1, &err), -1);
    assert_int_equal(err.rc, CS_FENCED);
    chatstate_destroy(&cs);
    s_expect("1", "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);

    char gone[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(gone), 0);
    cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, gone, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_commit_step(cs, &f, &reply, 1, &err), -1);
    assert_int_equal(err.rc, CS_NOT_FOUND);
    chatstate_destroy(&cs);

    cs_message_t bad_context = {.role = "user", .visibility = "both", .content = S_HI};
    cs_message_t with_context = {
        .role = "assistant", .content = S_HI, .context = &bad_context, .context_count = 1};
    cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_commit_step(cs, &f, &with_context, 1, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    chatstate_destroy(&cs);
    s_expect("1", "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);

    /* And one that holds lands. */
    cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_commit_step(cs, &f, &reply, 1, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    s_expect("2", "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);
}

/* A title call's outcome carried into the landing (worker/env/taskctx.c): started ahead, the
 * usage and the title ride with the start; the reply with its load; the landing; COMMIT. An
 * owner that is no longer the chat's writes none of it. */
static void test_a_title_carried_into_a_landing_started_ahead_takes_four_round_trips(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    cs_title_outcome_t o = {.title = "Greeting", .usage = "{\"input_tokens\":3}", .joined = true};
    cs_error_t err;
    bool applied = false;
    cs_fence_t stale = f;
    assert_int_equal(id_uuid_new(stale.runner_id), 0);
    chatstate_t *cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_title_outcome(cs, &stale, &o, &applied, &err), -1);
    assert_int_equal(err.rc, CS_FENCED);
    chatstate_destroy(&cs);
    s_expect("0", "SELECT count(*) FROM chat_usage WHERE chat_id = '%s'", chat);

    FILE *trace = s_trace_start(s_conn);
    cs = chatstate_begin_ahead(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_title_outcome(cs, &f, &o, &applied, &err), 0);
    assert_int_equal(s_turn_end(cs, &f, NULL, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    assert_int_equal(s_trace_round_trips(s_conn, trace), 4);
    assert_true(applied);
    s_expect("Greeting generated 1 waiting",
             "SELECT title || ' ' || title_source || ' ' || (SELECT count(*) FROM chat_usage u"
             " WHERE u.chat_id = c.id) || ' ' || status FROM chats c WHERE id = '%s'",
             chat);
}

/* Acquire (worker/lease/leasedb.c's bundle for one chat): the bundle's start, the owner update
 * with the heartbeat row's insert (and its slot, under the limiter) and the load, COMMIT. */
static void test_an_acquisition_takes_three_round_trips(void **state) {
    (void)state;
    char worker[ID_UUID_LEN + 1];
    char runner[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(worker), 0);
    for (int limited = 0; limited < 2; limited++) {
        cs_error_t err;
        char chat[ID_UUID_LEN + 1];
        s_new_chat(chat);
        assert_int_equal(id_uuid_new(runner), 0);
        int32_t candidates[] = {900001 + limited};
        bool vacant[] = {true};
        cs_slots_t slots = {.slots = candidates, .vacant = vacant, .count = 1};
        FILE *trace = s_trace_start(s_conn);
        chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
        int rc =
            cs ? chatstate_acquire_slot(cs, worker, runner, limited ? &slots : NULL, &err) : -1;
        rc = rc == 0 ? chatstate_commit(&cs, NULL, NULL, &err) : rc;
        int trips = s_trace_round_trips(s_conn, trace);
        chatstate_destroy(&cs);
        if (rc != 0) {
            fail_msg("acquire (limited %d): %s", limited, err.message);
        }
        assert_int_equal(trips, 3);
        assert_int_equal(slots.taken, limited ? candidates[0] : 0);
        char want[32];
        snprintf(want, sizeof want, "1 %d", limited ? (int)candidates[0] : 0);
        s_expect(want,
                 "SELECT count(*) || ' ' || coalesce(max(slot), 0) FROM chat_heartbeats"
                 " WHERE chat_id = '%s' AND runner_id = '%s'",
                 chat, runner);
    }
}

/* One chat of an acquisition pass (worker/lease/leasedb.c): nested, or alone (joined). */
static int s_acquire_in_pass(const char *chat, bool alone, const char *worker, cs_slots_t *slots,
                             cs_hints_t *hints, cs_error_t *err) {
    char runner[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(runner), 0);
    chatstate_t *cs = alone ? chatstate_join(s_conn, &chatsetup_settings, chat, err)
                            : chatstate_nest(s_conn, &chatsetup_settings, chat, err);
    int rc = cs ? chatstate_acquire_slot(cs, worker, runner, slots, err) : -1;
    if (rc == 0 && alone) {
        hint_update_t after;
        rc = chatstate_commit(&cs, NULL, &after, err);
        hints->update = after;
    } else if (rc == 0) {
        rc = chatstate_release(&cs, hints, err);
    }
    chatstate_destroy(&cs);
    return rc;
}

/* A batch's chats (ARCHITECTURE.md §6.2 step 4): each nested bundle's start, Acquire's writes
 * and the check go in one round trip, with the last chat's RELEASE; COMMIT is one more. A
 * pass with one chat is its round trip and COMMIT. Every chat's work commits. */
static void test_an_acquisition_pass_takes_one_round_trip_a_chat(void **state) {
    (void)state;
    enum { S_BATCH = 3 };
    char worker[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(worker), 0);
    char chats[S_BATCH + 1][ID_UUID_LEN + 1];
    for (int i = 0; i <= S_BATCH; i++) {
        s_new_chat(chats[i]);
    }
    int32_t candidates[] = {900021, 900022, 900023, 900024};
    bool vacant[] = {true, true, true, true};
    cs_slots_t slots = {.slots = candidates, .vacant = vacant, .count = S_BATCH};
    cs_error_t err;
    assert_int_equal(db_exec(s_conn, NULL, 0, "BEGIN", 0, NULL), DB_OK);
    FILE *trace = s_trace_start(s_conn);
    for (int i = 0; i < S_BATCH; i++) {
        cs_hints_t hints;
        if (s_acquire_in_pass(chats[i], false, worker, &slots, &hints, &err) != 0) {
            fail_msg("acquire %d: %s", i, err.message);
        }
        assert_string_equal(hints.update.worker_id, worker);
    }
    db_err_t e;
    PGresult *res = db_query(s_conn, &e, NULL, 0, "COMMIT", 0, NULL);
    assert_non_null(res);
    PQclear(res);
    assert_int_equal(s_trace_round_trips(s_conn, trace), S_BATCH + 1);
    assert_int_equal(PQtransactionStatus(s_conn), PQTRANS_IDLE);
    /* Alone: the chat's bundle joins the pass's transaction and commits it. */
    cs_slots_t last = {.slots = candidates + S_BATCH, .vacant = vacant, .count = 1};
    assert_int_equal(db_exec(s_conn, NULL, 0, "BEGIN", 0, NULL), DB_OK);
    trace = s_trace_start(s_conn);
    cs_hints_t hints;
    if (s_acquire_in_pass(chats[S_BATCH], true, worker, &last, &hints, &err) != 0) {
        fail_msg("acquire alone: %s", err.message);
    }
    assert_int_equal(s_trace_round_trips(s_conn, trace), 2);
    assert_int_equal(PQtransactionStatus(s_conn), PQTRANS_IDLE);
    assert_int_equal(hints.update.snapshot_version, 2);
    s_expect("4 4",
             "SELECT count(*) || ' ' || count(DISTINCT h.slot) FROM chat_heartbeats h"
             " JOIN chats c ON c.id = h.chat_id AND c.runner_id = h.runner_id"
             " WHERE c.worker_id = '%s' AND h.slot BETWEEN 900021 AND 900024",
             worker);
}

/* Acquire's writes go out before the row the bundle's start loaded is checked: a chat that may
 * not be acquired (not runnable, or gone) is refused after them, its savepoint undoes them, it
 * gives its candidate slot back, and the pass goes on with the next chat. */
static void test_a_chat_that_may_not_be_acquired_leaves_nothing_in_the_pass(void **state) {
    (void)state;
    char worker[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(worker), 0);
    char waiting[ID_UUID_LEN + 1];
    char next[ID_UUID_LEN + 1];
    char gone[ID_UUID_LEN + 1];
    s_new_chat(waiting);
    s_new_chat(next);
    assert_int_equal(id_uuid_new(gone), 0);
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE chats SET status = 'waiting' WHERE id = '%s'", waiting);
    s_must(sql);
    int32_t candidates[] = {900031};
    bool vacant[] = {true};
    cs_slots_t slots = {.slots = candidates, .vacant = vacant, .count = 1};
    cs_error_t err;
    cs_hints_t hints;
    assert_int_equal(db_exec(s_conn, NULL, 0, "BEGIN", 0, NULL), DB_OK);
    assert_int_equal(s_acquire_in_pass(waiting, false, worker, &slots, &hints, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    assert_non_null(strstr(err.message, "Acquire is not allowed"));
    assert_int_equal(slots.next, 0);
    assert_int_equal(s_acquire_in_pass(gone, false, worker, &slots, &hints, &err), -1);
    assert_int_equal(err.rc, CS_NOT_FOUND);
    assert_int_equal(slots.next, 0);
    assert_int_equal(PQtransactionStatus(s_conn), PQTRANS_INTRANS);
    if (s_acquire_in_pass(next, false, worker, &slots, &hints, &err) != 0) {
        fail_msg("acquire after the refusals: %s", err.message);
    }
    assert_int_equal(slots.taken, candidates[0]);
    assert_int_equal(db_exec(s_conn, NULL, 0, "COMMIT", 0, NULL), DB_OK);
    s_expect("waiting 1 0",
             "SELECT status || ' ' || snapshot_version || ' ' || (SELECT count(*)"
             " FROM chat_heartbeats WHERE chat_id = c.id) FROM chats c"
             " WHERE id = '%s' AND worker_id IS NULL",
             waiting);
    s_expect("1",
             "SELECT count(*) FROM chat_heartbeats h JOIN chats c ON c.id = h.chat_id"
             " AND c.runner_id = h.runner_id WHERE c.id = '%s' AND h.slot = 900031",
             next);
}

/* A chat held by a fresh lease is refused in the same round trip, and gives its candidate
 * slot back for the next chat of the batch. */
static void test_a_held_chat_is_refused_and_gives_its_candidate_back(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_fence_t f;
    s_acquired_chat(chat, &f);
    char worker[ID_UUID_LEN + 1];
    char runner[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(worker), 0);
    assert_int_equal(id_uuid_new(runner), 0);
    int32_t candidates[] = {900011, 900012};
    bool vacant[] = {true, true};
    cs_slots_t slots = {.slots = candidates, .vacant = vacant, .count = 2};
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_acquire_slot(cs, worker, runner, &slots, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    assert_non_null(strstr(err.message, "fresh lease"));
    assert_int_equal(slots.next, 0);
    assert_int_equal(slots.taken, 0);
    chatstate_destroy(&cs);
}

static int s_group_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    ASSERT(testdb_user_new(s_conn, "pipeline", s_owner) == 0);
    return 0;
}

static int s_group_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_statements_sent_ahead_run_in_order_in_one_round_trip),
        cmocka_unit_test(test_a_failure_sent_ahead_is_the_next_reads_and_stops_the_rest),
        cmocka_unit_test(test_a_failed_first_prepare_is_prepared_again),
        cmocka_unit_test(test_a_connection_lost_with_statements_waiting_is_a_connection_error),
        cmocka_unit_test(test_a_write_refused_as_read_only_makes_the_connection_unusable),
        cmocka_unit_test(test_a_chat_create_takes_two_round_trips),
        cmocka_unit_test(test_a_create_under_a_taken_id_changes_nothing),
        cmocka_unit_test(test_a_turn_ending_reply_takes_four_round_trips),
        cmocka_unit_test(test_a_released_turn_end_with_a_queue_keeps_the_chat),
        cmocka_unit_test(test_a_title_outcome_returns_the_row_it_writes),
        cmocka_unit_test(test_a_generation_attempt_takes_three_round_trips),
        cmocka_unit_test(test_a_generated_title_takes_three_round_trips),
        cmocka_unit_test(test_a_steps_reads_take_one_round_trip),
        cmocka_unit_test(test_a_step_started_ahead_takes_three_round_trips),
        cmocka_unit_test(test_a_turn_ending_reply_started_ahead_takes_three_round_trips),
        cmocka_unit_test(test_a_reply_sent_ahead_is_checked_against_the_start),
        cmocka_unit_test(test_a_title_carried_into_a_landing_started_ahead_takes_four_round_trips),
        cmocka_unit_test(test_an_acquisition_takes_three_round_trips),
        cmocka_unit_test(test_an_acquisition_pass_takes_one_round_trip_a_chat),
        cmocka_unit_test(test_a_chat_that_may_not_be_acquired_leaves_nothing_in_the_pass),
        cmocka_unit_test(test_a_held_chat_is_refused_and_gives_its_candidate_back),
    };
    return cmocka_run_group_tests_name("db_pipeline", tests, s_group_setup, s_group_teardown);
}
