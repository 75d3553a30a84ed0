/* routes_chat: chats (create, list, get, update) and the chat-level transitions (interrupt,
 * tool-results, compact, clear, reconcile-invalid), plus health and models. */
#include "rest.h"
#include "attachment.h"
#include "stream.h"
#include "watch.h"
#include "admithook.h"
#include "db.h"
#include "fieldpath.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char *const gateway_chat_json_sql;

#define SYSTEM_PROMPT_MAX_BYTES 10000 /* a chat's system prompt, as sent at creation */
#define CHATS_LIMIT_MAX         200   /* chats per page of GET /chats */

/* Replies with the chat as it is now (after a committed bundle). */
static void s_reply_chat(PGconn *conn, const http_req_t *req, int status, http_resp_t *resp) {
    json_t *chat = gateway_chat_json(conn, req->params[0], req->user_id, resp);
    if (chat) {
        http_json(resp, status, chat);
    }
}

/* Checks the tools array, which the body holds under key (dynamic_tools or its alias
 * unsafe_dynamic_tools): errors name the key the client sent. */
static int s_dynamic_tools(json_t *tools, const char *key, http_resp_t *resp) {
    if (!json_is_array(tools)) {
        http_invalid(resp, key, "must be an array");
        return -1;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char f[96];
        snprintf(f, sizeof f, "%s[%zu]", key, i);
        static const char *const fields[] = {"name", "description", "input_schema", NULL};
        if (!json_is_object(t)) {
            http_invalid(resp, f, "must be an object");
            return -1;
        }
        if (gateway_only_fields(t, fields, f, resp) != 0) {
            return -1;
        }
        const char *name = json_string_value(json_object_get(t, "name"));
        size_t n = name ? strlen(name) : 0;
        bool ok = n >= 1 && n <= 64;
        for (size_t k = 0; ok && k < n; k++) {
            char c = name[k];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
        }
        ok = ok && strncmp(name, "mcp__", 5) != 0; /* reserved for MCP tools (§7.9) */
        for (size_t k = 0; ok && k < i; k++) {
            ok = strcmp(name,
                        json_string_value(json_object_get(json_array_get(tools, k), "name"))) != 0;
        }
        if (!ok) {
            char ff[128];
            snprintf(ff, sizeof ff, "%s.name", f);
            http_invalid(resp, ff,
                         "must match ^[A-Za-z0-9_-]{1,64}$, not begin with mcp__ and be unique");
            return -1;
        }
        json_t *d = json_object_get(t, "description");
        json_t *s = json_object_get(t, "input_schema");
        if ((d && !json_is_string(d)) || (s && !json_is_object(s))) {
            char ff[128];
            snprintf(ff, sizeof ff, "%s.%s", f,
                     d && !json_is_string(d) ? "description" : "input_schema");
            http_invalid(resp, ff,
                         d && !json_is_string(d) ? "must be a string"
                                                 : "must be a JSON Schema object");
            return -1;
        }
    }
    return 0;
}

#define MCP_SERVERS_MAX 16 /* servers one chat may enable */

/* Checks mcp_servers: unique names of servers the deployment configures (ARCHITECTURE.md
 * §7.9). Errors name the element at fault. */
static int s_mcp_servers(const gateway_t *gw, json_t *v, http_resp_t *resp) {
    if (!json_is_array(v) || json_array_size(v) > MCP_SERVERS_MAX) {
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

/* A chat creation (POST /chats): its body, what the checks made of it, and what its hooks
 * added. The body's checks run before the request takes a database connection. */
typedef struct {
    json_t *body;
    json_t *title;
    json_t *sys;
    const char *dyn_key; /* dynamic_tools or its alias unsafe_dynamic_tools, as sent */
    json_t *dyn;
    json_t *mcp;
    char *content; /* gateway_content's canonical text, or a hook's override (heap) */
    gateway_format_t format;
    admithook_context_t context;
    char model_id[ID_UUID_LEN + 1];
    char chat_id[ID_UUID_LEN + 1];
} create_t;

/* The body's known fields and its scalar ones, each checked on its own so that the error
 * names the one at fault. */
static int s_create_fields(create_t *c, http_resp_t *resp) {
    static const char *const fields[] = {"content",         "title",         "system_prompt",
                                         "model",           "dynamic_tools", "unsafe_dynamic_tools",
                                         "response_format", "mcp_servers",   NULL};
    if (gateway_only_fields(c->body, fields, "", resp) != 0) {
        return -1;
    }
    if (c->dyn && json_object_get(c->body, "unsafe_dynamic_tools") &&
        !strcmp(c->dyn_key, "dynamic_tools")) {
        http_invalid(resp, "unsafe_dynamic_tools",
                     "give dynamic_tools or its alias unsafe_dynamic_tools, not both");
        return -1;
    }
    if (c->title &&
        (!json_is_string(c->title) || json_string_length(c->title) > CS_TITLE_MAX_BYTES)) {
        http_invalid(resp, "title", "must be a string of at most 200 bytes");
        return -1;
    }
    if (c->sys &&
        (!json_is_string(c->sys) || json_string_length(c->sys) > SYSTEM_PROMPT_MAX_BYTES)) {
        http_invalid(resp, "system_prompt", "must be a string of at most 10000 bytes");
        return -1;
    }
    return 0;
}

/* Reads and checks the whole body into c (nothing of it needs the database): 0, or -1 with
 * the answer in resp. */
static int s_create_parse(const gateway_t *gw, const http_req_t *req, create_t *c,
                          http_resp_t *resp) {
    if (!(c->body = gateway_body(req, resp, false))) {
        return -1;
    }
    c->title = json_object_get(c->body, "title");
    c->sys = json_object_get(c->body, "system_prompt");
    c->dyn_key =
        json_object_get(c->body, "dynamic_tools") ? "dynamic_tools" : "unsafe_dynamic_tools";
    c->dyn = json_object_get(c->body, c->dyn_key);
    c->mcp = json_object_get(c->body, "mcp_servers");
    json_t *parts = json_object_get(c->body, "content");
    if (s_create_fields(c, resp) != 0 ||
        !(c->content = gateway_content(parts, "content", true, resp)) ||
        (c->dyn && s_dynamic_tools(c->dyn, c->dyn_key, resp) != 0) ||
        gateway_format(c->body, c->dyn, &c->format, resp) != 0 ||
        (c->mcp && s_mcp_servers(gw, c->mcp, resp) != 0)) {
        return -1;
    }
    if (c->format.structured && json_array_size(parts) == 0) {
        http_invalid(resp, "response_format", "a structured request needs content to answer");
        return -1;
    }
    return 0;
}

/* True when the body sends a first message (else the chat starts empty and waits). */
static bool s_create_has_first(const create_t *c) {
    return json_array_size(json_object_get(c->body, "content")) > 0;
}

/* Mints the new chat's id, then runs its admission hooks (admithook.h): session_start, then
 * user_prompt_submit for a first message, with no connection held while they wait; a refusal
 * stores nothing. */
static int s_create_admit(gateway_t *gw, const http_req_t *req, create_t *c, PGconn **conn,
                          http_resp_t *resp) {
    int minted = id_uuid_new(c->chat_id);
    ASSERT(minted == 0);
    if (!admithook_enabled(gw)) {
        return 0;
    }
    admithook_t h;
    admithook_begin(&h, gw, c->chat_id, req->user_id, "create");
    return admithook_run(&h, conn, true, s_create_has_first(c) ? &c->content : NULL, &c->context,
                         resp);
}

/* Creates the chat (with its first message and the hooks' context) and answers 201 with it. */
static void s_create_store(gateway_t *gw, PGconn *conn, const http_req_t *req, create_t *c,
                           http_resp_t *resp) {
    bool has_first = s_create_has_first(c);
    char *tools = c->dyn ? jsonout_dumps(c->dyn) : NULL;
    char *mcp_text = c->mcp ? jsonout_dumps(c->mcp) : NULL;
    /* The hook's context after the prompt; with no prompt, alone: the chat waits (§7.10). */
    cs_message_t first = {.role = "user",
                          .content = c->content,
                          .created_by = req->user_id,
                          .model_config_id = c->model_id,
                          .response_format = c->format.json,
                          .so_request_id = c->format.structured ? c->format.request_id : NULL,
                          .context = c->context.rows,
                          .context_count = c->context.count};
    cs_create_t cc = {.chat_id = c->chat_id,
                      .owner_id = req->user_id,
                      .title = json_string_value(c->title),
                      .title_from_user = c->title != NULL,
                      .model_config_id = c->model_id,
                      .system_prompt = json_string_value(c->sys),
                      .dynamic_tools = tools,
                      .mcp_servers = mcp_text,
                      .messages = has_first ? &first : c->context.rows,
                      .message_count = has_first ? 1 : c->context.count};
    cs_error_t err;
    char chat_id[ID_UUID_LEN + 1];
    if (chatstate_create(conn, &gw->chat_settings, &cc, &gw->sink, chat_id, &err) != 0) {
        gateway_cs_error(resp, &err);
    } else {
        json_t *chat = gateway_chat_json(conn, chat_id, req->user_id, resp);
        if (chat) {
            http_json(resp, 201, chat);
        }
    }
    free(tools);
    free(mcp_text);
}

/* POST /chats: the body is checked whole first; then, on a pooled connection, the model is
 * resolved (the default when omitted), the hooks admit the chat and it is stored. */
static void s_create(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    create_t c = {0};
    if (s_create_parse(gw, req, &c, resp) == 0) {
        PGconn *conn = pool_get(gw->pool);
        if (gateway_model_id(gw, conn, json_object_get(c.body, "model"), c.model_id, resp) == 0 &&
            s_create_admit(gw, req, &c, &conn, resp) == 0 &&
            attachment_resolve(conn, req->user_id, NULL, c.model_id, "content", &c.content, resp) ==
                0) {
            s_create_store(gw, conn, req, &c, resp);
        }
        pool_put(gw->pool, conn);
    }
    admithook_context_clear(&c.context);
    gateway_format_clear(&c.format);
    free(c.content);
    json_decref(c.body);
}

static void s_get(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    PGconn *conn = pool_get(gw->pool);
    s_reply_chat(conn, req, 200, resp);
    pool_put(gw->pool, conn);
}

/* A list cursor must name one of the caller's own chats: any other id, malformed, unknown
 * or another user's, gets the same 400, so the answer tells nothing about other users' chats
 * (their existence, their order). 1 when it is theirs, 0 when not, -1 on a database error
 * (then a 500 in resp). */
static int s_own_cursor(PGconn *conn, const char *chat_id, const char *user_id, http_resp_t *resp) {
    const char *p[] = {chat_id, user_id};
    db_err_t e;
    PGresult *res =
        db_query(conn, &e, NULL, 0, "SELECT 1 FROM chats WHERE id = $1 AND owner_id = $2", 2, p);
    if (!res) {
        http_error(resp, 500, "Internal error.", "database unavailable");
        return -1;
    }
    int n = PQntuples(res);
    PQclear(res);
    return n == 1;
}

static void s_list(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    const char *after_s = http_query(req, "after_id");
    const char *archived = http_query(req, "archived");
    static const char cursor_detail[] = "must be the id of one of your chats";
    int64_t limit = 0;
    char after[ID_UUID_LEN + 1] = "";
    if (gateway_query_int(req, "limit", 1, CHATS_LIMIT_MAX, 50, &limit, resp) != 0) {
        return;
    }
    if (after_s && gateway_chat_id(after_s, after) != 0) {
        http_invalid(resp, "after_id", cursor_detail);
        return;
    }
    if (archived && strcmp(archived, "true") && strcmp(archived, "false")) {
        http_invalid(resp, "archived", "must be true or false");
        return;
    }
    char lim[DB_PARAM_INT64_LEN];
    const char *p[] = {req->user_id, archived ? archived : "false", after_s ? after : NULL,
                       db_param_int64(lim, limit)};
    PGconn *conn = pool_get(gw->pool);
    int own = after_s ? s_own_cursor(conn, after, req->user_id, resp) : 1;
    if (own <= 0) {
        pool_put(gw->pool, conn);
        if (own == 0) {
            http_invalid(resp, "after_id", cursor_detail);
        }
        return;
    }
    /* The cursor's row is read with the owner again: the check above and this query may see
     * different snapshots, and neither may read another user's row. */
    char *sql = mem_printf("SELECT %s FROM chats c WHERE c.owner_id = $1"
                           " AND c.parent_chat_id IS NULL" /* roots: children are embedded */
                           " AND c.archived = $2::boolean AND ($3::uuid IS NULL OR"
                           " (c.updated_at, c.id) < (SELECT updated_at, id FROM chats"
                           " WHERE id = $3::uuid AND owner_id = $1)) ORDER BY c.updated_at DESC,"
                           " c.id DESC LIMIT $4::int",
                           gateway_chat_json_sql);
    json_t *rows = gateway_rows(conn, sql, 4, p, resp);
    pool_put(gw->pool, conn);
    free(sql);
    if (rows) {
        http_json(resp, 200, rows);
    }
}

typedef struct {
    json_t *archived;
    json_t *title;
} update_t;

/* Archive and title in one bundle: a PATCH with both applies both or neither. */
static int s_update_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    update_t *u = ctx;
    if (u->archived && chatstate_set_archived(cs, json_is_true(u->archived), err) != 0) {
        return -1;
    }
    return u->title ? chatstate_set_title(cs, json_string_value(u->title), err) : 0;
}

static void s_update(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    json_t *body = gateway_body(req, resp, false);
    if (!body) {
        return;
    }
    static const char *const fields[] = {"title", "archived", NULL};
    update_t u = {json_object_get(body, "archived"), json_object_get(body, "title")};
    PGconn *conn = pool_get(gw->pool);
    json_t *chat = NULL;
    if (gateway_only_fields(body, fields, "", resp) != 0) {
        goto done;
    }
    if ((u.archived && !json_is_boolean(u.archived)) ||
        (u.title && (!json_is_string(u.title) || json_string_length(u.title) == 0 ||
                     json_string_length(u.title) > CS_TITLE_MAX_BYTES))) {
        http_invalid(resp, u.archived && !json_is_boolean(u.archived) ? "archived" : "title",
                     "archived is a boolean; title a string of 1 to 200 bytes");
        goto done;
    }
    if (!(chat = gateway_chat_json(conn, req->params[0], req->user_id, resp))) {
        goto done;
    }
    /* No change of archived, no transition: the request is refused as a whole, title
     * included (ARCHITECTURE.md §11). */
    if (u.archived && json_equal(u.archived, json_object_get(chat, "archived"))) {
        http_error(resp, 400,
                   json_is_true(u.archived) ? "Chat is already archived."
                                            : "Chat is already not archived.",
                   NULL);
        goto done;
    }
    if ((u.archived || u.title) &&
        gateway_bundle(gw, conn, req, s_update_step, &u, NULL, resp) != 0) {
        goto done;
    }
    http_json(resp, 204, NULL);
done:
    json_decref(chat);
    json_decref(body);
    pool_put(gw->pool, conn);
}

static int s_interrupt_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    (void)ctx;
    return chatstate_interrupt(cs, "user_cancel", err);
}

static int s_compact_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    (void)ctx;
    return chatstate_request_compaction(cs, err);
}

static int s_clear_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    return chatstate_clear_context(cs, ctx, err);
}

static int s_reconcile_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    (void)ctx;
    return chatstate_reconcile_invalid(cs, err);
}

/* A body-less chat transition that replies with the chat. */
static void s_simple(gateway_t *gw, http_req_t *req, http_resp_t *resp, gateway_step_fn step,
                     void *ctx, int status) {
    PGconn *conn = pool_get(gw->pool);
    if (gateway_bundle(gw, conn, req, step, ctx, NULL, resp) == 0) {
        s_reply_chat(conn, req, status, resp);
    }
    pool_put(gw->pool, conn);
}

/* Interrupts the chat, then its active descendants (ARCHITECTURE.md §3, "Families"): a parent
 * that is itself idle still stops its family, and answers 200 when anything stopped. */
static void s_interrupt(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    PGconn *conn = pool_get(gw->pool);
    int rc = gateway_bundle(gw, conn, req, s_interrupt_step, NULL, NULL, resp);
    int count = 0;
    if (rc == 0 || resp->status == 409) {
        cs_error_t err;
        if (chatstate_interrupt_descendants(conn, &gw->chat_settings, req->params[0], "user_cancel",
                                            &gw->sink, &count, &err) != 0) {
            gateway_cs_error(resp, &err);
            rc = 1;
        }
    }
    if (rc == 0 || (rc < 0 && count > 0)) {
        s_reply_chat(conn, req, 200, resp);
    }
    pool_put(gw->pool, conn);
}

static void s_compact(void *app, http_req_t *req, http_resp_t *resp) {
    s_simple(app, req, resp, s_compact_step, NULL, 200);
}

static void s_clear(void *app, http_req_t *req, http_resp_t *resp) {
    s_simple(app, req, resp, s_clear_step, req->user_id, 200);
}

static void s_reconcile(void *app, http_req_t *req, http_resp_t *resp) {
    s_simple(app, req, resp, s_reconcile_step, NULL, 200);
    /* The only conflict reconcile has is a valid state (ARCHITECTURE.md §4.3). */
    if (resp->status == 409) {
        http_error(resp, 409, "Chat is not in an invalid state.", NULL);
    }
}

typedef struct {
    cs_tool_result_t *results;
    int count;
} results_t;

static int s_results_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    results_t *r = ctx;
    return chatstate_complete_requires_action(cs, r->results, r->count, NULL, 0, err);
}

static void s_tool_results(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    json_t *body = gateway_body(req, resp, false);
    if (!body) {
        return;
    }
    static const char *const fields[] = {"results", NULL};
    static const char *const rfields[] = {"tool_call_id", "output", "is_error", NULL};
    json_t *arr = json_object_get(body, "results");
    size_t n = json_array_size(arr);
    results_t r = {mem_calloc(n ? n : 1, sizeof(cs_tool_result_t)), (int)n};
    char **outputs = mem_calloc(n ? n : 1, sizeof(char *));
    if (gateway_only_fields(body, fields, "", resp) != 0) {
        goto done;
    }
    if (!json_is_array(arr) || n == 0) {
        http_invalid(resp, "results", "must be a non-empty array");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        char f[64];
        snprintf(f, sizeof f, "results[%zu]", i);
        if (!json_is_object(e)) {
            http_invalid(resp, f, "must be an object");
            goto done;
        }
        if (gateway_only_fields(e, rfields, f, resp) != 0) {
            goto done;
        }
        json_t *id = json_object_get(e, "tool_call_id");
        json_t *out = json_object_get(e, "output");
        json_t *is_err = json_object_get(e, "is_error");
        if (!json_is_string(id) || !out || (is_err && !json_is_boolean(is_err))) {
            char ff[96];
            snprintf(ff, sizeof ff, "%s.%s", f,
                     !json_is_string(id) ? "tool_call_id"
                     : !out              ? "output"
                                         : "is_error");
            http_invalid(resp, ff,
                         !json_is_string(id) ? "must be a string"
                         : !out              ? "is required"
                                             : "must be a boolean");
            goto done;
        }
        outputs[i] = jsonout_dumps(out);
        r.results[i] = (cs_tool_result_t){json_string_value(id), outputs[i], json_is_true(is_err)};
    }
    PGconn *conn = pool_get(gw->pool);
    if (gateway_bundle(gw, conn, req, s_results_step, &r, NULL, resp) == 0) {
        http_json(resp, 204, NULL);
    }
    pool_put(gw->pool, conn);
done:
    for (size_t i = 0; i < n; i++) {
        free(outputs[i]);
    }
    free(outputs);
    free(r.results);
    json_decref(body);
}

static void s_models(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    (void)req;
    PGconn *conn = pool_get(gw->pool);
    json_t *rows = gateway_rows(conn,
                                "SELECT jsonb_build_object('id', id, 'name', name, 'provider',"
                                " provider, 'model', model, 'default', is_default,"
                                " 'context_limit', context_limit, 'native_structured_output',"
                                " native_structured_output) FROM model_configs ORDER BY name",
                                0, NULL, resp);
    pool_put(gw->pool, conn);
    if (rows) {
        http_json(resp, 200, json_pack("{s:o}", "models", rows));
    }
}

static void s_healthz(void *app, http_req_t *req, http_resp_t *resp) {
    (void)app;
    (void)req;
    http_json(resp, 200, json_pack("{s:s}", "status", "ok"));
}

static void s_metrics(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    (void)req;
    http_text(resp, 200, metrics_render(gw->metrics), "text/plain; version=0.0.4");
}

static void s_readyz(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    (void)req;
    PGconn *conn = pool_get_within(gw->pool, 2000);
    bool ok = conn && db_exec(conn, NULL, 0, "SELECT 1", 0, NULL) == DB_OK;
    if (conn) {
        pool_put(gw->pool, conn);
    }
    if (ok) {
        http_json(resp, 200, json_pack("{s:s}", "status", "ready"));
    } else {
        http_error(resp, 503, "Database unreachable.", NULL);
    }
}

/* Order matters: fixed paths before the "{}" patterns they would also match. */
const http_route_t chat_route_table[] = {
    {"GET", "/healthz", s_healthz, true, NULL, NULL},
    {"GET", "/readyz", s_readyz, true, NULL, NULL},
    {"GET", "/metrics", s_metrics, true, NULL, NULL},
    {"GET", "/api/v2/chats/models", s_models, false, NULL, NULL},
    {"GET", "/api/v2/chats/watch", watch_handle, false, NULL, NULL},
    {"POST", "/api/v2/chats", s_create, false, NULL, NULL},
    {"GET", "/api/v2/chats", s_list, false, NULL, "limit after_id offset q label archived"},
    {"GET", "/api/v2/chats/{}", s_get, false, NULL, NULL},
    {"PATCH", "/api/v2/chats/{}", s_update, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/interrupt", s_interrupt, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/tool-results", s_tool_results, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/compact", s_compact, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/clear", s_clear, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/reconcile-invalid", s_reconcile, false, NULL, NULL},
    {"GET", "/api/v2/chats/{}/stream", stream_handle, false, NULL, "after_id"},
};
const int chat_route_count = sizeof chat_route_table / sizeof chat_route_table[0];
