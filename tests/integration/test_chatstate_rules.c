/*
 * The rules around the move table (ARCHITECTURE.md §4.2, §4.3 "Rules every transition
 * keeps"): unowned interrupts finish in the same bundle, synthetic
 * cancellation results, answering outstanding calls before a user message, last_error
 * clearing, the compaction marker, queued_message_id on promotion, a queued prompt's hook
 * context inserted after it on promotion, tool-result checks,
 * the queue cap, post-commit hints, and the user title as a move of its own bundle.
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
#include "mem.h"
#include "testdb.h"

#define WORKER   "11111111-1111-4111-8111-111111111111"
#define RUNNER   "22222222-2222-4222-8222-222222222222"
#define USER_MSG "[{\"type\":\"text\",\"text\":\"hello world\"}]"
#define TOOL_CALL                                                                                  \
    "[{\"type\":\"tool-call\",\"tool_call_id\":\"dyn_1\",\"tool_name\":\"ask\",\"args\":{}}]"

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

typedef struct {
    int updates;
    int ownership;
    int64_t last_snapshot;
    bool last_title_changed;
    char last_owner[ID_UUID_LEN + 1];
} recorder_t;

static void s_rec_update(void *ctx, const hint_update_t *h) {
    recorder_t *r = ctx;
    r->updates++;
    r->last_snapshot = h->snapshot_version;
    r->last_title_changed = h->title_changed;
    snprintf(r->last_owner, sizeof r->last_owner, "%s", h->owner_id);
}

static void s_rec_ownership(void *ctx, const hint_ownership_t *h) {
    (void)h;
    ((recorder_t *)ctx)->ownership++;
}

static char *s_q(const char *fmt, const char *chat) {
    char *sql = mem_printf(fmt, chat, chat);
    char *v = testdb_scalar(s_conn, sql);
    free(sql);
    return v;
}

static void s_expect(const char *chat, const char *fmt, const char *want) {
    char *got = s_q(fmt, chat);
    if (!got || strcmp(got, want) != 0) {
        fail_msg("%s: want %s, got %s", fmt, want, got ? got : "NULL");
    }
    free(got);
}

static void s_new_chat(char chat[ID_UUID_LEN + 1], bool own) {
    cs_message_t first = {.role = "user", .content = USER_MSG};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    cs_error_t err;
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    if (own) {
        chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
        assert_non_null(cs);
        assert_int_equal(chatstate_acquire(cs, WORKER, RUNNER, &err), 0);
        assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    }
}

static void s_fence(const char *chat, const char *status, cs_fence_t *f) {
    snprintf(f->worker_id, sizeof f->worker_id, "%s", WORKER);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", RUNNER);
    f->status = status;
    f->history_version = -1;
    f->generation_attempt = -1;
    (void)chat;
}

static chatstate_t *s_begin(const char *chat) {
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    if (!cs) {
        fail_msg("begin: %s", err.message);
    }
    return cs;
}

static void s_commit(chatstate_t **cs, const hint_sink_t *sink) {
    cs_error_t err;
    if (chatstate_commit(cs, sink, NULL, &err) != 0) {
        fail_msg("commit: %s", err.message);
    }
}

static void s_queue(const char *chat, int n) {
    for (int i = 0; i < n; i++) {
        chatstate_t *cs = s_begin(chat);
        cs_message_t m = {.role = "user", .content = USER_MSG};
        int64_t mid;
        int64_t qid;
        cs_error_t err;
        assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
        assert_true(qid > 0);
        s_commit(&cs, NULL);
    }
}

static void s_enter_action(const char *chat) {
    chatstate_t *cs = s_begin(chat);
    cs_fence_t f;
    s_fence(chat, "running", &f);
    cs_message_t call = {.role = "assistant", .content = TOOL_CALL};
    cs_error_t err;
    assert_int_equal(chatstate_commit_step(cs, &f, &call, 1, &err), 0);
    assert_int_equal(chatstate_enter_requires_action(cs, &f, &err), 0);
    s_commit(&cs, NULL);
}

static void test_interrupt_on_unowned_chat_finishes_in_the_same_bundle(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    /* R0 unowned -> W */
    s_new_chat(chat, false);
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "waiting");
    /* R1 (2 queued) unowned -> R1 with the head promoted, carrying its queue id */
    s_new_chat(chat, false);
    s_queue(chat, 2);
    char *head = s_q("SELECT min(id) FROM chat_queued_messages WHERE chat_id = '%s'", chat);
    cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "running");
    s_expect(chat, "SELECT count(*) FROM chat_queued_messages WHERE chat_id = '%s'", "1");
    s_expect(chat,
             "SELECT queued_message_id FROM chat_messages WHERE chat_id = '%s'"
             " ORDER BY id DESC LIMIT 1",
             head);
    free(head);
    /* owned I0 is rejected (its runner finishes); unowned I0 finishes here */
    s_new_chat(chat, true);
    cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "interrupting");
    cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    chatstate_destroy(&cs);
    cs = s_begin(chat);
    cs_fence_t f;
    s_fence(chat, NULL, &f);
    assert_int_equal(chatstate_abandon(cs, &f, &err), 0);
    s_commit(&cs, NULL);
    cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "waiting");
}

static void test_send_interrupt_on_unowned_idle_queue_sends_the_message_itself(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, false);
    chatstate_t *cs = s_begin(chat);
    cs_message_t m = {.role = "user", .content = USER_MSG};
    int64_t mid = 0;
    int64_t qid = 0;
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_INTERRUPT, 0, &mid, &qid, &err), 0);
    s_commit(&cs, NULL);
    assert_true(mid > 0);
    assert_int_equal(qid, 0);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "running");
    char *want = mem_printf("%lld", (long long)mid);
    s_expect(chat, "SELECT max(id) FROM chat_messages WHERE chat_id = '%s' AND role = 'user'",
             want);
    free(want);
    s_expect(chat,
             "SELECT queued_message_id IS NOT NULL FROM chat_messages WHERE chat_id = '%s'"
             " ORDER BY id DESC LIMIT 1",
             "t");
}

static void test_interrupt_in_requires_action_answers_pending_calls(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    s_enter_action(chat);
    s_expect(chat, "SELECT requires_action_deadline_at > now() FROM chats WHERE id = '%s'", "t");
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "running");
    s_expect(chat, "SELECT requires_action_deadline_at IS NULL FROM chats WHERE id = '%s'", "t");
    s_expect(chat,
             "SELECT content->0->>'tool_call_id' || ' ' || (content->0->>'is_error')"
             " FROM chat_messages WHERE chat_id = '%s' AND role = 'tool'",
             "dyn_1 true");
}

static void test_promotion_answers_outstanding_calls_before_the_user_message(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    s_enter_action(chat);
    s_queue(chat, 1);
    char *qid = s_q("SELECT id FROM chat_queued_messages WHERE chat_id = '%s'", chat);
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_promote_queued(cs, strtoll(qid, NULL, 10), &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT string_agg(role::text, ',' ORDER BY id) FROM chat_messages"
             " WHERE chat_id = '%s'",
             "user,assistant,tool,user");
    s_expect(chat,
             "SELECT queued_message_id FROM chat_messages WHERE chat_id = '%s'"
             " ORDER BY id DESC LIMIT 1",
             qid);
    free(qid);
}

/* A prompt's hook context (cs_message_t.context) is kept with its queued row and inserted
 * right after it, in order, when it is promoted; a row that is no hook context is refused and
 * nothing is queued. */
static void test_a_queued_prompts_hook_context_follows_it_on_promotion(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    cs_message_t ctx[] = {{.role = "user",
                           .visibility = "model",
                           .content = "[{\"type\":\"text\",\"text\":\"CTX-M\"}]",
                           .so_meta = CS_HOOK_CONTEXT_META},
                          {.role = "assistant",
                           .visibility = "user",
                           .content = "[{\"type\":\"text\",\"text\":\"CTX-U\"}]",
                           .so_meta = CS_HOOK_CONTEXT_META}};
    cs_message_t m = {.role = "user", .content = USER_MSG, .context = ctx, .context_count = 2};
    int64_t mid;
    int64_t qid;
    /* A tool row is no hook context: refused, the bundle rolls back. */
    cs_message_t bad_ctx = {.role = "tool", .content = "[]", .so_meta = CS_HOOK_CONTEXT_META};
    cs_message_t bad = {
        .role = "user", .content = USER_MSG, .context = &bad_ctx, .context_count = 1};
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_send_message(cs, &bad, CS_BUSY_QUEUE, 0, &mid, &qid, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    chatstate_destroy(&cs);
    s_expect(chat, "SELECT count(*) FROM chat_queued_messages WHERE chat_id = '%s'", "0");
    cs = s_begin(chat);
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    assert_true(qid > 0 && mid == 0);
    s_commit(&cs, NULL);
    s_expect(
        chat,
        "SELECT string_agg(e ->> 'role' || '/' || (e ->> 'visibility'), ',') FROM"
        " chat_queued_messages, jsonb_array_elements(hook_context::jsonb) e WHERE chat_id = '%s'",
        "user/model,assistant/user");
    cs = s_begin(chat);
    cs_fence_t f;
    s_fence(chat, "running", &f);
    assert_int_equal(chatstate_finish_turn(cs, &f, NULL, 0, &err), 0);
    int n = 0;
    chatstate_inserted(cs, &n);
    assert_int_equal(n, 3); /* the prompt and its two context rows */
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT string_agg(role || '/' || visibility || '/' || (content -> 0 ->> 'text')"
             " || '/' || coalesce(structured_output ->> 'type', '-'), ' ' ORDER BY id) FROM"
             " chat_messages WHERE chat_id = '%s'",
             "user/both/hello world/- user/both/hello world/- user/model/CTX-M/hook-context"
             " assistant/user/CTX-U/hook-context");
    /* Sent to a waiting chat, the context follows the message at once. */
    cs = s_begin(chat);
    s_fence(chat, "running", &f);
    assert_int_equal(chatstate_finish_turn(cs, &f, NULL, 0, &err), 0);
    s_commit(&cs, NULL);
    cs = s_begin(chat);
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    assert_true(mid > 0 && qid == 0);
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT string_agg(role || '/' || visibility, ',' ORDER BY id) FROM (SELECT * FROM"
             " chat_messages WHERE chat_id = '%s' ORDER BY id DESC LIMIT 3) t",
             "user/both,user/model,assistant/user");
}

static void test_leaving_error_clears_last_error_but_archiving_keeps_it(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    chatstate_t *cs = s_begin(chat);
    cs_fence_t f;
    s_fence(chat, "running", &f);
    assert_int_equal(chatstate_finish_error(cs, &f, "{\"message\":\"boom\"}", NULL, 0, &err), 0);
    assert_int_equal(chatstate_set_archived(cs, true, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT last_error->>'message' FROM chats WHERE id = '%s'", "boom");
    cs = s_begin(chat);
    assert_int_equal(chatstate_set_archived(cs, false, &err), 0);
    cs_message_t m = {.role = "user", .content = USER_MSG};
    int64_t mid;
    int64_t qid;
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT coalesce(last_error::text, 'null') FROM chats WHERE id = '%s'", "null");
}

static void test_compaction_marks_the_chat_and_refuses_when_nothing_to_compact(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    cs_message_t first = {.role = "user", .content = USER_MSG};
    cs_create_t c = {.owner_id = s_owner, .messages = &first, .message_count = 1};
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0); /* unowned: -> W */
    assert_int_equal(chatstate_request_compaction(cs, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    assert_non_null(strstr(err.message, "nothing to compact"));
    chatstate_destroy(&cs);
    s_new_chat(chat, true);
    cs = s_begin(chat);
    cs_fence_t f;
    s_fence(chat, "running", &f);
    cs_message_t a = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"hi\"}]"};
    assert_int_equal(chatstate_commit_step(cs, &f, &a, 1, &err), 0);
    int64_t attempt = 0;
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), 0);
    assert_int_equal(attempt, 1);
    assert_int_equal(chatstate_finish_turn(cs, &f, NULL, 0, &err), 0);
    s_commit(&cs, NULL);
    cs = s_begin(chat);
    assert_int_equal(chatstate_request_compaction(cs, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT (compaction_requested_at IS NOT NULL) || ' ' || (history_version ="
             " snapshot_version) || ' ' || generation_attempt || ' ' || status FROM chats"
             " WHERE id = '%s'",
             "true true 0 running");
}

/* An owned chat with one answered turn and a pending compaction request: R0, marked. */
static void s_marked_chat(char chat[ID_UUID_LEN + 1]) {
    s_new_chat(chat, true);
    chatstate_t *cs = s_begin(chat);
    cs_fence_t f;
    s_fence(chat, "running", &f);
    cs_message_t a = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"hi\"}]"};
    cs_error_t err;
    assert_int_equal(chatstate_commit_step(cs, &f, &a, 1, &err), 0);
    assert_int_equal(chatstate_finish_turn(cs, &f, NULL, 0, &err), 0);
    assert_int_equal(chatstate_request_compaction(cs, &err), 0);
    s_commit(&cs, NULL);
}

#define MARKED "SELECT (compaction_requested_at IS NOT NULL)::text FROM chats WHERE id = '%s'"

/* ARCHITECTURE.md §4.3: moves that keep the turn alive carry the request forward. */
static void test_compaction_marker_survives_the_moves_that_keep_the_turn(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    s_marked_chat(chat);
    cs_fence_t f;
    s_fence(chat, "running", &f);
    cs_error_t err;
    s_queue(chat, 1);
    s_expect(chat, MARKED, "true");
    chatstate_t *cs = s_begin(chat);
    int64_t attempt = 0;
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), 0);
    assert_int_equal(chatstate_record_retry_state(cs, &f, "{\"attempt\":1}", &err), 0);
    cs_message_t a = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"x\"}]"};
    assert_int_equal(chatstate_commit_step(cs, &f, &a, 1, &err), 0);
    assert_int_equal(chatstate_set_title(cs, "kept", &err), 0);
    char *qid = s_q("SELECT id FROM chat_queued_messages WHERE chat_id = '%s'", chat);
    assert_int_equal(chatstate_delete_queued(cs, strtoll(qid, NULL, 10), &err), 0);
    free(qid);
    s_commit(&cs, NULL);
    s_expect(chat, MARKED, "true");
    cs = s_begin(chat);
    assert_int_equal(chatstate_abandon(cs, &f, &err), 0);
    assert_int_equal(chatstate_acquire(cs, WORKER, RUNNER, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, MARKED, "true");
    /* The compaction step consumes it, once. */
    cs = s_begin(chat);
    cs_message_t boundary = {.role = "user",
                             .visibility = "model",
                             .compressed = true,
                             .content = "[{\"type\":\"text\",\"text\":\"summary\"}]"};
    assert_int_equal(chatstate_commit_compaction(cs, &f, &boundary, 1, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, MARKED, "false");
    cs = s_begin(chat);
    assert_int_equal(chatstate_commit_compaction(cs, &f, &boundary, 1, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    chatstate_destroy(&cs);
}

/* Every other move that rewrites the execution state clears it by construction. */
static void test_compaction_marker_is_cleared_by_every_other_move(void **u) {
    (void)u;
    static const char *const moves[] = {"FinishTurn",  "FinishError",         "Interrupt",
                                        "EditMessage", "EnterRequiresAction", "Send(interrupt)"};
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
        char chat[ID_UUID_LEN + 1];
        s_marked_chat(chat);
        cs_fence_t f;
        s_fence(chat, "running", &f);
        cs_error_t err;
        chatstate_t *cs = s_begin(chat);
        int rc = -1;
        cs_message_t m = {.role = "user", .content = USER_MSG};
        if (i == 0) {
            rc = chatstate_finish_turn(cs, &f, NULL, 0, &err);
        } else if (i == 1) {
            rc = chatstate_finish_error(cs, &f, "{\"kind\":\"test\"}", NULL, 0, &err);
        } else if (i == 2) {
            rc = chatstate_interrupt(cs, "user", &err);
        } else if (i == 3) {
            char *mid = s_q("SELECT min(id) FROM chat_messages WHERE chat_id = '%s'", chat);
            rc = chatstate_edit_message(cs, strtoll(mid, NULL, 10), &m, CS_EDIT_SET_FORMAT, &err);
            free(mid);
        } else if (i == 4) {
            cs_message_t call = {.role = "assistant", .content = TOOL_CALL};
            rc = chatstate_commit_step(cs, &f, &call, 1, &err) ||
                 chatstate_enter_requires_action(cs, &f, &err);
        } else {
            int64_t mid;
            int64_t qid;
            rc = chatstate_send_message(cs, &m, CS_BUSY_INTERRUPT, 0, &mid, &qid, &err);
        }
        if (rc != 0) {
            fail_msg("%s: %s", moves[i], err.message);
        }
        s_commit(&cs, NULL);
        char *got = s_q(MARKED, chat);
        if (strcmp(got, "false") != 0) {
            fail_msg("%s left the compaction request set", moves[i]);
        }
        free(got);
    }
}

static void test_clear_context_inserts_the_boundary_triplet_once(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, false);
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    assert_int_equal(chatstate_clear_context(cs, s_owner, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT string_agg(role || '/' || visibility || '/' || compressed, ',' ORDER BY id)"
             " FROM chat_messages WHERE chat_id = '%s'",
             "user/both/false,user/model/true,assistant/user/true,tool/user/true");
    cs = s_begin(chat);
    assert_int_equal(chatstate_clear_context(cs, s_owner, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    assert_non_null(strstr(err.message, "nothing to clear"));
    chatstate_destroy(&cs);
}

static void test_tool_results_must_answer_exactly_the_pending_calls(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    s_enter_action(chat);
    cs_tool_result_t bad = {.tool_call_id = "nope", .output = "1"};
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_complete_requires_action(cs, &bad, 1, NULL, 0, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "results[0].tool_call_id"));
    chatstate_destroy(&cs);
    cs = s_begin(chat);
    assert_int_equal(chatstate_complete_requires_action(cs, NULL, 0, NULL, 0, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    chatstate_destroy(&cs);
    cs_tool_result_t good[2] = {{.tool_call_id = "dyn_1", .output = "{\"answer\":42}"},
                                {.tool_call_id = "dyn_1", .output = "{}"}};
    cs = s_begin(chat);
    assert_int_equal(chatstate_complete_requires_action(cs, good, 2, NULL, 0, &err), -1);
    assert_non_null(strstr(err.message, "twice"));
    chatstate_destroy(&cs);
    cs = s_begin(chat);
    assert_int_equal(chatstate_complete_requires_action(cs, good, 1, NULL, 0, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT content->0->'result'->>'answer' FROM chat_messages WHERE chat_id = '%s'"
             " AND role = 'tool'",
             "42");
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "running");
}

static void test_create_without_user_message_waits_and_titles_fall_back(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    cs_create_t c = {.owner_id = s_owner, .system_prompt = "be brief"};
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    s_expect(chat, "SELECT status || '|' || title FROM chats WHERE id = '%s'", "waiting|New Chat");
    s_new_chat(chat, false);
    s_expect(chat, "SELECT title || '|' || title_source FROM chats WHERE id = '%s'",
             "hello world|fallback");
}

static void test_queue_cap_rejects_and_changes_nothing(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    s_queue(chat, 2);
    char *before = s_q("SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    chatstate_t *cs = s_begin(chat);
    cs_message_t m = {.role = "user", .content = USER_MSG};
    int64_t mid;
    int64_t qid;
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 2, &mid, &qid, &err), -1);
    assert_int_equal(err.rc, CS_QUEUE_FULL);
    chatstate_destroy(&cs);
    s_expect(chat, "SELECT snapshot_version FROM chats WHERE id = '%s'", before);
    free(before);
}

static void test_hints_follow_commit_and_ownership_only_when_unowned(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    recorder_t rec = {0};
    hint_sink_t sink = {s_rec_update, s_rec_ownership, &rec};
    s_new_chat(chat, false);
    chatstate_t *cs = s_begin(chat);
    cs_message_t m = {.role = "user", .content = USER_MSG};
    int64_t mid;
    int64_t qid;
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    s_commit(&cs, &sink);
    /* A failed bundle publishes nothing: commit refuses it. */
    cs = s_begin(chat);
    assert_int_equal(chatstate_clear_context(cs, s_owner, &err), -1);
    assert_int_equal(chatstate_commit(&cs, &sink, NULL, &err), -1);
    assert_null(cs);
    assert_int_equal(rec.updates, 1);
    assert_int_equal(rec.ownership, 1); /* runnable, nobody holds it */
    char *sv = s_q("SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    assert_int_equal(rec.last_snapshot, strtoll(sv, NULL, 10));
    free(sv);
    cs = s_begin(chat);
    assert_int_equal(chatstate_acquire(cs, WORKER, RUNNER, &err), 0);
    s_commit(&cs, &sink);
    assert_int_equal(rec.updates, 2);
    assert_int_equal(rec.ownership, 1); /* a fresh lease now holds it */
    /* Every hint names the chat's user; only SetTitle says the title moved. */
    assert_string_equal(rec.last_owner, s_owner);
    assert_false(rec.last_title_changed);
}

static void test_set_title_is_a_bundle_with_a_hint_and_fails_with_its_bundle(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    recorder_t rec = {0};
    hint_sink_t sink = {s_rec_update, NULL, &rec};
    s_new_chat(chat, true);
    char *before = s_q("SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    chatstate_t *cs = s_begin(chat);
    assert_int_equal(chatstate_set_title(cs, "renamed", &err), 0);
    s_commit(&cs, &sink);
    s_expect(chat,
             "SELECT title || '|' || title_source || '|' || status FROM chats WHERE id = '%s'",
             "renamed|user|running");
    char *after = s_q("SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    assert_int_equal(strtoll(after, NULL, 10), strtoll(before, NULL, 10) + 1);
    assert_int_equal(rec.updates, 1);
    assert_int_equal(rec.last_snapshot, strtoll(after, NULL, 10));
    assert_true(rec.last_title_changed);
    assert_string_equal(rec.last_owner, s_owner);
    /* Archiving a running chat is refused: the title in the same bundle is not written, the
     * version does not move and no hint goes out. */
    cs = s_begin(chat);
    assert_int_equal(chatstate_set_archived(cs, true, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    assert_int_equal(chatstate_set_title(cs, "half", &err), -1);
    assert_int_equal(chatstate_commit(&cs, &sink, NULL, &err), -1);
    /* A title out of bounds is bad input, and the archive before it in the bundle is undone. */
    char big[CS_TITLE_MAX_BYTES + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *bad[] = {"", big, NULL};
    s_new_chat(chat, false);
    cs = s_begin(chat);
    assert_int_equal(chatstate_interrupt(cs, "user", &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat, "SELECT status FROM chats WHERE id = '%s'", "waiting");
    char *d0 = s_q("SELECT title || '|' || snapshot_version || '|' || archived FROM chats"
                   " WHERE id = '%s'",
                   chat);
    for (int i = 0; i < 3; i++) {
        cs = s_begin(chat);
        assert_int_equal(chatstate_set_archived(cs, true, &err), 0);
        assert_int_equal(chatstate_set_title(cs, bad[i], &err), -1);
        assert_int_equal(err.rc, CS_BAD_INPUT);
        assert_true(strncmp(err.message, "title: ", 7) == 0);
        assert_int_equal(chatstate_commit(&cs, &sink, NULL, &err), -1);
        s_expect(chat,
                 "SELECT title || '|' || snapshot_version || '|' || archived FROM chats"
                 " WHERE id = '%s'",
                 d0);
    }
    assert_int_equal(rec.updates, 1);
    free(d0);
    free(after);
    free(before);
}

static void test_reconcile_repairs_an_invalid_chat(void **u) {
    (void)u;
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    s_new_chat(chat, true);
    s_enter_action(chat);
    char *sql = mem_printf("UPDATE chats SET archived = true WHERE id = '%s'", chat);
    assert_int_equal(testdb_try(s_conn, sql, NULL, 0), 0);
    free(sql);
    chatstate_t *cs = s_begin(chat);
    cs_message_t m = {.role = "user", .content = USER_MSG};
    int64_t mid;
    int64_t qid;
    assert_int_equal(chatstate_send_message(cs, &m, CS_BUSY_QUEUE, 0, &mid, &qid, &err), -1);
    assert_int_equal(err.rc, CS_INVALID_STATE);
    assert_string_equal(err.message, "Chat is in an invalid state.");
    chatstate_destroy(&cs);
    cs = s_begin(chat);
    assert_int_equal(chatstate_reconcile_invalid(cs, &err), 0);
    s_commit(&cs, NULL);
    s_expect(chat,
             "SELECT status || ' ' || archived || ' ' || (last_error IS NOT NULL) || ' ' ||"
             " (requires_action_deadline_at IS NULL) FROM chats WHERE id = '%s'",
             "error false true true");
    s_expect(chat, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role = 'tool'",
             "1");
    cs = s_begin(chat);
    assert_int_equal(chatstate_reconcile_invalid(cs, &err), -1);
    assert_int_equal(err.rc, CS_CONFLICT);
    chatstate_destroy(&cs);
}

static int s_group_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    ASSERT(testdb_user_new(s_conn, "rules", s_owner) == 0);
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
        cmocka_unit_test(test_interrupt_on_unowned_chat_finishes_in_the_same_bundle),
        cmocka_unit_test(test_send_interrupt_on_unowned_idle_queue_sends_the_message_itself),
        cmocka_unit_test(test_interrupt_in_requires_action_answers_pending_calls),
        cmocka_unit_test(test_promotion_answers_outstanding_calls_before_the_user_message),
        cmocka_unit_test(test_a_queued_prompts_hook_context_follows_it_on_promotion),
        cmocka_unit_test(test_leaving_error_clears_last_error_but_archiving_keeps_it),
        cmocka_unit_test(test_compaction_marks_the_chat_and_refuses_when_nothing_to_compact),
        cmocka_unit_test(test_compaction_marker_survives_the_moves_that_keep_the_turn),
        cmocka_unit_test(test_compaction_marker_is_cleared_by_every_other_move),
        cmocka_unit_test(test_clear_context_inserts_the_boundary_triplet_once),
        cmocka_unit_test(test_tool_results_must_answer_exactly_the_pending_calls),
        cmocka_unit_test(test_create_without_user_message_waits_and_titles_fall_back),
        cmocka_unit_test(test_queue_cap_rejects_and_changes_nothing),
        cmocka_unit_test(test_hints_follow_commit_and_ownership_only_when_unowned),
        cmocka_unit_test(test_set_title_is_a_bundle_with_a_hint_and_fails_with_its_bundle),
        cmocka_unit_test(test_reconcile_repairs_an_invalid_chat),
    };
    return cmocka_run_group_tests(tests, s_group_setup, s_group_teardown);
}
