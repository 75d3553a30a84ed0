/* history: see history.h. */
#include "history.h"
#include "db.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL's JSON text of a stored value, read as stored text (jsonstrict.h, the number
 * policy): any number, of any length, reads (rows written before the policy hold integers
 * far beyond int64). NULL only for text that is not JSON at all. */
static json_t *s_stored(const char *text) {
    json_t *v = NULL;
    if (jsonstrict_parse(text, strlen(text), &jsonstrict_limits_stored, &v, NULL) != 0) {
        return NULL;
    }
    return v;
}

void history_clear(history_t *h) {
    json_decref(h->dynamic_tools);
    json_decref(h->mcp_servers);
    json_decref(h->messages);
    json_decref(h->model);
    json_decref(h->evidence);
    json_decref(h->summarizer);
    json_decref(h->title_model);
    json_decref(h->summary);
    free(h->response_format);
    memset(h, 0, sizeof *h);
}

static void s_rollback(PGconn *conn) {
    PQclear(PQexec(conn, "ROLLBACK"));
}

static const char *s_mismatch(PGresult *res, const cs_fence_t *f) {
    if (strcmp(PQgetvalue(res, 0, 1), f->worker_id) != 0 ||
        strcmp(PQgetvalue(res, 0, 2), f->runner_id) != 0) {
        return "owner";
    }
    if (f->status && strcmp(PQgetvalue(res, 0, 0), f->status) != 0) {
        return "status";
    }
    if (f->history_version >= 0 && db_int64(res, 0, 3) != f->history_version) {
        return "history_version";
    }
    if (f->generation_attempt >= 0 && db_int64(res, 0, 4) != f->generation_attempt) {
        return "generation_attempt";
    }
    if (db_bool(res, 0, 5)) {
        return "archived";
    }
    return NULL;
}

/* Runs sql inside the open transaction; on failure logs and returns NULL (the caller's
 * transaction is then failed: it rolls back). */
static PGresult *s_query(PGconn *conn, const char *chat_id, const char *sql, int n,
                         const char *const *p) {
    db_err_t e;
    char msg[200];
    PGresult *res = db_query(conn, &e, msg, sizeof msg, sql, n, p);
    if (!res) {
        char q[240];
        log_warn("history_query_failed", "chat_id=%s reason=%s", chat_id,
                 log_quote(msg, q, sizeof q));
    }
    return res;
}

/* The governing request and its evidence rows (ARCHITECTURE.md §8), inside the
 * open transaction. Evidence is read by request UUID over all active rows, not only from the
 * latest context boundary, so that compaction cannot reset a budget; a receipt anywhere
 * closes the request for good. Returns 0, or -1 (rolled back) on a database failure. */
static int s_load_request(PGconn *conn, const char *chat_id, history_t *out) {
    out->evidence = json_array();
    const char *p[] = {chat_id};
    PGresult *res = s_query(
        conn, chat_id,
        "SELECT m.structured_output_request_id::text, (m.structured_output -> 'response_format')"
        "::text FROM chat_messages m WHERE m.id = (SELECT max(id) FROM chat_messages"
        " WHERE chat_id = $1 AND role = 'user' AND NOT deleted AND visibility <> 'model')"
        " AND m.structured_output ->> 'type' = 'structured-output-request'"
        " AND m.structured_output_request_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM"
        " chat_messages r WHERE r.structured_output_request_id = m.structured_output_request_id"
        " AND r.structured_output ->> 'type' = 'structured-output-outcome')",
        1, p);
    if (!res) {
        return -1;
    }
    if (PQntuples(res) != 1) {
        PQclear(res);
        return 0;
    }
    snprintf(out->request_id, sizeof out->request_id, "%s", PQgetvalue(res, 0, 0));
    out->response_format = mem_strdup(db_text(res, 0, 1) ? db_text(res, 0, 1) : "null");
    PQclear(res);
    const char *ep[] = {chat_id, out->request_id};
    res = s_query(conn, chat_id,
                  "SELECT json_build_object('id', id, 'role', role, 'so', structured_output)::text"
                  " FROM chat_messages WHERE chat_id = $1 AND NOT deleted"
                  " AND structured_output_request_id = $2::uuid"
                  " AND structured_output ->> 'type' IN ('structured-output-step',"
                  " 'structured-output-candidate', 'structured-output-feedback')"
                  " ORDER BY id LIMIT 100001",
                  2, ep);
    if (!res) {
        return -1;
    }
    for (int i = 0; i < PQntuples(res) && i < HISTORY_MAX_MESSAGES; i++) {
        json_t *m = s_stored(PQgetvalue(res, i, 0));
        if (m) {
            json_array_append_new(out->evidence, m);
        }
    }
    PQclear(res);
    return 0;
}

/* A model config row (alias m) as the JSON history_t.model describes; $2 is the chat, whose
 * owner's threshold for that model is user_threshold. */
#define S_MODEL_JSON                                                                               \
    "json_build_object('id', m.id, 'name', m.name, 'provider', m.provider, 'model', m.model,"      \
    " 'base_url', m.base_url, 'api_key_env', m.api_key_env, 'native_structured_output',"           \
    " m.native_structured_output, 'context_limit', m.context_limit, 'compression_threshold',"      \
    " m.compression_threshold, 'prices', m.prices, 'user_threshold', (SELECT u.threshold_percent " \
    "FROM"                                                                                         \
    " user_compaction_thresholds u JOIN chats c ON c.owner_id = u.user_id WHERE c.id ="            \
    " $2::uuid AND u.model_config_id = m.id))::text"

/* The reads of history_load inside a transaction the caller opened and ends. */
static history_rc_t s_read(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                           bool with_messages, history_t *out) {
    const char *p[] = {chat_id};
    PGresult *res = s_query(
        conn, chat_id,
        "SELECT status, coalesce(worker_id::text, ''), coalesce(runner_id::text, ''),"
        " history_version, generation_attempt, archived, coalesce(dynamic_tools, '[]')::text,"
        " coalesce(floor(extract(epoch FROM requires_action_deadline_at - now()) * 1000)::bigint,"
        " 9223372036854775807), model_config_id::text, compaction_requested_at IS NOT NULL,"
        " coalesce(mcp_servers, '[]')::text, title_source = 'fallback'"
        " FROM chats WHERE id = $1",
        1, p);
    if (!res) {
        return HISTORY_DB;
    }
    if (PQntuples(res) != 1) {
        PQclear(res);
        return HISTORY_NOT_FOUND;
    }
    const char *why = s_mismatch(res, fence);
    if (why) {
        log_info("fence_mismatch",
                 "chat_id=%s field=%s worker_id=%s runner_id=%s source=read status=%s "
                 "history_version=%s expected_history_version=%lld",
                 chat_id, why, fence->worker_id, fence->runner_id, PQgetvalue(res, 0, 0),
                 PQgetvalue(res, 0, 3), (long long)fence->history_version);
        PQclear(res);
        return HISTORY_FENCED;
    }
    out->history_version = db_int64(res, 0, 3);
    out->generation_attempt = db_int64(res, 0, 4);
    out->deadline_in_ms = db_int64(res, 0, 7);
    out->compaction_requested = db_bool(res, 0, 9);
    out->title_fallback = db_bool(res, 0, 11);
    out->dynamic_tools = s_stored(PQgetvalue(res, 0, 6));
    if (!json_is_array(out->dynamic_tools)) {
        json_decref(out->dynamic_tools);
        out->dynamic_tools = json_array();
    }
    out->mcp_servers = s_stored(PQgetvalue(res, 0, 10));
    if (!json_is_array(out->mcp_servers)) {
        json_decref(out->mcp_servers);
        out->mcp_servers = json_array();
    }
    char *model_id = db_text(res, 0, 8) ? mem_strdup(db_text(res, 0, 8)) : NULL;
    PQclear(res);
    if (with_messages) {
        const char *mp[] = {model_id, chat_id};
        res = s_query(conn, chat_id,
                      "SELECT " S_MODEL_JSON " FROM model_configs m WHERE id = $1::uuid OR"
                      " is_default ORDER BY (id = $1::uuid) IS TRUE DESC LIMIT 1",
                      2, mp);
        if (!res) {
            free(model_id);
            history_clear(out);
            return HISTORY_DB;
        }
        out->model = PQntuples(res) == 1 ? s_stored(PQgetvalue(res, 0, 0)) : NULL;
        if (!out->model) {
            out->model = json_null();
        }
        PQclear(res);
        /* Model-visible, active rows from the latest context boundary on (system rows
         * always), receipts excluded: the prompt a model call would see. */
        res = s_query(
            conn, chat_id,
            "SELECT json_build_object('id', id, 'role', role, 'content', content, 'control',"
            " coalesce(structured_output ->> 'type' = 'structured-output-feedback' OR"
            " (structured_output ->> 'type' = 'hook-context' AND (structured_output ->> 'event')"
            " IS DISTINCT FROM 'post_compact'), false), 'hook', CASE WHEN structured_output ->>"
            " 'type' = 'hook-context' THEN structured_output ->> 'event' END,"
            " 'model_only', visibility = 'model', 'compressed', compressed, 'usage', usage)::text"
            " FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND visibility <> 'user'"
            " AND (role = 'system' OR id >= coalesce((SELECT max(id) FROM chat_messages"
            " WHERE chat_id = $1 AND NOT deleted AND compressed AND role = 'user'"
            " AND visibility = 'model'), 0))"
            " AND (structured_output ->> 'type') IS DISTINCT FROM 'structured-output-outcome'"
            " ORDER BY id LIMIT 100001",
            1, p);
        if (!res) {
            free(model_id);
            history_clear(out);
            return HISTORY_DB;
        }
        if (PQntuples(res) > HISTORY_MAX_MESSAGES) {
            log_error("history_too_long", "chat_id=%s rows=%d", chat_id, PQntuples(res));
            PQclear(res);
            free(model_id);
            history_clear(out);
            return HISTORY_DB;
        }
        out->messages = json_array();
        for (int i = 0; i < PQntuples(res); i++) {
            /* PostgreSQL's own JSON output: trusted, read as stored text. */
            json_t *m = s_stored(PQgetvalue(res, i, 0));
            if (m) {
                json_array_append_new(out->messages, m);
            }
        }
        PQclear(res);
        if (s_load_request(conn, chat_id, out) != 0) {
            free(model_id);
            history_clear(out);
            return HISTORY_DB;
        }
    }
    free(model_id);
    return HISTORY_OK;
}

history_rc_t history_load(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                          bool with_messages, history_t *out) {
    memset(out, 0, sizeof *out);
    char msg[200];
    /* One snapshot for the fence check and every read below, so the history is the one the
     * fenced row had; no row lock: a lock would give the read-only transaction an xid and
     * make its COMMIT wait for a WAL flush, on every step of every turn. A transition that
     * commits after the snapshot is caught by the fence of the write that follows. */
    if (db_exec(conn, msg, sizeof msg, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0,
                NULL) != DB_OK) {
        return HISTORY_DB;
    }
    history_rc_t rc = s_read(conn, chat_id, fence, with_messages, out);
    if (rc == HISTORY_OK && db_exec(conn, msg, sizeof msg, "COMMIT", 0, NULL) != DB_OK) {
        history_clear(out);
        return HISTORY_DB;
    }
    if (rc != HISTORY_OK && PQtransactionStatus(conn) != PQTRANS_IDLE) {
        s_rollback(conn);
    }
    return rc;
}

static int64_t s_limit(const json_t *model) {
    const json_t *v = json_object_get(model, "context_limit");
    return json_is_integer(v) && json_integer_value(v) > 0 ? (int64_t)json_integer_value(v) : 0;
}

/* The owner's threshold for the chat's model, else the model's, else the default. */
static int s_threshold(const json_t *model, int dflt) {
    const char *keys[] = {"user_threshold", "compression_threshold"};
    for (int k = 0; k < 2; k++) {
        const json_t *v = json_object_get(model, keys[k]);
        if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 100) {
            return (int)json_integer_value(v);
        }
    }
    return dflt;
}

/* The reads automatic compaction needs (ARCHITECTURE.md §7.6), inside the open transaction:
 * the override's config, the latest boundary's summary result, and the binding trigger.
 * Returns 0, or -1 on a database failure. */
/* The config of the model named name (history_t.model's shape) into *out, or NULL when name
 * is "" or no config has it (logged as event). Returns 0, or -1 on a database failure. */
static int s_model_named(PGconn *conn, const char *chat_id, const char *name, const char *event,
                         json_t **out) {
    *out = NULL;
    if (!name[0]) {
        return 0;
    }
    const char *p[] = {name, chat_id};
    PGresult *res = s_query(conn, chat_id,
                            "SELECT " S_MODEL_JSON " FROM model_configs m WHERE m.name = $1", 2, p);
    if (!res) {
        return -1;
    }
    *out = PQntuples(res) == 1 ? s_stored(PQgetvalue(res, 0, 0)) : NULL;
    PQclear(res);
    if (!*out) {
        char q[160];
        log_warn(event, "chat_id=%s model=%s", chat_id, log_quote(name, q, sizeof q));
    }
    return 0;
}

static int s_load_compaction(PGconn *conn, const char *chat_id, const compaction_config_t *cc,
                             history_t *out) {
    if (s_model_named(conn, chat_id, cc->model, "compaction_model_unresolved", &out->summarizer) !=
        0) {
        return -1;
    }
    const char *p[] = {chat_id};
    PGresult *res = s_query(
        conn, chat_id,
        "SELECT (content -> 0 -> 'result')::text, revision FROM chat_messages WHERE chat_id = $1"
        " AND NOT deleted AND compressed AND role = 'tool'"
        " AND content -> 0 ->> 'tool_name' = '" COMPACTION_TOOL "' AND id > coalesce((SELECT"
        " max(id) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND compressed AND"
        " role = 'user' AND visibility = 'model'), 0) ORDER BY id LIMIT 1",
        1, p);
    if (!res) {
        return -1;
    }
    out->summary = PQntuples(res) == 1 ? s_stored(PQgetvalue(res, 0, 0)) : NULL;
    out->summary_revision = out->summary ? strtoll(PQgetvalue(res, 0, 1), NULL, 10) : 0;
    if (out->summary && !json_is_object(out->summary)) {
        json_decref(out->summary);
        out->summary = NULL;
    }
    PQclear(res);
    out->trigger =
        compaction_trigger(s_limit(out->model), s_threshold(out->model, cc->default_threshold),
                           out->summarizer ? s_limit(out->summarizer) : -1);
    return 0;
}

history_rc_t history_read_locked(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                                 const compaction_config_t *cc, const char *title_model,
                                 history_t *out) {
    memset(out, 0, sizeof *out);
    history_rc_t rc = s_read(conn, chat_id, fence, true, out);
    if (rc == HISTORY_OK &&
        (s_load_compaction(conn, chat_id, cc, out) != 0 ||
         (out->title_fallback && s_model_named(conn, chat_id, title_model, "title_model_unresolved",
                                               &out->title_model) != 0))) {
        history_clear(out);
        return HISTORY_DB;
    }
    return rc;
}

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

static bool s_is_dynamic(const json_t *dynamic_tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(dynamic_tools, i, t) {
        if (!strcmp(s_str(t, "name"), name)) {
            return true;
        }
    }
    return false;
}

/* Whether an assistant row follows the latest boundary: messages start there, and the visible
 * compressed pair of a boundary is not model-visible, so any assistant row counts. */
static bool s_compactable(const json_t *messages) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!strcmp(s_str(m, "role"), "assistant")) {
            return true;
        }
    }
    return false;
}

/* Whether the history asks for no reply: its last row is an assistant row, or the rows after
 * the latest context boundary are model-only user rows (the boundary and the unanswered user
 * rows a compaction replayed after it, ARCHITECTURE.md §7.6), unless resume says that boundary
 * is an automatic summary made in the middle of a turn. A control row (structured feedback)
 * does ask for a reply. */
static bool s_complete(const json_t *messages, bool resume) {
    size_t n = json_array_size(messages);
    bool boundary = false;
    while (n > 0) {
        const json_t *m = json_array_get(messages, n - 1);
        if (strcmp(s_str(m, "role"), "user") || !json_is_true(json_object_get(m, "model_only")) ||
            json_is_true(json_object_get(m, "control"))) {
            break;
        }
        boundary = boundary || json_is_true(json_object_get(m, "compressed"));
        n--;
    }
    if (boundary) {
        return !resume;
    }
    return (n > 0 && !strcmp(s_str(json_array_get(messages, n - 1), "role"), "assistant"));
}

decide_t history_decide(const json_t *messages, const json_t *dynamic_tools, int64_t max_steps,
                        unsigned flags, json_t **pending) {
    if (pending) {
        *pending = NULL;
    }
    size_t n = json_array_size(messages);
    if (n == 0) {
        return DECIDE_FINISH_TURN;
    }
    size_t start = 0;
    for (size_t i = n; i-- > 0;) {
        const json_t *m = json_array_get(messages, i);
        if (!strcmp(s_str(m, "role"), "user") && !json_is_true(json_object_get(m, "control"))) {
            start = i + 1;
            break;
        }
    }
    /* Tool calls and results of the current turn (after the latest user row: every
     * transition that inserts a user row answers what was outstanding first). */
    json_t *calls = json_array();
    json_t *answered = json_object();
    int64_t steps = 0;
    for (size_t i = start; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = s_str(m, "role");
        bool assistant = !strcmp(role, "assistant");
        bool tool = !strcmp(role, "tool");
        steps += assistant;
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "content"), k, p) {
            const char *type = s_str(p, "type");
            const char *id = s_str(p, "tool_call_id");
            if (assistant && !strcmp(type, "tool-call") && id[0] &&
                !json_is_true(json_object_get(p, "provider_executed"))) {
                json_array_append(calls, p);
            } else if (tool && !strcmp(type, "tool-result") && id[0]) {
                json_object_set_new(answered, id, json_true());
            }
        }
    }
    json_t *local = json_array();
    size_t dynamic = 0;
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        if (json_object_get(answered, s_str(c, "tool_call_id"))) {
            continue;
        }
        if (s_is_dynamic(dynamic_tools, s_str(c, "tool_name"))) {
            dynamic++;
        } else {
            /* Local, or a name nobody declared: tools_run answers the latter with an error
             * result so the model learns of it. */
            json_array_append(local, c);
        }
    }
    json_decref(calls);
    json_decref(answered);
    decide_t d;
    if (json_array_size(local) > 0) {
        d = DECIDE_RUN_LOCAL;
    } else if (dynamic > 0) {
        d = DECIDE_REQUIRES_ACTION;
    } else if (flags & HISTORY_COMPACTION_REQUESTED) {
        d = s_compactable(messages) ? DECIDE_COMPACT : DECIDE_FINISH_TURN;
    } else if (s_complete(messages, flags & HISTORY_RESUME_AFTER_SUMMARY)) {
        d = DECIDE_FINISH_TURN;
    } else if (max_steps > 0 && steps >= max_steps) {
        d = DECIDE_FINISH_TURN;
    } else {
        d = DECIDE_CALL_MODEL;
    }
    if (d == DECIDE_RUN_LOCAL && pending) {
        *pending = json_incref(local);
    }
    json_decref(local);
    return d;
}

const char *history_decision_name(decide_t d) {
    switch (d) {
        case DECIDE_CALL_MODEL:
            return "call_model";
        case DECIDE_RUN_LOCAL:
            return "run_local_tools";
        case DECIDE_REQUIRES_ACTION:
            return "requires_action";
        case DECIDE_FINISH_TURN:
            return "finish_turn";
        case DECIDE_COMPACT:
            return "compact";
        case DECIDE_OVER_LIMIT:
            return "over_limit";
    }
    return "?";
}
