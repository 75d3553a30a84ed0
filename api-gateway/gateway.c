/* gateway: request-to-bundle helpers shared by the route handlers; see gateway.h. */
#include "gateway.h"
#include "db.h"
#include "jsonstrict.h"
#include "log.h"
#include "jsonout.h"
#include "mem.h"
#include "outformat.h"

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
        chatstate_t *cs = chatstate_begin(conn, chat_id, &err);
        if (cs && step(cs, ctx, &err) == 0 && chatstate_commit(&cs, &gw->sink, after, &err) == 0) {
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

/* "/content/0/text" -> "content[0].text": the field style of every validation error. */
static void s_pointer_to_field(const char *ptr, char *out, size_t size) {
    size_t o = 0;
    for (const char *p = ptr; *p == '/' && o + 4 < size;) {
        const char *seg = ++p;
        size_t n = strcspn(seg, "/");
        bool index = n > 0 && strspn(seg, "0123456789") == n;
        int w = snprintf(out + o, size - o, index ? "[%.*s]" : (o ? ".%.*s" : "%.*s"), (int)n, seg);
        o += w > 0 ? (size_t)w : 0;
        p = seg + n;
    }
    if (o == 0 || o >= size) {
        snprintf(out, size, "body");
    }
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
        char field[JSONSTRICT_PATH_MAX];
        s_pointer_to_field(e.path, field, sizeof field);
        http_invalid(resp, field, detail);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        http_invalid(resp, "body", "the body must be a JSON object");
        return NULL;
    }
    return v;
}

int gateway_only_fields(json_t *obj, const char *const *allowed, const char *prefix,
                        http_resp_t *resp) {
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++) {
            ok = !strcmp(key, allowed[i]);
        }
        if (!ok) {
            char field[160];
            snprintf(field, sizeof field, "%s%s", prefix, key);
            http_invalid(resp, field, "unknown field");
            return -1;
        }
    }
    return 0;
}

char *gateway_content(json_t *content, const char *field, bool empty_ok, http_resp_t *resp) {
    char path[128];
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
        snprintf(path, sizeof path, "%s[%zu]", field, i);
        json_t *type = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(type)) {
            http_invalid(resp, path, "a part is an object with a string \"type\"");
            return NULL;
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            char f[160];
            snprintf(f, sizeof f, "%s.type", path);
            http_invalid(resp, f, "only \"text\" input parts are supported");
            return NULL;
        }
        static const char *const text_fields[] = {"type", "text", NULL};
        char prefix[140];
        snprintf(prefix, sizeof prefix, "%s.", path);
        if (gateway_only_fields(part, text_fields, prefix, resp) != 0) {
            return NULL;
        }
        if (!json_is_string(json_object_get(part, "text"))) {
            char f[160];
            snprintf(f, sizeof f, "%s.text", path);
            http_invalid(resp, f, "must be a string");
            return NULL;
        }
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

#define GATEWAY_CHAT_JSON                                                                          \
    "jsonb_strip_nulls(jsonb_build_object('id', c.id, 'owner_id', c.owner_id, 'title', c.title,"   \
    " 'status', c.status, 'archived', c.archived, 'last_model_config_id', c.model_config_id,"      \
    " 'last_error', c.last_error, 'retry_state', c.retry_state,"                                   \
    " 'requires_action_deadline_at', c.requires_action_deadline_at,"                               \
    " 'created_at', c.created_at, 'updated_at', c.updated_at,"                                     \
    " 'snapshot_version', c.snapshot_version, 'dynamic_tools', c.dynamic_tools))"                  \
    " || jsonb_build_object('last_turn_summary', NULL, 'summary', NULL, 'children', '[]'::jsonb)"

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
