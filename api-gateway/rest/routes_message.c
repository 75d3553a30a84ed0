/* routes_message: messages (list, send, edit) and the queue (delete, promote). */
#include "admin.h"
#include "admithook.h"
#include "db.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"
#include "rest.h"
#include "trace.h"
#include "attachment.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGES_LIMIT_MAX 200

static json_t *s_messages_by_id(PGconn *conn, const int64_t *ids, int n, http_resp_t *resp) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(arr, json_integer(ids[i]));
    }
    char *list = jsonout_dumps(arr);
    json_decref(arr);
    const char *p[] = {list};
    json_t *rows = gateway_rows(conn,
                                "SELECT " GATEWAY_MESSAGE_JSON " FROM chat_messages m WHERE m.id IN"
                                " (SELECT jsonb_array_elements_text($1::jsonb)::bigint)"
                                " AND m.visibility <> 'model' ORDER BY m.id",
                                1, p, resp);
    free(list);
    return rows;
}

/* A message or queued-message id in the path: the strict reader of query numbers, so "+5",
 * " 5" and ids beyond int64 are refused rather than read as 5 or saturated. */
static int s_id_param(const char *s, int64_t *out) {
    return gateway_int_parse(s, 1, INT64_MAX, out);
}

/* A message or queued-message id that is not a positive integer: 400 on the caller's chat
 * (ARCHITECTURE.md §11), but 404 first when the chat is not theirs, as on every route. */
static void s_bad_id(gateway_t *gw, const http_req_t *req, http_resp_t *resp, const char *message) {
    PGconn *conn = pool_get(gw->pool);
    json_t *chat = gateway_chat_json(conn, req->params[0], req->user_id, resp);
    pool_put(gw->pool, conn);
    if (chat) {
        json_decref(chat);
        http_error(resp, 400, message, "Message ID must be a positive integer.");
    }
}

/* The owner read the page (the list answers the owner only): their read marker goes to the
 * newest message of its first limit rows (the one past them only tells has_more), never
 * back. A marker that could not be written leaves has_unread as it was; the page is still
 * answered. */
static void s_mark_read(PGconn *conn, const http_req_t *req, json_t *rows, size_t limit) {
    json_int_t newest = 0;
    for (size_t i = 0; i < json_array_size(rows) && i < limit; i++) {
        json_int_t id = json_integer_value(json_object_get(json_array_get(rows, i), "id"));
        newest = id > newest ? id : newest;
    }
    if (newest > 0) {
        (void)chatstate_mark_read(conn, req->params[0], req->user_id, newest); /* it logs */
    }
}

static void s_list(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    /* Message-id cursors are bounds on this chat's own ids (ids are one sequence over all
     * chats): the answer lists only this chat's messages whichever id is given, so a
     * cursor need not be one of its messages and tells nothing about other chats. */
    const char *before = http_query(req, "before_id");
    const char *after = http_query(req, "after_id");
    int64_t b = 0;
    int64_t a = 0;
    int64_t limit = 0;
    if (gateway_query_int(req, "before_id", 1, INT64_MAX, 0, &b, resp) != 0 ||
        gateway_query_int(req, "after_id", 1, INT64_MAX, 0, &a, resp) != 0 ||
        gateway_query_int(req, "limit", 1, MESSAGES_LIMIT_MAX, 50, &limit, resp) != 0) {
        return;
    }
    if (before && after && a >= b) {
        http_invalid(resp, "after_id", "must be less than before_id");
        return;
    }
    PGconn *conn = pool_get(gw->pool);
    json_t *chat = gateway_chat_json(conn, req->params[0], req->user_id, resp);
    if (!chat) {
        pool_put(gw->pool, conn);
        return;
    }
    json_decref(chat);
    char bs[DB_PARAM_INT64_LEN];
    char as[DB_PARAM_INT64_LEN];
    char ls[DB_PARAM_INT64_LEN];
    /* Newest first, except when only after_id is given (polling forward). */
    bool asc = after && !before;
    const char *p[] = {req->params[0], db_param_int64(bs, b), db_param_int64(as, a),
                       db_param_int64(ls, limit + 1)};
    char *sql =
        mem_printf("SELECT " GATEWAY_MESSAGE_JSON " FROM chat_messages m WHERE m.chat_id = $1"
                   " AND NOT m.deleted AND m.visibility IN ('user', 'both')"
                   " AND ($2::bigint = 0 OR m.id < $2::bigint)"
                   " AND ($3::bigint = 0 OR m.id > $3::bigint)"
                   " ORDER BY m.id %s LIMIT $4::int",
                   asc ? "ASC" : "DESC");
    json_t *rows = gateway_rows(conn, sql, 4, p, resp);
    free(sql);
    json_t *queued = NULL;
    if (rows && !before && !after) {
        queued = gateway_rows(conn,
                              "SELECT " GATEWAY_QUEUED_JSON " FROM chat_queued_messages q"
                              " WHERE q.chat_id = $1 ORDER BY q.position, q.id",
                              1, p, resp);
    }
    if (rows) {
        s_mark_read(conn, req, rows, (size_t)limit);
    }
    pool_put(gw->pool, conn);
    if (!rows) {
        return;
    }
    bool more = json_array_size(rows) > (size_t)limit;
    if (more) {
        json_array_remove(rows, json_array_size(rows) - 1);
    }
    json_t *out = json_pack("{s:o,s:b}", "messages", rows, "has_more", more);
    json_object_set_new(out, "queued_messages", queued ? queued : json_array());
    http_json(resp, 200, out);
}

typedef struct {
    cs_message_t msg;
    char traceparent[TRACE_PARENT_LEN + 1]; /* msg's (trace.h): the request's, or a new one */
    cs_busy_t busy;
    int max_queue;
    int64_t message_id;
    int64_t queued_id;
    int64_t edit_id;
    json_t *inserted;
    json_t *deleted;
    gateway_t *gw;
    PGconn *conn;
    http_resp_t *resp;
    gateway_format_t format;
    cs_edit_format_t edit_format;
    char model_id[ID_UUID_LEN + 1]; /* the model the message asks for, by configured name */
    admithook_context_t context;    /* what user_prompt_submit added (admithook.h) */
    int plan;                       /* a send's plan_mode: 1 "plan", 0 "", -1 absent */
    char *mcp_text;                 /* a send's mcp_servers as stored (heap), or NULL: kept */
} send_t;

/* Collects what the bundle inserted and deleted before it is committed and freed. */
static int s_collect(chatstate_t *cs, send_t *s) {
    int n = 0;
    const int64_t *ids = chatstate_inserted(cs, &n);
    s->inserted = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(s->inserted, json_integer(ids[i]));
    }
    ids = chatstate_deleted(cs, &n);
    s->deleted = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(s->deleted, json_integer(ids[i]));
    }
    return 0;
}

/* The hook's context goes with the message (chatstate.h, cs_message_t.context): right after
 * it, or kept with its queued row until it is promoted (ARCHITECTURE.md §7.10). */
static void s_context(send_t *s) {
    s->msg.context = s->context.rows;
    s->msg.context_count = s->context.count;
}

static int s_send_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    send_t *s = ctx;
    s_context(s);
    /* The chat's settings for the next turns first, so that the turn this send starts (or the
     * one it queues for) runs with them; a refused send undoes them with the rest. */
    if ((s->plan >= 0 && chatstate_set_plan_mode(cs, s->plan == 1, err) != 0) ||
        (s->mcp_text && chatstate_set_mcp_servers(cs, s->mcp_text, err) != 0)) {
        return -1;
    }
    if (chatstate_send_message(cs, &s->msg, s->busy, s->max_queue, &s->message_id, &s->queued_id,
                               err) != 0) {
        return -1;
    }
    return s_collect(cs, s);
}

static int s_edit_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    send_t *s = ctx;
    s_context(s);
    if (chatstate_edit_message(cs, s->edit_id, &s->msg, s->edit_format, err) != 0) {
        return -1;
    }
    /* The replacement is the last row inserted before its context. */
    int n = 0;
    const int64_t *ids = chatstate_inserted(cs, &n);
    s->message_id = n > s->context.count ? ids[n - 1 - s->context.count] : 0;
    return s_collect(cs, s);
}

static json_t *s_inserted_rows(send_t *s) {
    size_t n = json_array_size(s->inserted);
    int64_t *ids = mem_calloc(n ? n : 1, sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        ids[i] = json_integer_value(json_array_get(s->inserted, i));
    }
    json_t *rows = s_messages_by_id(s->conn, ids, (int)n, s->resp);
    free(ids);
    return rows;
}

static json_t *s_find(json_t *rows, int64_t id) {
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        if (json_integer_value(json_object_get(r, "id")) == id) {
            return r;
        }
    }
    return NULL;
}

/* Parses {content, busy_behavior?, model?, response_format?, reasoning_effort?, plan_mode?,
 * mcp_servers?} shared by send and edit (an edit takes no busy_behavior, plan_mode or
 * mcp_servers; the model and the format are read against the database by s_format, the
 * steering fields by s_steer). */
static int s_parse(http_req_t *req, http_resp_t *resp, json_t **body, send_t *s, bool edit) {
    static const char *const send_fields[] = {
        "content",          "busy_behavior", "model",       "response_format",
        "reasoning_effort", "plan_mode",     "mcp_servers", NULL};
    static const char *const edit_fields[] = {"content", "model", "response_format",
                                              "reasoning_effort", NULL};
    if (!(*body = gateway_body(req, resp, false)) ||
        gateway_only_fields(*body, edit ? edit_fields : send_fields, "", resp) != 0) {
        return -1;
    }
    json_t *busy = json_object_get(*body, "busy_behavior");
    const char *b = busy ? json_string_value(busy) : "queue";
    if (!b || (strcmp(b, "queue") && strcmp(b, "interrupt"))) {
        http_invalid(resp, "busy_behavior", "must be \"queue\" or \"interrupt\"");
        return -1;
    }
    s->busy = !strcmp(b, "interrupt") ? CS_BUSY_INTERRUPT : CS_BUSY_QUEUE;
    char *content = gateway_content(json_object_get(*body, "content"), "content", false, resp);
    if (!content) {
        return -1;
    }
    s->msg = (cs_message_t){.role = "user", .content = content, .created_by = req->user_id};
    (void)trace_from_header(http_header(req, "traceparent"), s->traceparent);
    s->msg.traceparent = s->traceparent[0] ? s->traceparent : NULL;
    return 0;
}

/* The steering fields (issue 38): the message's reasoning_effort; a send's plan_mode and
 * mcp_servers (null or absent: the chat's stay), for the chat's next turns. Checked before
 * anything is stored; a structured request with plan mode in the same body is refused here,
 * and against the chat's own plan mode inside the bundle (chatstate_send_message). */
static int s_steer(const gateway_t *gw, json_t *body, send_t *s, bool edit) {
    s->plan = -1;
    if (gateway_effort(body, &s->msg.reasoning_effort, s->resp) != 0 ||
        (!edit && gateway_plan_mode(body, &s->plan, s->resp) != 0)) {
        return -1;
    }
    json_t *mcp = edit ? NULL : json_object_get(body, "mcp_servers");
    if (mcp && !json_is_null(mcp)) {
        if (gateway_mcp_servers(gw, mcp, s->resp) != 0) {
            return -1;
        }
        s->mcp_text = jsonout_dumps(mcp);
    }
    if (s->format.structured && s->plan == 1) {
        http_invalid(s->resp, "response_format",
                     "a structured request cannot be combined with plan mode");
        return -1;
    }
    return 0;
}

/* Reads response_format against the chat's dynamic tools into s (before the bundle, so a
 * bad format changes nothing). For an edit, an omitted or null format preserves the edited
 * message's, {"type":"text"} clears it and a json_schema replaces it. */
static int s_format(send_t *s, const http_req_t *req, json_t *body, bool edit) {
    /* A model by its configured name: the message's turn runs on it, and it becomes the
     * chat's model when the message enters the history (ARCHITECTURE.md §7.1). */
    json_t *model = json_object_get(body, "model");
    if (model) {
        if (gateway_model_id(s->gw, s->conn, model, s->model_id, s->resp) != 0) {
            return -1;
        }
        s->msg.model_config_id = s->model_id;
    }
    json_t *tools = NULL;
    if (json_object_get(body, "response_format")) {
        const char *p[] = {req->params[0], req->user_id};
        json_t *rows = id_uuid_valid(req->params[0])
                           ? gateway_rows(s->conn,
                                          "SELECT coalesce(dynamic_tools, '[]'::json) FROM chats"
                                          " WHERE id = $1 AND owner_id = $2",
                                          2, p, s->resp)
                           : json_array();
        if (!rows) {
            return -1;
        }
        tools = json_incref(json_array_get(rows, 0));
        json_decref(rows);
    }
    int rc = gateway_format(body, tools, &s->format, s->resp);
    json_decref(tools);
    if (rc != 0) {
        return -1;
    }
    s->msg.response_format = s->format.json;
    s->msg.so_request_id = s->format.structured ? s->format.request_id : NULL;
    s->edit_format = edit && !s->format.given ? CS_EDIT_PRESERVE_FORMAT : CS_EDIT_SET_FORMAT;
    return 0;
}

/* The admission hooks of a send or an edit (admithook.h), before its bundle: the chat must be
 * the caller's (404 else, and no event), then, with no connection held while they wait,
 * session_start for an edit and user_prompt_submit, whose override becomes s->msg.content. */
static int s_admit(gateway_t *gw, const http_req_t *req, send_t *s, bool edit) {
    if (!admithook_enabled(gw)) {
        return 0;
    }
    json_t *chat = gateway_chat_json(s->conn, req->params[0], req->user_id, s->resp);
    if (!chat) {
        return -1;
    }
    json_decref(chat);
    admithook_t h;
    admithook_begin(&h, gw, req->params[0], req->user_id, edit ? "edit" : "send");
    char *content = (char *)s->msg.content;
    int rc = admithook_run(&h, &s->conn, edit, &content, &s->context, s->resp);
    s->msg.content = content;
    return rc;
}

/* The message's file parts checked against the chat and the message's model, and described
 * (attachment.h). */
static int s_attach(const http_req_t *req, send_t *s) {
    char *content = (char *)s->msg.content;
    int rc = attachment_resolve(s->conn, req->user_id, req->params[0], s->msg.model_config_id,
                                "content", &content, s->resp);
    s->msg.content = content;
    return rc;
}

/* Gives back what a send or an edit held: its connection, hook context, format, rows. */
static void s_send_clear(gateway_t *gw, send_t *s, json_t *body) {
    pool_put(gw->pool, s->conn);
    admithook_context_clear(&s->context);
    gateway_format_clear(&s->format);
    json_decref(s->inserted);
    json_decref(s->deleted);
    free((char *)s->msg.content);
    free(s->mcp_text);
    json_decref(body);
}

static void s_send(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    json_t *body = NULL;
    send_t s = {.max_queue = gw->max_queue, .gw = gw, .resp = resp};
    if (s_parse(req, resp, &body, &s, false) != 0) {
        json_decref(body);
        return;
    }
    s.conn = pool_get(gw->pool);
    if (s_format(&s, req, body, false) == 0 && s_steer(gw, body, &s, false) == 0 &&
        s_admit(gw, req, &s, false) == 0 && s_attach(req, &s) == 0 &&
        gateway_bundle(gw, s.conn, req, s_send_step, &s, NULL, resp) == 0) {
        json_t *rows = s_inserted_rows(&s);
        if (rows) {
            json_t *out = json_pack("{s:b,s:O}", "queued", s.message_id == 0, "messages", rows);
            json_t *m = s_find(rows, s.message_id);
            if (m) {
                json_object_set(out, "message", m);
            }
            if (s.queued_id) {
                char q[DB_PARAM_INT64_LEN];
                const char *p[] = {db_param_int64(q, s.queued_id)};
                json_t *qr = gateway_rows(s.conn,
                                          "SELECT " GATEWAY_QUEUED_JSON
                                          " FROM chat_queued_messages q WHERE q.id = $1",
                                          1, p, resp);
                if (qr && json_array_size(qr)) {
                    json_object_set(out, "queued_message", json_array_get(qr, 0));
                }
                json_decref(qr);
            }
            json_decref(rows);
            http_json(resp, 200, out);
        }
    }
    s_send_clear(gw, &s, body);
}

/* The edit found no active user message in the caller's chat: the reference's answers
 * (api-shapes.md §2.1), 400 "Only user messages can be edited." for another role's message,
 * else 404 "Chat message not found."; a chat that is not the caller's keeps its 404. */
static void s_edit_missing(PGconn *conn, const http_req_t *req, int64_t id, http_resp_t *resp) {
    char mid[DB_PARAM_INT64_LEN];
    const char *p[] = {req->params[0], db_param_int64(mid, id), req->user_id};
    http_resp_t h = {0};
    json_t *rows = gateway_rows(conn,
                                "SELECT jsonb_build_object('role', m.role) FROM chats c LEFT JOIN"
                                " chat_messages m ON m.chat_id = c.id AND m.id = $2::bigint AND"
                                " NOT m.deleted AND m.visibility <> 'model' WHERE c.id = $1::uuid"
                                " AND c.owner_id = $3::uuid",
                                3, p, &h);
    free(h.body);
    if (json_array_size(rows) == 1) {
        const char *role = json_string_value(json_object_get(json_array_get(rows, 0), "role"));
        free(resp->body);
        resp->body = NULL;
        if (role && strcmp(role, "user") != 0) {
            http_error(resp, 400, "Only user messages can be edited.", NULL);
        } else {
            http_error(resp, 404, "Chat message not found.",
                       "Message does not belong to this chat.");
        }
    }
    json_decref(rows);
}

static void s_edit(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    json_t *body = NULL;
    send_t s = {.gw = gw, .resp = resp};
    if (s_id_param(req->params[1], &s.edit_id) != 0) {
        s_bad_id(gw, req, resp, "Invalid chat message ID.");
        return;
    }
    if (s_parse(req, resp, &body, &s, true) != 0) {
        json_decref(body);
        return;
    }
    s.conn = pool_get(gw->pool);
    int rc = s_format(&s, req, body, true);
    if (rc == 0) {
        rc = s_steer(gw, body, &s, true);
    }
    if (rc == 0) {
        rc = s_admit(gw, req, &s, true);
    }
    if (rc == 0) {
        rc = s_attach(req, &s);
    }
    if (rc == 0 && gateway_bundle(gw, s.conn, req, s_edit_step, &s, NULL, resp) != 0) {
        rc = -1;
        if (resp->status == 404) {
            s_edit_missing(s.conn, req, s.edit_id, resp);
        }
    }
    if (rc == 0) {
        json_t *rows = s_inserted_rows(&s);
        if (rows) {
            json_t *out =
                json_pack("{s:O,s:O}", "messages", rows, "deleted_message_ids", s.deleted);
            json_t *m = s_find(rows, s.message_id);
            if (m) {
                json_object_set(out, "message", m);
            }
            json_decref(rows);
            http_json(resp, 200, out);
        }
    }
    s_send_clear(gw, &s, body);
}

typedef struct {
    int64_t id;
    bool promote;
} queue_op_t;

static int s_queue_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    queue_op_t *q = ctx;
    return q->promote ? chatstate_promote_queued(cs, q->id, err)
                      : chatstate_delete_queued(cs, q->id, err);
}

static void s_queue_op(gateway_t *gw, http_req_t *req, http_resp_t *resp, bool promote) {
    queue_op_t q = {.promote = promote};
    if (s_id_param(req->params[1], &q.id) != 0) {
        s_bad_id(gw, req, resp, "Invalid queued message ID.");
        return;
    }
    PGconn *conn = pool_get(gw->pool);
    if (gateway_bundle(gw, conn, req, s_queue_step, &q, NULL, resp) == 0) {
        http_json(resp, promote ? 202 : 204, NULL);
    }
    pool_put(gw->pool, conn);
}

static void s_queue_delete(void *app, http_req_t *req, http_resp_t *resp) {
    s_queue_op(app, req, resp, false);
}

static void s_queue_promote(void *app, http_req_t *req, http_resp_t *resp) {
    s_queue_op(app, req, resp, true);
}

/* The sums of the usage the chat's messages carry (ARCHITECTURE.md §7.7): every row with
 * usage, deleted ones included (their tokens were spent), grouped by the row's model config;
 * the ROLLUP row is the chat's total. */
/* Every model call of the chat: its message rows with usage (deleted ones too: their tokens
 * were spent) and its calls that wrote no message (chat_usage: titles). */
static void s_usage(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    PGconn *conn = pool_get(gw->pool);
    json_t *chat = gateway_chat_json(conn, req->params[0], req->user_id, resp);
    const char *p[] = {req->params[0]};
    json_t *rows =
        chat ? gateway_rows(conn,
                            "SELECT jsonb_build_object('model', CASE WHEN grouping(mc.name) = 1"
                            " THEN NULL ELSE coalesce(mc.name, '') END," ADMIN_USAGE_SUMS_SQL ")"
                            " FROM (SELECT m.model_config_id, m.usage, true AS message"
                            " FROM chat_messages m WHERE m.chat_id = $1::uuid"
                            " AND m.usage IS NOT NULL UNION ALL SELECT cu.model_config_id,"
                            " cu.usage, false FROM chat_usage cu WHERE cu.chat_id = $1::uuid) u"
                            " LEFT JOIN model_configs mc ON mc.id = u.model_config_id"
                            " GROUP BY ROLLUP (mc.name) ORDER BY grouping(mc.name), mc.name",
                            1, p, resp)
             : NULL;
    pool_put(gw->pool, conn);
    if (rows) {
        /* The last row is the total; with no usage at all it is the only one. */
        size_t n = json_array_size(rows);
        json_t *total = json_incref(json_array_get(rows, n - 1));
        json_object_del(total, "model");
        json_array_remove(rows, n - 1);
        json_object_set_new(total, "chat_id", json_string(req->params[0]));
        json_object_set_new(total, "by_model", rows);
        http_json(resp, 200, total);
    }
    json_decref(chat);
}

const http_route_t message_route_table[] = {
    {"GET", "/api/v2/chats/{}/messages", s_list, false, NULL, "before_id after_id limit"},
    {"GET", "/api/v2/chats/{}/usage", s_usage, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/messages", s_send, false, NULL, NULL},
    {"PATCH", "/api/v2/chats/{}/messages/{}", s_edit, false, NULL, NULL},
    {"DELETE", "/api/v2/chats/{}/queue/{}", s_queue_delete, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/queue/{}/promote", s_queue_promote, false, NULL, NULL},
};
const int message_route_count = sizeof message_route_table / sizeof message_route_table[0];
