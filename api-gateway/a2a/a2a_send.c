/* a2a_send: SendMessage's params and store; see a2a_send.h. */
#include "a2a_send.h"
#include "jsonnumber.h"
#include "a2a_file.h"
#include "a2a_push.h"
#include "db.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *s_invalid(const char *field, const char *detail) {
    return json_pack("{s:s,s:s}", "field", field, "detail", detail);
}

/* The message's text: its text parts joined (v1 {"text"} or v0.3 {"kind":"text"}); its file
 * parts go to files (a2a_file.h). */
static char *s_text(json_t *message, json_t *files, json_t **data) {
    json_t *parts = json_object_get(message, "parts");
    if (!json_is_array(parts) || json_array_size(parts) == 0) {
        *data = s_invalid("params.message.parts", "must be a non-empty array of text parts");
        return NULL;
    }
    char *text = mem_strdup("");
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        char *f = mem_printf("params.message.parts[%zu]", i);
        const char *t = json_string_value(json_object_get(p, "text"));
        int file = t ? 0 : a2a_file_part(p, f, files, data);
        if (!t && file == 0) {
            *data = s_invalid(f, "only text and file parts are accepted");
        }
        free(f);
        if (!t && file != 1) {
            free(text);
            return NULL;
        }
        if (t) {
            char *n = mem_printf("%s%s%s", text, text[0] ? "\n" : "", t);
            free(text);
            text = n;
        }
    }
    return text;
}

static bool s_lists_extension(json_t *message) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(message, "extensions"), i, e) {
        if (json_is_string(e) && !strcmp(json_string_value(e), A2A_EXTENSION_URI)) {
            return true;
        }
    }
    return false;
}

/* The extension's second rule: a structured request lists application/json among the output
 * modes it accepts. */
static bool s_accepts_json(json_t *conf) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(conf, "acceptedOutputModes"), i, m) {
        if (json_is_string(m) && !strcmp(json_string_value(m), "application/json")) {
            return true;
        }
    }
    return false;
}

/* The request's schema per the extension: schemaJson authoritative (never falling back
 * when invalid), the legacy schema object only when schemaJson is absent. Returns a new
 * reference, or NULL with *data naming the field. */
static json_t *s_schema(json_t *meta, bool *raw, json_t **data) {
    json_t *enc = json_object_get(meta, "resultEncoding");
    json_t *ver = json_object_get(meta, "version");
    json_t *sj = json_object_get(meta, "schemaJson");
    json_t *legacy = json_object_get(meta, "schema");
    const char *f = "params.metadata." A2A_META_KEY;
    if (!json_is_object(meta) || (ver && (!json_is_integer(ver) || json_integer_value(ver) != 1))) {
        *data = s_invalid(json_is_object(meta) ? "params.metadata." A2A_META_KEY ".version" : f,
                          "must be an object with version 1");
        return NULL;
    }
    if (enc && (!json_is_string(enc) || (strcmp(json_string_value(enc), "json-utf8") &&
                                         strcmp(json_string_value(enc), "protobuf-value")))) {
        *data = s_invalid("params.metadata." A2A_META_KEY ".resultEncoding",
                          "must be json-utf8 or protobuf-value");
        return NULL;
    }
    *raw = enc && !strcmp(json_string_value(enc), "json-utf8");
    json_t *schema = NULL;
    jsonstrict_error_t err;
    if (sj) {
        if (!json_is_string(sj) ||
            jsonstrict_parse(json_string_value(sj), json_string_length(sj),
                             &jsonstrict_limits_schema, &schema, &err) != 0) {
            char *d = mem_printf("not a JSON schema document: %s",
                                 json_is_string(sj) ? err.message : "must be a string");
            *data = s_invalid("params.metadata." A2A_META_KEY ".schemaJson", d);
            free(d);
            return NULL;
        }
        return schema;
    }
    char *text = legacy ? jsonout_dumps(legacy) : NULL;
    if (!text || !json_is_object(legacy) || strlen(text) > JSONSTRICT_SCHEMA_MAX_BYTES) {
        *data = s_invalid("params.metadata." A2A_META_KEY ".schema",
                          text ? "must be a schema object within maxSchemaBytes"
                               : "schemaJson or schema is required");
        free(text);
        return NULL;
    }
    free(text);
    return json_incref(legacy);
}

/* A field a gateway helper named in the REST body that s_parse_send builds, as the field
 * of the JSON-RPC request that the client sent: the schema's own path goes under the member
 * it came from (schema_field; for schemaJson, the rest of the path is inside the document
 * the string holds), the rest of response_format is the extension's metadata, content is
 * the message's parts. */
static char *s_request_field(const char *f, const char *schema_field) {
    static const char inner[] = "response_format.json_schema.schema";
    size_t n = strlen(inner);
    if (schema_field && !strncmp(f, inner, n) && (f[n] == '\0' || f[n] == '.' || f[n] == '[')) {
        return mem_printf("%s%s", schema_field, f + n);
    }
    if (!strncmp(f, "response_format", strlen("response_format"))) {
        return mem_strdup("params.metadata." A2A_META_KEY);
    }
    if (!strncmp(f, "content", strlen("content"))) {
        return mem_strdup("params.message.parts");
    }
    return mem_strdup(f);
}

/* An HTTP-style validation failure of a gateway helper, as JSON-RPC error data whose fields
 * name the JSON-RPC request (s_request_field). */
json_t *a2a_send_error_data(http_resp_t *h, const char *schema_field) {
    json_t *d = h->body ? json_loads(h->body, 0, NULL) : NULL;
    free(h->body);
    h->body = NULL;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(d, "validations"), i, v) {
        const char *f = json_string_value(json_object_get(v, "field"));
        if (f) {
            char *nf = s_request_field(f, schema_field);
            json_object_set_new(v, "field", json_string(nf));
            free(nf);
        }
    }
    return d ? d : s_invalid("params", "invalid");
}

#define S_PUSH_V1  "params.configuration.taskPushNotificationConfig"
#define S_PUSH_OLD "params.configuration.pushNotificationConfig"

/* A member whose value is JSON null is absent (proto3 JSON mapping). */
static json_t *s_member(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* The inline push config of a SendMessage, checked as a create would accept it and storing
 * nothing (security issue 34, item 4: it used to be dropped). v1.0 names it
 * SendMessageConfiguration.taskPushNotificationConfig, a TaskPushNotificationConfig whose
 * taskId is empty (this message's task is the one it is for: any taskId given is replaced);
 * v0.3 and the older v1 drafts name it pushNotificationConfig, accepted on v1 too, in the v1
 * shape unless its authentication has the drafts' "schemes" list. 0 (s->push NULL when there
 * is none), or -1 with *data naming the field. */
static int s_push_parse(json_t *conf, bool legacy, a2a_send_t *s, json_t **data) {
    json_t *v1 = legacy ? NULL : s_member(conf, "taskPushNotificationConfig");
    json_t *old = s_member(conf, "pushNotificationConfig");
    s->push = NULL;
    if (!v1 && !old) {
        return 0;
    }
    if (v1 && old) {
        *data = s_invalid(S_PUSH_OLD, "give taskPushNotificationConfig or pushNotificationConfig,"
                                      " not both");
        return -1;
    }
    json_t *cfg = v1 ? v1 : old;
    const char *at = v1 ? S_PUSH_V1 : S_PUSH_OLD;
    if (!json_is_object(cfg)) {
        *data = s_invalid(at, "must be a push notification config object");
        return -1;
    }
    json_t *auth = json_object_get(cfg, "authentication");
    bool shape03 =
        legacy || (!v1 && json_object_get(auth, "schemes") && !json_object_get(auth, "scheme"));
    if (a2a_push_config_check(cfg, at, shape03, data) != 0) {
        return -1;
    }
    s->push = cfg;
    s->push_legacy = shape03;
    s->push_field = at;
    return 0;
}

/* The field a create's failure names (params.<member> for v1, params.pushNotificationConfig.
 * <member> for v0.3) as the SendMessage's: the same member under s->push_field. */
static void s_push_field(json_t *data, const a2a_send_t *s) {
    const char *prefix = s->push_legacy ? "params.pushNotificationConfig" : "params";
    const char *f = json_string_value(json_object_get(data, "field"));
    size_t n = strlen(prefix);
    if (f && !strncmp(f, prefix, n) && (f[n] == '\0' || f[n] == '.')) {
        char *nf = mem_printf("%s%s", s->push_field, f + n);
        json_object_set_new(data, "field", json_string(nf));
        free(nf);
    }
}

int a2a_send_push(PGconn *conn, const char *user_id, const a2a_send_t *s, const char *task_id,
                  json_t **data) {
    if (!s->push) {
        return 0;
    }
    json_t *params;
    if (s->push_legacy) {
        params = json_pack("{s:s,s:O}", "taskId", task_id, "pushNotificationConfig", s->push);
    } else {
        params = jsonnumber_deep_copy(s->push);
        json_object_del(params, "tenant");
        json_object_set_new(params, "taskId", json_string(task_id));
    }
    json_t *result = NULL;
    int code = a2a_push_rpc(conn, user_id, A2A_PUSH_CREATE, params, s->push_legacy, &result, data);
    json_decref(params);
    if (code == 0) {
        log_info("a2a_push_inline_stored", "task_id=%s config_id=%s", task_id,
                 json_string_value(json_object_get(
                     s->push_legacy ? json_object_get(result, "pushNotificationConfig") : result,
                     "id")));
    } else if (*data) {
        s_push_field(*data, s);
    }
    json_decref(result);
    return code;
}

/* Validates a SendMessage's params into s: 0, -1 (invalid params) or A2A_SEND_MODES, with *data
 * naming the field. */
int a2a_send_parse(json_t *params, bool legacy, a2a_send_t *s, json_t **data) {
    json_t *msg = json_object_get(params, "message");
    json_t *conf = json_object_get(params, "configuration");
    json_t *meta = json_object_get(json_object_get(params, "metadata"), A2A_META_KEY);
    if (!json_is_object(msg)) {
        *data = s_invalid("params.message", "is required");
        return -1;
    }
    if (json_object_get(msg, "taskId")) {
        *data = s_invalid("params.message.taskId", "a finished turn cannot be continued; send a new"
                                                   " message in the context");
        return -1;
    }
    /* A context id in any letter case names the same chat; from here on it is lower-case,
     * as the bus topics and every id this agent answers with are. */
    json_t *ctx = json_object_get(msg, "contextId");
    s->context_id = NULL;
    if (ctx) {
        if (gateway_chat_id(json_string_value(ctx), s->context_buf) != 0) {
            *data = s_invalid("params.message.contextId", "must be a context id from this agent");
            return -1;
        }
        s->context_id = s->context_buf;
    }
    /* Before the schema's checks: a schema they refuse is stored as a failed task, and a bad
     * push config must leave nothing stored at all. */
    if (s_push_parse(conf, legacy, s, data) != 0) {
        return -1;
    }
    s->blocking = legacy ? !json_is_false(json_object_get(conf, "blocking"))
                         : !json_is_true(json_object_get(conf, "returnImmediately"));
    s->files = json_array();
    char *text = s_text(msg, s->files, data);
    if (!text) {
        return -1;
    }
    json_t *body = json_pack("{s:[{s:s,s:s}]}", "content", "type", "text", "text", text);
    free(text);
    int rc = 0;
    if (meta) {
        bool raw = false;
        json_t *schema = NULL;
        if (!s_lists_extension(msg)) {
            *data = s_invalid("params.message.extensions",
                              "a structured request lists " A2A_EXTENSION_URI);
            rc = -1;
        } else if (!s_accepts_json(conf)) {
            *data = s_invalid("params.configuration.acceptedOutputModes",
                              "a structured request accepts application/json");
            rc = A2A_SEND_MODES;
        } else if (!(schema = s_schema(meta, &raw, data))) {
            rc = -1;
        } else {
            s->schema_field = json_object_get(meta, "schemaJson")
                                  ? "params.metadata." A2A_META_KEY ".schemaJson"
                                  : "params.metadata." A2A_META_KEY ".schema";
            json_object_set_new(body, "response_format",
                                json_pack("{s:s,s:{s:s,s:o}}", "type", "json_schema", "json_schema",
                                          "name", raw ? A2A_FORMAT_JSON_UTF8 : A2A_FORMAT_PROTOBUF,
                                          "schema", schema));
        }
    }
    http_resp_t h = {0};
    if (rc == 0 &&
        (!(s->content = gateway_content(json_object_get(body, "content"), "content", false, &h)) ||
         gateway_format(body, NULL, &s->format, &h) != 0)) {
        *data = a2a_send_error_data(&h, s->schema_field);
        rc = -1;
    }
    json_decref(body);
    return rc;
}

int a2a_send_admit(gateway_t *gw, const http_req_t *req, a2a_send_t *s, http_resp_t *h) {
    if (!admithook_enabled(gw)) {
        return 0;
    }
    if (s->context_id) {
        PGconn *conn = pool_get(gw->pool);
        http_resp_t miss = {0};
        json_t *chat = gateway_chat_json(conn, s->context_id, req->user_id, &miss);
        pool_put(gw->pool, conn);
        free(miss.body);
        if (!chat) {
            return 0;
        }
        json_decref(chat);
    } else if (id_uuid_new(s->chat_id) != 0) {
        http_error(h, 500, "Internal error.", "no randomness for a chat id");
        return -1;
    }
    admithook_t hk;
    admithook_begin(&hk, gw, s->context_id ? s->context_id : s->chat_id, req->user_id, "a2a");
    return admithook_run(&hk, NULL, !s->context_id, &s->content, &s->context, h);
}

/* A new chat whose first message is the task; its id is that message's. */
int a2a_send_create(gateway_t *gw, PGconn *conn, const http_req_t *req, a2a_send_t *s,
                    char chat_id[ID_UUID_LEN + 1], char task_id[A2A_TASK_ID_MAX]) {
    char model[ID_UUID_LEN + 1];
    http_resp_t miss = {0};
    int found = gateway_model_find(gw, conn, NULL, model, &miss);
    free(miss.body);
    if (found != 1) {
        return -1;
    }
    cs_message_t m = {.role = "user",
                      .content = s->content,
                      .created_by = req->user_id,
                      .model_config_id = model,
                      .response_format = s->format.json,
                      .so_request_id = s->format.structured ? s->format.request_id : NULL};
    cs_message_t msgs[1 + sizeof s->context.rows / sizeof s->context.rows[0]];
    msgs[0] = m;
    for (int i = 0; i < s->context.count; i++) {
        msgs[1 + i] = s->context.rows[i]; /* the hooks' context after the prompt (§7.10) */
    }
    cs_create_t c = {.chat_id = s->chat_id[0] ? s->chat_id : NULL,
                     .owner_id = req->user_id,
                     .model_config_id = model,
                     .messages = msgs,
                     .message_count = 1 + s->context.count};
    cs_error_t err;
    if (chatstate_create(conn, &gw->chat_settings, &c, &gw->sink, chat_id, &err) != 0) {
        log_warn("a2a_create_failed", "message=%s", err.message);
        return -1;
    }
    const char *p[] = {chat_id};
    db_err_t e;
    PGresult *res = db_query(conn, &e, NULL, 0,
                             "SELECT min(id) FROM chat_messages WHERE chat_id = $1 AND"
                             " role = 'user'",
                             1, p);
    int ok = res && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);
    if (ok) {
        snprintf(task_id, A2A_TASK_ID_MAX, "%s", PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return ok ? 0 : -1;
}

typedef struct {
    cs_message_t msg;
    int max_queue;
    int64_t message_id;
    int64_t queued_id;
    const admithook_context_t *context;
} s_turn_t;

static int s_send_step(chatstate_t *cs, void *ctx, cs_error_t *err) {
    s_turn_t *t = ctx;
    /* The hook's context goes with the message, queued or not (ARCHITECTURE.md §7.10). */
    t->msg.context = t->context->rows;
    t->msg.context_count = t->context->count;
    return chatstate_send_message(cs, &t->msg, CS_BUSY_QUEUE, t->max_queue, &t->message_id,
                                  &t->queued_id, err);
}

/* A message in an existing context: the task is the message, or its queued row. */
int a2a_send_append(gateway_t *gw, PGconn *conn, const http_req_t *req, a2a_send_t *s,
                    char task_id[A2A_TASK_ID_MAX], http_resp_t *h) {
    http_req_t r = *req;
    r.params[0] = s->context_id;
    s_turn_t t = {.msg = {.role = "user",
                          .content = s->content,
                          .created_by = req->user_id,
                          .response_format = s->format.json,
                          .so_request_id = s->format.structured ? s->format.request_id : NULL},
                  .max_queue = gw->max_queue,
                  .context = &s->context};
    if (gateway_bundle(gw, conn, &r, s_send_step, &t, NULL, h) != 0) {
        return -1;
    }
    if (t.message_id) {
        snprintf(task_id, A2A_TASK_ID_MAX, "%lld", (long long)t.message_id);
    } else {
        snprintf(task_id, A2A_TASK_ID_MAX, "q%lld", (long long)t.queued_id);
    }
    return 0;
}
