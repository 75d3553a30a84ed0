/* chatstate: a chat's organization metadata (labels, pins) and the owner's read marker
 * (ARCHITECTURE.md §3, "Metadata"; issue 38). Labels and pins are metadata as a title is:
 * allowed in every state, the state left as it was, and no version moved but the bundle's
 * snapshot_version. See chatstate.h. */
#include "chatstate_priv.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The owner's pin lock, keyed as chatfile.c keys the owner's file lock ('chat_files:'): one
 * renumbering of an owner's pins at a time. The owner is read from the chat (it never
 * changes), so the statement needs no owner of its caller. */
#define CS_PIN_LOCK_SQL                                                                            \
    "SELECT pg_advisory_xact_lock(hashtextextended('chat_pins:' || owner_id::text, 0))"            \
    " FROM chats WHERE id = $1"

chatstate_t *chatstate_begin_pinning(PGconn *conn, const cs_settings_t *settings,
                                     const char *chat_id, cs_error_t *err) {
    memset(err, 0, sizeof *err);
    err->state = ES_N;
    if (!id_uuid_valid(chat_id)) {
        err->rc = CS_NOT_FOUND;
        snprintf(err->message, sizeof err->message, "chat not found");
        return NULL;
    }
    const char *p[] = {chat_id};
    char msg[200] = "could not send a statement";
    /* BEGIN rides with the lock: one round trip, and the lock is held before the row's. */
    db_err_t e = db_send(conn, "BEGIN", 0, NULL, NULL, NULL) == 0
                     ? db_exec(conn, msg, sizeof msg, CS_PIN_LOCK_SQL, 1, p)
                     : DB_ERR_CONNECTION;
    if (e != DB_OK) {
        db_flush(conn, NULL, 0);
        if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
            (void)db_exec(conn, NULL, 0, "ROLLBACK", 0, NULL); /* a lost connection is reset */
        }
        err->rc = e == DB_ERR_RETRYABLE ? CS_RETRY : CS_DB;
        snprintf(err->message, sizeof err->message, "database: %s", msg);
        return NULL;
    }
    chatstate_t *self = chatstate_join(conn, settings, chat_id, err);
    if (!self) {
        (void)db_exec(conn, NULL, 0, "ROLLBACK", 0, NULL);
    }
    return self;
}

int chatstate_set_labels(chatstate_t *self, const char *labels, cs_error_t *err) {
    if (cs_start(self, MV_SET_TITLE, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, labels};
    /* A labels text that is not an object fails the row's CHECK: the caller's programming
     * error (the gateway checks the request first), reported as a database failure. */
    if (cs_exec(self, err, "UPDATE chats SET labels = $2::jsonb WHERE id = $1", 2, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_SET_TITLE, err);
}

/* The renumbering of one pin move, in one statement (after the owner's pin lock, so its
 * snapshot sees every committed move of the owner's pins): "want" is where the chat goes (0:
 * unpinned; an unpinned chat goes last, count + 1; a pinned one to $2 clamped to 1..count) and
 * the pins between its old place and its new one shift by one, so the owner's pins stay 1..n
 * without a gap or a tie. */
#define CS_PIN_SQL                                                                                 \
    "WITH me AS (SELECT owner_id, pin_order AS cur FROM chats WHERE id = $1),"                     \
    " n AS (SELECT count(*)::int AS pinned FROM chats o, me"                                       \
    " WHERE o.owner_id = me.owner_id AND o.pin_order > 0),"                                        \
    " t AS (SELECT me.owner_id, me.cur, CASE WHEN $2::int = 0 THEN 0"                              \
    " WHEN me.cur = 0 THEN n.pinned + 1 ELSE least(greatest($2::int, 1), n.pinned) END AS want"    \
    " FROM me, n)"                                                                                 \
    " UPDATE chats c SET pin_order = CASE WHEN c.id = $1 THEN t.want"                              \
    " WHEN t.want = 0 OR t.want > t.cur THEN c.pin_order - 1 ELSE c.pin_order + 1 END"             \
    " FROM t WHERE c.owner_id = t.owner_id AND t.want <> t.cur AND (c.id = $1"                     \
    " OR (t.cur > 0 AND c.pin_order > 0 AND ((t.want = 0 AND c.pin_order > t.cur)"                 \
    " OR (t.want > t.cur AND c.pin_order > t.cur AND c.pin_order <= t.want)"                       \
    " OR (t.want > 0 AND t.want < t.cur AND c.pin_order >= t.want AND c.pin_order < t.cur))))"

int chatstate_set_pin_order(chatstate_t *self, int32_t pin_order, cs_error_t *err) {
    if (pin_order < 0) {
        return cs_fail(self, err, CS_BAD_INPUT, "pin_order: Pin order must be non-negative.");
    }
    if (cs_start(self, MV_SET_TITLE, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    if (pin_order > 0 && self->row.archived) {
        return cs_fail(self, err, CS_BAD_INPUT, "pin_order: Cannot pin an archived chat.");
    }
    if (pin_order > 0 && self->row.parent_chat_id[0]) {
        return cs_fail(self, err, CS_BAD_INPUT, "pin_order: Only a root chat can be pinned.");
    }
    char n[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id, db_param_int64(n, pin_order)};
    /* The lock again (it is re-entrant): a bundle started by chatstate_begin is still
     * serialized with the owner's other pin moves, only no longer free of deadlocks. */
    if (cs_exec(self, err, CS_PIN_LOCK_SQL, 1, p) != 0 ||
        cs_exec(self, err, CS_PIN_SQL, 2, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_SET_TITLE, err);
}

int chatstate_mark_read(PGconn *conn, const char *chat_id, const char *user_id,
                        int64_t message_id) {
    char id[DB_PARAM_INT64_LEN];
    const char *p[] = {chat_id, user_id, db_param_int64(id, message_id)};
    char msg[200] = "";
    /* Only the owner's marker, and only forward: a read of an older page, or a stream that
     * delivered less than a page did, leaves it where it is. Such a mark locks nothing and
     * writes nothing, so it commits without a WAL flush: an ON CONFLICT DO UPDATE would lock
     * the row even when its WHERE refuses, and 10,000 streams of one chat marking the same
     * message would queue on that lock, a flushed commit each (tests/bench/README.md,
     * "streams/run"). Two first marks at once keep one of them; the next mark moves it on. */
    db_err_t e = db_exec(
        conn, msg, sizeof msg,
        "WITH moved AS (UPDATE chat_read_markers SET last_read_message_id = $3::bigint"
        " WHERE chat_id = $1::uuid AND user_id = $2::uuid AND last_read_message_id < $3::bigint"
        " RETURNING 1)"
        " INSERT INTO chat_read_markers (chat_id, user_id, last_read_message_id)"
        " SELECT id, owner_id, $3::bigint FROM chats WHERE id = $1::uuid AND owner_id = $2::uuid"
        " AND NOT EXISTS (SELECT 1 FROM chat_read_markers WHERE chat_id = $1::uuid"
        " AND user_id = $2::uuid) ON CONFLICT (chat_id, user_id) DO NOTHING",
        3, p);
    if (e != DB_OK) {
        char q[256];
        log_warn("mark_read_failed", "chat_id=%s user_id=%s message_id=%lld reason=%s", chat_id,
                 user_id, (long long)message_id, log_quote(msg, q, sizeof q));
        return -1;
    }
    return 0;
}
