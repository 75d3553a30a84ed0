/* gateway: request-to-bundle helpers shared by the route handlers; see gateway.h. */
#include "gateway.h"
#include "db.h"
#include "effort.h"
#include "fieldpath.h"
#include "jsonstrict.h"
#include "log.h"
#include "jsonout.h"
#include "mem.h"
#include "outformat.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GATEWAY_BUNDLE_TRIES 4

void gateway_cs_error(http_resp_t *resp, const cs_error_t *err) {
    switch (err->rc) {
        case CS_NOT_FOUND:
            http_error(resp, 404, "Resource not found.", err->message);
            break;
        case CS_INVALID_STATE:
            http_error(resp, 409, "Chat is in an invalid state.", NULL);
            break;
        case CS_CONFLICT:
        case CS_FENCED:
            http_error(resp, 409, "Conflict.", err->message);
            break;
        case CS_BAD_INPUT: {
            /* The state machine's message starts with the field path: "results[0].x: ..." */
            char field[96];
            const char *colon = strstr(err->message, ": ");
            snprintf(field, sizeof field, "%.*s",
                     colon ? (int)(colon - err->message) : (int)strlen(err->message), err->message);
            http_invalid(resp, field, colon ? colon + 2 : err->message);
            break;
        }
        case CS_QUEUE_FULL:
            http_error(resp, 429, "Message queue is full.", err->message);
            break;
        case CS_RETRY:
            http_error(resp, 503, "Busy, try again.", err->message);
            break;
        default:
            http_error(resp, 500, "Internal error.", NULL);
            break;
    }
}

static int s_owned_by(PGconn *conn, const char *chat_id, const char *user_id) {
    if (!id_uuid_valid(chat_id)) {
        return 0;
    }
    const char *p[] = {chat_id, user_id};
    db_err_t e;
    PGresult *res =
        db_query(conn, &e, NULL, 0, "SELECT 1 FROM chats WHERE id = $1 AND owner_id = $2", 2, p);
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    PQclear(res);
    return n == 1;
}

int gateway_bundle(gateway_t *gw, PGconn *conn, const http_req_t *req, gateway_step_fn step,
                   void *ctx, hint_update_t *after, http_resp_t *resp) {
    const char *chat_id = req->params[0];
    int owned = s_owned_by(conn, chat_id, req->user_id);
    if (owned <= 0) {
        if (owned < 0) {
            http_error(resp, 500, "Internal error.", "database unavailable");
        } else {
            http_error(resp, 404, "Resource not found.", "chat not found");
        }
        return -1;
    }
    cs_error_t err = {0};
    for (int attempt = 0; attempt < GATEWAY_BUNDLE_TRIES; attempt++) {
        chatstate_t *cs = chatstate_begin(conn, &gw->chat_settings, chat_id, &err);
        if (cs && step(cs, ctx, &err) == 0 &&
            chatstate_commit_wake(&cs, &gw->sink, after, &err) == 0) {
            return 0;
        }
        chatstate_destroy(&cs);
        if (err.rc != CS_RETRY) {
            break;
        }
        log_info("bundle_retry", "chat_id=%s attempt=%d", chat_id, attempt + 1);
    }
    gateway_cs_error(resp, &err);
    return -1;
}

#define GATEWAY_POINTER_DEPTH_MAX 64 /* containers whose kind s_pointer_to_field recovers */

/* The kinds ('{' or '[') of the containers open at byte offset of body, outermost first;
 * returns how many (at most max). A JSON pointer cannot tell the member "0" from the element
 * 0: the body's text up to the error can. */
static int s_open_containers(const char *body, size_t len, size_t offset, char *kinds, int max) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < offset && i < len; i++) {
        char c = body[i];
        if (in_string) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (depth < max) {
                kinds[depth] = c;
            }
            depth++;
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        }
    }
    return depth < max ? depth : max;
}

/* A JSON pointer (RFC 6901) of the body as a field path of fieldpath.h: "/content/0/text" ->
 * "content[0].text", "/a~1b" -> "[\"a/b\"]"; the root is "body". A caller owns the result. */
static char *s_pointer_to_field(const char *ptr, const http_req_t *req, size_t offset) {
    char kinds[GATEWAY_POINTER_DEPTH_MAX];
    int known = s_open_containers(req->body, req->body_len, offset, kinds, (int)sizeof kinds);
    char *path = mem_strdup("");
    size_t seglen = strlen(ptr) + 1;
    char *seg = mem_alloc(seglen);
    int depth = 0;
    for (const char *p = ptr; *p == '/'; depth++) {
        p++;
        size_t n = strcspn(p, "/");
        size_t o = 0;
        for (size_t k = 0; k < n; k++) { /* ~1 is '/', ~0 is '~' */
            if (p[k] == '~' && k + 1 < n && (p[k + 1] == '0' || p[k + 1] == '1')) {
                seg[o++] = p[++k] == '1' ? '/' : '~';
            } else {
                seg[o++] = p[k];
            }
        }
        seg[o] = '\0';
        p += n;
        bool digits = o > 0 && strspn(seg, "0123456789") == o && (o == 1 || seg[0] != '0');
        bool element = depth < known ? kinds[depth] == '[' : digits;
        char *next = element && digits ? fieldpath_element(path, strtoul(seg, NULL, 10))
                                       : fieldpath_member(path, seg);
        free(path);
        path = next;
    }
    free(seg);
    if (!path[0]) {
        free(path);
        path = mem_strdup("body");
    }
    return path;
}

char *gateway_error_field(const http_req_t *req, const jsonstrict_error_t *e) {
    return s_pointer_to_field(e->path, req, e->offset);
}

json_t *gateway_body(const http_req_t *req, http_resp_t *resp, bool empty_ok) {
    if (req->body_len == 0 && empty_ok) {
        return json_object();
    }
    json_t *v = NULL;
    jsonstrict_error_t e;
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = HTTP_BODY_MAX_BYTES;
    if (jsonstrict_parse(req->body, req->body_len, &lim, &v, &e) != 0) {
        char detail[320];
        snprintf(detail, sizeof detail, "%s (at byte %zu)", e.message, e.offset);
        char *field = s_pointer_to_field(e.path, req, e.offset);
        http_invalid(resp, field, detail);
        free(field);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        http_invalid(resp, "body", "the body must be a JSON object");
        return NULL;
    }
    return v;
}

int gateway_only_fields(json_t *obj, const char *const *allowed, const char *parent,
                        http_resp_t *resp) {
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++) {
            ok = !strcmp(key, allowed[i]);
        }
        if (!ok) {
            char *field = fieldpath_member(parent, key);
            http_invalid(resp, field, "unknown field");
            free(field);
            return -1;
        }
    }
    return 0;
}

int gateway_int_parse(const char *text, int64_t min, int64_t max, int64_t *out) {
    ASSERT(min >= 0 && min <= max);
    if (!text || !*text) {
        return -1;
    }
    int64_t v = 0;
    for (const char *c = text; *c; c++) {
        if (*c < '0' || *c > '9') {
            return -1;
        }
        int d = *c - '0';
        if (v > max / 10 || v * 10 > max - d) { /* v * 10 + d > max, without overflowing */
            return -1;
        }
        v = v * 10 + d;
    }
    if (v < min) {
        return -1;
    }
    *out = v;
    return 0;
}

int gateway_query_int(const http_req_t *req, const char *name, int64_t min, int64_t max,
                      int64_t dflt, int64_t *out, http_resp_t *resp) {
    const char *text = http_query(req, name);
    if (!text) {
        *out = dflt;
        return 0;
    }
    if (gateway_int_parse(text, min, max, out) != 0) {
        char detail[96];
        snprintf(detail, sizeof detail, "must be an integer from %" PRId64 " to %" PRId64, min,
                 max);
        http_invalid(resp, name, detail);
        return -1;
    }
    return 0;
}

int gateway_chat_id(const char *text, char out[ID_UUID_LEN + 1]) {
    out[0] = '\0';
    if (!id_uuid_valid(text)) {
        return -1;
    }
    for (int i = 0; i <= ID_UUID_LEN; i++) {
        out[i] = (char)tolower((unsigned char)text[i]);
    }
    return 0;
}

/* Puts a file part's file_id in canonical (lower-case) form: 0, or -1 when it is no UUID. */
static int s_file_id(json_t *part) {
    char id[ID_UUID_LEN + 1];
    const char *v = json_string_value(json_object_get(part, "file_id"));
    if (!v || gateway_chat_id(v, id) != 0) {
        return -1;
    }
    json_object_set_new(part, "file_id", json_string(id));
    return 0;
}

char *gateway_content(json_t *content, const char *field, bool empty_ok, http_resp_t *resp) {
    if (!json_is_array(content)) {
        http_invalid(resp, field, content ? "must be an array of parts" : "is required");
        return NULL;
    }
    if (json_array_size(content) == 0 && !empty_ok) {
        http_invalid(resp, field, "must hold at least one part");
        return NULL;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        char *path = fieldpath_element(field, i);
        json_t *type = json_object_get(part, "type");
        static const char *const text_fields[] = {"type", "text", NULL};
        static const char *const file_fields[] = {"type", "file_id", NULL};
        const char *t = json_string_value(type);
        bool file = t && !strcmp(t, "file");
        const char *bad = NULL;
        const char *detail = NULL;
        if (!json_is_object(part) || !t) {
            detail = "a part is an object with a string \"type\"";
        } else if (strcmp(t, "text") != 0 && !file) {
            bad = "type";
            detail = "only \"text\" and \"file\" input parts are supported";
        } else if (gateway_only_fields(part, file ? file_fields : text_fields, path, resp) != 0) {
            free(path);
            return NULL;
        } else if (!file && !json_is_string(json_object_get(part, "text"))) {
            bad = "text";
            detail = "must be a string";
        } else if (file && s_file_id(part) != 0) {
            bad = "file_id";
            detail = "must be the id (a UUID) of an uploaded file (POST /api/v2/chats/files)";
        }
        if (detail) {
            char *f = bad ? fieldpath_member(path, bad) : mem_strdup(path);
            http_invalid(resp, f, detail);
            free(f);
            free(path);
            return NULL;
        }
        free(path);
    }
    return jsonout_dumps(content);
}

int gateway_format(json_t *body, json_t *dynamic_tools, gateway_format_t *out, http_resp_t *resp) {
    memset(out, 0, sizeof *out);
    json_t *v = json_object_get(body, "response_format");
    if (!v || json_is_null(v)) {
        return 0;
    }
    outformat_t *f = NULL;
    outformat_error_t e;
    if (outformat_parse(v, "response_format", &f, &e) != 0) {
        http_invalid(resp, e.field, e.message);
        return -1;
    }
    out->given = true;
    out->structured = f->structured;
    if (f->structured) {
        size_t i;
        json_t *t;
        json_array_foreach(dynamic_tools, i, t) {
            const char *name = json_string_value(json_object_get(t, "name"));
            if (name && !strcmp(name, OUTFORMAT_FINALIZER)) {
                outformat_destroy(&f);
                http_invalid(resp, "response_format",
                             "the chat declares a dynamic tool named " OUTFORMAT_FINALIZER
                             ", which a structured request reserves");
                return -1;
            }
        }
        out->json = outformat_json(f);
        ASSERT(id_uuid_new(out->request_id) == 0);
    }
    outformat_destroy(&f);
    return 0;
}

void gateway_format_clear(gateway_format_t *f) {
    free(f->json);
    f->json = NULL;
}

int gateway_effort(json_t *body, const char **out, http_resp_t *resp) {
    json_t *v = json_object_get(body, "reasoning_effort");
    *out = NULL;
    if (!v || json_is_null(v)) {
        return 0;
    }
    *out = effort_name(effort_rank(json_string_value(v)));
    if (!*out) {
        http_invalid(resp, "reasoning_effort", "must be one of " EFFORT_NAMES_TEXT);
        return -1;
    }
    return 0;
}

int gateway_plan_mode(json_t *body, int *out, http_resp_t *resp) {
    json_t *v = json_object_get(body, "plan_mode");
    *out = -1;
    if (!v || json_is_null(v)) {
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s || (strcmp(s, "plan") && s[0])) {
        /* The reference's message (api-shapes.md §2.1), with the usual validations entry. */
        static const char detail[] = "must be \"plan\" or \"\"";
        http_json(resp, 400,
                  json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "message", "Invalid plan_mode value.",
                            "detail", detail, "validations", "field", "plan_mode", "detail",
                            detail));
        return -1;
    }
    *out = s[0] != '\0';
    return 0;
}

int gateway_mcp_servers(const gateway_t *gw, json_t *v, http_resp_t *resp) {
    if (!json_is_array(v) || json_array_size(v) > GATEWAY_MCP_SERVERS_MAX) {
        http_invalid(resp, "mcp_servers", "must be an array of at most 16 server names");
        return -1;
    }
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        char f[64];
        snprintf(f, sizeof f, "mcp_servers[%zu]", i);
        const char *name = json_string_value(s);
        bool dup = false;
        for (size_t k = 0; name && k < i; k++) {
            dup = dup || !strcmp(name, json_string_value(json_array_get(v, k)));
        }
        if (!name || dup || !json_object_get(gw->mcp_servers, name)) {
            http_invalid(resp, f,
                         !name ? "must be a string"
                         : dup ? "names a server twice"
                               : "is not an MCP server of this deployment");
            return -1;
        }
    }
    return 0;
}

json_t *gateway_rows(PGconn *conn, const char *sql, int n, const char *const *params,
                     http_resp_t *resp) {
    db_err_t e;
    char msg[200];
    PGresult *res = db_query(conn, &e, msg, sizeof msg, sql, n, params);
    if (!res) {
        log_error("gateway_query_failed", "reason=\"%s\"", msg);
        http_error(resp, 500, "Internal error.", "database unavailable");
        return NULL;
    }
    json_t *rows = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        /* PostgreSQL's own JSON output of values that passed the strict boundary, read as
         * stored text (jsonstrict.h, the number policy): every number reads, so a row written
         * before the policy (1e300 given back as a 301-digit integer) never fails a read. */
        const char *text = PQgetvalue(res, i, 0);
        json_t *row = NULL;
        jsonstrict_error_t jerr;
        if (jsonstrict_parse(text, strlen(text), &jsonstrict_limits_stored, &row, &jerr) != 0) {
            log_error("gateway_row_unreadable", "reason=\"%s\"", jerr.message);
            PQclear(res);
            json_decref(rows);
            http_error(resp, 500, "Internal error.", "a stored value cannot be represented");
            return NULL;
        }
        json_array_append_new(rows, row);
    }
    PQclear(res);
    return rows;
}

/* One chat's own fields, of the row aliased a, as the text of a JSON object without its
 * closing brace, after a parenthesis the caller closes with "|| '}')::json" (jsonb_strip_nulls: a
 * root has no parent_chat_id or root_chat_id; plan_mode, last_reasoning_effort and lease_age_ms
 * appear when set). has_unread: an assistant message the owner has not read (chat_read_markers).
 * The fields the system writes go through jsonb; dynamic_tools, the client's (json,
 * 0021_exact_json.sql), is spliced in as its stored text so that its numbers reach the client as
 * written, and is left out when NULL. */
#define GATEWAY_CHAT_OPEN(a)                                                                       \
    "(left((jsonb_strip_nulls(jsonb_build_object('id', " a ".id, 'owner_id', " a ".owner_id,"      \
    " 'title', " a ".title, 'status', " a ".status, 'archived', " a ".archived,"                   \
    " 'parent_chat_id', " a ".parent_chat_id, 'root_chat_id', " a ".root_chat_id,"                 \
    " 'last_model_config_id', " a ".model_config_id, 'last_error', " a ".last_error,"              \
    " 'retry_state', " a ".retry_state,"                                                           \
    " 'requires_action_deadline_at', " a ".requires_action_deadline_at,"                           \
    " 'waiting_on_agents', nullif(" a ".waiting_on_agents, false), 'worker_id', " a ".worker_id,"  \
    " 'created_at', " a ".created_at, 'updated_at', " a ".updated_at,"                             \
    " 'snapshot_version', " a ".snapshot_version,"                                                 \
    " 'mcp_servers', " a ".mcp_servers, 'last_reasoning_effort', " a ".last_reasoning_effort,"     \
    " 'plan_mode', CASE WHEN " a ".plan_mode THEN 'plan' END, 'lease_age_ms', (SELECT"             \
    " (extract(epoch FROM statement_timestamp() - h.heartbeat_at) * 1000)::bigint"                 \
    " FROM chat_heartbeats h WHERE h.chat_id = " a ".id AND h.runner_id = " a ".runner_id)))"      \
    " || jsonb_build_object('last_turn_summary', NULL, 'summary', NULL, 'labels', " a ".labels,"   \
    " 'pin_order', " a ".pin_order, 'has_unread', EXISTS (SELECT 1 FROM chat_messages um"          \
    " WHERE um.chat_id = " a ".id AND um.role = 'assistant' AND um.visibility <> 'model'"          \
    " AND NOT um.deleted AND um.id > coalesce((SELECT r.last_read_message_id"                      \
    " FROM chat_read_markers r WHERE r.chat_id = " a ".id AND r.user_id = " a ".owner_id), 0))))"  \
    "::text, -1) || CASE WHEN " a ".dynamic_tools IS NULL OR json_typeof(" a ".dynamic_tools) ="   \
    " 'null' THEN '' ELSE ', \"dynamic_tools\": ' || " a ".dynamic_tools::text END"

/* A member of a root's family, as the root embeds it. */
#define GATEWAY_CHILD_JSON GATEWAY_CHAT_OPEN("d") " || ', \"children\": []}')::json"

/* A chat with its children: a root's whole family, flat, in creation order (each member with
 * its parent_chat_id); a child's are [] (ARCHITECTURE.md §3, "Families"). */
#define GATEWAY_CHAT_JSON                                                                          \
    GATEWAY_CHAT_OPEN("c")                                                                         \
    " || ', \"children\": ' || CASE WHEN c.parent_chat_id IS NOT NULL THEN '[]'"                   \
    " ELSE coalesce((SELECT json_agg(" GATEWAY_CHILD_JSON " ORDER BY d.created_at, d.id)"          \
    " FROM chats d WHERE d.root_chat_id = c.id)::text, '[]') END"                                  \
    " || ', \"files\": ' || coalesce((SELECT jsonb_agg(jsonb_build_object('id', f.id,"             \
    " 'owner_id', f.owner_id, 'name', f.name, 'mime_type', f.mime_type, 'size_bytes',"             \
    " f.size_bytes, 'sha256', encode(f.sha256, 'hex'), 'created_at', f.created_at)"                \
    " ORDER BY f.created_at, f.id) FROM chat_files f WHERE f.chat_id = c.id)::text, '[]')"         \
    " || '}')::json"

const char *const gateway_chat_json_sql = GATEWAY_CHAT_JSON;

json_t *gateway_chat_json(PGconn *conn, const char *chat_id, const char *user_id,
                          http_resp_t *resp) {
    if (!id_uuid_valid(chat_id)) {
        http_error(resp, 404, "Resource not found.", "chat not found");
        return NULL;
    }
    const char *p[] = {chat_id, user_id};
    json_t *rows = gateway_rows(
        conn, "SELECT " GATEWAY_CHAT_JSON " FROM chats c WHERE c.id = $1 AND c.owner_id = $2", 2, p,
        resp);
    if (!rows) {
        return NULL;
    }
    json_t *chat = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    if (!chat) {
        http_error(resp, 404, "Resource not found.", "chat not found");
    }
    return chat;
}

/* The model config by name (the default when model is NULL); see gateway.h. */
int gateway_model_find(gateway_t *gw, PGconn *conn, const char *name, char id[ID_UUID_LEN + 1],
                       http_resp_t *resp) {
    /* A name's key cannot be the default's: every name's has the prefix. */
    char *key = name ? mem_printf("name:%s", name) : mem_strdup("default");
    int64_t now = id_now_ms();
    if (idcache_get(gw->models, key, now, id)) {
        free(key);
        return 1;
    }
    const char *p[] = {name};
    db_err_t e;
    PGresult *res = db_query(conn, &e, NULL, 0,
                             "SELECT id FROM model_configs WHERE ($1::text IS NULL AND is_default)"
                             " OR name = $1",
                             1, p);
    if (!res) {
        free(key);
        http_error(resp, 500, "Internal error.", "database unavailable");
        return -1;
    }
    int n = PQntuples(res);
    if (n == 1) {
        snprintf(id, ID_UUID_LEN + 1, "%s", PQgetvalue(res, 0, 0));
        idcache_put(gw->models, key, id, now);
    }
    PQclear(res);
    free(key);
    return n == 1;
}

int gateway_model_id(gateway_t *gw, PGconn *conn, const json_t *model, char id[ID_UUID_LEN + 1],
                     http_resp_t *resp) {
    if (model && !json_is_string(model)) {
        http_invalid(resp, "model", "must be a model config name");
        return -1;
    }
    int found = gateway_model_find(gw, conn, model ? json_string_value(model) : NULL, id, resp);
    if (found < 0) {
        return -1;
    }
    if (!found) {
        http_invalid(resp, "model",
                     model ? "no model config has this name" : "no default model is configured");
        return -1;
    }
    return 0;
}

bool gateway_may_create(gateway_t *gw, const char *user_id, int *retry_after_s) {
    int64_t wait_ms = 0;
    if (!gw->creates || ratelimit_take(gw->creates, user_id, id_now_ms(), &wait_ms)) {
        return true;
    }
    *retry_after_s = (int)((wait_ms + 999) / 1000);
    return false;
}
