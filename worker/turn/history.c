/* history: see history.h. */
#include "history.h"
#include "fileparts.h"
#include "db.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <pthread.h>
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

/* Model configs as read (one text per config and owner threshold), parsed once and shared
 * read-only by every turn (jansson's reference counts are atomic), so that a worker holding
 * thousands of turns keeps one copy of each, not one per turn (ARCHITECTURE.md §6.5). Past
 * HISTORY_MODELS_SHARED texts, a config is parsed for its read alone. */
#define HISTORY_MODELS_SHARED 256
static pthread_mutex_t s_models_lock = PTHREAD_MUTEX_INITIALIZER;
static zhashx_t *s_models; /* text -> json_t *, each holding one reference */

static void s_model_free(void **item) {
    json_t *v = *item;
    json_decref(v);
    *item = NULL;
}

static json_t *s_model(const char *text) {
    pthread_mutex_lock(&s_models_lock);
    if (!s_models) {
        s_models = zhashx_new();
        zhashx_set_destructor(s_models, s_model_free);
    }
    json_t *v = json_incref(zhashx_lookup(s_models, text));
    if (!v) {
        v = s_stored(text);
        if (v && zhashx_size(s_models) < HISTORY_MODELS_SHARED) {
            zhashx_insert(s_models, text, json_incref(v));
        }
    }
    pthread_mutex_unlock(&s_models_lock);
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

static const char *s_mismatch(const PGresult *res, const cs_fence_t *f) {
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

/* A model config row (alias m) as the JSON history_t.model describes; $2 is the chat, whose
 * owner's threshold for that model is user_threshold. */
#define S_MODEL_JSON                                                                               \
    "json_build_object('id', m.id, 'name', m.name, 'provider', m.provider, 'model', m.model,"      \
    " 'base_url', m.base_url, 'api_key_env', m.api_key_env, 'native_structured_output',"           \
    " m.native_structured_output, 'context_limit', m.context_limit, 'compression_threshold',"      \
    " m.compression_threshold, 'prices', m.prices, 'options', m.options,"                          \
    " 'user_threshold', (SELECT u.threshold_percent FROM"                                          \
    " user_compaction_thresholds u JOIN chats c ON c.owner_id = u.user_id WHERE c.id ="            \
    " $2::uuid AND u.model_config_id = m.id))::text"

/* The latest boundary's id (0 without one): where the model-visible history starts. */
#define S_BOUNDARY                                                                                 \
    "coalesce((SELECT max(id) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND"           \
    " compressed AND role = 'user' AND visibility = 'model'), 0)"

/* The reads of one step, sent ahead together so that they cost one round trip (ARCHITECTURE.md
 * §4.4); each result is kept (a copy) until it is taken. */
typedef struct {
    PGresult *row;        /* the chat row, checked against the fence */
    PGresult *model;      /* the chat's model config, else the default */
    PGresult *messages;   /* the model-visible history */
    PGresult *request;    /* the governing structured request, if any */
    PGresult *summarizer; /* the compaction override's config, by name */
    PGresult *summary;    /* the latest boundary's summary result */
    PGresult *title;      /* the title model's config, by name */
} s_reads_t;

static void s_reads_clear(s_reads_t *r) {
    PGresult **all[] = {&r->row,        &r->model,   &r->messages, &r->request,
                        &r->summarizer, &r->summary, &r->title};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        PQclear(*all[i]);
        *all[i] = NULL;
    }
}

/* The statements of s_reads_t; NULL names (and with_messages false) leave theirs out. */
static int s_send_reads(PGconn *conn, const char *chat_id, bool with_messages,
                        const char *summarizer, bool summary, const char *title, s_reads_t *r) {
    const char *p[] = {chat_id, chat_id};
    int rc = db_send(
        conn,
        "SELECT status, coalesce(worker_id::text, ''), coalesce(runner_id::text, ''),"
        " history_version, generation_attempt, archived, coalesce(dynamic_tools, '[]')::text,"
        " coalesce(floor(extract(epoch FROM requires_action_deadline_at - now()) * 1000)::bigint,"
        " 9223372036854775807), model_config_id::text, compaction_requested_at IS NOT NULL,"
        " coalesce(mcp_servers, '[]')::text, title_source = 'fallback',"
        " coalesce((extract(epoch FROM title_requested_at) * 1000000)::bigint, 0),"
        " coalesce(last_reasoning_effort::text, ''), plan_mode, parent_chat_id IS NOT NULL,"
        " coalesce(u.age_us, -1), coalesce(u.traceparent, ''), coalesce(u.queued_us, -1),"
        " coalesce(u.prompt_id, 0)"
        /* The latest real user row (the prompt; not a model-only row a turn adds, such as a
         * hook's context or a structured request's feedback), read once for all four: its
         * age, its trace, how long it waited in the queue before its promotion, and its id. */
        " FROM chats LEFT JOIN LATERAL (SELECT (extract(epoch FROM clock_timestamp() -"
        " m.created_at) * 1000000)::bigint AS age_us, m.traceparent, (extract(epoch FROM"
        " m.created_at - m.queued_at) * 1000000)::bigint AS queued_us, m.id AS prompt_id"
        " FROM chat_messages m"
        " WHERE m.chat_id = $1 AND m.role = 'user' AND NOT m.deleted AND m.visibility <> 'model'"
        " ORDER BY m.id DESC LIMIT 1) u ON true WHERE id = $1",
        1, p, db_keep, &r->row);
    if (rc == 0 && with_messages) {
        rc = db_send(conn,
                     "SELECT " S_MODEL_JSON " FROM model_configs m WHERE m.id = (SELECT"
                     " model_config_id FROM chats WHERE id = $1::uuid) OR m.is_default"
                     " ORDER BY (m.id = (SELECT model_config_id FROM chats WHERE id = $1::uuid))"
                     " IS TRUE DESC LIMIT 1",
                     2, p, db_keep, &r->model);
    }
    /* Model-visible, active rows from the latest context boundary on (system rows always),
     * receipts excluded: the prompt a model call would see. */
    if (rc == 0 && with_messages) {
        rc = db_send(
            conn,
            "SELECT json_build_object('id', id, 'role', role, 'content', content, 'control',"
            " coalesce(structured_output ->> 'type' IN ('structured-output-feedback',"
            " 'structured-output-invalidation') OR"
            " (structured_output ->> 'type' = 'hook-context' AND (structured_output ->> 'event')"
            " IS DISTINCT FROM 'post_compact'), false), 'hook', CASE WHEN structured_output ->>"
            " 'type' = 'hook-context' THEN structured_output ->> 'event' END,"
            " 'model_only', visibility = 'model', 'compressed', compressed, 'usage', usage)::text"
            " FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND visibility <> 'user'"
            " AND (role = 'system' OR id >= " S_BOUNDARY ")"
            " AND (structured_output ->> 'type') IS DISTINCT FROM 'structured-output-outcome'"
            " ORDER BY id LIMIT 100001",
            1, p, db_keep, &r->messages);
    }
    if (rc == 0 && with_messages) {
        rc = db_send(
            conn,
            "SELECT m.structured_output_request_id::text, (m.structured_output ->"
            " 'response_format')::text FROM chat_messages m WHERE m.id = (SELECT max(id) FROM"
            " chat_messages WHERE chat_id = $1 AND role = 'user' AND NOT deleted AND visibility"
            " <> 'model') AND m.structured_output ->> 'type' = 'structured-output-request'"
            " AND m.structured_output_request_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM"
            " chat_messages r WHERE r.structured_output_request_id ="
            " m.structured_output_request_id AND r.structured_output ->> 'type' ="
            " 'structured-output-outcome')",
            1, p, db_keep, &r->request);
    }
    const char *names[] = {summarizer, title};
    PGresult **named[] = {&r->summarizer, &r->title};
    for (int i = 0; i < 2; i++) {
        const char *np[] = {names[i], chat_id};
        if (rc == 0 && names[i] && names[i][0]) {
            rc = db_send(conn, "SELECT " S_MODEL_JSON " FROM model_configs m WHERE m.name = $1", 2,
                         np, db_keep, named[i]);
        }
    }
    if (rc == 0 && summary) {
        rc = db_send(
            conn,
            "SELECT (content -> 0 -> 'result')::text, revision FROM chat_messages WHERE chat_id ="
            " $1 AND NOT deleted AND compressed AND role = 'tool' AND content -> 0 ->>"
            " 'tool_name' = '" COMPACTION_TOOL "' AND id > " S_BOUNDARY " ORDER BY id LIMIT 1",
            1, p, db_keep, &r->summary);
    }
    db_err_t e = DB_ERR_CONNECTION;
    char msg[200] = "could not send a statement";
    if (rc == 0) {
        e = db_flush(conn, msg, sizeof msg);
    } else {
        db_flush(conn, NULL, 0);
    }
    if (e != DB_OK) {
        char q[240];
        log_warn("history_query_failed", "chat_id=%s reason=%s", chat_id,
                 log_quote(msg, q, sizeof q));
        return -1;
    }
    return 0;
}

/* The governing request's evidence rows (ARCHITECTURE.md §8), read by request UUID over all
 * active rows, not only from the latest context boundary, so that compaction cannot reset a
 * budget; a receipt anywhere closes the request for good. Returns 0, or -1 on a database
 * failure. */
static int s_take_request(PGconn *conn, const char *chat_id, const PGresult *res, history_t *out) {
    out->evidence = json_array();
    if (!res || PQntuples(res) != 1) {
        return 0;
    }
    snprintf(out->request_id, sizeof out->request_id, "%s", PQgetvalue(res, 0, 0));
    out->response_format = mem_strdup(db_text(res, 0, 1) ? db_text(res, 0, 1) : "null");
    const char *ep[] = {chat_id, out->request_id};
    PGresult *ev =
        s_query(conn, chat_id,
                "SELECT json_build_object('id', id, 'role', role, 'so', structured_output)::text"
                " FROM chat_messages WHERE chat_id = $1 AND NOT deleted"
                " AND structured_output_request_id = $2::uuid"
                " AND structured_output ->> 'type' IN ('structured-output-step',"
                " 'structured-output-candidate', 'structured-output-feedback',"
                " 'structured-output-invalidation')"
                " ORDER BY id LIMIT 100001",
                2, ep);
    if (!ev) {
        return -1;
    }
    for (int i = 0; i < PQntuples(ev) && i < HISTORY_MAX_MESSAGES; i++) {
        json_t *m = s_stored(PQgetvalue(ev, i, 0));
        if (m) {
            json_array_append_new(out->evidence, m);
        }
    }
    PQclear(ev);
    return 0;
}

/* The chat row, against the fence. */
static history_rc_t s_take_row(const PGresult *res, const char *chat_id, const cs_fence_t *fence,
                               history_t *out) {
    if (!res || PQntuples(res) != 1) {
        return HISTORY_NOT_FOUND;
    }
    const char *why = s_mismatch(res, fence);
    if (why) {
        log_info("fence_mismatch",
                 "chat_id=%s field=%s worker_id=%s runner_id=%s source=read status=%s "
                 "history_version=%s expected_history_version=%lld",
                 chat_id, why, fence->worker_id, fence->runner_id, PQgetvalue(res, 0, 0),
                 PQgetvalue(res, 0, 3), (long long)fence->history_version);
        return HISTORY_FENCED;
    }
    out->history_version = db_int64(res, 0, 3);
    out->generation_attempt = db_int64(res, 0, 4);
    out->deadline_in_ms = db_int64(res, 0, 7);
    out->compaction_requested = db_bool(res, 0, 9);
    out->title_fallback = db_bool(res, 0, 11);
    out->title_requested = db_int64(res, 0, 12);
    snprintf(out->reasoning_effort, sizeof out->reasoning_effort, "%s", PQgetvalue(res, 0, 13));
    out->plan_mode = db_bool(res, 0, 14);
    out->subagent = db_bool(res, 0, 15);
    out->trigger_age_us = db_int64(res, 0, 16);
    out->trigger_queued_us = db_int64(res, 0, 18);
    out->trigger_id = db_int64(res, 0, 19);
    if (trace_parse(PQgetvalue(res, 0, 17), &out->trace) != 0) {
        out->trace = (trace_ctx_t){0}; /* none stored: the turn starts a trace of its own */
    }
    const int cols[] = {6, 10};
    json_t **arrays[] = {&out->dynamic_tools, &out->mcp_servers};
    for (int i = 0; i < 2; i++) {
        *arrays[i] = s_stored(PQgetvalue(res, 0, cols[i]));
        if (!json_is_array(*arrays[i])) {
            json_decref(*arrays[i]);
            *arrays[i] = json_array();
        }
    }
    return HISTORY_OK;
}

/* The model-visible history; -1 when it is longer than a turn may read. */
static int s_take_messages(const PGresult *res, const char *chat_id, history_t *out) {
    if (PQntuples(res) > HISTORY_MAX_MESSAGES) {
        log_error("history_too_long", "chat_id=%s rows=%d", chat_id, PQntuples(res));
        return -1;
    }
    out->messages = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        /* PostgreSQL's own JSON output: trusted, read as stored text. */
        json_t *m = s_stored(PQgetvalue(res, i, 0));
        if (m) {
            json_array_append_new(out->messages, m);
        }
    }
    return 0;
}

/* A config read by name (history_t.model's shape), or NULL when name is "" or none has it
 * (logged as event). */
static json_t *s_take_named(const PGresult *res, const char *chat_id, const char *name,
                            const char *event) {
    if (!name || !name[0]) {
        return NULL;
    }
    json_t *v = res && PQntuples(res) == 1 ? s_stored(PQgetvalue(res, 0, 0)) : NULL;
    if (!v) {
        char q[160];
        log_warn(event, "chat_id=%s model=%s", chat_id, log_quote(name, q, sizeof q));
    }
    return v;
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

/* Sends the reads, then takes them; on anything but HISTORY_OK out holds nothing. With cc, what
 * automatic compaction needs; with title, the title model when the title is the fallback or a
 * new one was requested. */
static history_rc_t s_read(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                           bool with_messages, const compaction_config_t *cc, const char *title,
                           history_t *out) {
    s_reads_t r = {0};
    if (s_send_reads(conn, chat_id, with_messages, cc ? cc->model : NULL, cc != NULL, title, &r) !=
        0) {
        s_reads_clear(&r);
        return HISTORY_DB;
    }
    history_rc_t rc = s_take_row(r.row, chat_id, fence, out);
    if (rc == HISTORY_OK && with_messages) {
        out->model = r.model && PQntuples(r.model) == 1 ? s_model(PQgetvalue(r.model, 0, 0)) : NULL;
        if (!out->model) {
            out->model = json_null();
        }
        if (!r.messages || s_take_messages(r.messages, chat_id, out) != 0 ||
            s_take_request(conn, chat_id, r.request, out) != 0 ||
            fileparts_fill(conn, chat_id, out->messages) != 0) {
            rc = HISTORY_DB;
        }
    }
    if (rc == HISTORY_OK && cc) {
        out->summarizer =
            s_take_named(r.summarizer, chat_id, cc->model, "compaction_model_unresolved");
        out->summary =
            r.summary && PQntuples(r.summary) == 1 ? s_stored(PQgetvalue(r.summary, 0, 0)) : NULL;
        out->summary_revision = out->summary ? strtoll(PQgetvalue(r.summary, 0, 1), NULL, 10) : 0;
        if (out->summary && !json_is_object(out->summary)) {
            json_decref(out->summary);
            out->summary = NULL;
        }
        out->trigger =
            compaction_trigger(s_limit(out->model), s_threshold(out->model, cc->default_threshold),
                               out->summarizer ? s_limit(out->summarizer) : -1);
    }
    if (rc == HISTORY_OK && (out->title_fallback || out->title_requested > 0)) {
        out->title_model = s_take_named(r.title, chat_id, title, "title_model_unresolved");
    }
    s_reads_clear(&r);
    if (rc != HISTORY_OK) {
        history_clear(out);
    }
    return rc;
}

history_rc_t history_load(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                          bool with_messages, history_t *out) {
    memset(out, 0, sizeof *out);
    char msg[200];
    /* One snapshot for the fence check and every read below, so the history is the one the
     * fenced row had; no row lock: a lock would give the read-only transaction an xid and
     * make its COMMIT wait for a WAL flush, on every step of every turn. A transition that
     * commits after the snapshot is caught by the fence of the write that follows. BEGIN is
     * sent ahead with the reads. */
    if (db_send(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, NULL, NULL) !=
        0) {
        db_flush(conn, NULL, 0);
        s_rollback(conn);
        return HISTORY_DB;
    }
    history_rc_t rc = s_read(conn, chat_id, fence, with_messages, NULL, NULL, out);
    if (rc == HISTORY_OK && db_exec(conn, msg, sizeof msg, "COMMIT", 0, NULL) != DB_OK) {
        history_clear(out);
        return HISTORY_DB;
    }
    if (rc != HISTORY_OK && PQtransactionStatus(conn) != PQTRANS_IDLE) {
        s_rollback(conn);
    }
    return rc;
}

history_rc_t history_read_locked(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                                 const compaction_config_t *cc, const char *title_model,
                                 history_t *out) {
    memset(out, 0, sizeof *out);
    return s_read(conn, chat_id, fence, true, cc, title_model, out);
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
    size_t waits = 0;
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        if (json_object_get(answered, s_str(c, "tool_call_id"))) {
            continue;
        }
        if (s_is_dynamic(dynamic_tools, s_str(c, "tool_name"))) {
            dynamic++;
        } else if (!strcmp(s_str(c, "tool_name"), CS_AGENT_WAIT_TOOL)) {
            waits++;
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
    } else if (waits > 0) {
        d = DECIDE_AGENT_WAIT;
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
        case DECIDE_AGENT_WAIT:
            return "agent_wait";
    }
    return "?";
}
