/* a2a: agent card and JSON-RPC dispatch; see a2a.h. */
#include "a2a.h"
#include "a2a_file.h"
#include "a2a_list.h"
#include "a2a_push.h"
#include "a2a_send.h"
#include "a2a_stream.h"
#include "a2a_task.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* JSON-RPC and A2A error codes (A2A v1.0 §9.5). */
enum {
    RPC_PARSE = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_NO_METHOD = -32601,
    RPC_INVALID_PARAMS = -32602,
    RPC_INTERNAL = -32603,
    A2A_TASK_NOT_FOUND = -32001,
    A2A_TASK_NOT_CANCELABLE = -32002,
    A2A_UNSUPPORTED_OPERATION = -32004,
    A2A_CONTENT_TYPE_NOT_SUPPORTED = -32005,
    A2A_HOOK_DENIED = -32050,  /* chatfleet's: a lifecycle hook denied the prompt (§7.10) */
    A2A_RATE_LIMITED = -32051, /* chatfleet's: the user's chats per minute are used up */
};

#define S_XSTR(x) #x
#define S_STR(x)  S_XSTR(x)

/* One JSON-RPC call being answered: alone (the HTTP answer is its response), in a batch (its
 * response joins the batch's array) or a notification (no id member: it runs, and nothing
 * is ever sent for it, not even an error; JSON-RPC 2.0 §4.1). */
typedef struct {
    http_resp_t *resp;
    json_t *id;    /* borrowed; json_null() when absent */
    bool notify;   /* a notification */
    json_t *batch; /* the batch's responses, or NULL for a single call */
} s_call_t;

static void s_answer(s_call_t *c, json_t *response) {
    if (c->notify) {
        json_decref(response);
    } else if (c->batch) {
        json_array_append_new(c->batch, response);
    } else {
        http_json(c->resp, 200, response);
    }
}

/* Answers with result (stolen). */
static void s_result(s_call_t *c, json_t *result) {
    s_answer(c, json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", c->id, "result", result));
}

/* Answers with an error (data stolen, may be NULL). */
static void s_error(s_call_t *c, int code, const char *message, json_t *data) {
    json_t *e = json_pack("{s:i,s:s}", "code", code, "message", message);
    if (data) {
        json_object_set_new(e, "data", data);
    }
    s_answer(c, json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", c->id ? c->id : json_null(),
                          "error", e));
}

static json_t *s_invalid(const char *field, const char *detail) {
    return json_pack("{s:s,s:s}", "field", field, "detail", detail);
}

static void s_agent_card(void *app, http_req_t *req, http_resp_t *resp) {
    (void)req;
    const gateway_t *gw = app;
    ASSERT(gw->public_url); /* set by main.c (or a test's gateway) */
    /* The configured URL, never the Host header: a forged Host must not steer clients. */
    char *url = mem_printf("%s%s", gw->public_url, A2A_RPC_PATH);
    json_t *params = json_pack(
        "{s:i,s:s,s:s,s:i,s:s,s:[s,s],s:[s,s]}", "version", 1, "mode", "request-schema",
        "schemaDialect", "http://json-schema.org/draft-07/schema#", "maxSchemaBytes",
        JSONSTRICT_SCHEMA_MAX_BYTES, "resultArtifactName", A2A_ARTIFACT_NAME, "schemaEncodings",
        "json-utf8", "protobuf-value", "resultEncodings", "json-utf8", "protobuf-value");
    json_t *card =
        json_pack("{s:s,s:s,s:s,s:[{s:s,s:s,s:s}],s:{s:b,s:b,s:[{s:s,s:s,s:b,s:o}]},"
                  "s:{s:{s:{s:s}}},s:[{s:{s:{s:[]}}}],s:[s],s:[s,s],s:[{s:s,s:s,s:s,s:[s]}]}",
                  "name", "chatfleet", "description",
                  "Durable AI agent chats; a context is a chat, a task is one turn.", "version",
                  "0.1.0", "supportedInterfaces", "url", url, "protocolBinding", "JSONRPC",
                  "protocolVersion", "1.0", "capabilities", "streaming", 1, "pushNotifications", 1,
                  "extensions", "uri", A2A_EXTENSION_URI, "description",
                  "Per-request JSON Schema (Draft-07) results as one artifact.", "required", 0,
                  "params", params, "securitySchemes", "bearer", "httpAuthSecurityScheme", "scheme",
                  "Bearer", "securityRequirements", "schemes", "bearer", "list",
                  "defaultInputModes", "text/plain", "defaultOutputModes", "text/plain",
                  "application/json", "skills", "id", "chat", "name", "chat", "description",
                  "Answers in a durable chat, optionally as a JSON value.", "tags", "chat");
    /* The v0.3 card's members too, for v0.3 clients (the v1 client reads supportedInterfaces
     * first and ignores them). */
    json_object_set_new(card, "url", json_string(url));
    json_object_set_new(card, "preferredTransport", json_string("JSONRPC"));
    json_object_set_new(card, "protocolVersion", json_string("0.3.0"));
    free(url);
    http_json(resp, 200, card);
}

static void s_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Reads the task, waiting up to wait_ms for it to end, and answers c with it. */
static void s_reply_task(gateway_t *gw, const http_req_t *req, s_call_t *c, const char *task_id,
                         bool legacy, bool wrap, int64_t wait_ms) {
    int64_t deadline = id_now_ms() + wait_ms;
    a2a_task_t t;
    for (;;) {
        PGconn *conn = pool_get(gw->pool);
        a2a_lookup_t rc = a2a_task_load(conn, task_id, req->user_id, legacy, &t);
        pool_put(gw->pool, conn);
        if (rc != A2A_TASK_FOUND) {
            s_error(c, rc == A2A_TASK_MISSING ? A2A_TASK_NOT_FOUND : RPC_INTERNAL,
                    rc == A2A_TASK_MISSING ? "Task not found" : "Internal error", NULL);
            return;
        }
        if (t.terminal || id_now_ms() >= deadline) {
            break;
        }
        json_decref(t.task);
        s_sleep_ms(A2A_POLL_MS);
    }
    s_result(c, wrap && !legacy ? json_pack("{s:o}", "task", t.task) : t.task);
}

/* The field a validation failure names: data's own, or its first validation's. */
static const char *s_data_field(json_t *data) {
    const char *f = json_string_value(json_object_get(data, "field"));
    return f ? f
             : json_string_value(json_object_get(
                   json_array_get(json_object_get(data, "validations"), 0), "field"));
}

static const char *s_data_detail(json_t *data) {
    const char *d = json_string_value(json_object_get(data, "detail"));
    return d ? d
             : json_string_value(json_object_get(
                   json_array_get(json_object_get(data, "validations"), 0), "detail"));
}

/* An invalid schema fails the task rather than reaching a model (the extension, "Request"):
 * the request becomes a task "r<n>" that has failed with code invalid_schema, its message and
 * metadata naming the field. In the request's context when it is the caller's, else in a
 * context of its own. 0 with task_id and context set, or -1 (c answered). */
static int s_refuse(gateway_t *gw, const http_req_t *req, s_call_t *c, const a2a_send_t *s,
                    json_t *data, char task_id[A2A_TASK_ID_MAX], char context[ID_UUID_LEN + 1]) {
    const char *field = s_data_field(data);
    const char *detail = s_data_detail(data);
    char *message = mem_printf("structured output failed: invalid_schema: %s: %s", field,
                               detail ? detail : "invalid");
    json_t *m = json_pack("{s:s,s:s}", "field", field, "detail", detail ? detail : "invalid");
    char *meta = jsonout_dumps(m);
    json_decref(m);
    PGconn *conn = pool_get(gw->pool);
    int rc = 0;
    if (s->context_id) {
        const char *p[] = {s->context_id, req->user_id};
        http_resp_t h = {0};
        json_t *rows = gateway_rows(conn,
                                    "SELECT to_jsonb(id) FROM chats WHERE id = $1::uuid"
                                    " AND owner_id = $2::uuid",
                                    2, p, &h);
        free(h.body);
        rc = json_array_size(rows) == 1 ? 0 : rows ? 1 : -1;
        json_decref(rows);
        snprintf(context, ID_UUID_LEN + 1, "%s", s->context_id);
    } else {
        rc = id_uuid_new(context);
    }
    if (rc == 0) {
        rc = a2a_task_refuse(conn, req->user_id, context, "invalid_schema", message, meta, task_id);
    }
    pool_put(gw->pool, conn);
    free(message);
    free(meta);
    if (rc == 1) {
        s_error(c, RPC_INVALID_PARAMS, "Invalid params",
                s_invalid("params.message.contextId", "no such context"));
        return -1;
    }
    if (rc != 0) {
        s_error(c, RPC_INTERNAL, "The task could not be stored", NULL);
        return -1;
    }
    log_info("a2a_task_refused", "context_id=%s task_id=%s code=invalid_schema field=%s", context,
             task_id, field);
    return 0;
}

static bool s_schema_field(const char *f) {
    static const char prefix[] = "params.metadata." A2A_META_KEY ".schema";
    return f && !strncmp(f, prefix, sizeof prefix - 1);
}

/* What s_cancel_run did: canceled now, not cancelable (ended, or its turn moved on), or not
 * the caller's task (or not readable). */
typedef enum { S_CANCEL_DONE = 0, S_CANCEL_REFUSED, S_CANCEL_MISSING } s_cancel_rc_t;

static s_cancel_rc_t s_cancel_run(gateway_t *gw, const http_req_t *req, const char *task_id,
                                  bool legacy);

/* The task exists but its inline push config could not be stored (a2a_send_push's code and
 * data): the task is canceled, since its client asked for notifications it would never get and
 * is better told than left waiting, and the answer is the error, its data naming the field,
 * the task and whether the cancellation took (a refused task has already failed). */
static void s_push_failed(gateway_t *gw, const http_req_t *req, s_call_t *c, const char *task_id,
                          const char *context_id, bool legacy, int code, json_t *data) {
    bool canceled = s_cancel_run(gw, req, task_id, legacy) == S_CANCEL_DONE;
    log_warn("a2a_push_inline_failed", "chat_id=%s task_id=%s code=%d canceled=%d", context_id,
             task_id, code, canceled);
    json_t *d = data ? data : json_object();
    json_object_set_new(d, "taskId", json_string(task_id));
    json_object_set_new(d, "contextId", json_string(context_id));
    json_object_set_new(d, "taskCanceled", json_boolean(canceled));
    bool invalid = code == RPC_INVALID_PARAMS;
    s_error(c, invalid ? RPC_INVALID_PARAMS : RPC_INTERNAL,
            invalid ? "Invalid params" : "The push notification config could not be stored", d);
}

static void s_send(gateway_t *gw, http_req_t *req, s_call_t *c, json_t *params, bool legacy,
                   bool streaming) {
    a2a_send_t s = {0};
    json_t *data = NULL;
    char chat_id[ID_UUID_LEN + 1] = "";
    char task_id[A2A_TASK_ID_MAX] = "";
    int prc = a2a_send_parse(params, legacy, &s, &data);
    bool refused = false;
    if (prc == -1 && s_schema_field(s_data_field(data))) {
        refused = s_refuse(gw, req, c, &s, data, task_id, chat_id) == 0;
        json_decref(data);
        if (!refused) {
            free(s.content);
            json_decref(s.files);
            gateway_format_clear(&s.format);
            return; /* answered */
        }
    } else if (prc != 0) {
        if (prc == A2A_SEND_MODES) {
            s_error(c, A2A_CONTENT_TYPE_NOT_SUPPORTED, "Incompatible content types", data);
        } else {
            s_error(c, RPC_INVALID_PARAMS, "Invalid params", data);
        }
        free(s.content);
        json_decref(s.files);
        gateway_format_clear(&s.format);
        return;
    }
    http_resp_t h = {0};
    if (!refused && a2a_send_admit(gw, req, &s, &h) != 0) {
        /* A hook refused the prompt or could not judge it (ARCHITECTURE.md §7.10): nothing
         * is stored; the data is the REST refusal ({"message","detail","kind"}). */
        json_t *d = h.body ? json_loads(h.body, 0, NULL) : NULL;
        bool denied = h.status == 403;
        s_error(c, denied ? A2A_HOOK_DENIED : RPC_INTERNAL,
                denied ? "The prompt was denied by a lifecycle hook" : "A lifecycle hook failed",
                d);
        free(h.body);
        free(s.content);
        json_decref(s.files);
        gateway_format_clear(&s.format);
        admithook_context_clear(&s.context);
        return;
    }
    PGconn *conn = pool_get(gw->pool);
    int rc = 0;
    int retry_s = 0;
    json_t *fdata = NULL;
    if (!refused &&
        a2a_file_store(gw, conn, req->user_id, s.context_id, s.files, &s.content, &fdata) != 0) {
        pool_put(gw->pool, conn);
        s_error(c, RPC_INVALID_PARAMS, "Invalid params", fdata);
        free(s.content);
        json_decref(s.files);
        admithook_context_clear(&s.context);
        gateway_format_clear(&s.format);
        return;
    }
    if (refused) {
        /* the failed task is the answer */
    } else if (s.context_id) {
        snprintf(chat_id, sizeof chat_id, "%s", s.context_id);
        rc = a2a_send_append(gw, conn, req, &s, task_id, &h);
    } else if (!gateway_may_create(gw, req->user_id, &retry_s)) {
        pool_put(gw->pool, conn);
        s_error(c, A2A_RATE_LIMITED, "Too many chats created",
                json_pack("{s:i}", "retryAfterSeconds", retry_s));
        free(s.content);
        json_decref(s.files);
        admithook_context_clear(&s.context);
        gateway_format_clear(&s.format);
        return;
    } else {
        rc = a2a_send_create(gw, conn, req, &s, chat_id, task_id);
    }
    pool_put(gw->pool, conn);
    free(s.content);
    json_decref(s.files);
    admithook_context_clear(&s.context);
    bool structured = s.format.structured;
    gateway_format_clear(&s.format);
    if (rc != 0) {
        bool missing = h.status == 404;
        s_error(c, missing ? RPC_INVALID_PARAMS : RPC_INTERNAL,
                missing ? "Invalid params" : "The message could not be stored",
                missing ? s_invalid("params.message.contextId", "no such context")
                        : a2a_send_error_data(&h, NULL));
        free(h.body);
        return;
    }
    log_info("a2a_task_started", "chat_id=%s task_id=%s structured=%d", chat_id, task_id,
             structured);
    if (s.push) {
        /* Now that the task has its id (a new chat's first message, the appended or queued
         * message, or the refused "r<n>"), and before any wait: a turn that ends first is
         * still delivered, WORKING then its end (a2a_push.h). */
        json_t *pdata = NULL;
        conn = pool_get(gw->pool);
        int code = a2a_send_push(conn, req->user_id, &s, task_id, &pdata);
        pool_put(gw->pool, conn);
        if (code != 0) {
            s_push_failed(gw, req, c, task_id, chat_id, legacy, code, pdata);
            return;
        }
    }
    if (streaming && !c->notify) {
        a2a_stream_start(gw, req, c->resp, c->id, task_id, chat_id, legacy);
        return;
    }
    s_reply_task(gw, req, c, task_id, legacy, true,
                 s.blocking && !c->notify ? A2A_BLOCKING_MAX_MS : 0);
}

typedef struct {
    PGconn *conn;
    const char *user_id;
    const char *task_id;    /* canonical, as the client named it */
    const a2a_task_t *task; /* as read before the bundle */
    int64_t queued_id;      /* the queued message to delete, or 0: interrupt the turn */
} s_cancel_t;

/* In the cancel's bundle (the chat's row locked): the task's turn is still the chat's last
 * one. A turn that ended before the lock was taken is not interrupted in its successor's
 * place. */
static bool s_still_running(PGconn *conn, const char *context_id, const char *message_id) {
    const char *p[] = {context_id, message_id};
    http_resp_t h = {0};
    json_t *rows = gateway_rows(conn,
                                "SELECT to_jsonb(count(*)) FROM chat_messages WHERE chat_id ="
                                " $1::uuid AND role = 'user' AND NOT deleted AND visibility <>"
                                " 'model' AND id > $2::bigint",
                                2, p, &h);
    free(h.body);
    bool ok = rows && json_integer_value(json_array_get(rows, 0)) == 0;
    json_decref(rows);
    return ok;
}

/* Interrupts the turn (or deletes the queued message) and records the cancellation, in one
 * transaction: the outcome is committed with the move or not at all. */
static int s_cancel_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    s_cancel_t *c = ctx;
    const a2a_task_t *t = c->task;
    if (!c->queued_id && t->message_id[0] &&
        !s_still_running(c->conn, t->context_id, t->message_id)) {
        err->rc = CS_CONFLICT;
        snprintf(err->message, sizeof err->message, "the task's turn has ended");
        return -1;
    }
    if ((c->queued_id ? chatstate_delete_queued(cs, c->queued_id, err)
                      : chatstate_interrupt(cs, "user_cancel", err)) != 0) {
        return -1;
    }
    int rc = a2a_task_outcome_put(c->conn, c->user_id, c->task_id, t->context_id, "canceled", NULL,
                                  NULL, NULL);
    if (rc == 0 && t->message_id[0] && strcmp(t->message_id, c->task_id) != 0) {
        rc = a2a_task_outcome_put(c->conn, c->user_id, t->message_id, t->context_id, "canceled",
                                  NULL, NULL, NULL); /* a promoted "q<id>": both names */
    }
    if (rc != 0) {
        err->rc = CS_DB;
        snprintf(err->message, sizeof err->message, "the cancellation could not be recorded");
    }
    return rc;
}

/* CancelTask's work, answering nothing: a queued task is deleted from the queue, a running one
 * interrupted, and the cancellation committed with the move (a2a_task_outcome_put), so every
 * later read on any gateway says CANCELED. */
static s_cancel_rc_t s_cancel_run(gateway_t *gw, const http_req_t *req, const char *task_id,
                                  bool legacy) {
    PGconn *conn = pool_get(gw->pool);
    a2a_task_t t;
    a2a_lookup_t rc = a2a_task_load(conn, task_id, req->user_id, legacy, &t);
    if (rc != A2A_TASK_FOUND || t.terminal) {
        pool_put(gw->pool, conn);
        json_decref(t.task);
        return rc == A2A_TASK_FOUND ? S_CANCEL_REFUSED : S_CANCEL_MISSING;
    }
    s_cancel_t cc = {.conn = conn, .user_id = req->user_id, .task_id = task_id, .task = &t};
    if (!strcmp(t.state, "TASK_STATE_SUBMITTED") && task_id[0] == 'q' &&
        gateway_int_parse(task_id + 1, 1, INT64_MAX, &cc.queued_id) != 0) {
        cc.queued_id = 0; /* unreachable: the id is canonical (s_task_id) */
    }
    http_req_t r = *req;
    r.params[0] = t.context_id;
    http_resp_t h = {0};
    int brc = gateway_bundle(gw, conn, &r, s_cancel_step, &cc, NULL, &h);
    pool_put(gw->pool, conn);
    free(h.body);
    json_decref(t.task);
    if (brc != 0) {
        return S_CANCEL_REFUSED;
    }
    log_info("a2a_task_canceled", "chat_id=%s task_id=%s", t.context_id, task_id);
    return S_CANCEL_DONE;
}

/* CancelTask: the answer is the task read back after the cancellation's commit. */
static void s_cancel(gateway_t *gw, http_req_t *req, s_call_t *c, const char *task_id,
                     bool legacy) {
    s_cancel_rc_t rc = s_cancel_run(gw, req, task_id, legacy);
    if (rc == S_CANCEL_MISSING) {
        s_error(c, A2A_TASK_NOT_FOUND, "Task not found", NULL);
    } else if (rc == S_CANCEL_REFUSED) {
        s_error(c, A2A_TASK_NOT_CANCELABLE, "Task cannot be canceled", NULL);
    } else {
        s_reply_task(gw, req, c, task_id, legacy, false, 0);
    }
}

/* SubscribeToTask (v0.3 tasks/resubscribe): the task's stream from any gateway, the current
 * Task first; a task already ended cannot be subscribed to (UnsupportedOperationError). */
static void s_subscribe(gateway_t *gw, http_req_t *req, s_call_t *c, const char *task_id,
                        bool legacy) {
    PGconn *conn = pool_get(gw->pool);
    a2a_task_t t;
    a2a_lookup_t rc = a2a_task_load(conn, task_id, req->user_id, legacy, &t);
    pool_put(gw->pool, conn);
    json_decref(t.task);
    if (rc != A2A_TASK_FOUND) {
        s_error(c, rc == A2A_TASK_MISSING ? A2A_TASK_NOT_FOUND : RPC_INTERNAL,
                rc == A2A_TASK_MISSING ? "Task not found" : "Internal error", NULL);
    } else if (t.terminal) {
        s_error(c, A2A_UNSUPPORTED_OPERATION, "The task has ended; read it with GetTask",
                json_pack("{s:s}", "state", t.state));
    } else if (c->notify || c->batch) {
        s_error(c, A2A_UNSUPPORTED_OPERATION, "A stream cannot be part of a batch", NULL);
    } else {
        log_info("a2a_task_subscribed", "chat_id=%s task_id=%s", t.context_id, task_id);
        a2a_stream_start(gw, req, c->resp, c->id, task_id, t.context_id, legacy);
    }
}

/* The task id of GetTask, CancelTask and SubscribeToTask in its canonical form
 * (a2a_task_id_canonical) in buf: NULL with *data set when it is not a string, NULL with
 * *data NULL when no task of this agent can have it (the answer is then "Task not found", as
 * for an unknown task). */
static const char *s_task_id(json_t *params, char buf[A2A_TASK_ID_MAX], json_t **data) {
    const char *tid = json_string_value(json_object_get(params, "id"));
    if (!tid) {
        *data = s_invalid("params.id", "must be a task id");
        return NULL;
    }
    return a2a_task_id_canonical(tid, buf) == 0 ? buf : NULL;
}

static bool s_is(const char *method, const char *v1, const char *v03) {
    return !strcmp(method, v1) || (v03 && !strcmp(method, v03));
}

/* The push notification config method's operation (v1 and v0.3 names), or -1. */
static int s_push_op(const char *method) {
    static const struct {
        const char *name;
        a2a_push_op_t op;
    } ops[] = {
        {"CreateTaskPushNotificationConfig", A2A_PUSH_CREATE},
        {"tasks/pushNotificationConfig/set", A2A_PUSH_CREATE},
        {"GetTaskPushNotificationConfig", A2A_PUSH_GET},
        {"tasks/pushNotificationConfig/get", A2A_PUSH_GET},
        {"ListTaskPushNotificationConfigs", A2A_PUSH_LIST},
        {"ListTaskPushNotificationConfig", A2A_PUSH_LIST},
        {"tasks/pushNotificationConfig/list", A2A_PUSH_LIST},
        {"DeleteTaskPushNotificationConfig", A2A_PUSH_DELETE},
        {"tasks/pushNotificationConfig/delete", A2A_PUSH_DELETE},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (!strcmp(method, ops[i].name)) {
            return (int)ops[i].op;
        }
    }
    return -1;
}

/* Runs one call (a JSON object) and answers it through c, whose resp and batch are set. */
static void s_dispatch(gateway_t *gw, http_req_t *req, s_call_t *c, json_t *rpc) {
    json_t *id = json_object_get(rpc, "id");
    const char *method = json_string_value(json_object_get(rpc, "method"));
    json_t *params = json_object_get(rpc, "params");
    if (!json_is_object(rpc) || !json_is_string(json_object_get(rpc, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(rpc, "jsonrpc")), "2.0") || !method ||
        (id && !json_is_string(id) && !json_is_integer(id) && !json_is_null(id))) {
        /* Answered even without an id: only a valid request can be a notification. */
        c->id = json_is_string(id) || json_is_integer(id) ? id : json_null();
        s_error(c, RPC_INVALID_REQUEST, "Invalid Request", NULL);
        return;
    }
    c->notify = id == NULL;
    c->id = id ? id : json_null();
    bool v1 = !strchr(method, '/');
    if (!json_is_object(params)) {
        s_error(c, RPC_INVALID_PARAMS, "Invalid params", s_invalid("params", "object"));
        return;
    }
    json_t *data = NULL;
    const char *tid = NULL;
    char tid_buf[A2A_TASK_ID_MAX];
    bool streaming = s_is(method, "SendStreamingMessage", "message/stream");
    if (streaming && c->batch) {
        s_error(c, A2A_UNSUPPORTED_OPERATION, "A stream cannot be part of a batch", NULL);
    } else if (streaming || s_is(method, "SendMessage", "message/send")) {
        s_send(gw, req, c, params, !v1, streaming);
    } else if (s_is(method, "ListTasks", NULL)) {
        PGconn *conn = pool_get(gw->pool);
        json_t *result = NULL;
        int code = a2a_list_tasks(conn, req->user_id, params, &result, &data);
        pool_put(gw->pool, conn);
        if (code == 0) {
            s_result(c, result);
        } else if (code == -2) {
            s_error(c, RPC_INTERNAL, "Internal error", NULL);
        }
    } else if (s_push_op(method) >= 0) {
        PGconn *conn = pool_get(gw->pool);
        json_t *result = NULL;
        int code = a2a_push_rpc(conn, req->user_id, (a2a_push_op_t)s_push_op(method), params, !v1,
                                &result, &data);
        pool_put(gw->pool, conn);
        if (code == 0) {
            s_result(c, result);
        } else if (code != RPC_INVALID_PARAMS) {
            s_error(c, code, code == A2A_TASK_NOT_FOUND ? "Task not found" : "Internal error",
                    NULL);
        }
    } else if (s_is(method, "GetTask", "tasks/get") || s_is(method, "CancelTask", "tasks/cancel") ||
               s_is(method, "SubscribeToTask", "tasks/resubscribe")) {
        if ((tid = s_task_id(params, tid_buf, &data))) {
            if (s_is(method, "GetTask", "tasks/get")) {
                s_reply_task(gw, req, c, tid, !v1, false, 0);
            } else if (s_is(method, "CancelTask", "tasks/cancel")) {
                s_cancel(gw, req, c, tid, !v1);
            } else {
                s_subscribe(gw, req, c, tid, !v1);
            }
        } else if (!data) {
            s_error(c, A2A_TASK_NOT_FOUND, "Task not found", NULL);
        }
    } else {
        s_error(c, RPC_NO_METHOD, "Method not found", NULL);
    }
    if (data) {
        s_error(c, RPC_INVALID_PARAMS, "Invalid params", data);
    }
}

/* A request the strict boundary refused. Text that is not JSON is a Parse error; JSON with a
 * value the boundary refuses (a number the policy refuses, a duplicate key, a cap) is Invalid
 * params naming the field, like a REST 400, with the request's id when a lenient read finds
 * one. */
static void s_refused(const http_req_t *req, http_resp_t *resp, const jsonstrict_error_t *err) {
    s_call_t c = {.resp = resp, .id = json_null()};
    bool syntax = err->code == JSONSTRICT_E_TOO_LARGE || err->code == JSONSTRICT_E_SYNTAX ||
                  err->code == JSONSTRICT_E_TRAILING || err->code == JSONSTRICT_E_UTF8 ||
                  err->code == JSONSTRICT_E_SURROGATE;
    if (syntax) {
        s_error(&c, RPC_PARSE, "Parse error",
                json_pack("{s:s,s:I}", "detail", err->message, "offset", (json_int_t)err->offset));
        return;
    }
    /* Read again with no cap (a number beyond one must not fail the read, jsonstrict.h): an id
     * that is a whole number in range is given back as the integer it was. */
    json_t *loose = jsonstrict_load_stored(req->body, req->body_len);
    json_t *got = json_object_get(loose, "id");
    double d = json_real_value(got);
    json_t *id = json_is_string(got) || json_is_integer(got) ? json_incref(got)
                 : json_is_real(got) && d == (double)(json_int_t)d && d > -9.2e18 && d < 9.2e18
                     ? json_integer((json_int_t)d)
                     : NULL;
    char *field = gateway_error_field(req, err);
    char detail[JSONSTRICT_MESSAGE_MAX + 40];
    snprintf(detail, sizeof detail, "%s (at byte %zu)", err->message, err->offset);
    c.id = id ? id : json_null();
    s_error(&c, RPC_INVALID_PARAMS, "Invalid params", s_invalid(field, detail));
    free(field);
    json_decref(id);
    json_decref(loose);
}

/* A batch (JSON-RPC 2.0 §6): each call runs in order and the answer is the array of the
 * responses to those that are not notifications; nothing at all (204) when every call was
 * one. An empty array, or one longer than A2A_BATCH_MAX, is one Invalid Request. */
static void s_batch(gateway_t *gw, http_req_t *req, http_resp_t *resp, json_t *calls) {
    s_call_t c = {.resp = resp, .id = json_null()};
    if (json_array_size(calls) == 0 || json_array_size(calls) > A2A_BATCH_MAX) {
        s_error(&c, RPC_INVALID_REQUEST, "Invalid Request",
                json_pack("{s:s,s:s}", "field", "", "detail",
                          "a batch holds 1 to " S_STR(A2A_BATCH_MAX) " calls"));
        return;
    }
    json_t *answers = json_array();
    size_t i;
    json_t *rpc;
    json_array_foreach(calls, i, rpc) {
        s_call_t one = {.resp = resp, .batch = answers};
        s_dispatch(gw, req, &one, rpc);
    }
    if (json_array_size(answers) == 0) {
        json_decref(answers);
        http_json(resp, 204, NULL);
    } else {
        http_json(resp, 200, answers);
    }
}

static void s_rpc(void *app, http_req_t *req, http_resp_t *resp) {
    json_t *rpc = NULL;
    jsonstrict_error_t err;
    if (jsonstrict_parse(req->body ? req->body : "", req->body_len, NULL, &rpc, &err) != 0) {
        s_refused(req, resp, &err);
        return;
    }
    if (json_is_array(rpc)) {
        s_batch(app, req, resp, rpc);
    } else {
        s_call_t c = {.resp = resp, .id = json_null()};
        s_dispatch(app, req, &c, rpc);
        if (c.notify && resp->status == 0 && !resp->raw) {
            http_json(resp, 204, NULL); /* a notification: run, never answered */
        }
    }
    json_decref(rpc);
}

const http_route_t a2a_route_table[] = {
    {"GET", "/.well-known/agent-card.json", s_agent_card, true, NULL, NULL},
    {"POST", A2A_RPC_PATH, s_rpc, false, NULL, NULL},
};
const int a2a_route_count = sizeof a2a_route_table / sizeof a2a_route_table[0];
