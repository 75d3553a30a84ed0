/* a2a_list: ListTasks; see a2a_list.h. */
#include "a2a_list.h"
#include "a2a_task.h"
#include "gateway.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every task of $1 (in context $2 when not NULL, updated at or after $3 when not NULL) with
 * its status timestamp, newest first. A turn's time is its last row's (or its outcome's, when
 * later); a queued message's its own; an outcome alone its own. */
static const char *const s_list_sql =
    "WITH u AS (SELECT m.id, m.chat_id, lead(m.id) OVER (PARTITION BY m.chat_id ORDER BY m.id)"
    " AS next_id FROM chat_messages m JOIN chats c ON c.id = m.chat_id WHERE c.owner_id ="
    " $1::uuid AND m.role = 'user' AND NOT m.deleted AND ($2::uuid IS NULL OR m.chat_id ="
    " $2::uuid)), t AS (SELECT u.id::text AS task_id, (SELECT max(a.created_at) FROM"
    " chat_messages a WHERE a.chat_id = u.chat_id AND a.id >= u.id AND (u.next_id IS NULL OR"
    " a.id < u.next_id)) AS ts FROM u UNION ALL SELECT 'q' || q.id, q.created_at FROM"
    " chat_queued_messages q JOIN chats c ON c.id = q.chat_id WHERE c.owner_id = $1::uuid AND"
    " ($2::uuid IS NULL OR q.chat_id = $2::uuid) UNION ALL SELECT o.task_id, o.created_at FROM"
    " a2a_task_outcomes o WHERE o.owner_id = $1::uuid AND ($2::uuid IS NULL OR o.context_id ="
    " $2::uuid) AND (o.task_id LIKE 'r%' OR (o.task_id LIKE 'q%' AND EXISTS (SELECT 1 FROM"
    " chats c WHERE c.id = o.context_id AND c.owner_id = o.owner_id) AND NOT EXISTS (SELECT 1"
    " FROM chat_queued_messages q WHERE q.id = substr(o.task_id, 2)::bigint) AND NOT EXISTS"
    " (SELECT 1 FROM chat_messages m WHERE m.queued_message_id = substr(o.task_id, 2)::bigint"
    " AND m.chat_id = o.context_id)))), s AS (SELECT t.task_id, greatest(t.ts, (SELECT"
    " o.created_at FROM a2a_task_outcomes o WHERE o.owner_id = $1::uuid AND o.task_id ="
    " t.task_id)) AS ts FROM t) SELECT jsonb_build_object('id', s.task_id, 'ts', " A2A_TASK_ISO(
        "s.ts") ") FROM s WHERE $3::timestamptz IS NULL OR s.ts >= $3::timestamptz"
                " ORDER BY s.ts DESC, s.task_id COLLATE \"C\" DESC";

static json_t *s_invalid(const char *field, const char *detail) {
    return json_pack("{s:s,s:s}", "field", field, "detail", detail);
}

/* "YYYY-MM-DDTHH:MM:SS" with an optional fraction and "Z" or "+HH:MM"/"-HH:MM": the ISO 8601
 * forms a client sends; PostgreSQL reads them exactly. */
static bool s_iso(const char *s) {
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t n = strlen(shape);
    if (strlen(s) < n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i]) {
            return false;
        }
    }
    int mo = (s[5] - '0') * 10 + s[6] - '0', d = (s[8] - '0') * 10 + s[9] - '0';
    int h = (s[11] - '0') * 10 + s[12] - '0', mi = (s[14] - '0') * 10 + s[15] - '0';
    int se = (s[17] - '0') * 10 + s[18] - '0';
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 59) {
        return false;
    }
    s += n;
    if (*s == '.') {
        size_t digits = strspn(s + 1, "0123456789");
        if (digits == 0 || digits > 9) {
            return false;
        }
        s += 1 + digits;
    }
    return !strcmp(s, "Z") ||
           ((s[0] == '+' || s[0] == '-') && strlen(s) == 6 && strspn(s + 1, "0123456789") == 2 &&
            s[3] == ':' && strspn(s + 4, "0123456789") == 2);
}

typedef struct {
    const char *context_id; /* canonical, or NULL */
    char context_buf[ID_UUID_LEN + 1];
    const char *status; /* a v1 state name, or NULL */
    const char *after;  /* ISO 8601, or NULL */
    int64_t page_size;
    bool artifacts;
    char cursor_ts[40]; /* the previous page's last task, or "" */
    char cursor_id[A2A_TASK_ID_MAX];
} s_query_t;

/* A page token is "<status timestamp>/<task id>" of the last task a page gave. */
static int s_token(const char *tok, s_query_t *q) {
    const char *slash = strrchr(tok, '/');
    if (!slash || (size_t)(slash - tok) >= sizeof q->cursor_ts ||
        a2a_task_id_canonical(slash + 1, q->cursor_id) != 0) {
        return -1;
    }
    snprintf(q->cursor_ts, sizeof q->cursor_ts, "%.*s", (int)(slash - tok), tok);
    return s_iso(q->cursor_ts) ? 0 : -1;
}

static int s_params(json_t *params, s_query_t *q, json_t **data) {
    json_t *ctx = json_object_get(params, "contextId");
    json_t *status = json_object_get(params, "status");
    json_t *size = json_object_get(params, "pageSize");
    json_t *tok = json_object_get(params, "pageToken");
    json_t *after = json_object_get(params, "statusTimestampAfter");
    json_t *hist = json_object_get(params, "historyLength");
    json_t *art = json_object_get(params, "includeArtifacts");
    q->page_size = A2A_LIST_PAGE_DEFAULT;
    if (ctx && json_string_length(ctx) > 0) {
        if (gateway_chat_id(json_string_value(ctx), q->context_buf) != 0) {
            *data = s_invalid("params.contextId", "must be a context id from this agent");
            return -1;
        }
        q->context_id = q->context_buf;
    } else if (ctx && !json_is_string(ctx)) {
        *data = s_invalid("params.contextId", "must be a string");
        return -1;
    }
    /* ProtoJSON: an enum is its name or its number (a2a.proto TaskState). */
    static const char *const numbered[] = {
        "TASK_STATE_UNSPECIFIED",    "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",      "TASK_STATE_FAILED",    "TASK_STATE_CANCELED",
        "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_REJECTED",  "TASK_STATE_AUTH_REQUIRED"};
    const char *st = json_string_value(status);
    json_int_t num = json_integer_value(status);
    if (json_is_integer(status) && num >= 0 &&
        num < (json_int_t)(sizeof numbered / sizeof *numbered)) {
        st = numbered[num];
    }
    if (status &&
        (!st || (strcmp(st, "TASK_STATE_UNSPECIFIED") && strcmp(st, "TASK_STATE_AUTH_REQUIRED") &&
                 strcmp(a2a_task_state_name(st, false), st)))) {
        *data = s_invalid("params.status", "must be a v1 task state name (TASK_STATE_WORKING)");
        return -1;
    }
    q->status = st && strcmp(st, "TASK_STATE_UNSPECIFIED") ? st : NULL;
    if (size && (!json_is_integer(size) || json_integer_value(size) < 1 ||
                 json_integer_value(size) > A2A_LIST_PAGE_MAX)) {
        *data = s_invalid("params.pageSize", "must be an integer from 1 to 100");
        return -1;
    }
    q->page_size = size ? json_integer_value(size) : q->page_size;
    if (tok && (!json_is_string(tok) ||
                (json_string_length(tok) > 0 && s_token(json_string_value(tok), q) != 0))) {
        *data = s_invalid("params.pageToken", "must be a nextPageToken this agent gave");
        return -1;
    }
    if (after && (!json_is_string(after) || !s_iso(json_string_value(after)))) {
        *data = s_invalid("params.statusTimestampAfter", "must be an ISO 8601 timestamp");
        return -1;
    }
    q->after = json_string_value(after);
    if (hist && (!json_is_integer(hist) || json_integer_value(hist) < 0)) {
        *data = s_invalid("params.historyLength", "must be a non-negative integer");
        return -1;
    }
    if (art && !json_is_boolean(art)) {
        *data = s_invalid("params.includeArtifacts", "must be a boolean");
        return -1;
    }
    q->artifacts = json_is_true(art);
    return 0;
}

/* True when (ts, id) comes after the cursor in the list's order. */
static bool s_after_cursor(const s_query_t *q, const char *ts, const char *id) {
    if (!q->cursor_ts[0]) {
        return true;
    }
    int c = strcmp(ts, q->cursor_ts);
    return c < 0 || (c == 0 && strcmp(id, q->cursor_id) < 0);
}

int a2a_list_tasks(PGconn *conn, const char *user_id, json_t *params, json_t **result,
                   json_t **data) {
    s_query_t q = {0};
    if (s_params(params, &q, data) != 0) {
        return -1;
    }
    const char *p[] = {user_id, q.context_id, q.after};
    http_resp_t h = {0};
    json_t *rows = gateway_rows(conn, s_list_sql, 3, p, &h);
    free(h.body);
    if (!rows) {
        return -2;
    }
    json_t *tasks = json_array();
    json_int_t total = 0;
    char last[80] = "";
    bool more = false;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        const char *ts = json_string_value(json_object_get(row, "ts"));
        bool in_page = !more && s_after_cursor(&q, ts, id);
        if (!q.status && !in_page) {
            total++; /* counted, not read: no filter needs its state */
            continue;
        }
        a2a_task_t t;
        a2a_lookup_t rc = a2a_task_load(conn, id, user_id, false, &t);
        if (rc == A2A_TASK_DB_ERROR) {
            json_decref(tasks);
            json_decref(rows);
            return -2;
        }
        if (rc != A2A_TASK_FOUND || (q.status && strcmp(t.state, q.status) != 0)) {
            json_decref(t.task); /* gone since the list was read, or filtered out */
            continue;
        }
        total++;
        if (in_page && (int64_t)json_array_size(tasks) < q.page_size) {
            if (!q.artifacts) {
                json_object_del(t.task, "artifacts");
            }
            json_array_append(tasks, t.task);
            snprintf(last, sizeof last, "%s/%s", ts, id);
        } else if (in_page) {
            more = true;
        }
        json_decref(t.task);
    }
    json_decref(rows);
    *result = json_pack("{s:o,s:s,s:I,s:I}", "tasks", tasks, "nextPageToken", more ? last : "",
                        "pageSize", (json_int_t)q.page_size, "totalSize", total);
    return 0;
}
