/* mcpset: the deployment's MCP servers and a step's MCP calls; see mcpset.h. */
#include "mcpset.h"
#include "config.h"
#include "header.h"
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
    int env;   /* variables, paths and network of its sandbox (for the log) */
    int ro_paths;
    int rw_paths;
    bool network;
    mcp_t *conn;
} s_server_t;

struct mcpset {
    s_server_t servers[MCPSET_SERVERS_MAX];
    int count;
    sandbox_mode_t mode; /* CHATFLEET_MCP_SANDBOX */
    bool probed;         /* whether the sandbox was probed (a stdio server, mode not off) */
    bool usable;
    char unusable[256]; /* why not */
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
        lines[n] = mem_printf("%s: %s", key, value ? value : "");
        struct curl_slist *check = NULL; /* as mcphttp.c will build it: length too */
        bool ok = value && header_name_ok(key) && header_value_ok(value) &&
                  header_append_line(&check, lines[n]) == 0;
        curl_slist_free_all(check);
        n++;
        if (!ok) {
            return "each header needs an RFC 9110 token as its name and a one-line string";
        }
    }
    return NULL;
}

/* The owned "NAME=value" lines and borrowed paths of a stdio server's sandbox. */
typedef struct {
    char *env[SANDBOX_ENV_MAX + 1];
    const char *ro[SANDBOX_PATHS_MAX + 1];
    const char *rw[SANDBOX_PATHS_MAX + 1];
    bool network;
} s_box_t;

static void s_box_clear(s_box_t *box) {
    for (int i = 0; box->env[i]; i++) {
        free(box->env[i]);
    }
}

/* "env" of a stdio server into box->env. Returns the reason of the first fault (its field,
 * relative to the server, into bad), or NULL. */
static const char *s_env(const json_t *v, s_box_t *box, char *bad, size_t size) {
    const json_t *env = json_object_get(v, "env");
    snprintf(bad, size, "env");
    if (env && !json_is_object(env)) {
        return "must be an object of strings by variable name";
    }
    if (json_object_size(env) > SANDBOX_ENV_MAX) {
        return "at most 64 variables";
    }
    const char *key;
    json_t *val;
    int n = 0;
    json_object_foreach((json_t *)env, key, val) {
        snprintf(bad, size, "env.%.100s", key);
        if (!config_env_name_ok(key)) {
            return "a variable name must match ^[A-Za-z_][A-Za-z0-9_]*$";
        }
        if (!json_is_string(val) || !json_string_value(val) ||
            !header_value_ok(json_string_value(val)) ||
            strlen(json_string_value(val)) != json_string_length(val)) {
            return "must be a one-line string without control characters";
        }
        box->env[n++] = mem_printf("%s=%s", key, json_string_value(val));
    }
    return NULL;
}

/* A path list of "sandbox" (ro_paths or rw_paths) into out. */
static const char *s_paths(const json_t *sb, const char *member, const char **out, char *bad,
                           size_t size) {
    const json_t *list = json_object_get(sb, member);
    snprintf(bad, size, "sandbox.%s", member);
    if (list && (!json_is_array(list) || json_array_size(list) > SANDBOX_PATHS_MAX)) {
        return "must be an array of at most 32 absolute paths";
    }
    size_t i;
    json_t *p;
    json_array_foreach(list, i, p) {
        const char *path = json_string_value(p);
        snprintf(bad, size, "sandbox.%s[%zu]", member, i);
        if (!path || path[0] != '/' || !header_value_ok(path) || strstr(path, "/../") ||
            strlen(path) != json_string_length(p) || strlen(path) >= 4096) {
            return "must be an absolute path (no control characters, no ..)";
        }
        out[i] = path;
    }
    return NULL;
}

/* "sandbox" of a stdio server: {"ro_paths": [...], "rw_paths": [...], "network": bool}. */
static const char *s_sandbox(const json_t *v, s_box_t *box, char *bad, size_t size) {
    const json_t *sb = json_object_get(v, "sandbox");
    snprintf(bad, size, "sandbox");
    if (sb && !json_is_object(sb)) {
        return "must be an object of ro_paths, rw_paths and network";
    }
    const char *key;
    json_t *m;
    json_object_foreach((json_t *)sb, key, m) {
        if (strcmp(key, "ro_paths") && strcmp(key, "rw_paths") && strcmp(key, "network")) {
            snprintf(bad, size, "sandbox.%.100s", key);
            return "unknown member (ro_paths, rw_paths and network are)";
        }
    }
    const json_t *net = json_object_get(sb, "network");
    if (net && !json_is_boolean(net)) {
        snprintf(bad, size, "sandbox.network");
        return "must be true or false";
    }
    box->network = json_is_true(net);
    const char *why = s_paths(sb, "ro_paths", box->ro, bad, size);
    return why ? why : s_paths(sb, "rw_paths", box->rw, bad, size);
}

/* The stdio fields of an entry: command's form, env and sandbox. */
static const char *s_stdio(const json_t *v, s_box_t *box, char *bad, size_t size) {
    const char *cmd = json_string_value(json_object_get(v, "command"));
    snprintf(bad, size, "command");
    if (cmd[0] != '/' && strchr(cmd, '/')) {
        return "must be an absolute path or a name looked up on the server's PATH";
    }
    const char *why = s_env(v, box, bad, size);
    return why ? why : s_sandbox(v, box, bad, size);
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
    s_box_t box = {0};
    char field[160] = "";
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
        if (!why && (json_object_get(v, "env") || json_object_get(v, "sandbox"))) {
            bad = NULL;
            why = "env and sandbox are for a stdio server (command)";
        }
    } else if ((why = s_stdio(v, &box, field, sizeof field))) {
        bad = field;
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
        s->network = box.network;
        for (s->env = 0; box.env[s->env]; s->env++) {
        }
        for (s->ro_paths = 0; box.ro[s->ro_paths]; s->ro_paths++) {
        }
        for (s->rw_paths = 0; box.rw[s->rw_paths]; s->rw_paths++) {
        }
        mcp_conf_t conf = {.name = name,
                           .command = json_string_value(cmd),
                           .args = argv,
                           .sandbox = {.mode = self->mode,
                                       .env = (const char *const *)box.env,
                                       .ro_paths = box.ro,
                                       .rw_paths = box.rw,
                                       .network = box.network},
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
    s_box_clear(&box);
    if (why) {
        return -1;
    }
    self->count++;
    return 0;
}

/* The sandbox's mode, and with a stdio server and the mode not off, whether bwrap works:
 * require without it is an error (no server may start unconfined). */
static int s_sandbox_check(mcpset_t *self, const json_t *servers, char *err, size_t size) {
    const char *key;
    json_t *v;
    bool stdio = false;
    json_object_foreach((json_t *)servers, key, v) {
        stdio = stdio || json_object_get(v, "command");
    }
    if (!stdio) {
        return 0;
    }
    sandbox_scratch_sweep();
    if (self->mode == SANDBOX_OFF) {
        return 0;
    }
    self->probed = true;
    self->usable = sandbox_usable(self->unusable, sizeof self->unusable);
    if (!self->usable && self->mode == SANDBOX_REQUIRE) {
        snprintf(err, size, "%s=require but the sandbox is not usable: %s", SANDBOX_ENV_MODE,
                 self->unusable);
        return -1;
    }
    return 0;
}

mcpset_t *mcpset_new(const char *path, char *err, size_t err_size) {
    mcpset_t *self = mem_calloc(1, sizeof *self);
    if (sandbox_mode_parse(getenv(SANDBOX_ENV_MODE), &self->mode) != 0) {
        snprintf(err, err_size, "%s=%s: must be auto, require or off", SANDBOX_ENV_MODE,
                 getenv(SANDBOX_ENV_MODE));
        mcpset_destroy(&self);
        return NULL;
    }
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
    } else {
        rc = s_sandbox_check(self, servers, err, err_size);
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
    log_info("mcp_config", "servers=%d mcp_sandbox=%s bwrap=\"%s\"", self->count,
             sandbox_mode_name(self->mode),
             !self->probed  ? "not used"
             : self->usable ? "usable"
                            : self->unusable);
    for (int i = 0; i < self->count; i++) {
        const s_server_t *s = &self->servers[i];
        if (s->http) {
            log_info("mcp_config", "server=%s timeout_ms=%lld transport=streamable-http", s->name,
                     (long long)s->timeout_ms);
            continue;
        }
        log_info("mcp_config",
                 "server=%s timeout_ms=%lld transport=stdio env=%d ro_paths=%d rw_paths=%d "
                 "network=%s",
                 s->name, (long long)s->timeout_ms, s->env, s->ro_paths, s->rw_paths,
                 s->network ? "shared" : "none");
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

/* Whether a tools/list entry says it changes nothing: annotations.readOnlyHint is true (MCP
 * 2025-06-18; a hint the server gives, absent meaning false). */
static bool s_read_only(const json_t *tool) {
    return json_is_true(json_object_get(json_object_get(tool, "annotations"), "readOnlyHint"));
}

json_t *mcpset_specs(mcpset_t *self, const json_t *enabled, bool read_only) {
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
            if (!s_name_ok(full, S_NAME_MAX, true) || (read_only && !s_read_only(t))) {
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
