/* chatsetup: chats in every execution state for tests; see chatsetup.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chatsetup.h"
#include "mem.h"
#include "testdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const cs_settings_t chatsetup_settings = {.lease_stale_ms = 30000,
                                          .requires_action_deadline_ms = 5 * 60 * 1000};

const chatsetup_t chatsetup_all[] = {
    {"N", 0, 0},       {"W", 0, 0},       {"E0", 0, 0},  {"E1", 1, 0},      {"E1", 2, 0},
    {"R0", 0, 0},      {"R1", 1, 0},      {"R1", 2, 0},  {"I0", 0, 0},      {"I1", 1, 0},
    {"I1", 2, 0},      {"A0", 0, 0},      {"A1", 1, 0},  {"A1", 2, 0},      {"XW", 0, 0},
    {"XE0", 0, 0},     {"XE1", 1, 0},     {"XE1", 2, 0}, {"Invalid", 1, 1}, {"Invalid", 2, 1},
    {"Invalid", 0, 2}, {"Invalid", 1, 3},
};
const int chatsetup_count = sizeof chatsetup_all / sizeof chatsetup_all[0];

void chatsetup_fence(PGconn *conn, const char *chat, cs_fence_t *f) {
    char *sql = mem_printf("SELECT status || ' ' || history_version || ' ' || generation_attempt"
                           " FROM chats WHERE id = '%s'",
                           chat);
    char *row = testdb_scalar(conn, sql);
    static char status[32];
    long long hv = 0;
    long long ga = 0;
    ASSERT(row && sscanf(row, "%31s %lld %lld", status, &hv, &ga) == 3);
    snprintf(f->worker_id, sizeof f->worker_id, "%s", CHATSETUP_WORKER);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", CHATSETUP_RUNNER);
    f->status = status;
    f->history_version = hv;
    f->generation_attempt = ga;
    free(row);
    free(sql);
}

typedef enum {
    STEP_ACQUIRE,
    STEP_REPLY,
    STEP_TOOL_CALL,
    STEP_QUEUE,
    STEP_SEND_INTERRUPT,
    STEP_INTERRUPT,
    STEP_FINISH_TURN,
    STEP_FINISH_ERROR,
    STEP_ARCHIVE,
    STEP_ABANDON,
} step_t;

static int s_step(PGconn *conn, chatstate_t *cs, const char *chat, step_t step, cs_error_t *err) {
    cs_fence_t f;
    chatsetup_fence(conn, chat, &f);
    cs_message_t user = {.role = "user", .content = CHATSETUP_USER_MSG};
    cs_message_t reply = {.role = "assistant", .content = "[{\"type\":\"text\",\"text\":\"hi\"}]"};
    cs_message_t call = {.role = "assistant",
                         .content = "[{\"type\":\"tool-call\",\"tool_call_id\":\"dyn_1\","
                                    "\"tool_name\":\"ask_user\",\"args\":{}}]"};
    int64_t mid;
    int64_t qid;
    switch (step) {
        case STEP_ACQUIRE:
            return chatstate_acquire(cs, CHATSETUP_WORKER, CHATSETUP_RUNNER, err);
        case STEP_REPLY:
            return chatstate_commit_step(cs, &f, &reply, 1, err);
        case STEP_TOOL_CALL:
            if (chatstate_commit_step(cs, &f, &call, 1, err) != 0) {
                return -1;
            }
            f.history_version = -1; /* the step itself advanced it */
            return chatstate_enter_requires_action(cs, &f, err);
        case STEP_QUEUE:
            return chatstate_send_message(cs, &user, CS_BUSY_QUEUE, 0, &mid, &qid, err);
        case STEP_SEND_INTERRUPT:
            return chatstate_send_message(cs, &user, CS_BUSY_INTERRUPT, 0, &mid, &qid, err);
        case STEP_INTERRUPT:
            return chatstate_interrupt(cs, "user", err);
        case STEP_FINISH_TURN:
            return chatstate_finish_turn(cs, &f, NULL, 0, err);
        case STEP_FINISH_ERROR:
            return chatstate_finish_error(cs, &f, "{\"message\":\"boom\"}", NULL, 0, err);
        case STEP_ARCHIVE:
            return chatstate_set_archived(cs, true, err);
        case STEP_ABANDON:
            return chatstate_abandon(cs, &f, err);
    }
    return -1;
}

/* One bundle applying one step; fails the test on any error. */
static void s_bundle(PGconn *conn, const char *chat, step_t step, int times) {
    for (int i = 0; i < times; i++) {
        cs_error_t err = {0};
        chatstate_t *cs = chatstate_begin(conn, &chatsetup_settings, chat, &err);
        if (!cs || s_step(conn, cs, chat, step, &err) != 0 ||
            chatstate_commit(&cs, NULL, NULL, &err) != 0) {
            chatstate_destroy(&cs);
            fail_msg("chatsetup: step %d failed: %s", (int)step, err.message);
        }
    }
}

static void s_sql(PGconn *conn, const char *fmt, const char *chat) {
    char *sql = mem_printf(fmt, chat);
    char err[256];
    if (testdb_try(conn, sql, err, sizeof err) != 0) {
        fail_msg("chatsetup: %s: %s", sql, err);
    }
    free(sql);
}

/* The steps from a fresh owned R0 chat (user message, reply) to a valid state. */
static void s_reach(PGconn *conn, const char *chat, const char *n, int queued) {
    switch (n[0]) {
        case 'R':
            s_bundle(conn, chat, STEP_QUEUE, queued);
            break;
        case 'I':
            s_bundle(conn, chat, queued > 0 ? STEP_SEND_INTERRUPT : STEP_INTERRUPT, 1);
            s_bundle(conn, chat, STEP_QUEUE, queued > 1 ? queued - 1 : 0);
            break;
        case 'A':
            s_bundle(conn, chat, STEP_TOOL_CALL, 1);
            s_bundle(conn, chat, STEP_QUEUE, queued);
            break;
        case 'W':
            s_bundle(conn, chat, STEP_FINISH_TURN, 1);
            break;
        case 'E':
            s_bundle(conn, chat, STEP_QUEUE, queued);
            s_bundle(conn, chat, STEP_FINISH_ERROR, 1);
            break;
        default:
            fail_msg("chatsetup: unknown state %s", n);
    }
}

void chatsetup_build(PGconn *conn, const char *owner, const chatsetup_t *s, bool unowned,
                     char chat[ID_UUID_LEN + 1]) {
    if (!strcmp(s->name, "N")) {
        ASSERT(id_uuid_new(chat) == 0);
        return;
    }
    cs_message_t first = {.role = "user", .content = CHATSETUP_USER_MSG};
    cs_create_t c = {.owner_id = owner, .messages = &first, .message_count = 1};
    cs_error_t err;
    if (chatstate_create(conn, &chatsetup_settings, &c, NULL, chat, &err) != 0) {
        fail_msg("chatsetup: create: %s", err.message);
    }
    s_bundle(conn, chat, STEP_ACQUIRE, 1);
    s_bundle(conn, chat, STEP_REPLY, 1);
    bool archived = s->name[0] == 'X';
    if (s->invalid_kind == 1) {
        s_bundle(conn, chat, STEP_QUEUE, s->queued);
        s_sql(conn, "UPDATE chats SET status = 'waiting' WHERE id = '%s'", chat);
    } else if (s->invalid_kind == 2) {
        s_sql(conn, "UPDATE chats SET archived = true WHERE id = '%s'", chat);
    } else if (s->invalid_kind == 3) {
        s_bundle(conn, chat, STEP_TOOL_CALL, 1);
        s_bundle(conn, chat, STEP_QUEUE, 1);
        s_sql(conn, "UPDATE chats SET archived = true WHERE id = '%s'", chat);
    } else {
        s_reach(conn, chat, archived ? s->name + 1 : s->name, s->queued);
    }
    if (archived) {
        s_bundle(conn, chat, STEP_ARCHIVE, 1);
    }
    if (unowned) {
        s_bundle(conn, chat, STEP_ABANDON, 1);
    }
}

char *chatsetup_digest(PGconn *conn, const char *chat) {
    char *sql = mem_printf(
        "SELECT md5(coalesce((SELECT row_to_json(c)::text FROM chats c WHERE id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(m)::text, ',' ORDER BY id)"
        " FROM chat_messages m WHERE chat_id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(q)::text, ',' ORDER BY id)"
        " FROM chat_queued_messages q WHERE chat_id = '%1$s'), '')"
        " || coalesce((SELECT string_agg(row_to_json(h)::text, ',' ORDER BY runner_id)"
        " FROM chat_heartbeats h WHERE chat_id = '%1$s'), ''))",
        chat);
    char *d = testdb_scalar(conn, sql);
    free(sql);
    return d;
}
