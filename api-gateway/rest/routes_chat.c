/* routes_chat: chats (create, list, get, update) and the chat-level transitions (interrupt,
 * tool-results, compact, clear, reconcile-invalid), plus health and models. */
#include "rest.h"
#include "attachment.h"
#include "chatlist.h"
#include "stream.h"
#include "watch.h"
#include "admithook.h"
#include "db.h"
#include "fieldpath.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char *const gateway_chat_json_sql;

#define SYSTEM_PROMPT_MAX_BYTES 10000 /* a chat's system prompt, as sent at creation */

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

/* A chat creation (POST /chats): its body, what the checks made of it, and what its hooks
 * added. The body's checks run before the request takes a database connection. */
typedef struct {
    json_t *body;
    json_t *title;
    json_t *sys;
    const char *dyn_key; /* dynamic_tools or its alias unsafe_dynamic_tools, as sent */
    json_t *dyn;
    json_t *mcp;
    json_t *labels;
    char *content; /* gateway_content's canonical text, or a hook's override (heap) */
    gateway_format_t format;
    const char *effort; /* the first message's reasoning_effort (a static name), or NULL */
    int plan;           /* plan_mode: 1 "plan", 0 "", -1 absent */
    admithook_context_t context;
    char model_id[ID_UUID_LEN + 1];
    char chat_id[ID_UUID_LEN + 1];
} create_t;

/* The body's known fields and its scalar ones, each checked on its own so that the error
 * names the one at fault. */
static int s_create_fields(create_t *c, http_resp_t *resp) {
    static const char *const fields[] = {"content",         "title",
                                         "system_prompt",   "model",
                                         "dynamic_tools",   "unsafe_dynamic_tools",
                                         "response_format", "mcp_servers",
                                         "labels",          "reasoning_effort",
                                         "plan_mode",       NULL};
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
    return c->labels ? chatlist_labels_check(c->labels, "labels", resp) : 0;
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
    c->labels = json_object_get(c->body, "labels");
    json_t *parts = json_object_get(c->body, "content");
    if (s_create_fields(c, resp) != 0 ||
        !(c->content = gateway_content(parts, "content", true, resp)) ||
        (c->dyn && s_dynamic_tools(c->dyn, c->dyn_key, resp) != 0) ||
        gateway_format(c->body, c->dyn, &c->format, resp) != 0 ||
        (c->mcp && gateway_mcp_servers(gw, c->mcp, resp) != 0) ||
        gateway_effort(c->body, &c->effort, resp) != 0 ||
        gateway_plan_mode(c->body, &c->plan, resp) != 0) {
        return -1;
    }
    if (c->format.structured && c->plan == 1) {
        http_invalid(resp, "response_format",
                     "a structured request cannot be combined with plan mode");
        return -1;
    }
    if (c->effort && json_array_size(parts) == 0) {
        http_invalid(resp, "reasoning_effort", "is a message's: give content to carry it");
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
    char *labels_text = c->labels ? jsonout_dumps(c->labels) : NULL;
    /* The hook's context after the prompt; with no prompt, alone: the chat waits (§7.10). */
    char traceparent[TRACE_PARENT_LEN + 1]; /* the request's (trace.h), or a new one */
    (void)trace_from_header(http_header(req, "traceparent"), traceparent);
    cs_message_t first = {.role = "user",
                          .traceparent = traceparent[0] ? traceparent : NULL,
                          .content = c->content,
                          .created_by = req->user_id,
                          .model_config_id = c->model_id,
                          .response_format = c->format.json,
                          .so_request_id = c->format.structured ? c->format.request_id : NULL,
                          .reasoning_effort = c->effort,
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
                      .labels = labels_text,
                      .plan_mode = c->plan == 1,
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
    free(labels_text);
}

/* POST /chats: the body is checked whole first; then, on a pooled connection, the model is
 * resolved (the default when omitted), the hooks admit the chat and it is stored. */
static void s_create(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    create_t c = {0};
    int retry_s = 0;
    if (s_create_parse(gw, req, &c, resp) == 0 && !gateway_may_create(gw, req->user_id, &retry_s)) {
        http_error(resp, 429, "Too many chats created.",
                   "this user's chats created per minute are used up (CHATFLEET_CHATS_PER_MIN)");
        resp->retry_after_s = retry_s;
    } else if (resp->status == 0) {
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

/* GET /chats: the list, searched, filtered and paged (core/chatlist.h). */
static void s_list(void *app, http_req_t *req, http_resp_t *resp) {
    chatlist_handle(app, req, resp);
}

/* A PATCH /chats/{id}: its body's fields (NULL when absent). */
typedef struct {
    json_t *archived;
    json_t *title;
    json_t *labels;
    json_t *pin_order;
    char *labels_text; /* labels as stored (heap) */
    int plan;          /* plan_mode: 1 "plan", 0 "", -1 absent (gateway_plan_mode) */
} update_t;

/* The pin a PATCH asks for: pin_order, whose clamping to the owner's count makes any value
 * beyond int the last place. */
static int32_t s_pin(const update_t *u) {
    json_int_t n = json_integer_value(u->pin_order);
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* Every field in one bundle: a PATCH with several applies all of them or none. Archiving
 * unpins the chat (closing the gap), in the same bundle. */
static int s_update_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    update_t *u = ctx;
    bool archiving = json_is_true(u->archived);
    if (u->archived && chatstate_set_archived(cs, archiving, err) != 0) {
        return -1;
    }
    if (u->title && chatstate_set_title(cs, json_string_value(u->title), err) != 0) {
        return -1;
    }
    if (u->labels_text && chatstate_set_labels(cs, u->labels_text, err) != 0) {
        return -1;
    }
    if (u->plan >= 0 && chatstate_set_plan_mode(cs, u->plan == 1, err) != 0) {
        return -1;
    }
    return u->pin_order || archiving ? chatstate_set_pin_order(cs, archiving ? 0 : s_pin(u), err)
                                     : 0;
}

#define UPDATE_PIN_TRIES 4 /* bundles of a pin move tried, as gateway_bundle tries its own */

/* gateway_bundle for a PATCH that moves pins (pin_order, or an archive, which unpins): the
 * bundle takes the owner's pin lock before the chat's row lock (chatstate_begin_pinning), so
 * that two pin moves of one owner never deadlock on each other's rows. The chat is the
 * caller's (s_update read it). 0, or -1 with the error in resp. */
static int s_update_pinning(gateway_t *gw, PGconn *conn, const http_req_t *req, update_t *u,
                            http_resp_t *resp) {
    cs_error_t err = {0};
    for (int attempt = 0; attempt < UPDATE_PIN_TRIES; attempt++) {
        chatstate_t *cs = chatstate_begin_pinning(conn, &gw->chat_settings, req->params[0], &err);
        if (cs && s_update_step(cs, u, &err) == 0 &&
            chatstate_commit_wake(&cs, &gw->sink, NULL, &err) == 0) {
            if (u->pin_order) {
                log_info("chat_pin_moved", "chat_id=%s pin_order=%lld", req->params[0],
                         (long long)json_integer_value(u->pin_order));
            }
            return 0;
        }
        chatstate_destroy(&cs);
        if (err.rc != CS_RETRY) {
            break;
        }
        log_info("bundle_retry", "chat_id=%s attempt=%d", req->params[0], attempt + 1);
    }
    gateway_cs_error(resp, &err);
    return -1;
}

/* The body's fields, each checked on its own so that the error names the one at fault. */
static int s_update_fields(update_t *u, http_resp_t *resp) {
    if ((u->archived && !json_is_boolean(u->archived)) ||
        (u->title && (!json_is_string(u->title) || json_string_length(u->title) == 0 ||
                      json_string_length(u->title) > CS_TITLE_MAX_BYTES))) {
        http_invalid(resp, u->archived && !json_is_boolean(u->archived) ? "archived" : "title",
                     "archived is a boolean; title a string of 1 to 200 bytes");
        return -1;
    }
    if (u->labels && chatlist_labels_check(u->labels, "labels", resp) != 0) {
        return -1;
    }
    if (u->pin_order && !json_is_integer(u->pin_order)) {
        http_invalid(resp, "pin_order", "must be an integer");
        return -1;
    }
    if (u->pin_order && json_integer_value(u->pin_order) < 0) {
        chatlist_invalid(resp, "Pin order must be non-negative.", "pin_order",
                         "0 unpins; a positive pin_order pins or moves the chat");
        return -1;
    }
    u->labels_text = u->labels ? jsonout_dumps(u->labels) : NULL;
    return 0;
}

/* What the chat as it is refuses (the bundle checks again under its locks): a change of
 * archived that changes nothing, refused as a whole, title included (ARCHITECTURE.md §11);
 * pinning a chat that is or becomes archived, or a child (only roots are pinned). */
static int s_update_against(const update_t *u, json_t *chat, http_resp_t *resp) {
    json_t *was = json_object_get(chat, "archived");
    if (u->archived && json_equal(u->archived, was)) {
        http_error(resp, 400,
                   json_is_true(u->archived) ? "Chat is already archived."
                                             : "Chat is already not archived.",
                   NULL);
        return -1;
    }
    bool pinning = u->pin_order && json_integer_value(u->pin_order) > 0;
    if (pinning && json_is_true(u->archived ? u->archived : was)) {
        chatlist_invalid(resp, "Cannot pin an archived chat.", "pin_order",
                         "unarchive the chat first");
        return -1;
    }
    if (pinning && json_object_get(chat, "parent_chat_id")) {
        chatlist_invalid(resp, "Only root chats can be pinned.", "pin_order",
                         "a subagent chat is listed inside its root");
        return -1;
    }
    return 0;
}

static void s_update(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    json_t *body = gateway_body(req, resp, false);
    if (!body) {
        return;
    }
    static const char *const fields[] = {"title",     "archived",  "labels",
                                         "pin_order", "plan_mode", NULL};
    update_t u = {.archived = json_object_get(body, "archived"),
                  .title = json_object_get(body, "title"),
                  .labels = json_object_get(body, "labels"),
                  .pin_order = json_object_get(body, "pin_order")};
    PGconn *conn = pool_get(gw->pool);
    json_t *chat = NULL;
    if (gateway_only_fields(body, fields, "", resp) != 0 || s_update_fields(&u, resp) != 0 ||
        gateway_plan_mode(body, &u.plan, resp) != 0 ||
        !(chat = gateway_chat_json(conn, req->params[0], req->user_id, resp)) ||
        s_update_against(&u, chat, resp) != 0) {
        goto done;
    }
    bool pins = u.pin_order || json_is_true(u.archived);
    if (pins ? s_update_pinning(gw, conn, req, &u, resp) != 0
             : (u.archived || u.title || u.labels || u.plan >= 0) &&
                   gateway_bundle(gw, conn, req, s_update_step, &u, NULL, resp) != 0) {
        goto done;
    }
    http_json(resp, 204, NULL);
done:
    free(u.labels_text);
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

static int s_title_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    (void)ctx;
    return chatstate_request_title(cs, err);
}

/* Asks a worker for a new generated title (ARCHITECTURE.md §7.8): a durable request a worker
 * serves (the running chat's next model step, or an idle chat's own call), even over a user
 * title. 202 with the chat; the title comes later, as a title_change. */
static void s_title_regenerate(void *app, http_req_t *req, http_resp_t *resp) {
    s_simple(app, req, resp, s_title_step, NULL, 202);
    if (resp->status == 409) {
        http_error(resp, 409, "Cannot regenerate the title of an archived chat.", NULL);
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
                                " native_structured_output, 'reasoning_effort',"
                                " options -> 'reasoning_effort') FROM model_configs ORDER BY name",
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
    {"GET", "/api/v2/chats", s_list, false, NULL, "limit after_id offset q label* archived"},
    {"GET", "/api/v2/chats/{}", s_get, false, NULL, NULL},
    {"PATCH", "/api/v2/chats/{}", s_update, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/interrupt", s_interrupt, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/tool-results", s_tool_results, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/compact", s_compact, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/clear", s_clear, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/reconcile-invalid", s_reconcile, false, NULL, NULL},
    {"POST", "/api/v2/chats/{}/title/regenerate", s_title_regenerate, false, NULL, NULL},
    {"GET", "/api/v2/chats/{}/stream", stream_handle, false, NULL, "after_id"},
};
const int chat_route_count = sizeof chat_route_table / sizeof chat_route_table[0];
