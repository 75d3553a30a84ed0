/* chatstate: a bundle's statements (sent ahead or run now), its row and the checks made on it;
 * the primitives every transition file uses (chatstate_priv.h). Calls nothing of the other
 * chatstate files. */
#include "chatstate_priv.h"
#include "log.h"
#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cs_fail(chatstate_t *self, cs_error_t *err, cs_rc_t rc, const char *fmt, ...) {
    self->failed = true;
    err->rc = rc;
    err->state = self->state;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* After a read: every statement sent ahead has run (or failed), and whatever inserted rows
 * it had has been handed to s_inserted. */
static void s_sent_done(chatstate_t *self) {
    self->insert_outs.count = 0;
    self->insert_outs.head = 0;
}

static int s_first_read(chatstate_t *self, cs_error_t *err);

/* A statement of a move: unless the move sends it behind the bundle's start (self->ahead), the
 * row the start loaded is read first, so that every move decides on it as before. */
static int s_before_statement(chatstate_t *self, cs_error_t *err) {
    return self->first_pending && !self->ahead ? s_first_read(self, err) : 0;
}

PGresult *cs_query(chatstate_t *self, cs_error_t *err, const char *sql, int n,
                   const char *const *params) {
    db_err_t e;
    char msg[200];
    if (s_before_statement(self, err) != 0) {
        return NULL;
    }
    cs_touch(self);
    PGresult *res = db_query(self->conn, &e, msg, sizeof msg, sql, n, params);
    s_sent_done(self);
    if (!res) {
        char q[240];
        log_warn("chatstate_query_failed", "chat_id=%s reason=%s", self->chat_id,
                 log_quote(msg, q, sizeof q));
        cs_fail(self, err, e == DB_ERR_RETRYABLE ? CS_RETRY : CS_DB, "database: %s", msg);
    }
    return res;
}

int cs_exec(chatstate_t *self, cs_error_t *err, const char *sql, int n, const char *const *params) {
    /* Sent ahead: its result only matters as success, which the bundle's next read reports
     * (ARCHITECTURE.md §4.4). */
    if (s_before_statement(self, err) != 0) {
        return -1;
    }
    cs_touch(self);
    if (db_send(self->conn, sql, n, params, NULL, NULL) != 0) {
        return cs_fail(self, err, CS_DB, "database: %s", "could not send a statement");
    }
    return 0;
}

int cs_keep(chatstate_t *self, cs_error_t *err, const char *sql, int n, const char *const *params,
            PGresult **keep) {
    if (s_before_statement(self, err) != 0) {
        return -1;
    }
    cs_touch(self);
    if (db_send(self->conn, sql, n, params, db_keep, keep) != 0) {
        return cs_fail(self, err, CS_DB, "database: %s", "could not send a statement");
    }
    return 0;
}

static void s_ids_push(cs_ids_t *ids, int64_t id) {
    if (ids->count == ids->cap) {
        ids->cap = ids->cap ? ids->cap * 2 : 8;
        ids->ids = mem_realloc(ids->ids, (size_t)ids->cap * sizeof *ids->ids);
    }
    ids->ids[ids->count++] = id;
}

/* The columns every load reads; $1 is the chat id, and cs_row_sql writes the bundle's lease
 * stale threshold (ms) in for the %lld. */
#define CS_ROW_COLUMNS                                                                             \
    "status, archived, coalesce(worker_id::text, ''), coalesce(runner_id::text, ''),"              \
    " history_version, generation_attempt,"                                                        \
    " (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = c.id),"                       \
    " snapshot_version, queue_version, retry_state_version,"                                       \
    " (worker_id IS NULL OR runner_id IS NULL OR (SELECT true FROM chat_heartbeats h"              \
    " WHERE h.chat_id = c.id AND h.runner_id = c.runner_id AND h.heartbeat_at >"                   \
    " statement_timestamp() - %lld * interval '1 millisecond' LIMIT 1) IS NULL), owner_id::text,"  \
    " compaction_requested_at IS NOT NULL, waiting_on_agents,"                                     \
    " coalesce(parent_chat_id::text, ''), title_requested_at IS NOT NULL"

void cs_touch(chatstate_t *self) {
    self->row_fresh = false;
    self->row_coming = false;
}

/* Fills r from a result of CS_ROW_COLUMNS; false when it has no row. */
static bool s_row_parse(const PGresult *res, cs_row_t *r) {
    if (!res || PQntuples(res) != 1) {
        return false;
    }
    snprintf(r->status, sizeof r->status, "%s", PQgetvalue(res, 0, 0));
    r->archived = db_bool(res, 0, 1);
    snprintf(r->worker_id, sizeof r->worker_id, "%s", PQgetvalue(res, 0, 2));
    snprintf(r->runner_id, sizeof r->runner_id, "%s", PQgetvalue(res, 0, 3));
    r->history_version = db_int64(res, 0, 4);
    r->generation_attempt = db_int64(res, 0, 5);
    r->queue_len = db_int64(res, 0, 6);
    r->snapshot_version = db_int64(res, 0, 7);
    r->queue_version = db_int64(res, 0, 8);
    r->retry_state_version = db_int64(res, 0, 9);
    r->needs_owner = db_bool(res, 0, 10);
    snprintf(r->owner_id, sizeof r->owner_id, "%s", PQgetvalue(res, 0, 11));
    r->compaction_requested = db_bool(res, 0, 12);
    r->agent_wait = db_bool(res, 0, 13);
    snprintf(r->parent_chat_id, sizeof r->parent_chat_id, "%s", PQgetvalue(res, 0, 14));
    r->title_requested = db_bool(res, 0, 15);
    return true;
}

static exec_state_t s_row_state(const cs_row_t *r) {
    return chatmove_classify(true, r->status, r->archived, r->queue_len > 0);
}

/* Fills the row from a result of CS_ROW_COLUMNS and frees it; -1 (not found) when it has no
 * row. */
int cs_row_from(chatstate_t *self, PGresult *res, cs_error_t *err) {
    bool found = s_row_parse(res, &self->row);
    PQclear(res);
    if (!found) {
        self->state = ES_N;
        return cs_fail(self, err, CS_NOT_FOUND, "chat not found");
    }
    self->state = s_row_state(&self->row);
    self->row_fresh = true;
    return 0;
}

/* The start's kept load, which the caller now owns; the start is no longer pending. */
static PGresult *s_take_first(chatstate_t *self) {
    PGresult *res = self->first;
    self->first = NULL;
    self->first_pending = false;
    return res;
}

/* A start whose load never ran (a load that ran and found no row is a result): the
 * transaction failed before it, or the connection did, and whoever read first was told why (a
 * move's own read: its failure stands; a caller's statements sent behind the start: CS_DB).
 * Never a missing chat. -1 then, else 0. */
static int s_first_failed(chatstate_t *self, const PGresult *res, cs_error_t *err) {
    if (res) {
        return 0;
    }
    return self->failed ? -1
                        : cs_fail(self, err, CS_DB, "database: %s", "the bundle's start failed");
}

/* Reads the row a start sent ahead loaded (joined, nested, or chatstate_begin_ahead; its
 * statements run now if they have not yet). */
static int s_first_read(chatstate_t *self, cs_error_t *err) {
    char msg[200];
    db_err_t e = db_flush(self->conn, msg, sizeof msg);
    s_sent_done(self);
    PGresult *res = s_take_first(self);
    if (e != DB_OK) {
        PQclear(res);
        return cs_fail(self, err, e == DB_ERR_RETRYABLE ? CS_RETRY : CS_DB, "database: %s", msg);
    }
    return s_first_failed(self, res, err) != 0 ? -1 : cs_row_from(self, res, err);
}

/* The checks of a move from state that do not depend on a fence: an invalid chat
 * (CS_INVALID_STATE), the move table (CS_CONFLICT naming the state). */
int cs_move_check(chatstate_t *self, exec_state_t state, chatmove_t move, cs_error_t *err) {
    /* SetTitle writes metadata only, so an invalid chat may still be renamed. */
    if (state == ES_INVALID && move != MV_RECONCILE_INVALID && move != MV_ABANDON &&
        move != MV_SET_TITLE) {
        return cs_fail(self, err, CS_INVALID_STATE, "Chat is in an invalid state.");
    }
    if (!chatmove_allowed(state, move)) {
        return cs_fail(self, err, CS_CONFLICT, "chat is in state %s: %s is not allowed",
                       chatmove_state_name(state), chatmove_name(move));
    }
    return 0;
}

/* What a fence no longer matches, or NULL. Archived is left to the move table: no worker
 * move is allowed from an archived state, so that case is a conflict naming the state. */
static const char *s_fence_mismatch(const cs_row_t *r, const cs_fence_t *f) {
    if (strcmp(r->worker_id, f->worker_id) != 0 || strcmp(r->runner_id, f->runner_id) != 0) {
        return "owner";
    }
    if (f->status && strcmp(r->status, f->status) != 0) {
        return "status";
    }
    if (f->history_version >= 0 && r->history_version != f->history_version) {
        return "history_version";
    }
    if (f->generation_attempt >= 0 && r->generation_attempt != f->generation_attempt) {
        return "generation_attempt";
    }
    return NULL;
}

int cs_fence_check(chatstate_t *self, const cs_row_t *r, const cs_fence_t *f, cs_error_t *err) {
    const char *why = f ? s_fence_mismatch(r, f) : NULL;
    if (!why) {
        return 0;
    }
    log_info("fence_mismatch",
             "chat_id=%s field=%s worker_id=%s runner_id=%s history_version=%lld "
             "expected_history_version=%lld generation_attempt=%lld expected_attempt=%lld",
             self->chat_id, why, f->worker_id, f->runner_id, (long long)r->history_version,
             (long long)f->history_version, (long long)r->generation_attempt,
             (long long)f->generation_attempt);
    return cs_fail(self, err, CS_FENCED, "fenced out: %s changed", why);
}

int cs_first_check(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, exec_state_t *from,
                   cs_error_t *err) {
    self->ahead = false;
    if (self->first_pending) {
        /* A move that failed before its writes were read: what was sent runs now, so that
         * the start's row is there to decide (a failure among them is the move's already). */
        db_flush(self->conn, NULL, 0);
        s_sent_done(self);
    }
    cs_row_t r;
    PGresult *res = s_take_first(self);
    if (s_first_failed(self, res, err) != 0) {
        return -1;
    }
    bool found = s_row_parse(res, &r);
    PQclear(res);
    if (!found) {
        return cs_fail(self, err, CS_NOT_FOUND, "chat not found");
    }
    *from = s_row_state(&r);
    if (cs_fence_check(self, &r, fence, err) != 0) {
        return -1;
    }
    return cs_move_check(self, *from, move, err);
}

/* The statement that loads the row (CS_ROW_COLUMNS) of chat $1; caller frees. */
char *cs_row_sql(const chatstate_t *self) {
    return mem_printf("SELECT " CS_ROW_COLUMNS " FROM chats c WHERE id = $1",
                      (long long)self->settings.lease_stale_ms);
}

/* The RETURNING row of a statement sent by cs_exec_row, when it is read. */
static void s_row_returned(void *ctx, const PGresult *res) {
    chatstate_t *self = ctx;
    self->returned = s_row_parse(res, &self->row);
}

int cs_exec_row(chatstate_t *self, cs_error_t *err, const char *sql, int n,
                const char *const *params) {
    if (s_before_statement(self, err) != 0) {
        return -1;
    }
    cs_touch(self);
    char *full =
        mem_printf("%s RETURNING " CS_ROW_COLUMNS, sql, (long long)self->settings.lease_stale_ms);
    self->returned = false;
    int rc = db_send(self->conn, full, n, params, s_row_returned, self);
    free(full);
    if (rc != 0) {
        return cs_fail(self, err, CS_DB, "database: %s", "could not send a statement");
    }
    self->row_coming = true;
    return 0;
}

/* cs_load's way when the last statement sent returns the row: it runs now, with what was
 * sent before it. 0, -1, or 1 when it wrote no row (its WHERE refused): the row is loaded. */
static int s_load_returned(chatstate_t *self, cs_error_t *err) {
    char msg[200];
    db_err_t e = db_flush(self->conn, msg, sizeof msg);
    s_sent_done(self);
    self->row_coming = false;
    if (e != DB_OK) {
        return cs_fail(self, err, e == DB_ERR_RETRYABLE ? CS_RETRY : CS_DB, "database: %s", msg);
    }
    if (!self->returned) {
        return 1;
    }
    self->state = s_row_state(&self->row);
    self->row_fresh = true;
    return 0;
}

int cs_load(chatstate_t *self, cs_error_t *err) {
    if (self->failed || !self->open) {
        return cs_fail(self, err, CS_DB, "bundle already failed");
    }
    if (s_before_statement(self, err) != 0) {
        return -1;
    }
    if (self->row_fresh) {
        return 0;
    }
    int returned = self->row_coming ? s_load_returned(self, err) : 1;
    if (returned <= 0) {
        return returned;
    }
    const char *p[] = {self->chat_id};
    char *sql = cs_row_sql(self);
    PGresult *res = cs_query(self, err, sql, 1, p);
    free(sql);
    return res ? cs_row_from(self, res, err) : -1;
}

void cs_ids_push_inserted(chatstate_t *self, int64_t id) {
    s_ids_push(&self->inserted, id);
}

void cs_deleted_push(chatstate_t *self, int64_t id) {
    s_ids_push(&self->deleted, id);
}

int cs_link_files(chatstate_t *self, const char *content, cs_error_t *err) {
    if (!content || !strstr(content, "\"file_id\"")) {
        return 0;
    }
    if (self->settings.max_attachments < 1) {
        return cs_fail(self, err, CS_BAD_INPUT, "no attachment cap is configured");
    }
    char cap[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id, content, db_param_int64(cap, self->settings.max_attachments)};
    /* One statement: the message's files locked and checked, then (only when all pass) the
     * chat's earliest other files evicted to make room and the new ones linked. */
    PGresult *res = cs_query(
        self, err,
        "WITH msg AS (SELECT DISTINCT (p ->> 'file_id')::uuid AS id"
        " FROM jsonb_array_elements($2::jsonb) p"
        " WHERE p ->> 'type' = 'file' AND p ? 'file_id'),"
        " f AS (SELECT c.id, c.chat_id FROM chat_files c"
        " WHERE c.id IN (SELECT id FROM msg) AND c.complete"
        " AND c.owner_id = (SELECT owner_id FROM chats WHERE id = $1) FOR UPDATE OF c),"
        " chk AS (SELECT (SELECT count(*) FROM msg) AS wanted,"
        " count(*) FILTER (WHERE chat_id IS NULL OR chat_id = $1) AS ok,"
        " count(*) FILTER (WHERE chat_id IS NULL) AS fresh FROM f),"
        " plan AS (SELECT wanted, ok = wanted AND wanted <= $3::int AS v,"
        " CASE WHEN ok = wanted AND wanted <= $3::int THEN greatest(0, (SELECT count(*)"
        " FROM chat_files WHERE chat_id = $1) + fresh - $3::int) ELSE 0 END AS n FROM chk),"
        " evicted AS (DELETE FROM chat_files WHERE id IN (SELECT id FROM chat_files"
        " WHERE chat_id = $1 AND id NOT IN (SELECT id FROM msg) ORDER BY created_at, id"
        " LIMIT (SELECT n FROM plan)) RETURNING id),"
        " linked AS (UPDATE chat_files SET chat_id = $1 WHERE (SELECT v FROM plan)"
        " AND id IN (SELECT id FROM f WHERE chat_id IS NULL) RETURNING id)"
        " SELECT p.wanted, p.v, (SELECT count(*) FROM evicted), (SELECT count(*) FROM linked)"
        " FROM plan p",
        3, p);
    if (!res) {
        return -1;
    }
    int64_t wanted = db_int64(res, 0, 0);
    bool ok = db_bool(res, 0, 1);
    int64_t evicted = db_int64(res, 0, 2);
    PQclear(res);
    if (!ok && wanted > self->settings.max_attachments) {
        return cs_fail(self, err, CS_BAD_INPUT,
                       "content: the message names %lld files, over the chat's cap of %d",
                       (long long)wanted, self->settings.max_attachments);
    }
    if (!ok) {
        return cs_fail(self, err, CS_BAD_INPUT,
                       "content: a file the message names is gone (deleted or evicted), not "
                       "the owner's, or attached to another chat");
    }
    if (evicted > 0) {
        log_info("chat_files_evicted", "chat_id=%s evicted=%lld cap=%d", self->chat_id,
                 (long long)evicted, self->settings.max_attachments);
    }
    return 0;
}
