/*
 * Walks every (execution state, transition) pair, the 13 states plus Invalid, on a real
 * PostgreSQL, and checks acceptance or rejection and the resulting state against the
 * execution-state diagram of reference/chatd-architecture.md, transcribed below verbatim as
 * the test's own expectation (independent of common/chatmove's table). Rejected moves must
 * leave the chat's rows exactly as they were.
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
#include "mem.h"
#include "testdb.h"

static const char *s_diagram[] = {
    "N --> R0: Create",
    "W --> R0: SendMessage",
    "W --> R0: EditMessage",
    "W --> R0: RequestCompaction",
    "W --> W: ClearContext",
    "W --> E0: FinishError",
    "W --> XW: SetArchived(true)",
    "E0 --> R0: SendMessage",
    "E0 --> R0: EditMessage",
    "E0 --> R0: RequestCompaction",
    "E0 --> W: ClearContext",
    "E0 --> XE0: SetArchived(true)",
    "E1 --> R1: SendMessage",
    "E1 --> R0: EditMessage",
    "E1 --> R1: RequestCompaction",
    "E1 --> E0: DeleteQueuedMessage / removed last queued",
    "E1 --> E1: DeleteQueuedMessage / queue still non-empty",
    "E1 --> R0: PromoteQueuedMessage / promoted last queued",
    "E1 --> R1: PromoteQueuedMessage / queue still non-empty",
    "E1 --> XE1: SetArchived(true)",
    "R0 --> R0: RecordGenerationAttempt",
    "R0 --> R0: RecordRetryState",
    "R0 --> R0: CommitStep",
    "R0 --> A0: EnterRequiresAction",
    "R0 --> I0: Interrupt",
    "R0 --> I1: SendMessage(interrupt)",
    "R0 --> R0: EditMessage",
    "R0 --> W: FinishTurn / queue empty",
    "R0 --> E0: FinishError",
    "R0 --> R1: SendMessage(queue)",
    "R1 --> R1: RecordGenerationAttempt",
    "R1 --> R1: RecordRetryState",
    "R1 --> R1: CommitStep",
    "R1 --> A1: EnterRequiresAction",
    "R1 --> I1: Interrupt",
    "R1 --> I1: SendMessage(interrupt)",
    "R1 --> R0: EditMessage",
    "R1 --> E1: FinishError",
    "R1 --> R1: SendMessage(queue)",
    "R1 --> R0: DeleteQueuedMessage / removed last queued",
    "R1 --> R1: DeleteQueuedMessage / queue still non-empty",
    "R1 --> I1: PromoteQueuedMessage",
    "R1 --> R0: FinishTurn / promoted last queued",
    "R1 --> R1: FinishTurn / queue still non-empty after promoting head",
    "I0 --> I1: SendMessage",
    "I0 --> R0: EditMessage",
    "I0 --> W: FinishInterruption",
    "I1 --> I1: SendMessage",
    "I1 --> R0: EditMessage",
    "I1 --> I0: DeleteQueuedMessage / removed last queued",
    "I1 --> I1: DeleteQueuedMessage / queue still non-empty",
    "I1 --> I1: PromoteQueuedMessage",
    "I1 --> R0: FinishInterruption / promoted last queued",
    "I1 --> R1: FinishInterruption / queue still non-empty after promoting head",
    "A0 --> R0: CompleteRequiresAction",
    "A0 --> R0: Interrupt",
    "A0 --> R0: CancelRequiresAction",
    "A0 --> A1: SendMessage(queue)",
    "A0 --> R1: SendMessage(interrupt)",
    "A0 --> R0: EditMessage",
    "A1 --> R1: CompleteRequiresAction",
    "A1 --> R1: Interrupt",
    "A1 --> R1: CancelRequiresAction",
    "A1 --> A1: SendMessage(queue)",
    "A1 --> R1: SendMessage(interrupt)",
    "A1 --> R0: EditMessage",
    "A1 --> A0: DeleteQueuedMessage / removed last queued",
    "A1 --> A1: DeleteQueuedMessage / queue still non-empty",
    "A1 --> R0: PromoteQueuedMessage / promoted last queued",
    "A1 --> R1: PromoteQueuedMessage / queue still non-empty",
    "XW --> W: SetArchived(false)",
    "XE0 --> E0: SetArchived(false)",
    "XE1 --> E1: SetArchived(false)",
    "Invalid --> E0: ReconcileInvalidState / no queued messages",
    "Invalid --> E1: ReconcileInvalidState / queued messages",
};

#define WORKER   "11111111-1111-4111-8111-111111111111"
#define RUNNER   "22222222-2222-4222-8222-222222222222"
#define USER_MSG "[{\"type\":\"text\",\"text\":\"hello\"}]"

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

/* The setups: how to reach each state, and with how many queued messages. */
typedef struct {
    const char *name; /* state name as in the diagram */
    int queued;       /* queue length to set up */
    int invalid_kind; /* 0: a valid state; 1..3: a kind of invalid state */
} setup_t;

static const setup_t s_setups[] = {
    {"N", 0, 0},       {"W", 0, 0},       {"E0", 0, 0},  {"E1", 1, 0},      {"E1", 2, 0},
    {"R0", 0, 0},      {"R1", 1, 0},      {"R1", 2, 0},  {"I0", 0, 0},      {"I1", 1, 0},
    {"I1", 2, 0},      {"A0", 0, 0},      {"A1", 1, 0},  {"A1", 2, 0},      {"XW", 0, 0},
    {"XE0", 0, 0},     {"XE1", 1, 0},     {"XE1", 2, 0}, {"Invalid", 1, 1}, {"Invalid", 2, 1},
    {"Invalid", 0, 2}, {"Invalid", 1, 3},
};

static void s_ok(int rc, const cs_error_t *err, const char *what) {
    if (rc != 0) {
        fail_msg("setup %s failed: %s", what, err->message);
    }
}

static void s_fence(PGconn *conn, const char *chat, cs_fence_t *f) {
    char *sql = mem_printf("SELECT status || ' ' || history_version || ' ' || generation_attempt"
                           " FROM chats WHERE id = '%s'",
                           chat);
    char *row = testdb_scalar(conn, sql);
    static char status[32];
    long long hv = 0;
    long long ga = 0;
    ASSERT(sscanf(row, "%31s %lld %lld", status, &hv, &ga) == 3);
    snprintf(f->worker_id, sizeof f->worker_id, "%s", WORKER);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", RUNNER);
    f->status = status;
    f->history_version = hv;
    f->generation_attempt = ga;
    free(row);
    free(sql);
}

/* Applies one worker-side or HTTP-side bundle used by the setup; asserts success. */
typedef int (*step_fn)(chatstate_t *cs, const char *chat, cs_error_t *err);

static void s_bundle(const char *chat, step_fn fn, const char *what) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, chat, &err);
    s_ok(cs ? 0 : -1, &err, what);
    s_ok(fn(cs, chat, &err), &err, what);
    s_ok(chatstate_commit(&cs, NULL, NULL, &err), &err, what);
}

static int s_do_acquire(chatstate_t *cs, const char *chat, cs_error_t *err) {
    (void)chat;
    return chatstate_acquire(cs, WORKER, RUNNER, err);
}

static int s_do_step(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(s_conn, chat, &f);
    cs_message_t m = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"hi\"}]"};
    return chatstate_commit_step(cs, &f, &m, 1, err);
}

static int s_do_tool_step(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(s_conn, chat, &f);
    cs_message_t m = {.role = "assistant",
                      .content = "[{\"type\":\"tool-call\",\"tool_call_id\":\"dyn_1\","
                                 "\"tool_name\":\"ask_user\",\"args\":{}}]"};
    if (chatstate_commit_step(cs, &f, &m, 1, err) != 0) {
        return -1;
    }
    f.history_version = -1;
    return chatstate_enter_requires_action(cs, &f, err);
}

static int s_do_queue(chatstate_t *cs, const char *chat, cs_error_t *err) {
    (void)chat;
    int64_t mid;
    int64_t qid;
    cs_message_t m = {.role = "user", .content = USER_MSG};
    return chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, err);
}

static int s_do_send_interrupt(chatstate_t *cs, const char *chat, cs_error_t *err) {
    (void)chat;
    int64_t mid;
    int64_t qid;
    cs_message_t m = {.role = "user", .content = USER_MSG};
    return chatstate_send_message(cs, &m, CS_BUSY_INTERRUPT, 0, &mid, &qid, err);
}

static int s_do_interrupt(chatstate_t *cs, const char *chat, cs_error_t *err) {
    (void)chat;
    return chatstate_interrupt(cs, "user", err);
}

static int s_do_finish_turn(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(s_conn, chat, &f);
    return chatstate_finish_turn(cs, &f, NULL, 0, err);
}

static int s_do_finish_error(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(s_conn, chat, &f);
    return chatstate_finish_error(cs, &f, "{\"message\":\"boom\"}", NULL, 0, err);
}

static int s_do_archive(chatstate_t *cs, const char *chat, cs_error_t *err) {
    (void)chat;
    return chatstate_set_archived(cs, true, err);
}

static int s_do_abandon(chatstate_t *cs, const char *chat, cs_error_t *err) {
    cs_fence_t f;
    s_fence(s_conn, chat, &f);
    return chatstate_abandon(cs, &f, err);
}

static void s_sql(const char *fmt, const char *chat) {
    char *sql = mem_printf(fmt, chat);
    char err[256];
    if (testdb_try(s_conn, sql, err, sizeof err) != 0) {
        fail_msg("%s: %s", sql, err);
    }
    free(sql);
}

/* Builds a chat in the given state, owned by (WORKER, RUNNER) with a fresh lease unless
 * unowned. Writes its id to chat (or a random unused id for N). */
static void s_setup(const setup_t *s, bool unowned, char chat[ID_UUID_LEN + 1]) {
    if (!strcmp(s->name, "N")) {
        ASSERT(id_uuid_new(chat) == 0);
        return;
    }
    cs_message_t first = {.role = "user", .content = USER_MSG};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    cs_error_t err;
    s_ok(chatstate_create(s_conn, &c, NULL, chat, &err), &err, "create");
    s_bundle(chat, s_do_acquire, "acquire");
    s_bundle(chat, s_do_step, "step");
    const char *n = s->name;
    bool archived = n[0] == 'X';
    if (archived) {
        n++;
    }
    if (s->invalid_kind == 1) { /* waiting with a queue */
        for (int i = 0; i < s->queued; i++) {
            s_bundle(chat, s_do_queue, "queue");
        }
        s_sql("UPDATE chats SET status = 'waiting' WHERE id = '%s'", chat);
    } else if (s->invalid_kind == 2) { /* archived while running */
        s_sql("UPDATE chats SET archived = true WHERE id = '%s'", chat);
    } else if (s->invalid_kind == 3) { /* archived while requiring action, with a queue */
        s_bundle(chat, s_do_tool_step, "tool step");
        s_bundle(chat, s_do_queue, "queue");
        s_sql("UPDATE chats SET archived = true WHERE id = '%s'", chat);
    } else if (n[0] == 'R') {
        for (int i = 0; i < s->queued; i++) {
            s_bundle(chat, s_do_queue, "queue");
        }
    } else if (n[0] == 'I') {
        if (s->queued > 0) {
            s_bundle(chat, s_do_send_interrupt, "send interrupt");
        } else {
            s_bundle(chat, s_do_interrupt, "interrupt");
        }
        for (int i = 1; i < s->queued; i++) {
            s_bundle(chat, s_do_queue, "queue");
        }
    } else if (n[0] == 'A') {
        s_bundle(chat, s_do_tool_step, "tool step");
        for (int i = 0; i < s->queued; i++) {
            s_bundle(chat, s_do_queue, "queue");
        }
    } else if (n[0] == 'W') {
        s_bundle(chat, s_do_finish_turn, "finish turn");
    } else if (n[0] == 'E') {
        for (int i = 0; i < s->queued; i++) {
            s_bundle(chat, s_do_queue, "queue");
        }
        s_bundle(chat, s_do_finish_error, "finish error");
    }
    if (archived) {
        s_bundle(chat, s_do_archive, "archive");
    }
    if (unowned) {
        s_bundle(chat, s_do_abandon, "abandon");
    }
}

static char *s_digest(const char *chat) {
    char *sql = mem_printf(
        "SELECT md5(coalesce((SELECT row_to_json(c)::text FROM chats c WHERE id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(m)::text, ',' ORDER BY id)"
        " FROM chat_messages m WHERE chat_id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(q)::text, ',' ORDER BY id)"
        " FROM chat_queued_messages q WHERE chat_id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(h)::text, ',' ORDER BY runner_id)"
        " FROM chat_heartbeats h WHERE chat_id = '%1$s'), ''))",
        chat);
    char *d = testdb_scalar(s_conn, sql);
    free(sql);
    return d;
}

static exec_state_t s_classify(const char *chat) {
    char *sql = mem_printf("SELECT status || ' ' || archived || ' ' || (SELECT count(*) FROM"
                           " chat_queued_messages WHERE chat_id = '%1$s') FROM chats"
                           " WHERE id = '%1$s'",
                           chat);
    char *row = testdb_scalar(s_conn, sql);
    free(sql);
    if (!row) {
        return ES_N;
    }
    char status[32];
    char arch[8];
    long long q = 0;
    ASSERT(sscanf(row, "%31s %7s %lld", status, arch, &q) == 3);
    free(row);
    return chatmove_classify(true, status, arch[0] == 't', q > 0);
}

static int64_t s_id(const char *sql_fmt, const char *chat) {
    char *sql = mem_printf(sql_fmt, chat);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    int64_t id = v ? strtoll(v, NULL, 10) : 999999999;
    free(v);
    return id;
}

/* Applies move m to the chat in one bundle; returns 0 (committed) or the rejection code. */
static cs_rc_t s_apply(chatmove_t m, const char *chat) {
    cs_error_t err;
    memset(&err, 0, sizeof err);
    if (m == MV_CREATE) {
        cs_message_t first = {.role = "user", .content = USER_MSG};
        cs_create_t c = {
            .chat_id = chat, .owner_id = s_owner, .messages = &first, .message_count = 1};
        char out[ID_UUID_LEN + 1];
        return chatstate_create(s_conn, &c, NULL, out, &err) == 0 ? CS_OK : err.rc;
    }
    chatstate_t *cs = chatstate_begin(s_conn, chat, &err);
    if (!cs) {
        return err.rc;
    }
    cs_fence_t f;
    s_fence(s_conn, chat, &f);
    cs_message_t um = {.role = "user", .content = USER_MSG};
    cs_message_t am = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"x\"}]"};
    cs_tool_result_t tr = {.tool_call_id = "dyn_1", .output = "{\"ok\":true}"};
    int64_t mid;
    int64_t qid;
    int64_t attempt;
    int64_t first_user =
        s_id("SELECT min(id) FROM chat_messages WHERE chat_id = '%s' AND role = 'user'", chat);
    int64_t head = s_id("SELECT id FROM chat_queued_messages WHERE chat_id = '%s'"
                        " ORDER BY position, id LIMIT 1",
                        chat);
    int64_t tail = s_id("SELECT id FROM chat_queued_messages WHERE chat_id = '%s'"
                        " ORDER BY position DESC, id DESC LIMIT 1",
                        chat);
    int rc = -1;
    switch (m) {
        case MV_SET_ARCHIVED_TRUE:
            rc = chatstate_set_archived(cs, true, &err);
            break;
        case MV_SET_ARCHIVED_FALSE:
            rc = chatstate_set_archived(cs, false, &err);
            break;
        case MV_SEND_QUEUE:
            rc = chatstate_send_message(cs, &um, CS_BUSY_QUEUE, 0, &mid, &qid, &err);
            break;
        case MV_SEND_INTERRUPT:
            rc = chatstate_send_message(cs, &um, CS_BUSY_INTERRUPT, 0, &mid, &qid, &err);
            break;
        case MV_EDIT:
            rc = chatstate_edit_message(cs, first_user, &um, CS_EDIT_SET_FORMAT, &err);
            break;
        case MV_DELETE_QUEUED:
            rc = chatstate_delete_queued(cs, head, &err);
            break;
        case MV_PROMOTE_QUEUED:
            rc = chatstate_promote_queued(cs, tail, &err);
            break;
        case MV_INTERRUPT:
            rc = chatstate_interrupt(cs, "user", &err);
            break;
        case MV_COMPLETE_REQUIRES_ACTION:
            rc = chatstate_complete_requires_action(cs, &tr, 1, NULL, 0, &err);
            break;
        case MV_REQUEST_COMPACTION:
            rc = chatstate_request_compaction(cs, &err);
            break;
        case MV_CLEAR_CONTEXT:
            rc = chatstate_clear_context(cs, s_owner, &err);
            break;
        case MV_RECONCILE_INVALID:
            rc = chatstate_reconcile_invalid(cs, &err);
            break;
        case MV_ACQUIRE:
            rc = chatstate_acquire(cs, WORKER, RUNNER, &err);
            break;
        case MV_ABANDON:
            rc = chatstate_abandon(cs, &f, &err);
            break;
        case MV_COMMIT_STEP:
            rc = chatstate_commit_step(cs, &f, &am, 1, &err);
            break;
        case MV_ENTER_REQUIRES_ACTION:
            rc = chatstate_enter_requires_action(cs, &f, &err);
            break;
        case MV_FINISH_INTERRUPTION:
            rc = chatstate_finish_interruption(cs, &f, NULL, 0, &err);
            break;
        case MV_RECORD_GENERATION_ATTEMPT:
            rc = chatstate_record_generation_attempt(cs, &f, &attempt, &err);
            break;
        case MV_RECORD_RETRY_STATE:
            rc = chatstate_record_retry_state(cs, &f, "{\"attempt\":1}", &err);
            break;
        case MV_FINISH_TURN:
            rc = chatstate_finish_turn(cs, &f, NULL, 0, &err);
            break;
        case MV_FINISH_ERROR:
            rc = chatstate_finish_error(cs, &f, "{\"message\":\"x\"}", NULL, 0, &err);
            break;
        case MV_CANCEL_REQUIRES_ACTION:
            rc = chatstate_cancel_requires_action(cs, &f, "timeout", &err);
            break;
        default:
            fail_msg("unknown move %d", m);
    }
    if (rc != 0) {
        if (err.rc == CS_OK || err.rc == CS_DB) {
            fail_msg("%s: unexpected error: %s", chatmove_name(m), err.message);
        }
        chatstate_destroy(&cs);
        return err.rc;
    }
    if (chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        fail_msg("%s: commit failed: %s", chatmove_name(m), err.message);
    }
    return CS_OK;
}

/* The diagram's expectation for (state name, queue length, move): the permitted result, or
 * NULL when the diagram has no such edge. Labels match on the transition name (with
 * "SendMessage" covering both busy behaviours) and the variant on the queue length. */
static const char *s_expect(const char *state, int queued, chatmove_t m) {
    const char *name = chatmove_name(m);
    for (size_t i = 0; i < sizeof s_diagram / sizeof s_diagram[0]; i++) {
        char from[16];
        char to[16];
        char label[128];
        if (sscanf(s_diagram[i], "%15s --> %15[^:]: %127[^\n]", from, to, label) != 3) {
            fail_msg("bad diagram line %s", s_diagram[i]);
        }
        if (strcmp(from, state) != 0) {
            continue;
        }
        char *variant = strstr(label, " / ");
        if (variant) {
            *variant = '\0';
            variant += 3;
        }
        bool match = !strcmp(label, name) ||
                     (!strcmp(label, "SendMessage") && !strncmp(name, "SendMessage", 11));
        if (!match) {
            continue;
        }
        if (variant) {
            bool last = strstr(variant, "last") || strstr(variant, "no queued") ||
                        strstr(variant, "queue empty");
            bool nonempty = strstr(variant, "non-empty") || !strcmp(variant, "queued messages");
            if ((last && queued > 1) || (nonempty && queued < 2 && strcmp(state, "Invalid")) ||
                (!strcmp(variant, "no queued messages") && queued > 0) ||
                (!strcmp(variant, "queued messages") && queued == 0)) {
                continue;
            }
        }
        static char out[16];
        snprintf(out, sizeof out, "%s", to);
        return out;
    }
    return NULL;
}

/* Ownership diagram and acquisition rule: Acquire from a runnable state, Abandon from any
 * existing state; neither changes the execution state. */
static const char *s_expect_ownership(const char *state, chatmove_t m) {
    static const char *runnable[] = {"R0", "R1", "I0", "I1", "A0", "A1"};
    if (!strcmp(state, "N")) {
        return NULL;
    }
    if (m == MV_ABANDON) {
        return state;
    }
    for (int i = 0; i < 6; i++) {
        if (!strcmp(state, runnable[i])) {
            return state;
        }
    }
    return NULL;
}

static void test_every_state_against_every_transition(void **unused) {
    (void)unused;
    int pairs = 0;
    int accepted = 0;
    int rejected = 0;
    for (size_t si = 0; si < sizeof s_setups / sizeof s_setups[0]; si++) {
        const setup_t *s = &s_setups[si];
        for (int m = 0; m < MV_COUNT; m++) {
            bool ownership = m == MV_ACQUIRE || m == MV_ABANDON;
            const char *want = ownership ? s_expect_ownership(s->name, m)
                                         : s_expect(s->name, s->queued, (chatmove_t)m);
            char chat[ID_UUID_LEN + 1];
            s_setup(s, m == MV_ACQUIRE, chat);
            exec_state_t before = s_classify(chat);
            if (strcmp(chatmove_state_name(before), s->name) != 0) {
                fail_msg("setup for %s produced %s", s->name, chatmove_state_name(before));
            }
            char *d0 = strcmp(s->name, "N") ? s_digest(chat) : NULL;
            cs_rc_t rc = s_apply((chatmove_t)m, chat);
            exec_state_t after = s_classify(chat);
            pairs++;
            if (want) {
                if (rc != CS_OK || strcmp(chatmove_state_name(after), want) != 0) {
                    fail_msg("%s (queue %d) + %s: want %s, got rc=%d state %s", s->name, s->queued,
                             chatmove_name(m), want, rc, chatmove_state_name(after));
                }
                accepted++;
            } else {
                cs_rc_t expect_rc = !strcmp(s->name, "N")         ? CS_NOT_FOUND
                                    : !strcmp(s->name, "Invalid") ? CS_INVALID_STATE
                                                                  : CS_CONFLICT;
                if (m == MV_CREATE && strcmp(s->name, "N") != 0) {
                    expect_rc = CS_CONFLICT; /* the chat already exists */
                }
                if (rc != expect_rc) {
                    fail_msg("%s (queue %d) + %s: want rejection %d, got %d", s->name, s->queued,
                             chatmove_name(m), expect_rc, rc);
                }
                if (d0) {
                    char *d1 = s_digest(chat);
                    if (strcmp(d0, d1) != 0) {
                        fail_msg("%s + %s was rejected but changed the chat", s->name,
                                 chatmove_name(m));
                    }
                    free(d1);
                }
                rejected++;
            }
            free(d0);
        }
    }
    printf("walk: checked %d (state, transition) pairs over %zu setups x %d transitions: "
           "%d accepted, %d rejected\n",
           pairs, sizeof s_setups / sizeof s_setups[0], (int)MV_COUNT, accepted, rejected);
    assert_int_equal(pairs, (int)(sizeof s_setups / sizeof s_setups[0]) * MV_COUNT);
}

static int s_group_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    ASSERT(id_uuid_new(s_owner) == 0);
    char *sql = mem_printf("INSERT INTO users (id, name) VALUES ('%s', 'walker')", s_owner);
    ASSERT(testdb_try(s_conn, sql, NULL, 0) == 0);
    free(sql);
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
        cmocka_unit_test(test_every_state_against_every_transition),
    };
    return cmocka_run_group_tests(tests, s_group_setup, s_group_teardown);
}
