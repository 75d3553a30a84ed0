/* agents: see agents.h. */
#include "agents.h"
#include "db.h"
#include "id.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"
#include "outformat.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGENTS_PROMPT_MAX  65536 /* bytes of a spawn's prompt or a message_agent's message */
#define AGENTS_FORMAT_PATH "response_format"

static const struct {
    const char *name;
    const char *description;
    const char *schema;
} s_specs_src[] = {
    {"spawn_agent",
     "Starts a subagent: a child chat that works on prompt on its own, possibly on another"
     " machine, while you go on. Returns its agent_id at once; call wait_agent for its answer."
     " Optional: title, type (general, or explore for a read-only investigation),"
     " model_config_id (see list_subagent_models; default: your model), response_format (a"
     " json_schema format: the answer is then a validated JSON value).",
     "{\"type\":\"object\",\"properties\":{\"prompt\":{\"type\":\"string\"},"
     "\"title\":{\"type\":\"string\"},\"type\":{\"enum\":[\"general\",\"explore\"]},"
     "\"model_config_id\":{\"type\":\"string\"},\"response_format\":{\"type\":\"object\"}},"
     "\"required\":[\"prompt\"],\"additionalProperties\":false}"},
    {"wait_agent",
     "Waits until the named subagents (agent_ids; none: all of yours) have finished, then"
     " returns each one's answer, structured value or error. Costs nothing while it waits.",
     "{\"type\":\"object\",\"properties\":{\"agent_ids\":{\"type\":\"array\",\"items\":"
     "{\"type\":\"string\"}}},\"additionalProperties\":false}"},
    {"message_agent",
     "Sends message to one of your subagents: queued behind its current work, or, with"
     " interrupt true, stopping that work first.",
     "{\"type\":\"object\",\"properties\":{\"agent_id\":{\"type\":\"string\"},"
     "\"message\":{\"type\":\"string\"},\"interrupt\":{\"type\":\"boolean\"}},"
     "\"required\":[\"agent_id\",\"message\"],\"additionalProperties\":false}"},
    {"interrupt_agent", "Stops one of your subagents' current work (and its own subagents').",
     "{\"type\":\"object\",\"properties\":{\"agent_id\":{\"type\":\"string\"}},"
     "\"required\":[\"agent_id\"],\"additionalProperties\":false}"},
    {"list_agents", "Lists your subagents with their state.",
     "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}"},
    {"list_subagent_models", "Lists the model configs a subagent may be given.",
     "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}"},
};

#define S_NSPECS (sizeof s_specs_src / sizeof s_specs_src[0])

bool agents_is_tool(const char *name) {
    for (size_t i = 0; name && i < S_NSPECS; i++) {
        if (!strcmp(s_specs_src[i].name, name)) {
            return true;
        }
    }
    return name && !strcmp(name, "close_agent");
}

static json_t *s_specs[S_NSPECS];
static pthread_once_t s_specs_once = PTHREAD_ONCE_INIT;

static void s_specs_build(void) {
    for (size_t i = 0; i < S_NSPECS; i++) {
        s_specs[i] = json_pack("{s:s, s:s, s:o}", "name", s_specs_src[i].name, "description",
                               s_specs_src[i].description, "input_schema",
                               json_loads(s_specs_src[i].schema, 0, NULL));
    }
}

bool agents_changes_nothing(const char *name) {
    static const char *const reads[] = {"list_agents", "list_subagent_models", CS_AGENT_WAIT_TOOL};
    for (size_t i = 0; name && i < sizeof reads / sizeof reads[0]; i++) {
        if (!strcmp(name, reads[i])) {
            return true;
        }
    }
    return false;
}

json_t *agents_specs(void) {
    pthread_once(&s_specs_once, s_specs_build);
    json_t *arr = json_array();
    for (size_t i = 0; i < S_NSPECS; i++) {
        json_array_append(arr, s_specs[i]);
    }
    return arr;
}

/* --- Results. --- */

static json_t *s_error(bool *is_error, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static json_t *s_error(bool *is_error, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *is_error = true;
    return json_pack("{s:s}", "error", msg);
}

/* One row, one column of JSON text from sql, parsed; NULL on a database failure (logged). A
 * query without a row gives JSON null. */
static json_t *s_json_row(PGconn *conn, const char *sql, int n, const char *const *p) {
    db_err_t e = DB_OK;
    char msg[200];
    PGresult *res = db_query(conn, &e, msg, sizeof msg, sql, n, p);
    if (!res) {
        char q[240];
        log_warn("agents_query_failed", "reason=%s", log_quote(msg, q, sizeof q));
        return NULL;
    }
    json_t *v = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)
                    ? json_loads(PQgetvalue(res, 0, 0), JSON_DECODE_ANY, NULL)
                    : json_null();
    PQclear(res);
    return v ? v : json_null();
}

/* A string argument: NULL (with *bad set) when present but not a string of 1..max bytes. */
static const char *s_str_arg(const json_t *args, const char *key, size_t max, bool required,
                             char *bad, size_t size) {
    const json_t *v = json_object_get(args, key);
    if (!v && !required) {
        return NULL;
    }
    size_t len = json_string_length(v);
    if (!json_is_string(v) || len == 0 || len > max) {
        snprintf(bad, size, "args.%s: must be a string of 1 to %zu bytes", key, max);
        return NULL;
    }
    return json_string_value(v);
}

/* The arguments' keys, each one of allowed (NULL-terminated): the name of the first that is
 * not, or NULL. */
static const char *s_unknown_key(const json_t *args, const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)args, key, v) {
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++) {
            ok = !strcmp(allowed[i], key);
        }
        if (!ok) {
            return key;
        }
    }
    return NULL;
}

/* The child of a->chat_id named by args.agent_id into id; an error result otherwise. NULL
 * when it is the caller's child; *db on a database failure. */
static json_t *s_child(PGconn *conn, const agents_ctx_t *a, const json_t *args, char *id,
                       bool *is_error, bool *db) {
    char bad[120] = "";
    const char *agent = s_str_arg(args, "agent_id", ID_UUID_LEN, true, bad, sizeof bad);
    if (!agent || !id_uuid_valid(agent)) {
        return s_error(is_error, "%s", bad[0] ? bad : "args.agent_id: must be a UUID");
    }
    const char *p[] = {agent, a->chat_id};
    json_t *found = s_json_row(conn,
                               "SELECT to_jsonb(true) FROM chats WHERE id = $1::uuid"
                               " AND parent_chat_id = $2::uuid",
                               2, p);
    if (!found) {
        *db = true;
        return NULL;
    }
    bool mine = json_is_true(found);
    json_decref(found);
    if (!mine) {
        return s_error(is_error, "args.agent_id: %s is not a subagent of this chat", agent);
    }
    snprintf(id, ID_UUID_LEN + 1, "%s", agent);
    return NULL;
}

/* --- spawn_agent. --- */

/* The child this call created before (a step run again after a crash), as its result; JSON
 * null when there is none; NULL on a database failure. */
static json_t *s_spawned(PGconn *conn, const char *parent, const char *call_id) {
    const char *p[] = {parent, call_id};
    return s_json_row(conn,
                      "SELECT jsonb_build_object('agent_id', id, 'title', title, 'type',"
                      " coalesce(substring(system_prompt from 'subagent of type ([a-z]+)'),"
                      " 'general'), 'model_config_id', model_config_id, 'depth', depth)::text"
                      " FROM chats WHERE parent_chat_id = $1::uuid AND spawn_call_id = $2",
                      2, p);
}

/* The model a spawn gets: args.model_config_id when it names a config, else the parent's. */
static json_t *s_spawn_model(PGconn *conn, const agents_ctx_t *a, const json_t *args, char *model,
                             bool *is_error) {
    const json_t *m = json_object_get(args, "model_config_id");
    if (m && (!json_is_string(m) || !id_uuid_valid(json_string_value(m)))) {
        return s_error(is_error, "args.model_config_id: must be the UUID of a model config");
    }
    const char *p[] = {a->chat_id, m ? json_string_value(m) : NULL};
    json_t *id = s_json_row(conn,
                            "SELECT to_jsonb(coalesce((SELECT id FROM model_configs WHERE"
                            " id = $2::uuid), CASE WHEN $2::uuid IS NULL THEN coalesce((SELECT"
                            " model_config_id FROM chats WHERE id = $1::uuid), (SELECT id FROM"
                            " model_configs WHERE is_default)) END)::text)",
                            2, p);
    if (!id) {
        return NULL;
    }
    if (!json_is_string(id)) {
        json_decref(id);
        return s_error(is_error, "args.model_config_id: no model config %s",
                       m ? json_string_value(m) : "for the parent");
    }
    snprintf(model, ID_UUID_LEN + 1, "%s", json_string_value(id));
    json_decref(id);
    return json_null(); /* resolved */
}

typedef struct {
    const char *prompt;
    const char *title;
    const char *type;
    char model[ID_UUID_LEN + 1];
    outformat_t *format;
} s_spawn_t;

/* Checks a spawn's arguments into s; an error result, or NULL when they hold. */
static json_t *s_spawn_args(const json_t *args, s_spawn_t *s, bool *is_error) {
    static const char *const allowed[] = {"prompt",          "title",           "type",
                                          "model_config_id", "response_format", NULL};
    const char *unknown = s_unknown_key(args, allowed);
    if (!json_is_object(args) || unknown) {
        return s_error(is_error, "args%s%s: %s", unknown ? "." : "", unknown ? unknown : "",
                       unknown ? "unknown field" : "must be an object");
    }
    char bad[120] = "";
    s->prompt = s_str_arg(args, "prompt", AGENTS_PROMPT_MAX, true, bad, sizeof bad);
    s->title = s_str_arg(args, "title", CS_TITLE_MAX_BYTES, false, bad, sizeof bad);
    s->type = json_string_value(json_object_get(args, "type"));
    if (bad[0]) {
        return s_error(is_error, "%s", bad);
    }
    if (json_object_get(args, "type") &&
        (!s->type || (strcmp(s->type, "general") && strcmp(s->type, "explore")))) {
        return s_error(is_error, "args.type: must be \"general\" or \"explore\"");
    }
    s->type = s->type ? s->type : "general";
    const json_t *rf = json_object_get(args, AGENTS_FORMAT_PATH);
    outformat_error_t fe;
    if (rf && outformat_parse(rf, "args." AGENTS_FORMAT_PATH, &s->format, &fe) != 0) {
        return s_error(is_error, "%s: %s", fe.field, fe.message);
    }
    return NULL;
}

/* Creates the child (chatstate_create, under the family's caps): its result, an error result
 * (a cap, an archived family), or NULL on a database failure. */
static json_t *s_spawn_create(PGconn *conn, const agents_ctx_t *a, const char *call_id,
                              const s_spawn_t *s, bool *is_error) {
    const char *p[] = {a->chat_id};
    json_t *parent = s_json_row(conn,
                                "SELECT jsonb_build_object('owner_id', owner_id, 'mcp_servers',"
                                " mcp_servers)::text FROM chats WHERE id = $1::uuid",
                                1, p);
    if (!json_is_object(parent)) {
        json_decref(parent);
        return NULL;
    }
    json_t *content = json_pack("[{s:s, s:s}]", "type", "text", "text", s->prompt);
    char *content_text = jsonout_dumps(content);
    json_decref(content);
    const json_t *mcp = json_object_get(parent, "mcp_servers");
    char *mcp_text = json_is_array(mcp) ? jsonout_dumps(mcp) : NULL;
    char *format = s->format ? outformat_json(s->format) : NULL;
    char request_id[ID_UUID_LEN + 1] = "";
    if (format && id_uuid_new(request_id) != 0) {
        request_id[0] = '\0';
    }
    char *system = mem_printf(
        "You are a subagent of type %s: another agent gave you the task"
        " below. Work on it alone and end with your answer to it.%s",
        s->type, !strcmp(s->type, "explore") ? " Investigate and report; change nothing." : "");
    const char *owner = json_string_value(json_object_get(parent, "owner_id"));
    cs_message_t first = {.role = "user",
                          .content = content_text,
                          .created_by = owner,
                          .model_config_id = s->model,
                          .response_format = format,
                          .so_request_id = format && request_id[0] ? request_id : NULL,
                          .traceparent = a->traceparent};
    cs_create_t cc = {.owner_id = owner,
                      .title = s->title,
                      .title_from_user = s->title != NULL,
                      .model_config_id = s->model,
                      .system_prompt = system,
                      .mcp_servers = mcp_text,
                      .messages = &first,
                      .message_count = 1,
                      .parent_chat_id = a->chat_id,
                      .max_depth = a->max_depth,
                      .max_children = a->max_children,
                      .spawn_call_id = call_id};
    cs_error_t err;
    char child[ID_UUID_LEN + 1];
    json_t *out = json_null();
    if (format && !request_id[0]) {
        out = NULL;
    } else if (chatstate_create(conn, a->settings, &cc, a->sink, child, &err) != 0) {
        out = err.rc == CS_CONFLICT || err.rc == CS_NOT_FOUND || err.rc == CS_BAD_INPUT
                  ? s_error(is_error, "spawn_agent refused: %s", err.message)
                  : NULL;
    } else {
        log_info("agent_spawned", "chat_id=%s parent_chat_id=%s type=%s", child, a->chat_id,
                 s->type);
    }
    free(system);
    free(format);
    free(mcp_text);
    free(content_text);
    json_decref(parent);
    return out;
}

static json_t *s_spawn(PGconn *conn, const agents_ctx_t *a, const json_t *call, bool *is_error) {
    const char *call_id = json_string_value(json_object_get(call, "tool_call_id"));
    s_spawn_t s = {0};
    json_t *bad = s_spawn_args(json_object_get(call, "args"), &s, is_error);
    if (bad) {
        return bad;
    }
    json_t *out = s_spawned(conn, a->chat_id, call_id);
    if (json_is_null(out)) {
        json_decref(out);
        out = s_spawn_model(conn, a, json_object_get(call, "args"), s.model, is_error);
    }
    if (json_is_null(out)) {
        json_decref(out);
        out = s_spawn_create(conn, a, call_id, &s, is_error);
    }
    if (json_is_null(out)) { /* created: read back what the model needs */
        json_decref(out);
        out = s_spawned(conn, a->chat_id, call_id);
    }
    outformat_destroy(&s.format);
    return out;
}

/* --- message_agent, interrupt_agent, the lists. --- */

static json_t *s_message(PGconn *conn, const agents_ctx_t *a, const json_t *call, bool *is_error) {
    const json_t *args = json_object_get(call, "args");
    char id[ID_UUID_LEN + 1];
    bool db = false;
    json_t *bad = s_child(conn, a, args, id, is_error, &db);
    if (bad || db) {
        return bad;
    }
    char why[120] = "";
    const char *text = s_str_arg(args, "message", AGENTS_PROMPT_MAX, true, why, sizeof why);
    const json_t *intr = json_object_get(args, "interrupt");
    if (!text || (intr && !json_is_boolean(intr))) {
        return s_error(is_error, "%s", text ? "args.interrupt: must be a boolean" : why);
    }
    json_t *content = json_pack("[{s:s, s:s}]", "type", "text", "text", text);
    char *content_text = jsonout_dumps(content);
    json_decref(content);
    cs_message_t msg = {.role = "user", .content = content_text, .traceparent = a->traceparent};
    cs_error_t err;
    int64_t message_id = 0;
    int64_t queued_id = 0;
    chatstate_t *cs = chatstate_begin(conn, a->settings, id, &err);
    int rc = cs ? chatstate_send_message(cs, &msg,
                                         json_is_true(intr) ? CS_BUSY_INTERRUPT : CS_BUSY_QUEUE,
                                         a->max_queue, &message_id, &queued_id, &err)
                : -1;
    rc = rc == 0 ? chatstate_commit_wake(&cs, a->sink, NULL, &err) : rc;
    chatstate_destroy(&cs);
    free(content_text);
    if (rc != 0) {
        return err.rc == CS_RETRY || err.rc == CS_DB
                   ? NULL
                   : s_error(is_error, "message_agent refused: %s", err.message);
    }
    return json_pack("{s:s, s:b}", "agent_id", id, "queued", queued_id != 0);
}

static json_t *s_interrupt(PGconn *conn, const agents_ctx_t *a, const json_t *call,
                           bool *is_error) {
    char id[ID_UUID_LEN + 1];
    bool db = false;
    json_t *bad = s_child(conn, a, json_object_get(call, "args"), id, is_error, &db);
    if (bad || db) {
        return bad;
    }
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(conn, a->settings, id, &err);
    int rc = cs ? chatstate_interrupt(cs, "parent_interrupt", &err) : -1;
    bool stopped = rc == 0;
    rc = rc == 0 ? chatstate_commit_wake(&cs, a->sink, NULL, &err) : rc;
    chatstate_destroy(&cs);
    if (rc != 0 && err.rc != CS_CONFLICT) {
        return err.rc == CS_RETRY || err.rc == CS_DB
                   ? NULL
                   : s_error(is_error, "interrupt_agent refused: %s", err.message);
    }
    int family = 0;
    if (chatstate_interrupt_descendants(conn, a->settings, id, "parent_interrupt", a->sink, &family,
                                        &err) != 0) {
        return NULL;
    }
    return json_pack("{s:s, s:b, s:i}", "agent_id", id, "interrupted", stopped && rc == 0,
                     "descendants_interrupted", family);
}

static json_t *s_list(PGconn *conn, const agents_ctx_t *a) {
    const char *p[] = {a->chat_id};
    return s_json_row(conn,
                      "SELECT jsonb_build_object('agents', coalesce(jsonb_agg(jsonb_build_object("
                      "'agent_id', id, 'title', title, 'status', CASE WHEN waiting_on_agents"
                      " THEN 'waiting_on_agents' ELSE status::text END, 'archived', archived,"
                      " 'depth', depth, 'model_config_id', model_config_id)"
                      " ORDER BY created_at, id), '[]'))::text"
                      " FROM chats WHERE parent_chat_id = $1::uuid",
                      1, p);
}

static json_t *s_models(PGconn *conn) {
    return s_json_row(conn,
                      "SELECT jsonb_build_object('models', coalesce(jsonb_agg(jsonb_build_object("
                      "'id', id, 'name', name, 'provider', provider, 'model', model, 'default',"
                      " is_default) ORDER BY name), '[]'))::text FROM model_configs",
                      0, NULL);
}

json_t *agents_run(PGconn *conn, const agents_ctx_t *a, const json_t *call, bool *is_error) {
    *is_error = false;
    const char *name = json_string_value(json_object_get(call, "tool_name"));
    name = name ? name : "";
    if (a->max_depth <= 0) { /* not offered (CHATFLEET_SUBAGENT_MAX_DEPTH=0): a made-up call */
        return s_error(is_error, "%s: subagents are off on this deployment", name);
    }
    if (!strcmp(name, "spawn_agent")) {
        return s_spawn(conn, a, call, is_error);
    }
    if (!strcmp(name, "message_agent")) {
        return s_message(conn, a, call, is_error);
    }
    if (!strcmp(name, "interrupt_agent") || !strcmp(name, "close_agent")) {
        return s_interrupt(conn, a, call, is_error);
    }
    if (!strcmp(name, "list_agents")) {
        return s_list(conn, a);
    }
    if (!strcmp(name, "list_subagent_models")) {
        return s_models(conn);
    }
    return s_error(is_error, "%s is answered when the subagents end, never run", name);
}
