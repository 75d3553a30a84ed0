/* chatstate: bundles and the helpers every transition uses; see chatstate.h. */
#include "chatstate_priv.h"
#include "log.h"
#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs a statement now (after whatever was sent ahead); 0 or -1 as cs_query. */
static int s_exec_now(chatstate_t *self, cs_error_t *err, const char *sql) {
    PGresult *res = cs_query(self, err, sql, 0, NULL);
    PQclear(res);
    return res ? 0 : -1;
}

/* Sends a statement ahead and leaves it to the caller: the connection's next query runs it
 * and reports its failure as its own, and the bundle does not wait for it. 0 or -1. */
static int s_hand_over(chatstate_t *self, cs_error_t *err, const char *sql) {
    if (db_send(self->conn, sql, 0, NULL, NULL, NULL) != 0) {
        return cs_fail(self, err, CS_DB, "database: %s", "could not send a statement");
    }
    self->handed = true;
    return 0;
}

static chatstate_t *s_new(PGconn *conn, const cs_settings_t *settings, const char *chat_id) {
    ASSERT(settings && settings->lease_stale_ms > 0 && settings->requires_action_deadline_ms >= 0);
    chatstate_t *self = mem_calloc(1, sizeof *self);
    self->conn = conn;
    self->settings = *settings;
    snprintf(self->chat_id, sizeof self->chat_id, "%s", chat_id);
    self->state = ES_N;
    return self;
}

void chatstate_destroy(chatstate_t **self_p) {
    chatstate_t *self = *self_p;
    if (!self) {
        return;
    }
    if (!self->handed) {
        db_flush(self->conn, NULL, 0); /* what was sent ahead runs (or fails) first */
    }
    if (self->open) {
        /* A nested bundle undoes only its own work; the caller's transaction goes on. */
        PQclear(PQexec(self->conn, self->nested ? "ROLLBACK TO SAVEPOINT chatstate_bundle;"
                                                  " RELEASE SAVEPOINT chatstate_bundle"
                                                : "ROLLBACK"));
    }
    PQclear(self->first);
    free(self->inserted.ids);
    free(self->deleted.ids);
    free(self->insert_outs.outs);
    free(self->family);
    free(self);
    *self_p = NULL;
}

/* How a bundle starts: its own transaction (read at once, or sent ahead), joining the
 * caller's, or nested in it. */
typedef enum { S_BEGIN, S_BEGIN_AHEAD, S_JOIN, S_NEST } s_start_t;

static chatstate_t *s_begin(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                            s_start_t how, cs_error_t *err);

chatstate_t *chatstate_begin(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                             cs_error_t *err) {
    return s_begin(conn, settings, chat_id, S_BEGIN, err);
}

chatstate_t *chatstate_begin_ahead(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                                   cs_error_t *err) {
    return s_begin(conn, settings, chat_id, S_BEGIN_AHEAD, err);
}

static chatstate_t *s_inside(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                             s_start_t how, cs_error_t *err) {
    /* Active: statements sent ahead in it (a released bundle's RELEASE) are still running. */
    PGTransactionStatusType ts = PQtransactionStatus(conn);
    if (ts != PQTRANS_INTRANS && ts != PQTRANS_ACTIVE) {
        memset(err, 0, sizeof *err);
        err->rc = CS_DB;
        snprintf(err->message, sizeof err->message, "chatstate: no open transaction");
        return NULL;
    }
    return s_begin(conn, settings, chat_id, how, err);
}

chatstate_t *chatstate_join(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                            cs_error_t *err) {
    return s_inside(conn, settings, chat_id, S_JOIN, err);
}

chatstate_t *chatstate_nest(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                            cs_error_t *err) {
    return s_inside(conn, settings, chat_id, S_NEST, err);
}

static chatstate_t *s_begin(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                            s_start_t how, cs_error_t *err) {
    memset(err, 0, sizeof *err);
    err->state = ES_N;
    chatstate_t *self = s_new(conn, settings, chat_id);
    self->nested = how == S_NEST;
    if (!id_uuid_valid(chat_id)) {
        cs_fail(self, err, CS_NOT_FOUND, "chat not found");
        chatstate_destroy(&self);
        return NULL;
    }
    /* BEGIN, the row lock with the snapshot_version bump, and the first load, in one round
     * trip of prepared statements (ARCHITECTURE.md §4.4). The load is its own statement so
     * that it reads with a snapshot taken after the lock was granted (a RETURNING subquery
     * would see the queue as of before the wait). */
    static const char *const start[] = {[S_BEGIN] = "BEGIN",
                                        [S_BEGIN_AHEAD] = "BEGIN",
                                        [S_JOIN] = NULL,
                                        [S_NEST] = "SAVEPOINT chatstate_bundle"};
    const char *p[] = {chat_id};
    int sent = start[how] ? db_send(conn, start[how], 0, NULL, NULL, NULL) : 0;
    if (sent == 0) {
        sent =
            db_send(conn, "UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = $1",
                    1, p, NULL, NULL);
    }
    char *sql = cs_row_sql(self);
    /* Sent ahead (joined, nested, or asked for): the load is sent too and read with the
     * bundle's first read (ARCHITECTURE.md §6.2 step 4); a failure is that read's. */
    bool ahead = how != S_BEGIN;
    if (ahead && sent == 0) {
        sent = db_send(conn, sql, 1, p, db_keep, &self->first);
    }
    if (ahead && sent == 0) {
        free(sql);
        self->open = self->first_pending = true;
        return self;
    }
    db_err_t e = DB_ERR_CONNECTION;
    char msg[200] = "could not send a statement";
    PGresult *res = sent == 0 ? db_query(conn, &e, msg, sizeof msg, sql, 1, p) : NULL;
    if (sent != 0) {
        db_flush(conn, NULL, 0); /* what was sent runs; the bundle fails below */
    }
    free(sql);
    /* (Had a nested bundle's SAVEPOINT itself failed, its rollback fails too, harmlessly:
     * the caller's transaction had failed already.) */
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        self->open = true;
    }
    if (!res) {
        char q[240];
        log_warn("chatstate_query_failed", "chat_id=%s reason=%s", chat_id,
                 log_quote(msg, q, sizeof q));
        cs_fail(self, err, e == DB_ERR_RETRYABLE ? CS_RETRY : CS_DB, "database: %s", msg);
        chatstate_destroy(&self);
        return NULL;
    }
    if (cs_row_from(self, res, err) != 0) {
        chatstate_destroy(&self);
        return NULL;
    }
    return self;
}

int cs_start(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, cs_error_t *err) {
    if (cs_load(self, err) != 0) {
        return -1;
    }
    if (cs_fence_check(self, &self->row, fence, err) != 0) {
        return -1;
    }
    return cs_move_check(self, self->state, move, err);
}

int cs_start_ahead(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, cs_error_t *err) {
    self->ahead = self->first_pending;
    return self->ahead ? 0 : cs_start(self, move, fence, err);
}

int cs_ahead_end(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, int rc,
                 exec_state_t *from, cs_error_t *err) {
    if (!self->ahead) {
        return rc;
    }
    rc = rc == 0 ? cs_load(self, err) : rc;
    return cs_first_check(self, move, fence, from, err) != 0 ? -1 : rc;
}

/* The one place the compaction marker is cleared by construction (ARCHITECTURE.md §4.3). Only
 * RequestCompaction sets it, and it carries it forward, so the flag of the row loaded when this
 * move started tells whether there is anything to clear: a plain turn pays no statement. */
static int s_clear_compaction(chatstate_t *self, chatmove_t move, cs_error_t *err) {
    if (chatmove_keeps_compaction(move) || !self->row.compaction_requested) {
        return 0;
    }
    const char *p[] = {self->chat_id};
    return cs_exec(self, err, "UPDATE chats SET compaction_requested_at = NULL WHERE id = $1", 1,
                   p);
}

/* An agent wait lasts while the chat stays in requires_action: every move that leaves it (the
 * resumption, an interrupt, an edit) ends it here, by construction. */
static int s_clear_agent_wait(chatstate_t *self, cs_error_t *err) {
    if (!self->row.agent_wait || self->state == ES_A0 || self->state == ES_A1) {
        return 0;
    }
    const char *p[] = {self->chat_id};
    return cs_exec(self, err, "UPDATE chats SET waiting_on_agents = false WHERE id = $1", 1, p) ||
           cs_load(self, err);
}

int cs_finish(chatstate_t *self, exec_state_t from, chatmove_t move, cs_error_t *err) {
    if (s_clear_compaction(self, move, err) != 0 || cs_load(self, err) != 0 ||
        s_clear_agent_wait(self, err) != 0) {
        return -1;
    }
    if (!chatmove_result_ok(from, move, self->state)) {
        log_error("chatstate_bad_result", "chat_id=%s from=%s move=%s to=%s", self->chat_id,
                  chatmove_state_name(from), chatmove_name(move), chatmove_state_name(self->state));
        return cs_fail(self, err, CS_DB, "internal: %s from %s landed in %s", chatmove_name(move),
                       chatmove_state_name(from), chatmove_state_name(self->state));
    }
    bool ended = self->state == ES_W || self->state == ES_E0 || self->state == ES_E1;
    if (ended && chatmove_runnable(from) && self->row.parent_chat_id[0]) {
        snprintf(self->wake, sizeof self->wake, "%s", self->row.parent_chat_id);
    }
    log_debug("transition", "chat_id=%s move=%s from=%s to=%s", self->chat_id, chatmove_name(move),
              chatmove_state_name(from), chatmove_state_name(self->state));
    return 0;
}

int cs_set_status(chatstate_t *self, const char *status, bool clear_error, cs_error_t *err) {
    const char *p[] = {self->chat_id, status, clear_error ? "t" : "f"};
    return cs_exec_row(self, err,
                       "UPDATE chats c SET status = $2::chat_status, updated_at = now(),"
                       " last_error = CASE WHEN $3::boolean THEN NULL ELSE last_error END"
                       " WHERE c.id = $1",
                       3, p);
}

/* Records the ids a multi-row insert returned (RETURNING id) as inserted and frees res; -1
 * when the insert failed (res NULL). */
static int s_take_inserted(chatstate_t *self, PGresult *res) {
    if (!res) {
        return -1;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        cs_ids_push_inserted(self, db_int64(res, i, 0));
    }
    PQclear(res);
    return 0;
}

/* The result of a message insert sent ahead: its id, in the order they were sent. */
static void s_inserted(void *ctx, const PGresult *res) {
    chatstate_t *self = ctx;
    int64_t id = db_int64(res, 0, 0);
    cs_ids_push_inserted(self, id);
    if (self->insert_outs.head < self->insert_outs.count) {
        int64_t *out = self->insert_outs.outs[self->insert_outs.head++];
        if (out) {
            *out = id;
        }
    }
}

int cs_context_check(chatstate_t *self, const cs_message_t *m, cs_error_t *err) {
    for (int i = 0; i < m->context_count; i++) {
        const cs_message_t *c = &m->context[i];
        const char *v = c->visibility ? c->visibility : "both";
        bool model_only = !strcmp(c->role, "user") && !strcmp(v, "model");
        bool user_only = !strcmp(c->role, "assistant") && !strcmp(v, "user");
        if ((!model_only && !user_only) || !c->so_meta ||
            strcmp(c->so_meta, CS_HOOK_CONTEXT_META) || c->context_count) {
            return cs_fail(self, err, CS_BAD_INPUT,
                           "hook context: a model-only user row or a user-only assistant row");
        }
    }
    return 0;
}

char *cs_context_json(const cs_message_t *m) {
    /* Roles, visibilities and metadata are the checked constants; content is JSON already. */
    size_t n = 3;
    for (int i = 0; i < m->context_count; i++) {
        n += strlen(m->context[i].content) + sizeof CS_HOOK_CONTEXT_META + 128;
    }
    char *out = mem_calloc(1, n);
    size_t w = 0;
    out[w++] = '[';
    for (int i = 0; i < m->context_count; i++) {
        const cs_message_t *c = &m->context[i];
        w += (size_t)snprintf(out + w, n - w,
                              "%s{\"role\":\"%s\",\"visibility\":\"%s\",\"content\":%s,"
                              "\"structured_output\":%s}",
                              i ? "," : "", c->role, c->visibility, c->content, c->so_meta);
    }
    out[w++] = ']';
    return out;
}

/* Inserts the hook context rows kept with a queued message (context_json, a JSON array as
 * cs_context_json wrote it) right after it, in order, created by created_by. */
static int s_insert_kept_context(chatstate_t *self, const char *context_json,
                                 const char *created_by, cs_error_t *err) {
    const char *p[] = {self->chat_id, context_json, created_by};
    PGresult *res =
        cs_query(self, err,
                 "INSERT INTO chat_messages (chat_id, role, visibility, content, created_by,"
                 " structured_output) SELECT $1, (e ->> 'role')::chat_message_role,"
                 " (e ->> 'visibility')::chat_message_visibility, e -> 'content', $3::uuid,"
                 " e -> 'structured_output' FROM json_array_elements($2::json) WITH ORDINALITY "
                 "AS x(e, ord)"
                 " ORDER BY ord RETURNING id",
                 3, p);
    return s_take_inserted(self, res);
}

int cs_insert(chatstate_t *self, const cs_message_t *m, int64_t queued_id, int64_t *id_out,
              cs_error_t *err) {
    /* A promoted row's files were linked when it was queued (one of them may have been
     * evicted since: the history then shows its placeholder). */
    if (cs_context_check(self, m, err) != 0 ||
        (!queued_id && cs_link_files(self, m->content, err) != 0)) {
        return -1;
    }
    char qid[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id,
                       m->role,
                       m->visibility,
                       m->content,
                       m->created_by,
                       m->model_config_id,
                       m->usage,
                       m->so_request_id,
                       m->so_meta,
                       queued_id ? db_param_int64(qid, queued_id) : NULL,
                       m->compressed ? "t" : "f",
                       m->response_format,
                       m->reasoning_effort,
                       m->traceparent,
                       m->queued_at};
    /* Sent ahead: the id reaches the inserted list (and *id_out) when the bundle next reads,
     * which every transition does before it ends (cs_finish). */
    cs_touch(self);
    if (self->insert_outs.count == self->insert_outs.cap) {
        self->insert_outs.cap = self->insert_outs.cap ? self->insert_outs.cap * 2 : 4;
        self->insert_outs.outs = mem_realloc(
            self->insert_outs.outs, (size_t)self->insert_outs.cap * sizeof *self->insert_outs.outs);
    }
    self->insert_outs.outs[self->insert_outs.count++] = id_out;
    if (db_send(self->conn,
                "INSERT INTO chat_messages (chat_id, role, visibility, content, created_by,"
                " model_config_id, usage, structured_output_request_id, structured_output,"
                " queued_message_id, compressed, reasoning_effort, traceparent, queued_at)"
                " VALUES ($1, $2::chat_message_role, coalesce($3, 'both')::chat_message_visibility,"
                " $4::json, $5::uuid, $6::uuid, $7::jsonb, $8::uuid,"
                " coalesce($9::json, CASE WHEN $12::json IS NULL THEN NULL ELSE json_build_object("
                "'type', 'structured-output-request', 'response_format', $12::json) END),"
                " $10::bigint, $11::boolean, $13::reasoning_effort, $14, $15::timestamptz)"
                " RETURNING id",
                15, p, s_inserted, self) != 0) {
        self->insert_outs.count--;
        return cs_fail(self, err, CS_DB, "database: %s", "could not send a statement");
    }
    /* A user message that names a model: the chat's turn runs on it from now on, so the chat
     * records it as its last model (ARCHITECTURE.md §7.1); its reasoning effort likewise
     * becomes the chat's last_reasoning_effort. */
    if ((m->model_config_id || m->reasoning_effort) && !strcmp(m->role, "user") &&
        (!m->visibility || strcmp(m->visibility, "model")) && !m->compressed) {
        const char *mp[] = {self->chat_id, m->model_config_id, m->reasoning_effort};
        if (cs_exec(self, err,
                    "UPDATE chats SET model_config_id = coalesce($2::uuid, model_config_id),"
                    " last_reasoning_effort = coalesce($3::reasoning_effort,"
                    " last_reasoning_effort) WHERE id = $1",
                    3, mp) != 0) {
            return -1;
        }
    }
    for (int i = 0; i < m->context_count; i++) {
        if (cs_insert(self, &m->context[i], 0, NULL, err) != 0) {
            return -1;
        }
    }
    return 0;
}

int cs_insert_all(chatstate_t *self, const cs_message_t *msgs, int count, cs_error_t *err) {
    for (int i = 0; i < count; i++) {
        if (cs_insert(self, &msgs[i], 0, NULL, err) != 0) {
            return -1;
        }
    }
    return 0;
}

const char *const chatstate_pending_calls_sql =
    CS_PENDING_CALLS_SQL " SELECT call_id, name, args FROM pending ORDER BY mid, ord";

const char *const chatstate_client_calls_sql =
    CS_PENDING_CALLS_SQL " SELECT call_id, name, args FROM pending"
                         " WHERE name <> '" CS_AGENT_WAIT_TOOL "' ORDER BY mid, ord";

int cs_answer_pending(chatstate_t *self, const char *reason, cs_error_t *err) {
    const char *p[] = {self->chat_id, reason};
    PGresult *res = cs_query(
        self, err,
        CS_PENDING_CALLS_SQL
        " INSERT INTO chat_messages (chat_id, role, visibility, content)"
        " SELECT $1, 'tool', 'both', json_build_array(json_build_object('type', 'tool-result',"
        " 'tool_call_id', call_id, 'tool_name', name,"
        " 'result', json_build_object('error', $2::text), 'is_error', true))"
        " FROM pending ORDER BY mid, ord RETURNING id",
        2, p);
    return s_take_inserted(self, res);
}

int cs_promote(chatstate_t *self, int64_t queued_id, int64_t *message_id, cs_error_t *err) {
    char qid[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id, db_param_int64(qid, queued_id)};
    PGresult *res =
        cs_query(self, err,
                 "DELETE FROM chat_queued_messages WHERE id = (SELECT id FROM chat_queued_messages"
                 " WHERE chat_id = $1 AND ($2::bigint = 0 OR id = $2::bigint)"
                 " ORDER BY position, id LIMIT 1)"
                 " RETURNING id, content::text, created_by::text, model_config_id::text,"
                 " response_format::text, structured_output_request_id::text,"
                 " hook_context::text, reasoning_effort::text, traceparent, created_at::text",
                 2, p);
    if (!res) {
        return -1;
    }
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cs_fail(self, err, CS_NOT_FOUND, "queued message not found");
    }
    int64_t promoted = db_int64(res, 0, 0);
    cs_message_t m = {.role = "user",
                      .content = db_text(res, 0, 1),
                      .created_by = db_text(res, 0, 2),
                      .model_config_id = db_text(res, 0, 3),
                      .response_format = db_text(res, 0, 4),
                      .so_request_id = db_text(res, 0, 5),
                      .reasoning_effort = db_text(res, 0, 7),
                      .traceparent = db_text(res, 0, 8),
                      .queued_at = db_text(res, 0, 9)};
    int rc = cs_answer_pending(self, "tool call canceled: a new user message arrived", err);
    if (rc == 0) {
        rc = cs_insert(self, &m, promoted, message_id, err);
    }
    if (rc == 0 && db_text(res, 0, 6)) {
        rc = s_insert_kept_context(self, db_text(res, 0, 6), m.created_by, err);
    }
    PQclear(res);
    return rc;
}

int cs_land_after_turn(chatstate_t *self, int64_t *promoted, bool release, cs_error_t *err) {
    const char *p[] = {self->chat_id, release ? "t" : "f"};
    /* One statement for the usual case: the deadline cleared and, with nothing queued, the
     * chat waiting. With a queue the status is left to the promotion below. Sent ahead,
     * returning the row, whose queue length says which case this is (the chat's row lock
     * keeps the queue still in between): one round trip, and the move's closing load is
     * free. Released, a chat that lands waiting loses its owner and lease in the same
     * statement (Abandon's writes). */
    if (cs_exec_row(self, err,
                    "WITH w AS (SELECT count(*) AS n FROM chat_queued_messages WHERE chat_id = $1),"
                    " gone AS (DELETE FROM chat_heartbeats h USING chats o, w WHERE $2::boolean"
                    " AND w.n = 0 AND h.chat_id = $1 AND o.id = $1 AND h.runner_id = o.runner_id)"
                    " UPDATE chats c SET requires_action_deadline_at = NULL,"
                    " status = CASE WHEN w.n = 0 THEN 'waiting'::chat_status ELSE c.status END,"
                    " updated_at = CASE WHEN w.n = 0 THEN now() ELSE c.updated_at END,"
                    " worker_id = CASE WHEN $2::boolean AND w.n = 0 THEN NULL ELSE c.worker_id END,"
                    " runner_id = CASE WHEN $2::boolean AND w.n = 0 THEN NULL ELSE c.runner_id END"
                    " FROM w WHERE c.id = $1",
                    2, p) != 0 ||
        cs_load(self, err) != 0) {
        return -1;
    }
    if (self->row.queue_len == 0) {
        return 0;
    }
    if (cs_promote(self, 0, promoted, err) != 0) {
        return -1;
    }
    return cs_set_status(self, "running", false, err);
}

int cs_finish_interruption(chatstate_t *self, const cs_message_t *partial, int count,
                           int64_t *promoted, cs_error_t *err) {
    if (cs_insert_all(self, partial, count, err) != 0 ||
        cs_answer_pending(self, "tool call interrupted", err) != 0 ||
        cs_cancel_open_request(self, "interrupted", err) != 0) {
        return -1;
    }
    return cs_land_after_turn(self, promoted, false, err);
}

static void s_hint_from_row(const chatstate_t *self, hint_update_t *u) {
    const cs_row_t *r = &self->row;
    memset(u, 0, sizeof *u);
    snprintf(u->chat_id, sizeof u->chat_id, "%s", self->chat_id);
    snprintf(u->owner_id, sizeof u->owner_id, "%s", r->owner_id);
    u->title_changed = self->title_set;
    u->snapshot_version = r->snapshot_version;
    snprintf(u->worker_id, sizeof u->worker_id, "%s", r->worker_id);
    snprintf(u->runner_id, sizeof u->runner_id, "%s", r->runner_id);
    u->history_version = r->history_version;
    u->queue_version = r->queue_version;
    u->retry_state_version = r->retry_state_version;
    u->generation_attempt = r->generation_attempt;
    snprintf(u->status, sizeof u->status, "%s", r->status);
    u->archived = r->archived;
}

void chatstate_publish(const hint_sink_t *sink, const cs_hints_t *hints) {
    if (sink && sink->update) {
        sink->update(sink->ctx, &hints->update);
    }
    if (sink && sink->ownership && hints->ownership) {
        hint_ownership_t o;
        snprintf(o.chat_id, sizeof o.chat_id, "%s", hints->update.chat_id);
        o.snapshot_version = hints->update.snapshot_version;
        sink->ownership(sink->ctx, &o);
    }
}

/* Ends the bundle's own part: COMMIT, or RELEASE SAVEPOINT when nested, after a last load
 * whose row becomes the hints. The release is sent ahead and left to the caller's next query
 * (chatstate_release); a COMMIT runs now. */
static int s_end(chatstate_t *self, const char *sql, cs_hints_t *h, cs_error_t *err) {
    int rc = -1;
    if (self->failed) {
        if (err->rc == CS_OK) {
            cs_fail(self, err, CS_DB, "bundle already failed");
        }
    } else if (cs_load(self, err) == 0) {
        s_hint_from_row(self, &h->update);
        /* An idle chat with a title request also wants an owner: the acquirer's title pass
         * takes it for one title call (chatstate_title.c). */
        bool wanted =
            chatmove_runnable(self->state) || (self->row.title_requested && !self->row.archived);
        h->ownership = wanted && self->row.needs_owner && !self->row.agent_wait;
        rc = self->nested ? s_hand_over(self, err, sql) : s_exec_now(self, err, sql);
    }
    if (rc == 0) {
        self->open = false;
        const hint_update_t *u = &h->update;
        log_info(self->nested ? "bundle_released" : "bundle_committed",
                 "chat_id=%s snapshot_version=%lld history_version=%lld queue_version=%lld "
                 "generation_attempt=%lld status=%s state=%s worker_id=%s",
                 u->chat_id, (long long)u->snapshot_version, (long long)u->history_version,
                 (long long)u->queue_version, (long long)u->generation_attempt, u->status,
                 chatmove_state_name(self->state), u->worker_id[0] ? u->worker_id : "-");
    }
    return rc;
}

int chatstate_commit(chatstate_t **self_p, const hint_sink_t *sink, hint_update_t *after,
                     cs_error_t *err) {
    chatstate_t *self = *self_p;
    ASSERT(self);
    cs_hints_t h;
    int rc = -1;
    if (self->nested) {
        cs_fail(self, err, CS_DB, "internal: a nested bundle is released, not committed");
    } else {
        rc = s_end(self, "COMMIT", &h, err);
    }
    if (rc == 0) {
        chatstate_publish(sink, &h);
        for (int i = 0; i < self->family_count; i++) {
            cs_hints_t member = {.update = self->family[i]};
            chatstate_publish(sink, &member);
        }
        if (after) {
            *after = h.update;
        }
    }
    chatstate_destroy(self_p);
    return rc;
}

int chatstate_release(chatstate_t **self_p, cs_hints_t *hints, cs_error_t *err) {
    chatstate_t *self = *self_p;
    ASSERT(self && self->nested);
    int rc = s_end(self, "RELEASE SAVEPOINT chatstate_bundle", hints, err);
    chatstate_destroy(self_p);
    return rc;
}

exec_state_t chatstate_state(const chatstate_t *self) {
    return self->state;
}

const int64_t *chatstate_inserted(const chatstate_t *self, int *count) {
    *count = self->inserted.count;
    return self->inserted.ids;
}

const int64_t *chatstate_deleted(const chatstate_t *self, int *count) {
    *count = self->deleted.count;
    return self->deleted.ids;
}

int chatstate_create(PGconn *conn, const cs_settings_t *settings, const cs_create_t *c,
                     const hint_sink_t *sink, char chat_id_out[ID_UUID_LEN + 1], cs_error_t *err) {
    memset(err, 0, sizeof *err);
    char id[ID_UUID_LEN + 1];
    if (c->chat_id) {
        snprintf(id, sizeof id, "%s", c->chat_id);
    } else if (id_uuid_new(id) != 0) {
        err->rc = CS_DB;
        snprintf(err->message, sizeof err->message, "no randomness for a chat id");
        return -1;
    }
    chatstate_t *self = s_new(conn, settings, id);
    const char *first_user = NULL;
    for (int i = 0; i < c->message_count && !first_user; i++) {
        const cs_message_t *m = &c->messages[i];
        if (!strcmp(m->role, "user") && !(m->visibility && !strcmp(m->visibility, "model"))) {
            first_user = m->content;
        }
    }
    if (cs_exec(self, err, "BEGIN", 0, NULL) != 0) {
        chatstate_destroy(&self);
        return -1;
    }
    self->open = true;
    cs_family_t fam = {.depth = 0};
    if (c->parent_chat_id && cs_family_join(self, c, &fam, err) != 0) {
        chatstate_destroy(&self);
        return -1;
    }
    char depth[DB_PARAM_INT64_LEN];
    const char *p[] = {id,
                       c->owner_id,
                       c->title,
                       c->title_from_user && c->title ? "user" : "fallback",
                       first_user ? "running" : "waiting",
                       c->model_config_id,
                       c->system_prompt,
                       c->dynamic_tools,
                       first_user,
                       c->mcp_servers,
                       c->parent_chat_id,
                       c->parent_chat_id ? fam.root_chat_id : NULL,
                       db_param_int64(depth, fam.depth),
                       c->parent_chat_id ? c->spawn_call_id : NULL,
                       c->labels};
    /* The row is sent ahead with the messages, and read with the load that checks them: one
     * round trip (ARCHITECTURE.md §4.4). Were the id taken, the messages would have gone to
     * that chat inside this transaction, which the conflict below rolls back. */
    PGresult *created = NULL;
    cs_keep(self, err,
            "INSERT INTO chats (id, owner_id, title, title_source, status, model_config_id,"
            " system_prompt, dynamic_tools, mcp_servers, parent_chat_id, root_chat_id, depth,"
            " spawn_call_id, labels)"
            " SELECT $1, $2::uuid, coalesce($3,"
            " left(regexp_replace("
            "(SELECT e.p ->> 'text' FROM jsonb_array_elements($9::jsonb) e(p)"
            " WHERE e.p ->> 'type' = 'text' LIMIT 1), '\\s+', ' ', 'g'), 80), 'New Chat'),"
            " $4::chat_title_source, $5::chat_status, $6::uuid, $7, $8::json, $10::jsonb,"
            " $11::uuid, $12::uuid, $13::int, $14, coalesce($15::jsonb, '{}'::jsonb)"
            " WHERE NOT EXISTS (SELECT 1 FROM chats WHERE id = $1 OR (parent_chat_id = $11::uuid"
            " AND spawn_call_id = $14)) RETURNING id",
            15, p, &created);
    /* Plan mode rides with the row, sent ahead: no round trip of its own. */
    const char *pp[] = {id};
    if (c->plan_mode && !self->failed) {
        cs_exec(self, err, "UPDATE chats SET plan_mode = true WHERE id = $1", 1, pp);
    }
    if (!self->failed && c->system_prompt) {
        cs_message_t sys = {
            .role = "system", .visibility = "model", .content = NULL, .created_by = c->owner_id};
        const char *sp[] = {c->system_prompt};
        PGresult *js = cs_query(self, err,
                                "SELECT jsonb_build_array(jsonb_build_object('type', 'text',"
                                " 'text', $1::text))::text",
                                1, sp);
        if (js) {
            sys.content = PQgetvalue(js, 0, 0);
            cs_insert(self, &sys, 0, NULL, err);
            PQclear(js);
        }
    }
    if (!self->failed) {
        cs_insert_all(self, c->messages, c->message_count, err);
    }
    if (!self->failed) {
        cs_load(self, err);
    }
    if (created && PQntuples(created) != 1) {
        cs_fail(self, err, CS_CONFLICT, "chat %s already exists: Create is not allowed", id);
    }
    if (self->failed) {
        /* A move that failed before any read (a message's files refused, say) left the row's
         * statement unread: run it now, so that its kept result lands here to be cleared. */
        db_flush(self->conn, NULL, 0);
    }
    PQclear(created);
    if (!self->failed && cs_finish(self, ES_N, MV_CREATE, err) != 0) {
        self->failed = true;
    }
    if (self->failed) {
        chatstate_destroy(&self);
        return -1;
    }
    snprintf(chat_id_out, ID_UUID_LEN + 1, "%s", id);
    return chatstate_commit(&self, sink, NULL, err);
}
