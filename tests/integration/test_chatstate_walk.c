/*
 * Walks every (execution state, transition) pair, the 13 states plus Invalid, on a real
 * PostgreSQL, and checks acceptance or rejection and the resulting state against the
 * move table of ARCHITECTURE.md §4.3, transcribed below as
 * the test's own expectation (independent of chatmove.c's table). Rejected moves must
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
#include "chatsetup.h"
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

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

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
        cs_message_t first = {.role = "user", .content = CHATSETUP_USER_MSG};
        cs_create_t c = {
            .chat_id = chat, .owner_id = s_owner, .messages = &first, .message_count = 1};
        char out[ID_UUID_LEN + 1];
        return chatstate_create(s_conn, &chatsetup_settings, &c, NULL, out, &err) == 0 ? CS_OK
                                                                                       : err.rc;
    }
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    if (!cs) {
        return err.rc;
    }
    cs_fence_t f;
    chatsetup_fence(s_conn, chat, &f);
    cs_message_t um = {.role = "user", .content = CHATSETUP_USER_MSG};
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
        case MV_SET_TITLE:
            rc = chatstate_set_title(cs, "walked", &err);
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
            rc = chatstate_acquire(cs, CHATSETUP_WORKER, CHATSETUP_RUNNER, &err);
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
 * existing state; neither changes the execution state. SetTitle (metadata) is allowed from
 * any existing state, Invalid included, and changes none either. */
static const char *s_expect_stateless(const char *state, chatmove_t m) {
    static const char *runnable[] = {"R0", "R1", "I0", "I1", "A0", "A1"};
    if (!strcmp(state, "N")) {
        return NULL;
    }
    if (m == MV_ABANDON || m == MV_SET_TITLE) {
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
    for (int si = 0; si < chatsetup_count; si++) {
        const chatsetup_t *s = &chatsetup_all[si];
        for (int m = 0; m < MV_COUNT; m++) {
            bool stateless = m == MV_ACQUIRE || m == MV_ABANDON || m == MV_SET_TITLE;
            const char *want = stateless ? s_expect_stateless(s->name, m)
                                         : s_expect(s->name, s->queued, (chatmove_t)m);
            char chat[ID_UUID_LEN + 1];
            chatsetup_build(s_conn, s_owner, s, m == MV_ACQUIRE, chat);
            exec_state_t before = s_classify(chat);
            if (strcmp(chatmove_state_name(before), s->name) != 0) {
                fail_msg("setup for %s produced %s", s->name, chatmove_state_name(before));
            }
            char *d0 = strcmp(s->name, "N") ? chatsetup_digest(s_conn, chat) : NULL;
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
                    char *d1 = chatsetup_digest(s_conn, chat);
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
    printf("walk: checked %d (state, transition) pairs over %d setups x %d transitions: "
           "%d accepted, %d rejected\n",
           pairs, chatsetup_count, (int)MV_COUNT, accepted, rejected);
    assert_int_equal(pairs, chatsetup_count * MV_COUNT);
}

static int s_group_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    ASSERT(testdb_user_new(s_conn, "walker", s_owner) == 0);
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
