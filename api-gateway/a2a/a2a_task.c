/* a2a_task: A2A tasks derived from committed chat rows; see a2a_task.h. */
#include "a2a_task.h"
#include "jsonstrict.h"
#include "gateway.h"
#include "jsonout.h"
#include "jsonnumber.h"
#include "mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One row describing the user message's turn: the chat's status, whether a later user
 * message exists (the turn is over), the receipt of its structured request and the text of
 * the assistant messages between the two. json, not jsonb: the receipt's value is the stored
 * text (0021_exact_json.sql), which jsonb would rewrite. */
static const char *const s_turn_sql =
    "WITH t AS (SELECT m.id, m.chat_id, m.structured_output_request_id AS rid,"
    " m.structured_output -> 'response_format' -> 'json_schema' ->> 'name' AS fmt, c.status,"
    " (SELECT min(n.id) FROM chat_messages n WHERE n.chat_id = m.chat_id AND n.role = 'user'"
    " AND NOT n.deleted AND n.id > m.id) AS next_id"
    " FROM chat_messages m JOIN chats c ON c.id = m.chat_id"
    " WHERE m.id = $1::bigint AND c.owner_id = $2::uuid AND m.role = 'user')"
    " SELECT json_build_object('id', t.id, 'chat_id', t.chat_id, 'rid', t.rid, 'fmt', t.fmt,"
    " 'status', t.status, 'over', t.next_id IS NOT NULL, 'ts', " A2A_TASK_ISO(
        "(SELECT"
        " max(a.created_at) FROM chat_messages a WHERE a.chat_id = t.chat_id AND a.id >= t.id"
        " AND (t.next_id IS NULL OR a.id < t.next_id))") ", 'receipt', (SELECT r.structured_output"
                                                         " FROM chat_messages r WHERE "
                                                         "r.structured_output_request_id = t.rid"
                                                         " AND r.structured_output ->> 'type' = "
                                                         "'structured-output-outcome'),"
                                                         " 'text', (SELECT string_agg(p.part ->> "
                                                         "'text', '' ORDER BY a.id, p.ord)"
                                                         " FROM chat_messages a CROSS JOIN LATERAL "
                                                         "json_array_elements(a.content)"
                                                         " WITH ORDINALITY AS p(part, ord) WHERE "
                                                         "a.chat_id = t.chat_id AND a.role = "
                                                         "'assistant'"
                                                         " AND NOT a.deleted AND a.id > t.id AND "
                                                         "(t.next_id IS NULL OR a.id < t.next_id)"
                                                         " AND (a.structured_output ->> 'type') IS "
                                                         "DISTINCT FROM 'structured-output-outcome'"
                                                         " AND p.part ->> 'type' = 'text')) FROM t";

static json_t *s_rows(PGconn *conn, const char *sql, int n, const char *const *p, bool *failed) {
    http_resp_t ignore = {0};
    json_t *rows = gateway_rows(conn, sql, n, p, &ignore);
    free(ignore.body);
    *failed = rows == NULL;
    return rows;
}

/* The first row of a two-parameter query ($1, $2), as a new reference; NULL when there is
 * none (or on a failed read, *failed set). */
static json_t *s_first_row(PGconn *conn, const char *sql, const char *const p[2], bool *failed) {
    json_t *rows = s_rows(conn, sql, 2, p, failed);
    json_t *row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return row;
}

const char *a2a_task_state_name(const char *v1_state, bool legacy) {
    static const char *const map[][2] = {
        {"TASK_STATE_SUBMITTED", "submitted"}, {"TASK_STATE_WORKING", "working"},
        {"TASK_STATE_COMPLETED", "completed"}, {"TASK_STATE_FAILED", "failed"},
        {"TASK_STATE_CANCELED", "canceled"},   {"TASK_STATE_INPUT_REQUIRED", "input-required"},
        {"TASK_STATE_REJECTED", "rejected"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (!strcmp(map[i][0], v1_state)) {
            return map[i][legacy ? 1 : 0];
        }
    }
    return legacy ? "unknown" : "TASK_STATE_UNSPECIFIED";
}

bool a2a_task_lossless(const json_t *v) {
    if (json_is_number(v)) {
        return jsonnumber_fits_double(v);
    }
    size_t i;
    const char *k;
    json_t *e;
    if (json_is_array(v)) {
        json_array_foreach((json_t *)v, i, e) {
            if (!a2a_task_lossless(e)) {
                return false;
            }
        }
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, e) {
            if (!a2a_task_lossless(e)) {
                return false;
            }
        }
    }
    return true;
}

static char *s_base64(const char *in, size_t len) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = mem_alloc(4 * ((len + 2) / 3) + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        v |= i + 1 < len ? (unsigned char)in[i + 1] << 8 : 0;
        v |= i + 2 < len ? (unsigned char)in[i + 2] : 0;
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tab[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static json_t *s_text_part(const char *text, bool legacy) {
    return legacy ? json_pack("{s:s,s:s}", "kind", "text", "text", text)
                  : json_pack("{s:s}", "text", text);
}

/* The structured value as the one part the request's encoding asks for. */
static json_t *s_value_part(const json_t *value, bool raw, bool legacy) {
    if (!raw) {
        return legacy ? json_pack("{s:s,s:O}", "kind", "data", "data", value)
                      : json_pack("{s:O,s:s}", "data", value, "mediaType", "application/json");
    }
    char *text = jsonout_dumps(value); /* exact: integers are int64 and printed as such */
    char *b64 = s_base64(text, strlen(text));
    json_t *part = legacy ? json_pack("{s:s,s:{s:s,s:s,s:s}}", "kind", "file", "file", "bytes", b64,
                                      "mimeType", "application/json", "name", "result.json")
                          : json_pack("{s:s,s:s}", "raw", b64, "mediaType", "application/json");
    free(b64);
    free(text);
    return part;
}

static json_t *s_artifact(const char *id, const char *name, json_t *part, bool ext, bool legacy) {
    json_t *a = json_pack("{s:s,s:s,s:[o]}", "artifactId", id, "name", name, "parts", part);
    if (ext) {
        json_object_set_new(a, "extensions", json_pack("[s]", A2A_EXTENSION_URI));
    }
    (void)legacy;
    return a;
}

typedef struct {
    const char *state;
    char code[64];
    json_t *artifact; /* owned until placed */
    char *message;    /* the status message text, or NULL */
} s_view_t;

/* A structured turn: its receipt decides, or the chat's progress while there is none. */
static void s_structured(json_t *row, const char *tid, bool legacy, s_view_t *v) {
    json_t *r = json_object_get(row, "receipt");
    const char *st = json_string_value(json_object_get(r, "status"));
    /* {"error":{"code"}}; a receipt written before that shape has "code" at the top. */
    const char *code = json_string_value(json_object_get(json_object_get(r, "error"), "code"));
    code = code ? code : json_string_value(json_object_get(r, "code"));
    const char *fmt = json_string_value(json_object_get(row, "fmt"));
    json_t *value = json_object_get(r, "value");
    bool raw = !fmt || strcmp(fmt, A2A_FORMAT_PROTOBUF) != 0;
    snprintf(v->code, sizeof v->code, "%s", code ? code : "");
    if (st && !strcmp(st, "succeeded") && value) {
        if (!raw && !a2a_task_lossless(value)) {
            v->state = "TASK_STATE_FAILED";
            snprintf(v->code, sizeof v->code, "result_not_representable");
            return;
        }
        v->state = "TASK_STATE_COMPLETED";
        const char *rid = json_string_value(json_object_get(row, "rid"));
        v->artifact = s_artifact(rid ? rid : tid, A2A_ARTIFACT_NAME,
                                 s_value_part(value, raw, legacy), true, legacy);
    } else if (st) {
        v->state = !strcmp(st, "canceled") ? "TASK_STATE_CANCELED" : "TASK_STATE_FAILED";
    } else if (json_object_get(row, "queued")) {
        return; /* still queued: only a receipt (a deletion's cancellation) ends it */
    } else if (json_is_true(json_object_get(row, "over")) ||
               !strcmp(json_string_value(json_object_get(row, "status")), "waiting")) {
        v->state = "TASK_STATE_FAILED"; /* the turn ended without a receipt */
        snprintf(v->code, sizeof v->code, "no_receipt");
    }
}

static void s_text(json_t *row, const char *tid, bool legacy, s_view_t *v) {
    const char *status = json_string_value(json_object_get(row, "status"));
    const char *text = json_string_value(json_object_get(row, "text"));
    if (json_is_true(json_object_get(row, "over")) || !strcmp(status, "waiting")) {
        v->state = "TASK_STATE_COMPLETED";
        char *aid = mem_printf("%s-answer", tid);
        v->artifact =
            s_artifact(aid, "answer", s_text_part(text ? text : "", legacy), false, legacy);
        free(aid);
        v->message = mem_strdup(text ? text : "");
    } else if (!strcmp(status, "error")) {
        v->state = "TASK_STATE_FAILED";
    }
}

/* A recorded outcome (a2a_task_outcomes) decides over the rows: a canceled text turn reads
 * canceled, a refused request failed with its code and message. */
static void s_outcome(json_t *o, s_view_t *v) {
    const char *state = json_string_value(json_object_get(o, "state"));
    const char *code = json_string_value(json_object_get(o, "code"));
    const char *message = json_string_value(json_object_get(o, "message"));
    v->state = state && !strcmp(state, "canceled") ? "TASK_STATE_CANCELED" : "TASK_STATE_FAILED";
    snprintf(v->code, sizeof v->code, "%s", code ? code : "");
    v->message = message ? mem_strdup(message) : NULL;
}

static json_t *s_status(const s_view_t *v, const char *tid, const char *ctx, bool legacy) {
    json_t *status = json_pack("{s:s}", "state", a2a_task_state_name(v->state, legacy));
    char *text =
        v->message ? mem_strdup(v->message)
        : v->code[0]
            ? mem_printf("structured output %s: %s",
                         !strcmp(v->state, "TASK_STATE_CANCELED") ? "canceled" : "failed", v->code)
            : NULL;
    if (text) {
        char *mid = mem_printf("%s-status", tid);
        json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:[o]}", "messageId", mid, "role",
                              legacy ? "agent" : "ROLE_AGENT", "contextId", ctx, "taskId", tid,
                              "parts", s_text_part(text, legacy));
        if (legacy) {
            json_object_set_new(m, "kind", json_string("message"));
        }
        json_object_set_new(status, "message", m);
        free(mid);
        free(text);
    }
    return status;
}

static void s_build(json_t *row, const char *tid, bool legacy, a2a_task_t *out) {
    const char *ctx = json_string_value(json_object_get(row, "chat_id"));
    const char *status = json_string_value(json_object_get(row, "status"));
    s_view_t v = {.state = status && !strcmp(status, "requires_action")
                               ? "TASK_STATE_INPUT_REQUIRED"
                               : "TASK_STATE_WORKING"};
    if (json_is_null(json_object_get(row, "queued"))) {
        v.state = "TASK_STATE_SUBMITTED";
    }
    json_t *outcome = json_object_get(row, "outcome");
    bool canceled =
        outcome && !strcmp(json_string_value(json_object_get(outcome, "state")), "canceled");
    if (outcome && !(canceled && json_string_value(json_object_get(row, "rid")))) {
        s_outcome(outcome, &v);
    } else if (json_string_value(json_object_get(row, "rid"))) {
        s_structured(row, tid, legacy, &v);
    } else if (!json_object_get(row, "queued")) {
        s_text(row, tid, legacy, &v);
    }
    if (canceled && strcmp(v.state, "TASK_STATE_CANCELED") != 0) {
        /* A structured turn canceled before its worker wrote the cancellation receipt. */
        v.state = "TASK_STATE_CANCELED";
        json_decref(v.artifact);
        v.artifact = NULL;
        snprintf(v.code, sizeof v.code, "canceled");
    }
    json_t *st = s_status(&v, tid, ctx, legacy);
    const char *ts = json_string_value(json_object_get(row, "ts"));
    if (ts) {
        json_object_set_new(st, "timestamp", json_string(ts));
    }
    json_t *task =
        json_pack("{s:s,s:s,s:o,s:[]}", "id", tid, "contextId", ctx, "status", st, "artifacts");
    if (v.artifact) {
        json_array_append_new(json_object_get(task, "artifacts"), v.artifact);
    }
    if (v.code[0]) {
        json_t *so = json_pack("{s:s}", "code", v.code);
        json_t *detail = json_object_get(outcome, "detail");
        if (json_is_object(detail)) {
            json_object_update(so, detail);
        }
        json_object_set_new(task, "metadata", json_pack("{s:o}", "kediStructuredOutput", so));
    }
    if (legacy) {
        json_object_set_new(task, "kind", json_string("task"));
    }
    free(v.message);
    out->task = task;
    snprintf(out->state, sizeof out->state, "%s", v.state);
    snprintf(out->context_id, sizeof out->context_id, "%s", ctx ? ctx : "");
    out->terminal = !strcmp(v.state, "TASK_STATE_COMPLETED") ||
                    !strcmp(v.state, "TASK_STATE_FAILED") ||
                    !strcmp(v.state, "TASK_STATE_CANCELED");
}

/* "q<id>": the promoted message if there is one, else the queued row. */
static json_t *s_queued_row(PGconn *conn, const char *qid, const char *user_id, char *mid,
                            size_t midlen, bool *failed) {
    const char *p[] = {qid, user_id};
    json_t *rows = s_rows(conn,
                          "SELECT to_jsonb(m.id::text) FROM chat_messages m JOIN chats c"
                          " ON c.id = m.chat_id WHERE m.queued_message_id = $1::bigint"
                          " AND c.owner_id = $2::uuid AND m.role = 'user'",
                          2, p, failed);
    const char *id = json_string_value(json_array_get(rows, 0));
    if (id) {
        snprintf(mid, midlen, "%s", id);
        json_decref(rows);
        return NULL;
    }
    json_decref(rows);
    if (*failed) {
        return NULL;
    }
    return s_first_row(
        conn,
        "SELECT jsonb_build_object('chat_id', q.chat_id, 'rid',"
        " q.structured_output_request_id, 'status', c.status, 'queued', NULL, 'ts', " A2A_TASK_ISO(
            "q.created_at") ")"
                            " FROM chat_queued_messages q JOIN chats c ON c.id = q.chat_id"
                            " WHERE q.id = $1::bigint AND c.owner_id = $2::uuid",
        p, failed);
}

int a2a_task_id_canonical(const char *text, char out[A2A_TASK_ID_MAX]) {
    char prefix = text[0] == 'q' || text[0] == 'Q'   ? 'q'
                  : text[0] == 'r' || text[0] == 'R' ? 'r'
                                                     : '\0';
    int64_t id = 0;
    if (gateway_int_parse(text + (prefix ? 1 : 0), 1, INT64_MAX, &id) != 0) {
        return -1;
    }
    snprintf(out, A2A_TASK_ID_MAX, "%.1s%lld", prefix ? &prefix : "", (long long)id);
    return 0;
}

static bool s_digits(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 18) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
    }
    return true;
}

/* The recorded outcome of task_id, as a row s_build reads alone or merged into the task's
 * own row; NULL when there is none (or on a failed read, *failed set). A chat's outcome lives
 * as long as the chat is the owner's. */
static json_t *s_outcome_row(PGconn *conn, const char *task_id, const char *user_id, bool *failed) {
    const char *p[] = {task_id, user_id};
    return s_first_row(conn,
                       "SELECT jsonb_build_object('chat_id', o.context_id, 'ts', " A2A_TASK_ISO(
                           "o.created_at") ", 'outcome', jsonb_strip_nulls(jsonb_build_object("
                                           "'state', o.state, 'code', o.code, 'message',"
                                           " o.message, 'detail', o.detail)))"
                                           " FROM a2a_task_outcomes o WHERE o.task_id = $1"
                                           " AND o.owner_id = $2::uuid AND (o.task_id LIKE"
                                           " 'r%' OR EXISTS (SELECT 1 FROM chats c WHERE"
                                           " c.id = o.context_id AND c.owner_id = o.owner_id))",
                       p, failed);
}

/* The task's own row: its user message's turn, or its queued message. */
static json_t *s_task_row(PGconn *conn, const char *task_id, const char *user_id, char *mid,
                          size_t midlen, bool *failed) {
    json_t *row = NULL;
    snprintf(mid, midlen, "%s", task_id);
    if (task_id[0] == 'q' && s_digits(task_id + 1)) {
        mid[0] = '\0';
        row = s_queued_row(conn, task_id + 1, user_id, mid, midlen, failed);
        if (row) {
            return row;
        }
    }
    if (!*failed && s_digits(mid)) {
        const char *p[] = {mid, user_id};
        row = s_first_row(conn, s_turn_sql, p, failed);
    }
    return row;
}

a2a_lookup_t a2a_task_load(PGconn *conn, const char *task_id, const char *user_id, bool legacy,
                           a2a_task_t *out) {
    memset(out, 0, sizeof *out);
    bool failed = false;
    json_t *outcome = s_outcome_row(conn, task_id, user_id, &failed);
    json_t *row = NULL;
    if (!failed && task_id[0] != 'r') {
        row = s_task_row(conn, task_id, user_id, out->message_id, sizeof out->message_id, &failed);
    }
    if (failed) {
        json_decref(outcome);
        json_decref(row);
        return A2A_TASK_DB_ERROR;
    }
    if (row && outcome) {
        /* The later of the two times: an interrupted turn may commit text after the cancel. */
        const char *a = json_string_value(json_object_get(row, "ts"));
        const char *b = json_string_value(json_object_get(outcome, "ts"));
        if (b && (!a || strcmp(b, a) > 0)) {
            json_object_set(row, "ts", json_object_get(outcome, "ts"));
        }
        json_object_set(row, "outcome", json_object_get(outcome, "outcome"));
    } else if (outcome) {
        row = json_incref(outcome);
    }
    json_decref(outcome);
    if (!row) {
        return A2A_TASK_MISSING;
    }
    s_build(row, task_id, legacy, out);
    json_decref(row);
    return A2A_TASK_FOUND;
}

int a2a_task_outcome_put(PGconn *conn, const char *user_id, const char *task_id,
                         const char *context_id, const char *state, const char *code,
                         const char *message, const char *detail) {
    const char *p[] = {user_id, task_id, context_id, state, code, message, detail};
    bool failed = false;
    json_t *rows = s_rows(conn,
                          "INSERT INTO a2a_task_outcomes (owner_id, task_id, context_id, state,"
                          " code, message, detail) VALUES ($1::uuid, $2, $3::uuid, $4, $5, $6,"
                          " $7::jsonb) ON CONFLICT (owner_id, task_id) DO NOTHING"
                          " RETURNING to_jsonb(task_id)",
                          7, p, &failed);
    json_decref(rows);
    return failed ? -1 : 0;
}

int a2a_task_refuse(PGconn *conn, const char *user_id, const char *context_id, const char *code,
                    const char *message, const char *detail, char task_id[A2A_TASK_ID_MAX]) {
    const char *p[] = {user_id, context_id, code, message, detail};
    bool failed = false;
    json_t *rows = s_rows(conn,
                          "INSERT INTO a2a_task_outcomes (owner_id, task_id, context_id, state,"
                          " code, message, detail) VALUES ($1::uuid, 'r' ||"
                          " nextval('a2a_refused_task_seq'), $2::uuid, 'failed', $3, $4,"
                          " $5::jsonb) RETURNING to_jsonb(task_id)",
                          5, p, &failed);
    const char *id = json_string_value(json_array_get(rows, 0));
    int rc = id ? 0 : -1;
    if (id) {
        snprintf(task_id, A2A_TASK_ID_MAX, "%s", id);
    }
    json_decref(rows);
    return rc;
}
