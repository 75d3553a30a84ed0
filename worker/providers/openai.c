/* openai: see openai.h; the wire format is in worker/providers/README.md. */
#include "openai.h"
#include "dynbuf.h"
#include "httpstream.h"
#include "usage.h"
#include "jsonout.h"
#include "mem.h"

#include <stdlib.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* --- Request. --- */

/* One part of a user message that holds files, as a content part (NULL: not sent). */
static json_t *s_user_part(const json_t *p) {
    char *text = NULL;
    json_t *c = NULL;
    switch (httpstream_user_part(p, HTTPSTREAM_TAKES_IMAGE | HTTPSTREAM_TAKES_PDF)) {
        case HTTPSTREAM_PART_TEXT:
            return json_pack("{s:s, s:s}", "type", "text", "text", s_str(p, "text"));
        case HTTPSTREAM_PART_IMAGE:
            text = httpstream_data_url(p);
            c = json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", text);
            break;
        case HTTPSTREAM_PART_PDF:
            text = httpstream_data_url(p);
            c = json_pack("{s:s, s:{s:s, s:s}}", "type", "file", "file", "filename",
                          s_str(p, "name"), "file_data", text);
            break;
        case HTTPSTREAM_PART_PLACEHOLDER:
            text = httpstream_file_placeholder(p);
            c = json_pack("{s:s, s:s}", "type", "text", "text", text);
            break;
        case HTTPSTREAM_PART_SKIP:
            break;
    }
    free(text);
    return c;
}

/* A user message: its text as a string, or content parts in order when it holds a file. */
static json_t *s_user(const json_t *msg) {
    if (!httpstream_has_files(msg)) {
        char *text = httpstream_text_of(msg);
        json_t *m = json_pack("{s:s, s:s}", "role", "user", "content", text);
        free(text);
        return m;
    }
    json_t *content = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        json_t *c = s_user_part(p);
        if (c) {
            json_array_append_new(content, c);
        }
    }
    return json_pack("{s:s, s:o}", "role", "user", "content", content); /* o steals content */
}

/* The argument text of a history tool call: what the model wrote when it was not JSON. */
static char *s_args_text(const json_t *part) {
    const char *raw = json_string_value(json_object_get(part, "args_text"));
    if (raw) {
        return mem_strdup(raw);
    }
    const json_t *args = json_object_get(part, "args");
    return args ? jsonout_dumps(args) : mem_strdup("{}");
}

static json_t *s_assistant(const json_t *msg) {
    char *text = httpstream_text_of(msg);
    json_t *calls = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        if (strcmp(s_str(p, "type"), "tool-call")) {
            continue; /* Chat Completions takes no reasoning back */
        }
        char *args = s_args_text(p);
        json_array_append_new(calls,
                              json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", s_str(p, "tool_call_id"),
                                        "type", "function", "function", "name",
                                        s_str(p, "tool_name"), "arguments", args));
        free(args);
    }
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(m, "content",
                        text[0] || !json_array_size(calls) ? json_string(text) : json_null());
    if (json_array_size(calls)) {
        json_object_set_new(m, "tool_calls", calls);
    } else {
        json_decref(calls);
    }
    free(text);
    return m;
}

/* Appends one "tool" message per result of a history tool message. */
static void s_tool_results(json_t *out, const json_t *msg) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        if (strcmp(s_str(p, "type"), "tool-result")) {
            continue;
        }
        char *text = httpstream_result_text(p);
        json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
                                             s_str(p, "tool_call_id"), "content", text));
        free(text);
    }
}

static json_t *s_body(const provider_request_t *req) {
    json_t *body = json_pack(
        "{s:s, s:o, s:b}", "model", req->model->model ? req->model->model : "", "messages",
        httpstream_chat_messages(req->messages, s_user, s_assistant, s_tool_results), "stream",
        !req->summary);
    if (!req->summary) {
        json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    if (json_array_size(req->tools) > 0) {
        json_object_set_new(body, "tools", httpstream_function_tools(req->tools));
    }
    if (req->native_schema) {
        /* Not strict: strict mode accepts only a subset of JSON Schema (every property
         * required, additionalProperties false), and the worker validates the value itself.
         * "O" takes a new reference to the borrowed schema. */
        const char *name = req->native_name && req->native_name[0] ? req->native_name : "output";
        json_object_set_new(body, "response_format",
                            json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema",
                                      "name", name, "schema", req->native_schema));
    }
    if (req->reasoning_effort) {
        /* The Chat Completions field takes the whole scale as it is, none to max
         * (provider-wire.md §1.1); a model refuses a value it lacks with a 400, which the
         * config's max is there to prevent. */
        json_object_set_new(body, "reasoning_effort", json_string(req->reasoning_effort));
    }
    return body;
}

/* --- Stream. --- */

typedef struct {
    char id[128];
    char name[128];
    dynbuf_t args; /* at most OPENAI_ARGS_MAX_BYTES */
    bool used;
} s_call_t;

typedef struct {
    provider_part_fn *on_part;
    void *ctx;
    provider_result_t *out;
    dynbuf_t text;    /* at most OPENAI_TEXT_MAX_BYTES */
    s_call_t **calls; /* by index, made on first use: most replies have none (a pointer array of
                         64 in every call's state was 512 bytes a stream in flight) */
    size_t ncalls;    /* slots in calls, at most OPENAI_TOOL_CALLS_MAX */
    json_t *usage;
    bool finished; /* finish_reason seen */
} s_state_t;

static httpstream_verdict_t s_fail(s_state_t *st, const char *what) {
    (void)provider_fail(st->out, 0, true, -1, "openai: protocol: %s", what);
    return HTTPSTREAM_ABORT;
}

static httpstream_verdict_t s_text(s_state_t *st, const char *delta) {
    if (!delta[0]) {
        return HTTPSTREAM_CONTINUE;
    }
    if (dynbuf_add(&st->text, delta, strlen(delta)) != 0) {
        return s_fail(st, "reply text over its cap");
    }
    json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", delta);
    httpstream_emit(st->on_part, st->ctx, part);
    json_decref(part);
    return HTTPSTREAM_CONTINUE;
}

static httpstream_verdict_t s_call_delta(s_state_t *st, const json_t *tc) {
    json_int_t index = json_integer_value(json_object_get(tc, "index"));
    if (!json_is_integer(json_object_get(tc, "index")) || index < 0 ||
        index >= OPENAI_TOOL_CALLS_MAX) {
        return s_fail(st, "tool call index missing or out of range");
    }
    if ((size_t)index >= st->ncalls) {
        st->calls = mem_realloc(st->calls, ((size_t)index + 1) * sizeof *st->calls);
        memset(st->calls + st->ncalls, 0, ((size_t)index + 1 - st->ncalls) * sizeof *st->calls);
        st->ncalls = (size_t)index + 1;
    }
    if (!st->calls[index]) {
        st->calls[index] = mem_calloc(1, sizeof(s_call_t));
        dynbuf_init(&st->calls[index]->args, OPENAI_ARGS_MAX_BYTES);
    }
    s_call_t *c = st->calls[index];
    c->used = true;
    const char *id = json_string_value(json_object_get(tc, "id"));
    const json_t *fn = json_object_get(tc, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    if (id && id[0]) {
        snprintf(c->id, sizeof c->id, "%s", id);
    }
    if (name && name[0]) {
        snprintf(c->name, sizeof c->name, "%s", name);
    }
    if (args && dynbuf_add(&c->args, args, strlen(args)) != 0) {
        return s_fail(st, "tool call arguments over their cap");
    }
    return HTTPSTREAM_CONTINUE;
}

static httpstream_verdict_t s_choice(s_state_t *st, const json_t *choice) {
    const json_t *delta = json_object_get(choice, "delta");
    const char *text = json_string_value(json_object_get(delta, "content"));
    const char *refusal = json_string_value(json_object_get(delta, "refusal"));
    httpstream_verdict_t v = HTTPSTREAM_CONTINUE;
    /* A refusal is shown to the user like text (worker/providers/README.md). */
    if (text) {
        v = s_text(st, text);
    }
    if (v == HTTPSTREAM_CONTINUE && refusal) {
        v = s_text(st, refusal);
    }
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc) {
        if (v == HTTPSTREAM_CONTINUE) {
            v = s_call_delta(st, tc);
        }
    }
    if (json_is_string(json_object_get(choice, "finish_reason"))) {
        st->finished = true;
        const char *reason = json_string_value(json_object_get(choice, "finish_reason"));
        httpstream_stop_reason(st->out, reason ? reason : "stop");
    }
    return v;
}

static httpstream_verdict_t s_on_event(void *arg, const char *event, const char *data, size_t len) {
    s_state_t *st = arg;
    if (!strncmp(data, "[DONE]", 6)) {
        return HTTPSTREAM_DONE;
    }
    json_t *chunk = httpstream_parse_event("openai", data, len);
    if (!json_is_object(chunk)) {
        json_decref(chunk);
        return s_fail(st, "a data event that is not a JSON object");
    }
    httpstream_verdict_t v = HTTPSTREAM_CONTINUE;
    const json_t *err = json_object_get(chunk, "error");
    if (err && !json_is_null(err)) {
        v = httpstream_stream_error("openai", err, st->out);
    }
    /* Only the first choice: chatfleet never asks for n > 1. */
    const json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    if (v == HTTPSTREAM_CONTINUE && json_is_object(choice)) {
        v = s_choice(st, choice);
    }
    const json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage)) {
        json_decref(st->usage);
        usage_t u = usage_openai(usage);
        st->usage = usage_json(&u);
    }
    json_decref(chunk);
    return v;
}

/* A non-streaming reply (a summary call, provider.h): one chat.completion object. Its text is
 * kept, not streamed; a summary offers no tools, so tool calls are not read. */
static httpstream_verdict_t s_on_whole(void *arg, const char *event, const char *data, size_t len) {
    (void)event;
    s_state_t *st = arg;
    json_t *doc = httpstream_parse_event("openai", data, len);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return s_fail(st, "a response that is not a JSON object");
    }
    httpstream_verdict_t v = HTTPSTREAM_DONE;
    const json_t *err = json_object_get(doc, "error");
    const json_t *choice = json_array_get(json_object_get(doc, "choices"), 0);
    const json_t *msg = json_object_get(choice, "message");
    const char *text = json_string_value(json_object_get(msg, "content"));
    if (err && !json_is_null(err)) {
        v = httpstream_stream_error("openai", err, st->out);
    } else if (!json_is_object(msg)) {
        v = s_fail(st, "a response without choices[0].message");
    } else if (text && dynbuf_add(&st->text, text, strlen(text)) != 0) {
        v = s_fail(st, "reply text over its cap");
    } else {
        const char *reason = json_string_value(json_object_get(choice, "finish_reason"));
        httpstream_stop_reason(st->out, reason ? reason : "stop");
        const json_t *usage = json_object_get(doc, "usage");
        usage_t u = usage_openai(usage);
        st->usage = json_is_object(usage) ? usage_json(&u) : NULL;
    }
    json_decref(doc);
    return v;
}

/* The reply's parts: its text, then its tool calls in index order, each emitted whole. */
static json_t *s_content(s_state_t *st) {
    json_t *content = json_array();
    if (st->text.len > 0) {
        json_array_append_new(
            content, json_pack("{s:s, s:s%}", "type", "text", "text", st->text.data, st->text.len));
    }
    for (size_t i = 0; i < st->ncalls; i++) {
        s_call_t *c = st->calls[i];
        if (!c || !c->used) {
            continue;
        }
        char fresh[HTTPSTREAM_CALL_ID_BYTES];
        if (!c->id[0]) {
            httpstream_call_id(fresh);
        }
        json_t *part = httpstream_tool_call(c->id[0] ? c->id : fresh, c->name, dynbuf_str(&c->args),
                                            c->args.len);
        httpstream_emit(st->on_part, st->ctx, part);
        json_array_append_new(content, part);
    }
    return content;
}

static void s_state_free(void *arg) {
    s_state_t *st = arg;
    dynbuf_free(&st->text);
    for (size_t i = 0; i < st->ncalls; i++) {
        if (st->calls[i]) {
            dynbuf_free(&st->calls[i]->args);
            free(st->calls[i]);
        }
    }
    free(st->calls);
    json_decref(st->usage);
    free(st);
}

static void s_ok(void *arg, provider_result_t *out) {
    s_state_t *st = arg;
    out->content = s_content(st);
    out->usage = st->usage;
    st->usage = NULL;
}

static void *s_state_new(provider_call_t *call) {
    s_state_t *st = mem_calloc(1, sizeof *st);
    *st = (s_state_t){.on_part = call->on_part, .ctx = call->part_ctx, .out = &call->out};
    dynbuf_init(&st->text, OPENAI_TEXT_MAX_BYTES); /* after the literal, which zeroes it */
    return st;
}

const netprovider_spec_t openai_spec = {
    .name = "openai",
    .base_url_default = OPENAI_BASE_URL_DEFAULT,
    .path = "/chat/completions",
    .key_name = "Authorization",
    .key_prefix = "Bearer ",
    .accept_stream = "Accept: text/event-stream",
    .accept_whole = "Accept: application/json",
    .stream_mode = HTTPSTREAM_SSE,
    .body = s_body,
    .state_new = s_state_new,
    .state_free = s_state_free,
    .on_event = s_on_event,
    .on_whole = s_on_whole,
    .ok = s_ok,
};
