/*
 * Worker fences (ARCHITECTURE.md §5.2, §6.1): a worker-side transition whose fence no longer
 * matches the chat row (another runner or worker, an older history_version or generation_attempt,
 * another status) is rejected with CS_FENCED and leaves the database exactly as it was. "Exactly"
 * is checked with a digest of the chat row (snapshot_version included), its messages, its queue and
 * its heartbeats, taken before the bundle and after it was committed or rolled back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chatstate.h"
#include "id.h"
#include "log.h"
#include "mem.h"
#include "testdb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USER_MSG "[{\"type\":\"text\",\"text\":\"hello\"}]"
#define STEP_MSG "[{\"type\":\"text\",\"text\":\"step\"}]"
#define TOOL_CALL_MSG                                                                              \
    "[{\"type\":\"tool-call\",\"tool_call_id\":\"dyn_1\",\"tool_name\":\"ask_user\",\"args\":{}}]"
#define LEASE_STALE_MS 2000
#define RA_DEADLINE_MS 60000

static const cs_settings_t s_settings = {.lease_stale_ms = LEASE_STALE_MS,
                                         .requires_action_deadline_ms = RA_DEADLINE_MS};
#define DIGEST_LEN 32

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

/* md5 of everything a transition may touch for this chat, in a stable order. */
static void s_digest(const char *chat, char out[DIGEST_LEN + 1]) {
    char *sql = mem_printf(
        "SELECT md5(coalesce((SELECT row_to_json(c)::text FROM chats c WHERE id = '%1$s'), '')"
        " || '|' || coalesce((SELECT string_agg(row_to_json(m)::text, ',' ORDER BY m.id)"
        " FROM chat_messages m WHERE chat_id = '%1$s'), '')"
        " || '|' || coalesce((SELECT string_agg(row_to_json(q)::text, ',' ORDER BY q.id)"
        " FROM chat_queued_messages q WHERE chat_id = '%1$s'), '')"
        " || '|' || coalesce((SELECT string_agg(row_to_json(h)::text, ',' ORDER BY h.runner_id)"
        " FROM chat_heartbeats h WHERE chat_id = '%1$s'), ''))",
        chat);
    char *md5 = testdb_scalar(s_conn, sql);
    assert_non_null(md5);
    assert_int_equal(strlen(md5), DIGEST_LEN);
    memcpy(out, md5, DIGEST_LEN + 1);
    free(md5);
    free(sql);
}

static int64_t s_snapshot(const char *chat) {
    char *sql = mem_printf("SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    char *text = testdb_scalar(s_conn, sql);
    assert_non_null(text);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    assert_true(errno == 0 && end != text && *end == '\0');
    free(text);
    free(sql);
    return (int64_t)v;
}

static void s_ok(int rc, const cs_error_t *err, const char *what) {
    if (rc != 0) {
        fail_msg("%s failed: rc=%d %s", what, err->rc, err->message);
    }
}

/* The fence a task would capture now, for (worker, runner). */
static void s_fence_now(const char *chat, const char *worker, const char *runner, cs_fence_t *f,
                        char status[32]) {
    char *sql = mem_printf("SELECT status || ' ' || history_version || ' ' || generation_attempt"
                           " FROM chats WHERE id = '%s'",
                           chat);
    char *row = testdb_scalar(s_conn, sql);
    assert_non_null(row);
    long long hv = 0;
    long long ga = 0;
    assert_int_equal(sscanf(row, "%31s %lld %lld", status, &hv, &ga), 3);
    memset(f, 0, sizeof *f);
    snprintf(f->worker_id, sizeof f->worker_id, "%s", worker);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", runner);
    f->status = status;
    f->history_version = hv;
    f->generation_attempt = ga;
    free(row);
    free(sql);
}

/* A chat with one user message, in R0, unowned. */
static void s_create(char chat[ID_UUID_LEN + 1]) {
    cs_message_t m = {.role = "user", .content = USER_MSG};
    cs_create_t c = {.owner_id = s_owner, .messages = &m, .message_count = 1};
    cs_error_t err;
    s_ok(chatstate_create(s_conn, &s_settings, &c, NULL, chat, &err), &err, "create");
}

static void s_acquire(const char *chat, const char *worker, const char *runner) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    s_ok(chatstate_acquire(cs, worker, runner, &err), &err, "acquire");
    s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, "commit acquire");
}

static void s_record_attempt(const char *chat, const char *worker, const char *runner) {
    cs_fence_t f;
    char status[32];
    s_fence_now(chat, worker, runner, &f, status);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    int64_t attempt = 0;
    s_ok(chatstate_record_generation_attempt(cs, &f, &attempt, &err), &err, "record attempt");
    s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, "commit attempt");
    assert_int_equal(attempt, f.generation_attempt + 1);
}

static void s_interrupt(const char *chat) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    s_ok(chatstate_interrupt(cs, "user", &err), &err, "interrupt");
    s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, "commit interrupt");
}

static void s_enter_requires_action(const char *chat, const char *worker, const char *runner) {
    cs_fence_t f;
    char status[32];
    s_fence_now(chat, worker, runner, &f, status);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    cs_message_t m = {.role = "assistant", .content = TOOL_CALL_MSG};
    s_ok(chatstate_commit_step(cs, &f, &m, 1, &err), &err, "tool step");
    f.history_version = -1; /* the step itself just moved history */
    f.generation_attempt = -1;
    s_ok(chatstate_enter_requires_action(cs, &f, &err), &err, "enter requires action");
    s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, "commit requires action");
}

static const char *s_state_of(const char *chat) {
    static char name[48];
    char *sql = mem_printf("SELECT status || CASE WHEN archived THEN '+archived' ELSE '' END"
                           " || '/' || (SELECT count(*) FROM chat_queued_messages q"
                           " WHERE q.chat_id = c.id) FROM chats c WHERE id = '%s'",
                           chat);
    char *s = testdb_scalar(s_conn, sql);
    assert_non_null(s);
    snprintf(name, sizeof name, "%s", s);
    free(s);
    free(sql);
    return name;
}

typedef enum { K_RUNNER = 0, K_WORKER, K_HISTORY, K_ATTEMPT, K_STATUS, K_COUNT } stale_t;

static const char *s_stale_names[K_COUNT] = {"runner_id", "worker_id", "history_version",
                                             "generation_attempt", "status"};

typedef enum {
    W_COMMIT_STEP = 0,
    W_RECORD_ATTEMPT,
    W_RECORD_RETRY,
    W_FINISH_TURN,
    W_ENTER_RA,
    W_FINISH_ERROR,
    W_ABANDON,
    W_FINISH_INTERRUPTION,
    W_CANCEL_RA,
    W_SET_GENERATED_TITLE,
    W_COUNT
} wmove_t;

typedef struct {
    const char *name;
    const char *state;        /* the chat state the move is valid from: R0, I0 or A0 */
    const char *wrong_status; /* a status the table would also accept the move from */
    bool owner_only;          /* Abandon checks only the owner half of the fence */
} wmove_info_t;

static const wmove_info_t s_moves[W_COUNT] = {
    [W_COMMIT_STEP] = {"CommitStep", "R0", "interrupting", false},
    [W_RECORD_ATTEMPT] = {"RecordGenerationAttempt", "R0", "requires_action", false},
    [W_RECORD_RETRY] = {"RecordRetryState", "R0", "waiting", false},
    [W_FINISH_TURN] = {"FinishTurn", "R0", "interrupting", false},
    [W_ENTER_RA] = {"EnterRequiresAction", "R0", "requires_action", false},
    [W_FINISH_ERROR] = {"FinishError", "R0", "error", false},
    [W_ABANDON] = {"Abandon", "R0", NULL, true},
    [W_FINISH_INTERRUPTION] = {"FinishInterruption", "I0", "running", false},
    [W_CANCEL_RA] = {"CancelRequiresAction", "A0", "running", false},
    [W_SET_GENERATED_TITLE] = {"SetTitle (generated)", "R0", NULL, true},
};

static int s_apply(wmove_t mv, chatstate_t *cs, const cs_fence_t *f, cs_error_t *err) {
    cs_message_t step = {.role = "assistant", .content = STEP_MSG};
    int64_t attempt = 0;
    switch (mv) {
        case W_COMMIT_STEP:
            return chatstate_commit_step(cs, f, &step, 1, err);
        case W_RECORD_ATTEMPT:
            return chatstate_record_generation_attempt(cs, f, &attempt, err);
        case W_RECORD_RETRY:
            return chatstate_record_retry_state(cs, f, "{\"retry_at\":\"soon\",\"attempt\":2}",
                                                err);
        case W_FINISH_TURN:
            return chatstate_finish_turn(cs, f, &step, 1, err);
        case W_ENTER_RA:
            return chatstate_enter_requires_action(cs, f, err);
        case W_FINISH_ERROR:
            return chatstate_finish_error(cs, f, "{\"message\":\"boom\"}", &step, 1, err);
        case W_ABANDON:
            return chatstate_abandon(cs, f, err);
        case W_FINISH_INTERRUPTION:
            return chatstate_finish_interruption(cs, f, &step, 1, err);
        case W_CANCEL_RA:
            return chatstate_cancel_requires_action(cs, f, "timed out", err);
        case W_SET_GENERATED_TITLE: {
            bool applied = false;
            return chatstate_set_generated_title(cs, f, "a generated title", &applied, err);
        }
        case W_COUNT:
            break;
    }
    fail_msg("unknown move %d", (int)mv);
    return -1;
}

/* A fresh chat in the move's state, owned by (worker, runner), with generation_attempt 1
 * so that an older attempt exists. */
static void s_setup(const wmove_info_t *info, char chat[ID_UUID_LEN + 1], const char *worker,
                    const char *runner) {
    s_create(chat);
    s_acquire(chat, worker, runner);
    if (!strcmp(info->state, "A0")) {
        s_enter_requires_action(chat, worker, runner);
        /* A0 keeps the attempt of the step; record none (the table forbids it in A0). */
    } else {
        s_record_attempt(chat, worker, runner);
        if (!strcmp(info->state, "I0")) {
            s_interrupt(chat);
        }
    }
    const char *want = !strcmp(info->state, "R0")   ? "running/0"
                       : !strcmp(info->state, "I0") ? "interrupting/0"
                                                    : "requires_action/0";
    assert_string_equal(s_state_of(chat), want);
}

/* Runs the move with the fence, expects it rejected with no change at all, and returns the
 * error kind it was rejected with. */
static cs_rc_t s_expect_rejected(const char *chat, wmove_t mv, const cs_fence_t *f,
                                 const char *what) {
    char before[DIGEST_LEN + 1];
    char after[DIGEST_LEN + 1];
    s_digest(chat, before);
    int64_t snap = s_snapshot(chat);

    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    if (s_apply(mv, cs, f, &err) == 0) {
        chatstate_destroy(&cs);
        fail_msg("%s: expected a rejection, the move was accepted", what);
    }
    /* A poisoned bundle must refuse to commit, and committing must not leak the bump. */
    cs_error_t cerr = err;
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &cerr), -1);
    assert_null(cs);

    s_digest(chat, after);
    if (strcmp(before, after) != 0) {
        fail_msg("%s: rejected move changed the chat (digest %s -> %s)", what, before, after);
    }
    assert_int_equal(s_snapshot(chat), snap);
    return err.rc;
}

static void s_expect_fenced(const char *chat, wmove_t mv, const cs_fence_t *f, const char *what) {
    cs_rc_t rc = s_expect_rejected(chat, mv, f, what);
    if (rc != CS_FENCED) {
        fail_msg("%s: expected CS_FENCED (%d), got %d", what, CS_FENCED, rc);
    }
}

static int s_group_setup(void **state) {
    (void)state;
    log_init("test_chatstate_fence", "warn");
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    return testdb_user_new(s_conn, "fence-owner", s_owner);
}

static int s_group_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

/* Every worker move x every stale fence field: CS_FENCED, nothing changed. The same move with
 * the current fence is then accepted, which proves the setup was valid. */
static void test_stale_fence_field_is_fenced_and_changes_nothing_for_every_worker_move(void **st) {
    (void)st;
    int checked = 0;
    for (int mv = 0; mv < W_COUNT; mv++) {
        const wmove_info_t *info = &s_moves[mv];
        for (int k = 0; k < K_COUNT; k++) {
            if (info->owner_only && k != K_RUNNER && k != K_WORKER) {
                continue;
            }
            char worker[ID_UUID_LEN + 1];
            char runner[ID_UUID_LEN + 1];
            char chat[ID_UUID_LEN + 1];
            assert_int_equal(id_uuid_new(worker), 0);
            assert_int_equal(id_uuid_new(runner), 0);
            s_setup(info, chat, worker, runner);

            cs_fence_t good;
            char status[32];
            s_fence_now(chat, worker, runner, &good, status);
            cs_fence_t f = good;
            char other[ID_UUID_LEN + 1];
            assert_int_equal(id_uuid_new(other), 0);
            switch ((stale_t)k) {
                case K_RUNNER:
                    snprintf(f.runner_id, sizeof f.runner_id, "%s", other);
                    break;
                case K_WORKER:
                    snprintf(f.worker_id, sizeof f.worker_id, "%s", other);
                    break;
                case K_HISTORY:
                    assert_true(good.history_version >= 1);
                    f.history_version = good.history_version - 1;
                    break;
                case K_ATTEMPT:
                    f.generation_attempt =
                        good.generation_attempt > 0 ? good.generation_attempt - 1 : 1;
                    break;
                case K_STATUS:
                    f.status = info->wrong_status;
                    break;
                case K_COUNT:
                    break;
            }
            char what[128];
            snprintf(what, sizeof what, "%s from %s with stale %s", info->name, info->state,
                     s_stale_names[k]);
            s_expect_fenced(chat, (wmove_t)mv, &f, what);
            checked++;

            /* Control: the current fence is accepted on the very same chat. */
            cs_error_t err;
            chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
            s_ok(cs ? 0 : -1, &err, "begin");
            if (s_apply((wmove_t)mv, cs, &good, &err) != 0) {
                chatstate_destroy(&cs);
                fail_msg("%s: the current fence was rejected too: %s", what, err.message);
            }
            s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, what);
        }
    }
    printf("fence: %d (move, stale field) pairs fenced with no change\n", checked);
    /* Abandon and the generated title check only the owner half of the fence. */
    assert_int_equal(checked, (W_COUNT - 2) * K_COUNT + 2 * 2);
}

/* A step still running when the user interrupts: its fence expected running, the chat is now
 * interrupting (I0) and still owned by the same runner. The status fence (ARCHITECTURE.md
 * §5.2) makes this a fence failure, the quiet expected exit, and not a conflict the worker
 * would report as an error. */
static void test_step_after_interrupt_with_running_fence_is_fenced(void **st) {
    (void)st;
    const wmove_t moves[] = {W_COMMIT_STEP, W_RECORD_ATTEMPT, W_RECORD_RETRY, W_FINISH_TURN,
                             W_ENTER_RA};
    int wrong = 0;
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
        char worker[ID_UUID_LEN + 1];
        char runner[ID_UUID_LEN + 1];
        char chat[ID_UUID_LEN + 1];
        assert_int_equal(id_uuid_new(worker), 0);
        assert_int_equal(id_uuid_new(runner), 0);
        s_setup(&s_moves[W_COMMIT_STEP], chat, worker, runner);
        cs_fence_t f;
        char status[32];
        s_fence_now(chat, worker, runner, &f, status);
        assert_string_equal(f.status, "running");
        s_interrupt(chat);
        assert_string_equal(s_state_of(chat), "interrupting/0");
        char what[128];
        snprintf(what, sizeof what, "%s after Interrupt with the running fence",
                 s_moves[moves[i]].name);
        cs_rc_t rc = s_expect_rejected(chat, moves[i], &f, what);
        if (rc != CS_FENCED) {
            printf("fence: %s: rejected with rc %d, not CS_FENCED (%d)\n", what, rc, CS_FENCED);
            wrong++;
        }
    }
    assert_int_equal(wrong, 0);
}

/* Another runner takes the chat over a stale lease; the old runner's CommitStep is fenced and
 * changes nothing, and its Abandon does not release the new owner. */
static void test_old_runner_is_fenced_after_takeover_of_stale_lease(void **st) {
    (void)st;
    char worker_a[ID_UUID_LEN + 1];
    char runner_a[ID_UUID_LEN + 1];
    char worker_b[ID_UUID_LEN + 1];
    char runner_b[ID_UUID_LEN + 1];
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(worker_a), 0);
    assert_int_equal(id_uuid_new(runner_a), 0);
    assert_int_equal(id_uuid_new(worker_b), 0);
    assert_int_equal(id_uuid_new(runner_b), 0);
    s_create(chat);
    s_acquire(chat, worker_a, runner_a);
    cs_fence_t old;
    char status[32];
    s_fence_now(chat, worker_a, runner_a, &old, status);

    /* While A's lease is fresh, B cannot take the chat, and nothing changes. */
    char before[DIGEST_LEN + 1];
    char after[DIGEST_LEN + 1];
    s_digest(chat, before);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    assert_int_equal(chatstate_acquire(cs, worker_b, runner_b, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    chatstate_destroy(&cs);
    s_digest(chat, after);
    assert_string_equal(before, after);

    /* A stops heartbeating: its lease is older than LEASE_STALE_MS. */
    char *sql = mem_printf("UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour'"
                           " WHERE chat_id = '%s' AND runner_id = '%s'",
                           chat, runner_a);
    assert_int_equal(testdb_try(s_conn, sql, NULL, 0), 0);
    free(sql);
    s_acquire(chat, worker_b, runner_b);
    sql = mem_printf("SELECT worker_id::text || ' ' || runner_id::text FROM chats WHERE id = '%s'",
                     chat);
    char *owner = testdb_scalar(s_conn, sql);
    free(sql);
    char want[2 * ID_UUID_LEN + 2];
    snprintf(want, sizeof want, "%s %s", worker_b, runner_b);
    assert_non_null(owner);
    assert_string_equal(owner, want);
    free(owner);

    s_expect_fenced(chat, W_COMMIT_STEP, &old, "old runner's CommitStep after takeover");
    s_expect_fenced(chat, W_FINISH_TURN, &old, "old runner's FinishTurn after takeover");
    s_expect_fenced(chat, W_ABANDON, &old, "old runner's Abandon after takeover");
    s_expect_fenced(chat, W_SET_GENERATED_TITLE, &old,
                    "old runner's generated title after takeover");

    /* The new owner's fence works. */
    cs_fence_t now;
    s_fence_now(chat, worker_b, runner_b, &now, status);
    cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    s_ok(cs ? 0 : -1, &err, "begin");
    cs_message_t m = {.role = "assistant", .content = STEP_MSG};
    s_ok(chatstate_commit_step(cs, &now, &m, 1, &err), &err, "new owner's CommitStep");
    s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, "commit");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_stale_fence_field_is_fenced_and_changes_nothing_for_every_worker_move),
        cmocka_unit_test(test_old_runner_is_fenced_after_takeover_of_stale_lease),
        cmocka_unit_test(test_step_after_interrupt_with_running_fence_is_fenced),
    };
    return cmocka_run_group_tests_name("chatstate_fence", tests, s_group_setup, s_group_teardown);
}
