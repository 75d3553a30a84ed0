/* ask: one turn from the command line; see ask.h. */
#include "ask.h"
#include "id.h"
#include "jsonout.h"
#include "jsonschema.h"
#include "jsonstrict.h"
#include "mem.h"
#include "clistream.h"
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASK_PRINTED_MAX 256 /* committed messages whose printed text is remembered */

typedef struct {
    int64_t id;
    char *text; /* what was printed for this message */
} s_printed_t;

typedef struct {
    client_t *client;
    const ask_opts_t *opts;
    char chat_id[ID_UUID_LEN + 1];
    jsonschema_t *compiled;
    bool structured;                  /* --schema was given */
    char request_id[ID_UUID_LEN + 1]; /* "" until known (a new chat's comes on the stream) */
    int64_t baseline;                 /* messages up to this id are not this turn's */
    int64_t user_id;                  /* our user message, 0 until it is seen */
    bool ran;                         /* the turn was seen running or answering */
    bool done;
    int rc;
    /* The text ledger: the current episode's streamed text and what has been printed since
     * the last committed assistant message, so a replay never prints twice. */
    char *episode;
    char *shown;
    int64_t part_hv;
    int64_t part_ga;
    s_printed_t printed[ASK_PRINTED_MAX];
    int nprinted;
    bool ends_newline;
    bool any_text;
    json_t *handled; /* tool_call_id -> true */
    char *last_text; /* the newest committed assistant message's text, or NULL */
} s_ask_t;

static char *s_cat(char *a, const char *b) {
    char *r = mem_printf("%s%s", a ? a : "", b);
    free(a);
    return r;
}

static bool s_prefix(const char *p, const char *s) {
    return strncmp(p, s, strlen(p)) == 0;
}

static void s_out(s_ask_t *a, const char *text) {
    if (!*text) {
        return;
    }
    fputs(text, stdout);
    fflush(stdout);
    a->any_text = true;
    a->ends_newline = text[strlen(text) - 1] == '\n';
}

/* Text goes to stdout unless the answer is a structured value and stdout is piped. */
static bool s_text_visible(const s_ask_t *a) {
    return a->opts->tty || !a->structured;
}

static void s_on_part(s_ask_t *a, json_t *data) {
    json_t *mp = json_object_get(data, "message_part");
    json_t *part = json_object_get(mp, "part");
    const char *role = json_string_value(json_object_get(mp, "role"));
    const char *text = json_string_value(json_object_get(part, "text"));
    int64_t hv = json_integer_value(json_object_get(mp, "history_version"));
    int64_t ga = json_integer_value(json_object_get(mp, "generation_attempt"));
    if (!a->user_id || !role || strcmp(role, "assistant") || !text) {
        return;
    }
    if (hv != a->part_hv || ga != a->part_ga) { /* another episode: its text starts over */
        free(a->episode);
        a->episode = NULL;
        a->part_hv = hv;
        a->part_ga = ga;
    }
    a->ran = true;
    a->episode = s_cat(a->episode, text);
    const char *shown = a->shown ? a->shown : "";
    if (s_prefix(shown, a->episode) && strlen(a->episode) > strlen(shown)) {
        if (s_text_visible(a)) {
            s_out(a, a->episode + strlen(shown));
        }
        free(a->shown);
        a->shown = mem_strdup(a->episode);
    }
}

static char *s_message_text(json_t *m) {
    char *t = mem_strdup("");
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(m, "content"), i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *text = json_string_value(json_object_get(p, "text"));
        if (type && !strcmp(type, "text") && text) {
            t = s_cat(t, text);
        }
    }
    return t;
}

static s_printed_t *s_printed(s_ask_t *a, int64_t id) {
    for (int i = 0; i < a->nprinted; i++) {
        if (a->printed[i].id == id) {
            return &a->printed[i];
        }
    }
    if (a->nprinted == ASK_PRINTED_MAX) {
        free(a->printed[0].text);
        memmove(a->printed, a->printed + 1, (ASK_PRINTED_MAX - 1) * sizeof a->printed[0]);
        a->nprinted--;
    }
    a->printed[a->nprinted] = (s_printed_t){id, NULL};
    return &a->printed[a->nprinted++];
}

/* A committed assistant message: print what the stream has not shown yet. */
static void s_on_assistant(s_ask_t *a, json_t *m) {
    a->ran = true;
    char *text = s_message_text(m);
    s_printed_t *p = s_printed(a, json_integer_value(json_object_get(m, "id")));
    const char *before = p->text ? p->text : (a->shown ? a->shown : "");
    if (s_prefix(before, text)) {
        if (s_text_visible(a)) {
            s_out(a, text + strlen(before));
        }
    } /* else a rewrite that deltas cannot express: suppressed (cli/README.md) */
    free(a->last_text);
    a->last_text = mem_strdup(text);
    free(p->text);
    p->text = text;
    free(a->shown);
    a->shown = NULL;
    free(a->episode);
    a->episode = NULL;
    if (a->opts->tty) {
        size_t i;
        json_t *part;
        json_array_foreach(json_object_get(m, "content"), i, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            if (type && !strcmp(type, "tool-call")) {
                const char *name = json_string_value(json_object_get(part, "tool_name"));
                fprintf(stdout, "%s[tool call: %s]\n", a->ends_newline || !a->any_text ? "" : "\n",
                        name ? name : "?");
                a->ends_newline = true;
            }
        }
    }
}

static void s_finish_line(s_ask_t *a) {
    if (a->any_text && !a->ends_newline) {
        fputc('\n', stdout);
        a->ends_newline = true;
    }
}

/* In native structured mode the model's answer is the JSON value itself, already printed as
 * it streamed: on a terminal it is not printed a second time as the fenced block. True when
 * the newest committed assistant text is exactly that value (read through the strict
 * boundary). */
static bool s_shown_as_text(const s_ask_t *a, json_t *value) {
    json_t *shown = NULL;
    if (!a->last_text ||
        jsonstrict_parse(a->last_text, strlen(a->last_text), NULL, &shown, NULL) != 0) {
        return false;
    }
    bool same = json_equal(shown, value);
    json_decref(shown);
    return same;
}

static void s_on_receipt(s_ask_t *a, json_t *so) {
    const char *status = json_string_value(json_object_get(so, "status"));
    /* {"error":{"code","message"}}; a receipt written before that shape has "code" only. */
    json_t *error = json_object_get(so, "error");
    const char *code = json_string_value(json_object_get(error, "code"));
    const char *message = json_string_value(json_object_get(error, "message"));
    code = code ? code : json_string_value(json_object_get(so, "code"));
    json_t *value = json_object_get(so, "value");
    a->done = true;
    if (status && !strcmp(status, "succeeded") && value) {
        jsonschema_report_t report;
        if (a->compiled && jsonschema_validate(a->compiled, value, JSONSCHEMA_FAIL_FAST, &report) !=
                               JSONSCHEMA_VALID) {
            fprintf(stderr, "chatfleet: invalid_value: the value fails the schema at %s: %s\n",
                    report.count ? report.items[0].instance_path : "",
                    report.count ? report.items[0].message : "");
            a->rc = ASK_FAILED;
            return;
        }
        char *text = jsonout_dumps(value);
        if (a->opts->tty) {
            s_finish_line(a);
            if (!s_shown_as_text(a, value)) {
                fprintf(stdout, "```json\n%s\n```\n", text);
            }
        } else {
            fprintf(stdout, "%s\n", text);
        }
        fflush(stdout);
        free(text);
        a->rc = ASK_OK;
        return;
    }
    bool canceled = status && !strcmp(status, "canceled");
    s_finish_line(a);
    fprintf(stderr, "chatfleet: structured output %s: %s%s%s\n", canceled ? "canceled" : "failed",
            code ? code : "unknown", message ? ": " : "", message ? message : "");
    a->rc = canceled ? ASK_CANCELED : ASK_FAILED;
}

/* Our user message is the first user message after the baseline that carries our request. */
static void s_on_user(s_ask_t *a, json_t *m, int64_t id) {
    const char *rid = json_string_value(json_object_get(m, "structured_output_request_id"));
    if (a->user_id || id <= a->baseline) {
        return;
    }
    if (!a->structured || !a->request_id[0] || (rid && !strcmp(rid, a->request_id))) {
        a->user_id = id;
        if (a->structured && !a->request_id[0] && rid && id_uuid_valid(rid)) {
            snprintf(a->request_id, sizeof a->request_id, "%s", rid);
        }
    }
}

static void s_on_message(s_ask_t *a, json_t *data, int64_t id) {
    json_t *m = json_object_get(data, "message");
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *so = json_object_get(m, "structured_output");
    const char *rid = json_string_value(json_object_get(so, "request_id"));
    if (!role) {
        return;
    }
    if (so && a->request_id[0] && rid && !strcmp(rid, a->request_id)) {
        s_on_receipt(a, so);
    } else if (!strcmp(role, "user")) {
        s_on_user(a, m, id);
    } else if (!strcmp(role, "assistant") && !so && a->user_id && id > a->user_id) {
        s_on_assistant(a, m);
    }
}

static void s_post_results(s_ask_t *a, json_t *results) {
    char *path = mem_printf("/api/v2/chats/%s/tool-results", a->chat_id);
    json_t *body = json_pack("{s:O}", "results", results);
    json_t *out = NULL;
    long st = client_call(a->client, "POST", path, body, &out);
    if (st != 204 && st != 200) {
        client_print_error("tool-results", st, out);
    }
    json_decref(out);
    json_decref(body);
    free(path);
}

static const char *s_command(const s_ask_t *a, const char *name) {
    for (int i = 0; name && i < a->opts->ntools; i++) {
        if (!strcmp(a->opts->tools[i].name, name)) {
            return a->opts->tools[i].command;
        }
    }
    return NULL;
}

static void s_on_action(s_ask_t *a, json_t *data) {
    json_t *results = json_array();
    size_t i;
    json_t *call;
    json_array_foreach(json_object_get(json_object_get(data, "action_required"), "tool_calls"), i,
                       call) {
        const char *id = json_string_value(json_object_get(call, "tool_call_id"));
        const char *name = json_string_value(json_object_get(call, "tool_name"));
        const char *args = json_string_value(json_object_get(call, "args"));
        if (!id || json_object_get(a->handled, id)) {
            continue;
        }
        json_object_set_new(a->handled, id, json_true());
        const char *cmd = s_command(a, name);
        bool is_error = true;
        json_t *out = cmd ? tool_run(cmd, args ? args : "{}", &is_error)
                          : json_string("no local command handles this tool");
        if (a->opts->tty) {
            s_finish_line(a);
            fprintf(stdout, "[ran %s%s]\n", name ? name : "?", is_error ? ": error" : "");
        }
        json_array_append_new(results, json_pack("{s:s,s:o,s:b}", "tool_call_id", id, "output", out,
                                                 "is_error", is_error));
    }
    if (json_array_size(results) > 0) {
        s_post_results(a, results);
    }
    json_decref(results);
}

static void s_on_status(s_ask_t *a, json_t *data) {
    const char *st = json_string_value(json_object_get(json_object_get(data, "status"), "status"));
    if (!st || !a->user_id) {
        return;
    }
    bool terminal = !strcmp(st, "waiting") || !strcmp(st, "error");
    if (!terminal) {
        a->ran = true;
        return;
    }
    /* A waiting status before anything of the turn was seen is not its end; an error is,
     * once our message is in history (a model that fails at once can end the turn before
     * the stream's first read, so no running status is ever seen). */
    if (!a->ran && strcmp(st, "error") != 0) {
        return;
    }
    a->done = true;
    if (a->structured) {
        /* The receipt commits with the turn's end and is sent before the status. */
        fprintf(stderr, "chatfleet: structured output failed: no_receipt (the turn ended"
                        " without one)\n");
        a->rc = ASK_FAILED;
    } else if (!strcmp(st, "error")) {
        a->rc = ASK_FAILED;
    }
}

static void s_print_error(s_ask_t *a, json_t *e) {
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *kind = json_string_value(json_object_get(e, "kind"));
    s_finish_line(a);
    fprintf(stderr, "chatfleet: the turn failed: %s%s%s\n", kind ? kind : "error", msg ? ": " : "",
            msg ? msg : "");
}

static bool s_on_event(void *ctx, const char *type, json_t *data, int64_t id) {
    s_ask_t *a = ctx;
    if (!strcmp(type, "message")) {
        s_on_message(a, data, id);
    } else if (!strcmp(type, "message_part")) {
        s_on_part(a, data);
    } else if (!strcmp(type, "action_required")) {
        s_on_action(a, data);
    } else if (!strcmp(type, "status")) {
        s_on_status(a, data);
    } else if (!strcmp(type, "preview_reset")) {
        free(a->episode);
        a->episode = NULL;
    }
    return a->done;
}

json_t *ask_load_schema(const char *arg) {
    const char *p = arg;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
        p++;
    }
    char *text = NULL;
    size_t len = 0;
    if (*p == '{' || *p == '[' || !strcmp(p, "true") || !strcmp(p, "false")) {
        text = mem_strdup(arg);
        len = strlen(text);
    } else {
        FILE *f = !strcmp(arg, "-") ? stdin : fopen(arg, "rb");
        if (!f) {
            fprintf(stderr, "chatfleet: --schema %s: cannot be read\n", arg);
            return NULL;
        }
        /* One byte past the cap, so the boundary reports an oversized file as such. */
        text = mem_alloc(JSONSTRICT_SCHEMA_MAX_BYTES + 2);
        len = fread(text, 1, JSONSTRICT_SCHEMA_MAX_BYTES + 1, f);
        if (f != stdin) {
            fclose(f);
        }
    }
    json_t *schema = NULL;
    jsonstrict_error_t err;
    if (jsonstrict_parse(text, len, &jsonstrict_limits_schema, &schema, &err) != 0) {
        fprintf(stderr, "chatfleet: --schema: %s (at byte %zu, %s)\n", err.message, err.offset,
                err.path[0] ? err.path : "/");
    }
    free(text);
    return schema;
}

/* The body of a create or send: content, response_format and (create) dynamic tools. */
static json_t *s_body(const ask_opts_t *o, json_t *schema, bool create) {
    json_t *body = json_pack("{s:[{s:s,s:s}]}", "content", "type", "text", "text", o->prompt);
    if (o->model) {
        json_object_set_new(body, "model", json_string(o->model));
    }
    if (create && o->system) {
        json_object_set_new(body, "system_prompt", json_string(o->system));
    }
    if (schema) {
        json_object_set_new(body, "response_format",
                            json_pack("{s:s,s:{s:s,s:O}}", "type", "json_schema", "json_schema",
                                      "name", "cli_result", "schema", schema));
    }
    if (create && o->ntools > 0) {
        json_t *tools = json_array();
        for (int i = 0; i < o->ntools; i++) {
            char *d = mem_printf("Runs `%s` on the user's machine: the arguments on its stdin,"
                                 " its stdout is the result.",
                                 o->tools[i].command);
            json_array_append_new(tools,
                                  json_pack("{s:s,s:s,s:{s:s}}", "name", o->tools[i].name,
                                            "description", d, "input_schema", "type", "object"));
            free(d);
        }
        json_object_set_new(body, "dynamic_tools", tools);
    }
    return body;
}

static void s_take_request_id(s_ask_t *a, json_t *m) {
    const char *rid = json_string_value(json_object_get(m, "structured_output_request_id"));
    if (rid && id_uuid_valid(rid)) {
        snprintf(a->request_id, sizeof a->request_id, "%s", rid);
    }
}

/* Creates the chat; its user message (and request id) is the first on the stream. */
static int s_create(s_ask_t *a, json_t *body) {
    json_t *out = NULL;
    long st = client_call(a->client, "POST", "/api/v2/chats", body, &out);
    const char *id = json_string_value(json_object_get(out, "id"));
    if (st != 201 || !id || !id_uuid_valid(id)) {
        client_print_error("create chat", st, out);
        json_decref(out);
        return -1;
    }
    snprintf(a->chat_id, sizeof a->chat_id, "%s", id);
    json_decref(out);
    return 0;
}

/* Sends to an existing chat; a queued message becomes ours when it is promoted. */
static int s_send(s_ask_t *a, json_t *body) {
    char *path = mem_printf("/api/v2/chats/%s/messages?limit=1", a->chat_id);
    json_t *out = NULL;
    long st = client_call(a->client, "GET", path, NULL, &out);
    free(path);
    if (st != 200) {
        client_print_error("read chat", st, out);
        json_decref(out);
        return -1;
    }
    a->baseline = json_integer_value(
        json_object_get(json_array_get(json_object_get(out, "messages"), 0), "id"));
    json_decref(out);
    path = mem_printf("/api/v2/chats/%s/messages", a->chat_id);
    st = client_call(a->client, "POST", path, body, &out);
    free(path);
    if (st != 200) {
        client_print_error("send", st, out);
        json_decref(out);
        return -1;
    }
    json_t *m = json_object_get(out, "message");
    if (m) {
        a->user_id = json_integer_value(json_object_get(m, "id"));
        s_take_request_id(a, m);
    } else {
        s_take_request_id(a, json_object_get(out, "queued_message"));
    }
    json_decref(out);
    return 0;
}

/* After an error status: the chat's last_error says why. */
static void s_report_error(s_ask_t *a) {
    char *path = mem_printf("/api/v2/chats/%s", a->chat_id);
    json_t *out = NULL;
    if (client_call(a->client, "GET", path, NULL, &out) == 200) {
        s_print_error(a, json_object_get(out, "last_error"));
    }
    json_decref(out);
    free(path);
}

static void s_interrupt(s_ask_t *a) {
    char *path = mem_printf("/api/v2/chats/%s/interrupt", a->chat_id);
    json_t *out = NULL;
    long st = client_call(a->client, "POST", path, NULL, &out);
    if (st != 200) {
        client_print_error("interrupt", st, out);
    }
    fprintf(stderr, "chatfleet: interrupted (chat %s)\n", a->chat_id);
    json_decref(out);
    free(path);
}

static int s_follow(s_ask_t *a, volatile sig_atomic_t *cancel) {
    char *path = mem_printf("/api/v2/chats/%s/stream", a->chat_id);
    clistream_t *s =
        clistream_new(a->client, path, a->user_id ? a->user_id - 1 : a->baseline, cancel);
    free(path);
    clistream_end_t end = clistream_run(s, s_on_event, a);
    clistream_destroy(&s);
    if (end == CLISTREAM_CANCELLED) {
        s_interrupt(a);
        return ASK_INTERRUPTED;
    }
    if (end != CLISTREAM_STOPPED) {
        return ASK_TRANSPORT;
    }
    s_finish_line(a);
    if (a->rc == ASK_FAILED && !a->structured) {
        s_report_error(a);
    }
    return a->rc;
}

static void s_free(s_ask_t *a) {
    for (int i = 0; i < a->nprinted; i++) {
        free(a->printed[i].text);
    }
    free(a->episode);
    free(a->last_text);
    free(a->shown);
    json_decref(a->handled);
    jsonschema_destroy(&a->compiled);
}

/* -v: the chat's usage totals (GET /chats/{id}/usage) as one line on stderr. */
static void s_print_usage(s_ask_t *a) {
    char *path = mem_printf("/api/v2/chats/%s/usage", a->chat_id);
    json_t *u = NULL;
    long st = client_call(a->client, "GET", path, NULL, &u);
    if (st == 200) {
        fprintf(stderr, "usage: chat=%s", a->chat_id);
        const char *keys[] = {"messages",
                              "input_tokens",
                              "output_tokens",
                              "cache_read_tokens",
                              "cache_creation_tokens",
                              "reasoning_tokens",
                              "total_cost_micros",
                              NULL};
        for (int k = 0; keys[k]; k++) {
            fprintf(stderr, " %s=%lld", keys[k],
                    (long long)json_integer_value(json_object_get(u, keys[k])));
        }
        fputc('\n', stderr);
    } else {
        client_print_error("usage", st, u);
    }
    json_decref(u);
    free(path);
}

int ask_run(client_t *client, const ask_opts_t *opts, volatile sig_atomic_t *cancel) {
    s_ask_t a = {.client = client,
                 .opts = opts,
                 .structured = opts->schema != NULL,
                 .rc = ASK_OK,
                 .handled = json_object()};
    json_t *schema = NULL;
    if (opts->schema) {
        jsonschema_error_t err;
        if (!(schema = ask_load_schema(opts->schema))) {
            s_free(&a);
            return ASK_USAGE;
        }
        if (jsonschema_compile(schema, &a.compiled, &err) != 0) {
            fprintf(stderr, "chatfleet: --schema: %s at %s\n", err.message,
                    err.schema_path[0] ? err.schema_path : "/");
            json_decref(schema);
            s_free(&a);
            return ASK_USAGE;
        }
    }
    if (upload_check(&opts->files) != 0) {
        json_decref(schema);
        s_free(&a);
        return ASK_USAGE;
    }
    if (opts->chat_id) {
        snprintf(a.chat_id, sizeof a.chat_id, "%s", opts->chat_id);
    }
    json_t *body = s_body(opts, schema, !opts->chat_id);
    int rc = ASK_TRANSPORT;
    if (upload_all(client, &opts->files, json_object_get(body, "content")) == 0 &&
        (opts->chat_id ? s_send(&a, body) : s_create(&a, body)) == 0) {
        rc = s_follow(&a, cancel);
    }
    if (opts->verbose && a.chat_id[0]) {
        s_print_usage(&a);
    }
    json_decref(body);
    json_decref(schema);
    s_free(&a);
    return rc;
}
