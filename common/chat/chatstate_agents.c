/* chatstate_agents: agent waits and family interrupts (ARCHITECTURE.md §3, "Agent waits");
 * see chatstate.h. The last of the chatstate files: it runs whole bundles of the others. */
#include "chatstate_priv.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest answer text a wait returns per child, in characters (before JSON escaping). */
#define S_ANSWER_MAX "32768"

/* For one wait_agent call of parent $1 with args $2: whether every child it names has ended,
 * and its result. A name that is not a child of the parent is an entry of its own. The answer
 * is the text of the child's latest visible assistant row; value or error that of the receipt
 * of its latest request, if any; a child in error gives its last_error. The entries are json,
 * the value spliced in as the receipt's stored text, so that its numbers reach the parent as
 * the child's model wrote them (0021_exact_json.sql). */
static const char *const s_wait_sql =
    "WITH ids AS (SELECT CASE WHEN jsonb_typeof($2::jsonb -> 'agent_ids') = 'array'"
    " AND jsonb_array_length($2::jsonb -> 'agent_ids') > 0"
    " THEN $2::jsonb -> 'agent_ids' END AS a),"
    " named AS (SELECT e.v #>> '{}' AS agent_id, e.ord FROM ids,"
    " jsonb_array_elements(ids.a) WITH ORDINALITY e(v, ord)"
    " UNION ALL SELECT c.id::text, row_number() OVER (ORDER BY c.created_at, c.id)"
    " FROM ids, chats c WHERE ids.a IS NULL AND c.parent_chat_id = $1),"
    " facts AS (SELECT n.ord, n.agent_id, c.id, c.status::text AS status, c.title, c.last_error"
    " FROM named n LEFT JOIN chats c ON c.parent_chat_id = $1 AND c.id::text = n.agent_id),"
    " entries AS (SELECT f.ord, f.id IS NULL OR f.status IN ('waiting', 'error') AS ended,"
    " CASE WHEN f.id IS NULL THEN json_build_object('agent_id', f.agent_id, 'status', 'not_found',"
    " 'error', 'not a subagent of this chat') ELSE (left(json_build_object('agent_id', f.agent_id,"
    " 'title', f.title, 'status', CASE f.status WHEN 'waiting' THEN 'completed' ELSE f.status END)"
    "::text, -1) || CASE WHEN a.answer IS NOT NULL"
    " THEN ', \"answer\": ' || to_json(left(a.answer, " S_ANSWER_MAX "))::text ELSE '' END"
    " || CASE WHEN r.so ->> 'status' = 'succeeded'"
    " THEN ', \"value\": ' || coalesce((r.so -> 'value')::text, 'null') ELSE '' END"
    " || CASE WHEN f.status = 'error' THEN ', \"error\": ' || coalesce(f.last_error, '{}')::text"
    " WHEN r.so -> 'error' IS NOT NULL THEN ', \"error\": ' || (r.so -> 'error')::text ELSE ''"
    " END || '}')::json"
    " END AS entry FROM facts f"
    " LEFT JOIN LATERAL (SELECT string_agg(e.p ->> 'text', '' ORDER BY e.ord) AS answer FROM"
    " (SELECT m.content FROM chat_messages m WHERE m.chat_id = f.id AND m.role = 'assistant'"
    " AND NOT m.deleted AND m.visibility <> 'model' AND (m.structured_output ->> 'type')"
    " IS DISTINCT FROM 'structured-output-outcome' ORDER BY m.id DESC LIMIT 1) lm,"
    " json_array_elements(lm.content) WITH ORDINALITY e(p, ord) WHERE e.p ->> 'type' = 'text') a"
    " ON true"
    " LEFT JOIN LATERAL (SELECT m.structured_output AS so FROM chat_messages m"
    " WHERE m.chat_id = f.id AND (m.structured_output ->> 'type') = 'structured-output-outcome'"
    " AND m.id > coalesce((SELECT max(u.id) FROM chat_messages u WHERE u.chat_id = f.id"
    " AND u.role = 'user' AND NOT u.deleted AND u.visibility <> 'model'), 0)"
    " ORDER BY m.id DESC LIMIT 1) r ON true)"
    " SELECT coalesce(bool_and(ended), true),"
    " json_build_object('agents', coalesce(json_agg(entry ORDER BY ord), '[]'))::text"
    " FROM entries";

static void s_results_free(cs_tool_result_t *results, int n) {
    for (int i = 0; i < n; i++) {
        free((char *)results[i].tool_call_id);
        free((char *)results[i].output);
    }
    free(results);
}

/* The result of each pending call into results (n of them); *ended false as soon as one call
 * names a child that is still active. 0 or -1 (the bundle poisoned). */
static int s_wait_results(chatstate_t *self, const PGresult *pending, cs_tool_result_t *results,
                          bool *ended, cs_error_t *err) {
    *ended = true;
    for (int i = 0; i < PQntuples(pending) && *ended; i++) {
        const char *p[] = {self->chat_id, PQgetvalue(pending, i, 2)};
        PGresult *res = cs_query(self, err, s_wait_sql, 2, p);
        if (!res) {
            return -1;
        }
        *ended = db_bool(res, 0, 0);
        results[i] = (cs_tool_result_t){.tool_call_id = mem_strdup(PQgetvalue(pending, i, 0)),
                                        .output = mem_strdup(PQgetvalue(res, 0, 1))};
        PQclear(res);
    }
    return 0;
}

/* The resumption's moves in an open bundle of the parent: *resumed when it applied them;
 * *rehint when another attempt resumed the parent already and it still needs an owner. */
static int s_resume(chatstate_t *self, bool *resumed, bool *rehint, cs_error_t *err) {
    if (cs_load(self, err) != 0) {
        return -1;
    }
    if (!self->row.agent_wait) {
        *rehint = chatmove_runnable(self->state) && self->row.needs_owner;
        return 0;
    }
    if (cs_start(self, MV_COMPLETE_REQUIRES_ACTION, NULL, err) != 0) {
        return -1;
    }
    const char *p[] = {self->chat_id, CS_AGENT_WAIT_TOOL};
    PGresult *pending = cs_query(self, err,
                                 CS_PENDING_CALLS_SQL " SELECT call_id, name <> $2, args::text"
                                                      " FROM pending ORDER BY mid, ord",
                                 2, p);
    if (!pending) {
        return -1;
    }
    int n = PQntuples(pending);
    for (int i = 0; i < n; i++) {
        if (db_bool(pending, i, 1)) {
            PQclear(pending);
            return cs_fail(self, err, CS_BAD_INPUT, "an agent wait holds a call that is not %s",
                           CS_AGENT_WAIT_TOOL);
        }
    }
    cs_tool_result_t *results = mem_calloc((size_t)(n ? n : 1), sizeof *results);
    bool ended = false;
    int rc = s_wait_results(self, pending, results, &ended, err);
    PQclear(pending);
    if (rc == 0 && ended) {
        rc = cs_complete_pending(self, results, n, NULL, 0, err);
        *resumed = rc == 0;
    }
    s_results_free(results, n);
    return rc;
}

/* Runs sql ($1 the only parameter) outside any bundle, with its failure in err. */
static PGresult *s_query(PGconn *conn, const char *sql, const char *param, cs_error_t *err) {
    db_err_t e = DB_OK;
    const char *p[] = {param};
    PGresult *res = db_query(conn, &e, err->message, sizeof err->message, sql, 1, p);
    if (!res) {
        err->rc = e == DB_ERR_RETRYABLE ? CS_RETRY : CS_DB;
    }
    return res;
}

/* Whether the parent is in an agent wait, read without a lock: 1, 0 (also when it does not
 * exist), or -1 with err. A wait that begins after this read is the waiting bundle's own to
 * resume (chatstate_commit_wake). */
static int s_waiting(PGconn *conn, const char *parent_id, cs_error_t *err) {
    if (!id_uuid_valid(parent_id)) {
        return 0;
    }
    PGresult *res =
        s_query(conn, "SELECT waiting_on_agents FROM chats WHERE id = $1", parent_id, err);
    if (!res) {
        return -1;
    }
    int waiting = PQntuples(res) == 1 && db_bool(res, 0, 0);
    PQclear(res);
    return waiting;
}

int chatstate_agents_resume(PGconn *conn, const cs_settings_t *settings, const char *parent_id,
                            const hint_sink_t *sink, bool *resumed, cs_error_t *err) {
    *resumed = false;
    /* Most children end while their parent still waits for others, or after it resumed: they
     * leave the parent's row alone, so that its lock stays free for the acquirers. */
    int waiting = s_waiting(conn, parent_id, err);
    if (waiting <= 0) {
        return waiting;
    }
    chatstate_t *cs = chatstate_begin(conn, settings, parent_id, err);
    if (!cs) {
        return err->rc == CS_NOT_FOUND ? 0 : -1;
    }
    bool rehint = false;
    if (s_resume(cs, resumed, &rehint, err) != 0) {
        chatstate_destroy(&cs);
        return -1;
    }
    if (!*resumed && rehint) {
        /* Another attempt resumed the parent and published its ownership hint while this one
         * held the row lock, so an acquirer's pass (FOR UPDATE SKIP LOCKED) may have skipped
         * it: the lock's last holder hints again as it lets go. */
        return chatstate_commit(&cs, sink, NULL, err);
    }
    if (!*resumed) {
        chatstate_destroy(&cs);
        return 0;
    }
    hint_update_t after;
    if (chatstate_commit(&cs, sink, &after, err) != 0) {
        *resumed = false;
        return -1;
    }
    log_info("agents_resumed", "chat_id=%s history_version=%lld snapshot_version=%lld", parent_id,
             (long long)after.history_version, (long long)after.snapshot_version);
    return 0;
}

int chatstate_commit_wake(chatstate_t **self_p, const hint_sink_t *sink, hint_update_t *after,
                          cs_error_t *err) {
    chatstate_t *self = *self_p;
    PGconn *conn = self->conn;
    cs_settings_t settings = self->settings;
    char wake[ID_UUID_LEN + 1];
    snprintf(wake, sizeof wake, "%s", self->wake);
    if (chatstate_commit(self_p, sink, after, err) != 0) {
        return -1;
    }
    bool resumed = false;
    cs_error_t werr = {0};
    if (wake[0] && chatstate_agents_resume(conn, &settings, wake, sink, &resumed, &werr) != 0) {
        char q[300];
        log_warn("agents_wake_failed", "chat_id=%s reason=%s", wake,
                 log_quote(werr.message, q, sizeof q));
    }
    return 0;
}

int chatstate_agents_sweep(PGconn *conn, const cs_settings_t *settings, const hint_sink_t *sink,
                           int limit, int *resumed, cs_error_t *err) {
    memset(err, 0, sizeof *err);
    *resumed = 0;
    char text[DB_PARAM_INT64_LEN];
    PGresult *res =
        s_query(conn,
                "SELECT p.id::text FROM chats p WHERE p.waiting_on_agents AND NOT EXISTS"
                " (SELECT 1 FROM chats c WHERE c.parent_chat_id = p.id AND c.status IN"
                " ('running', 'interrupting', 'requires_action'))"
                " ORDER BY p.updated_at, p.id LIMIT $1::int",
                db_param_int64(text, limit), err);
    if (!res) {
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        bool one = false;
        rc = chatstate_agents_resume(conn, settings, PQgetvalue(res, i, 0), sink, &one, err);
        *resumed += one;
    }
    PQclear(res);
    return rc;
}

/* Interrupts one descendant in its own bundle: 0 also when it ended or went meanwhile. */
static int s_interrupt_one(PGconn *conn, const cs_settings_t *settings, const char *id,
                           const char *reason, const hint_sink_t *sink, bool *done,
                           cs_error_t *err) {
    *done = false;
    chatstate_t *cs = chatstate_begin(conn, settings, id, err);
    if (!cs) {
        return err->rc == CS_NOT_FOUND ? 0 : -1;
    }
    if (chatstate_interrupt(cs, reason, err) != 0) {
        chatstate_destroy(&cs);
        return err->rc == CS_CONFLICT || err->rc == CS_INVALID_STATE ? 0 : -1;
    }
    if (chatstate_commit_wake(&cs, sink, NULL, err) != 0) {
        return -1;
    }
    *done = true;
    return 0;
}

int chatstate_interrupt_descendants(PGconn *conn, const cs_settings_t *settings,
                                    const char *chat_id, const char *reason,
                                    const hint_sink_t *sink, int *count, cs_error_t *err) {
    memset(err, 0, sizeof *err);
    *count = 0;
    if (!id_uuid_valid(chat_id)) {
        return 0;
    }
    PGresult *res = s_query(conn,
                            "WITH RECURSIVE d AS (SELECT id, status, depth, created_at FROM chats"
                            " WHERE parent_chat_id = $1::uuid UNION ALL SELECT c.id, c.status,"
                            " c.depth, c.created_at FROM chats c JOIN d ON c.parent_chat_id = d.id)"
                            " SELECT id::text FROM d WHERE status IN ('running', 'interrupting',"
                            " 'requires_action') ORDER BY depth, created_at, id",
                            chat_id, err);
    if (!res) {
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        bool done = false;
        rc = s_interrupt_one(conn, settings, PQgetvalue(res, i, 0), reason, sink, &done, err);
        *count += done;
    }
    PQclear(res);
    return rc;
}
