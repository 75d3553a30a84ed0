/* mcpset: the deployment's MCP servers and a step's MCP calls; see mcpset.h. */
#include "mcpset.h"
#include "id.h"
#include "jsonstrict.h"
#include "log.h"
#include "mcp.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CONFIG_MAX_BYTES (1024 * 1024) /* the config file */
#define S_NAME_MAX         64            /* a tool's full name, as providers accept it */

typedef struct {
    char name[32];
    int64_t timeout_ms;
    bool http; /* Streamable HTTP, else stdio */
    mcp_t *conn;
} s_server_t;

struct mcpset {
    s_server_t servers[MCPSET_SERVERS_MAX];
    int count;
};

static bool s_name_ok(const char *s, size_t max, bool underscore) {
    size_t n = strlen(s);
    if (n < 1 || n > max) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                  (underscore && ((c >= 'A' && c <= 'Z') || c == '_'));
        if (!ok) {
            return false;
        }
    }
    return true;
}

static char *s_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    char *buf = mem_alloc(S_CONFIG_MAX_BYTES + 1);
    *len = fread(buf, 1, S_CONFIG_MAX_BYTES + 1, f);
    fclose(f);
    return buf;
}

#define S_HEADERS_MAX 32 /* headers of an HTTP server */

/* The HTTP fields of an entry: url, and headers as "Name: value" lines into lines (each
 * owned). Returns the reason of the first fault (its field into *bad), or NULL. */
static const char *s_http(const json_t *v, const char **bad, char *lines[S_HEADERS_MAX + 1]) {
    const json_t *url = json_object_get(v, "url");
    const json_t *headers = json_object_get(v, "headers");
    const char *u = json_string_value(url);
    *bad = "url";
    if (!u || (strncmp(u, "http://", 7) && strncmp(u, "https://", 8))) {
        return "must be an http:// or https:// URL";
    }
    *bad = "headers";
    if (headers && (!json_is_object(headers) || json_object_size(headers) > S_HEADERS_MAX)) {
        return "must be an object of at most 32 header values by name";
    }
    const char *key;
    json_t *h;
    int n = 0;
    json_object_foreach((json_t *)headers, key, h) {
        const char *value = json_string_value(h);
        bool ok = value && key[0] && !strpbrk(value, "\r\n");
        for (const char *c = key; ok && *c; c++) {
            ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                 *c == '-';
        }
        if (!ok) {
            return "each header needs a name of letters, digits and '-' and a one-line string";
        }
        lines[n++] = mem_printf("%s: %s", key, value);
    }
    return NULL;
}

/* Checks one server's entry and starts its connection: "command" (stdio) or "url" (Streamable
 * HTTP), exactly one. */
static int s_add(mcpset_t *self, const char *name, const json_t *v, char *err, size_t size) {
    const json_t *cmd = json_object_get(v, "command");
    const json_t *args = json_object_get(v, "args");
    const json_t *to = json_object_get(v, "timeout_ms");
    const char *bad = NULL;
    const char *why = NULL;
    char *lines[S_HEADERS_MAX + 1] = {0};
    if (!s_name_ok(name, 24, false)) {
        why = "a server name must match ^[a-z0-9-]{1,24}$";
    } else if (!json_is_object(v)) {
        why = "must be an object";
    } else if (!cmd == !json_object_get(v, "url")) {
        why = "needs exactly one of command (stdio) and url (Streamable HTTP)";
    } else if (cmd && (!json_is_string(cmd) || !json_string_length(cmd))) {
        bad = "command", why = "must be a non-empty string";
    } else if (args && (!cmd || !json_is_array(args) || json_array_size(args) > MCP_ARGS_MAX)) {
        bad = "args", why = "must be an array of at most 64 strings, with command";
    } else if (to && (!json_is_integer(to) || json_integer_value(to) < 1)) {
        bad = "timeout_ms", why = "must be a positive integer";
    } else if (!cmd) {
        why = s_http(v, &bad, lines);
    }
    for (size_t i = 0; !why && i < json_array_size(args); i++) {
        if (!json_is_string(json_array_get(args, i))) {
            snprintf(err, size, "mcp_servers.%s.args[%zu]: must be a string", name, i);
            why = "";
        }
    }
    if (!why && self->count == MCPSET_SERVERS_MAX) {
        snprintf(err, size, "mcp_servers: at most %d servers", MCPSET_SERVERS_MAX);
        why = "";
    }
    if (why && why[0]) {
        snprintf(err, size, "mcp_servers.%s%s%s: %s", name, bad ? "." : "", bad ? bad : "", why);
    }
    const char *argv[MCP_ARGS_MAX + 1] = {0};
    for (size_t i = 0; !why && i < json_array_size(args); i++) {
        argv[i] = json_string_value(json_array_get(args, i));
    }
    s_server_t *s = &self->servers[self->count];
    if (!why) {
        snprintf(s->name, sizeof s->name, "%s", name);
        s->timeout_ms = to ? json_integer_value(to) : MCPSET_TIMEOUT_DEFAULT_MS;
        s->http = !cmd;
        mcp_conf_t conf = {.name = name,
                           .command = json_string_value(cmd),
                           .args = argv,
                           .url = json_string_value(json_object_get(v, "url")),
                           .headers = (const char *const *)lines,
                           .call_timeout_ms = s->timeout_ms};
        s->conn = mcp_new(&conf);
        if (!s->conn) {
            snprintf(err, size, "mcp_servers.%s: cannot start its connection", name);
            why = "";
        }
    }
    for (int i = 0; lines[i]; i++) {
        free(lines[i]);
    }
    if (why) {
        return -1;
    }
    self->count++;
    return 0;
}

mcpset_t *mcpset_new(const char *path, char *err, size_t err_size) {
    mcpset_t *self = mem_calloc(1, sizeof *self);
    if (!path) {
        return self;
    }
    size_t len = 0;
    char *text = s_read(path, &len);
    json_t *root = NULL;
    jsonstrict_error_t e;
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = S_CONFIG_MAX_BYTES;
    if (!text || jsonstrict_parse(text, len, &lim, &root, &e) != 0) {
        snprintf(err, err_size, "%s: %s", path, text ? e.message : "cannot read the file");
        free(text);
        mcpset_destroy(&self);
        return NULL;
    }
    free(text);
    json_t *servers = json_object_get(root, "mcp_servers");
    const char *name;
    json_t *v;
    int rc = 0;
    if (servers && !json_is_object(servers)) {
        snprintf(err, err_size, "mcp_servers: must be an object of servers by name");
        rc = -1;
    }
    json_object_foreach(servers, name, v) {
        if (rc == 0 && s_add(self, name, v, err, err_size) != 0) {
            rc = -1;
        }
    }
    json_decref(root);
    if (rc != 0) {
        mcpset_destroy(&self);
    }
    return self;
}

void mcpset_destroy(mcpset_t **self_p) {
    mcpset_t *self = self_p ? *self_p : NULL;
    if (!self) {
        return;
    }
    for (int i = 0; i < self->count; i++) {
        mcp_destroy(&self->servers[i].conn);
    }
    free(self);
    *self_p = NULL;
}

void mcpset_log(const mcpset_t *self) {
    log_info("mcp_config", "servers=%d", self->count);
    for (int i = 0; i < self->count; i++) {
        log_info("mcp_config", "server=%s timeout_ms=%lld transport=%s", self->servers[i].name,
                 (long long)self->servers[i].timeout_ms,
                 self->servers[i].http ? "streamable-http" : "stdio");
    }
}

bool mcpset_is_tool(const char *name) {
    return name && !strncmp(name, MCPSET_PREFIX, strlen(MCPSET_PREFIX));
}

static s_server_t *s_find(mcpset_t *self, const char *name, size_t len) {
    for (int i = 0; i < self->count; i++) {
        if (strlen(self->servers[i].name) == len && !strncmp(self->servers[i].name, name, len)) {
            return &self->servers[i];
        }
    }
    return NULL;
}

static bool s_enabled(const json_t *enabled, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(enabled, i, v) {
        if (json_is_string(v) && !strcmp(json_string_value(v), name)) {
            return true;
        }
    }
    return false;
}

json_t *mcpset_specs(mcpset_t *self, const json_t *enabled) {
    json_t *out = json_array();
    for (int i = 0; i < self->count; i++) {
        s_server_t *s = &self->servers[i];
        if (!s_enabled(enabled, s->name)) {
            continue;
        }
        json_t *tools = mcp_tools(s->conn);
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) {
            char full[S_NAME_MAX + 64];
            snprintf(full, sizeof full, MCPSET_PREFIX "%s__%s", s->name,
                     json_string_value(json_object_get(t, "name")));
            if (!s_name_ok(full, S_NAME_MAX, true)) {
                continue;
            }
            json_t *schema = json_object_get(t, "inputSchema");
            const char *d = json_string_value(json_object_get(t, "description"));
            json_array_append_new(out, json_pack("{s:s, s:s, s:O}", "name", full, "description",
                                                 d ? d : "", "input_schema",
                                                 json_is_object(schema) ? schema : json_object()));
        }
        json_decref(tools);
    }
    return out;
}

/* --- A step's MCP calls as one provider call. --- */

typedef struct s_batch s_batch_t;

/* One call on its way to a server; its answer comes back through the loop. */
typedef struct {
    s_batch_t *batch;
    s_server_t *server;
    uint64_t id; /* mcp_call's; 0 once answered */
    char tool_call_id[128];
    json_t *result;
    bool is_error;
} s_slot_t;

struct s_batch {
    provider_call_t *call; /* NULL once the call ended or was cancelled */
    evloop_t *loop;
    s_slot_t *slots;
    size_t n;
    size_t left; /* slots not answered */
    int refs;    /* the call's, plus one per slot whose answer is on its way; loop thread */
};

static void s_unref(s_batch_t *b) {
    if (--b->refs > 0) {
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        json_decref(b->slots[i].result);
    }
    free(b->slots);
    free(b);
}

static void s_answer(s_slot_t *slot, json_t *result, bool is_error) {
    s_batch_t *b = slot->batch;
    json_object_set_new(b->call->out.content, slot->tool_call_id,
                        json_pack("{s:o, s:b}", "result", result, "is_error", is_error));
    if (--b->left == 0) {
        provider_call_end(b->call, PROVIDER_OK);
    }
}

/* The start's own count: the call ends (deferred, provider.h) when nothing was sent. */
static void s_answer_last(s_batch_t *b) {
    if (--b->left == 0) {
        provider_call_end(b->call, PROVIDER_OK);
    }
}

/* Loop thread: a server's answer. */
static void s_on_loop(void *arg) {
    s_slot_t *slot = arg;
    s_batch_t *b = slot->batch;
    json_t *result = slot->result;
    slot->result = NULL;
    slot->id = 0;
    if (b->call) {
        s_answer(slot, result, slot->is_error); /* steals result */
    } else {
        json_decref(result);
    }
    s_unref(b);
}

/* I/O thread of a server: hands the answer to the loop. */
static void s_on_done(void *arg, json_t *result, bool is_error) {
    s_slot_t *slot = arg;
    slot->result = result;
    slot->is_error = is_error;
    evloop_post(slot->batch->loop, s_on_loop, slot);
}

static void s_stop(void *impl) {
    s_batch_t *b = impl;
    b->call = NULL;
    for (size_t i = 0; i < b->n; i++) {
        if (b->slots[i].id && mcp_cancel(b->slots[i].server->conn, b->slots[i].id)) {
            b->slots[i].id = 0;
            b->refs--; /* its answer will never come; the call's own reference remains */
        }
    }
}

static void s_free(void *impl) {
    s_batch_t *b = impl;
    b->call = NULL;
    s_unref(b);
}

provider_call_t *mcpset_start(mcpset_t *self, evloop_t *loop, const json_t *calls,
                              const json_t *enabled, provider_done_fn *done, void *ctx) {
    provider_call_t *call = provider_call_new(loop, NULL, NULL, done, ctx);
    s_batch_t *b = mem_calloc(1, sizeof *b);
    b->call = call;
    b->loop = loop;
    b->n = json_array_size(calls);
    b->slots = mem_calloc(b->n ? b->n : 1, sizeof *b->slots);
    b->left = b->n + 1; /* and one for this function, so the call cannot end inside the loop */
    b->refs = 1;
    call->impl = b;
    call->stop = s_stop;
    call->impl_free = s_free;
    call->out.content = json_object();
    int64_t now = id_now_ms();
    for (size_t i = 0; i < b->n; i++) {
        const json_t *c = json_array_get(calls, i);
        s_slot_t *slot = &b->slots[i];
        slot->batch = b;
        snprintf(slot->tool_call_id, sizeof slot->tool_call_id, "%s",
                 json_string_value(json_object_get(c, "tool_call_id")));
        const char *name = json_string_value(json_object_get(c, "tool_name"));
        const char *server = name ? name + strlen(MCPSET_PREFIX) : "";
        const char *sep = strstr(server, "__");
        s_server_t *s = sep ? s_find(self, server, (size_t)(sep - server)) : NULL;
        if (!s || !s_enabled(enabled, s->name)) {
            s_answer(slot,
                     json_pack("{s:s}", "error",
                               "no such tool: its MCP server is not enabled for this chat"),
                     true);
            continue;
        }
        slot->server = s;
        b->refs++;
        slot->id = mcp_call(s->conn, sep + 2, json_object_get(c, "args"), now + s->timeout_ms,
                            s_on_done, slot);
    }
    s_answer_last(b);
    call->starting = false;
    return call;
}
