/* ollama: see ollama.h; the wire format is in worker/providers/README.md. */
#include "ollama.h"
#include "jsonnumber.h"
#include "dynbuf.h"
#include "httpstream.h"
#include "usage.h"
#include "jsonout.h"
#include "mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* --- Request. --- */

/* Appends a user message's part to its text or images. Ollama takes no PDF: a file it does
 * not take becomes a placeholder on a line of its own (*note: the text ends with one). */
static void s_user_part(const json_t *p, dynbuf_t *text, json_t *images, bool *note) {
    httpstream_part_kind_t kind = httpstream_user_part(p, HTTPSTREAM_TAKES_IMAGE);
    if (kind == HTTPSTREAM_PART_IMAGE) {
        json_array_append_new(images, json_string(s_str(p, "data")));
    } else if (kind == HTTPSTREAM_PART_TEXT) {
        const char *t = s_str(p, "text");
        if (*note && t[0]) {
            (void)dynbuf_add(text, "\n", 1);
        }
        (void)dynbuf_add(text, t, strlen(t));
        *note = *note && !t[0];
    } else if (kind == HTTPSTREAM_PART_PLACEHOLDER) {
        char *t = httpstream_file_placeholder(p);
        if (text->len > 0) {
            (void)dynbuf_add(text, "\n", 1);
        }
        (void)dynbuf_add(text, t, strlen(t));
        free(t);
        *note = true;
    }
}

/* A user message: its text in content and its images (raw base64) in images. */
static json_t *s_user(const json_t *msg) {
    dynbuf_t text;
    dynbuf_init(&text, SIZE_MAX / 2); /* uncapped: the history it copies is already in memory */
    json_t *images = json_array();
    bool note = false;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        s_user_part(p, &text, images, &note);
    }
    json_t *m = json_pack("{s:s, s:s%}", "role", "user", "content", dynbuf_str(&text), text.len);
    dynbuf_free(&text);
    if (json_array_size(images) > 0) {
        json_object_set_new(m, "images", images); /* steals images */
    } else {
        json_decref(images);
    }
    return m;
}

static json_t *s_assistant(const json_t *msg) {
    char *text = httpstream_text_of(msg);
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", text);
    free(text);
    json_t *calls = json_array();
    dynbuf_t thinking;
    dynbuf_init(&thinking, OLLAMA_TEXT_MAX_BYTES);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        const char *type = s_str(p, "type");
        if (!strcmp(type, "reasoning")) {
            const char *t = s_str(p, "text");
            (void)dynbuf_add(&thinking, t, strlen(t));
        } else if (!strcmp(type, "tool-call")) {
            const json_t *args = json_object_get(p, "args");
            json_array_append_new(calls,
                                  json_pack("{s:s, s:{s:s, s:O}}", "id", s_str(p, "tool_call_id"),
                                            "function", "name", s_str(p, "tool_name"), "arguments",
                                            json_is_object(args) ? args : json_object()));
        }
    }
    if (thinking.len > 0) {
        json_object_set_new(m, "thinking", json_stringn(thinking.data, thinking.len));
    }
    dynbuf_free(&thinking);
    if (json_array_size(calls)) {
        json_object_set_new(m, "tool_calls", calls);
    } else {
        json_decref(calls);
    }
    return m;
}

static void s_tool_results(json_t *out, const json_t *msg) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        if (strcmp(s_str(p, "type"), "tool-result")) {
            continue;
        }
        char *text = httpstream_result_text(p);
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s}", "role", "tool", "tool_name",
                                             s_str(p, "tool_name"), "tool_call_id",
                                             s_str(p, "tool_call_id"), "content", text));
        free(text);
    }
}

/* "think" for an effort (provider.h): false for none; for the models that take a level (their
 * name begins with OLLAMA_THINK_LEVELS_PREFIX) the nearest of "low", "medium" and "high";
 * true for any other. */
static json_t *s_think(const provider_request_t *req) {
    const char *e = req->reasoning_effort;
    if (!strcmp(e, "none")) {
        return json_false();
    }
    const char *model = req->model->model ? req->model->model : "";
    if (strncmp(model, OLLAMA_THINK_LEVELS_PREFIX, strlen(OLLAMA_THINK_LEVELS_PREFIX)) != 0) {
        return json_true();
    }
    bool low = !strcmp(e, "minimal") || !strcmp(e, "low");
    return json_string(low ? "low" : !strcmp(e, "medium") ? "medium" : "high");
}

static json_t *s_body(const provider_request_t *req) {
    json_t *body = json_pack(
        "{s:s, s:o, s:b}", "model", req->model->model ? req->model->model : "", "messages",
        httpstream_chat_messages(req->messages, s_user, s_assistant, s_tool_results), "stream",
        !req->summary);
    if (json_array_size(req->tools) > 0) {
        json_object_set_new(body, "tools", httpstream_function_tools(req->tools));
    }
    if (req->native_schema) {
        /* Ollama takes the schema itself as "format" (a copy: the request borrows it). */
        json_object_set_new(body, "format", jsonnumber_deep_copy(req->native_schema));
    }
    if (req->reasoning_effort) {
        json_object_set_new(body, "think", s_think(req));
    }
    return body;
}

/* --- Stream. --- */

typedef struct {
    provider_part_fn *on_part;
    void *ctx;
    provider_result_t *out;
    dynbuf_t text;     /* at most OLLAMA_TEXT_MAX_BYTES */
    dynbuf_t thinking; /* at most OLLAMA_TEXT_MAX_BYTES */
    json_t *reasoning; /* owned: the reasoning part, once its thinking has ended */
    json_t *calls;     /* owned: the tool-call parts so far */
    json_t *usage;     /* owned */
} s_state_t;

static httpstream_verdict_t s_fail(s_state_t *st, const char *what) {
    (void)provider_fail(st->out, 0, true, -1, "ollama: protocol: %s", what);
    return HTTPSTREAM_ABORT;
}

/* Thinking comes before the answer: the first text or tool call (or the end) closes it. */
static void s_close_thinking(s_state_t *st) {
    if (st->reasoning || st->thinking.len == 0) {
        return;
    }
    st->reasoning =
        json_pack("{s:s, s:s%}", "type", "reasoning", "text", st->thinking.data, st->thinking.len);
    httpstream_emit(st->on_part, st->ctx, st->reasoning);
}

static httpstream_verdict_t s_tool_call(s_state_t *st, const json_t *tc) {
    if (json_array_size(st->calls) >= OLLAMA_TOOL_CALLS_MAX) {
        return s_fail(st, "too many tool calls");
    }
    const json_t *fn = json_object_get(tc, "function");
    const json_t *args = json_object_get(fn, "arguments");
    /* The arguments arrive parsed; they are rewritten and read back so that the same
     * jsonstrict caps apply as for the providers that stream argument text. */
    char *text = json_is_string(args) ? mem_strdup(json_string_value(args))
                 : args               ? jsonout_dumps(args)
                                      : mem_strdup("");
    char fresh[HTTPSTREAM_CALL_ID_BYTES];
    const char *id = s_str(tc, "id");
    if (!id[0]) {
        httpstream_call_id(fresh);
        id = fresh;
    }
    json_t *part = httpstream_tool_call(id, s_str(fn, "name"), text, strlen(text));
    free(text);
    httpstream_emit(st->on_part, st->ctx, part);
    json_array_append_new(st->calls, part);
    return HTTPSTREAM_CONTINUE;
}

static httpstream_verdict_t s_message(s_state_t *st, const json_t *msg) {
    const char *thinking = s_str(msg, "thinking");
    const char *content = s_str(msg, "content");
    if (thinking[0] && !st->reasoning) {
        if (dynbuf_add(&st->thinking, thinking, strlen(thinking)) != 0) {
            return s_fail(st, "thinking over its cap");
        }
    }
    const json_t *calls = json_object_get(msg, "tool_calls");
    if (content[0] || json_array_size(calls) > 0) {
        s_close_thinking(st);
    }
    if (content[0]) {
        if (dynbuf_add(&st->text, content, strlen(content)) != 0) {
            return s_fail(st, "reply text over its cap");
        }
        json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", content);
        httpstream_emit(st->on_part, st->ctx, part);
        json_decref(part);
    }
    httpstream_verdict_t v = HTTPSTREAM_CONTINUE;
    size_t i;
    json_t *tc;
    json_array_foreach(calls, i, tc) {
        if (v == HTTPSTREAM_CONTINUE) {
            v = s_tool_call(st, tc);
        }
    }
    return v;
}

static httpstream_verdict_t s_on_line(void *arg, const char *event, const char *data, size_t len) {
    s_state_t *st = arg;
    json_t *line = httpstream_parse_event("ollama", data, len);
    if (!json_is_object(line)) {
        json_decref(line);
        return s_fail(st, "a line that is not a JSON object");
    }
    httpstream_verdict_t v = HTTPSTREAM_CONTINUE;
    const json_t *err = json_object_get(line, "error");
    if (err && !json_is_null(err)) {
        v = httpstream_stream_error("ollama", err, st->out);
    } else {
        v = s_message(st, json_object_get(line, "message"));
    }
    if (v == HTTPSTREAM_CONTINUE && json_is_true(json_object_get(line, "done"))) {
        s_close_thinking(st);
        json_t *reason = json_object_get(line, "done_reason");
        httpstream_stop_reason(st->out,
                               json_is_string(reason) ? json_string_value(reason) : "stop");
        usage_t u = usage_ollama(line);
        st->usage = usage_json(&u);
        v = HTTPSTREAM_DONE;
    }
    json_decref(line);
    return v;
}

/* The reply's parts: reasoning, then text, then tool calls (the order Ollama sends). */
static json_t *s_content(s_state_t *st) {
    json_t *content = json_array();
    if (st->reasoning) {
        json_array_append(content, st->reasoning);
    }
    if (st->text.len > 0) {
        json_array_append_new(
            content, json_pack("{s:s, s:s%}", "type", "text", "text", st->text.data, st->text.len));
    }
    json_array_extend(content, st->calls);
    return content;
}

static void s_state_free(void *arg) {
    s_state_t *st = arg;
    dynbuf_free(&st->text);
    dynbuf_free(&st->thinking);
    json_decref(st->reasoning);
    json_decref(st->calls);
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
    *st = (s_state_t){
        .on_part = call->on_part, .ctx = call->part_ctx, .out = &call->out, .calls = json_array()};
    dynbuf_init(&st->text, OLLAMA_TEXT_MAX_BYTES);
    dynbuf_init(&st->thinking, OLLAMA_TEXT_MAX_BYTES);
    return st;
}

/* A summary's answer (stream:false) is one object, read like a stream's last line, so one
 * handler serves both; the Accept line is the same for both. */
const netprovider_spec_t ollama_spec = {
    .name = "ollama",
    .base_url_default = OLLAMA_BASE_URL_DEFAULT,
    .path = "/api/chat",
    .key_name = "Authorization",
    .key_prefix = "Bearer ",
    .accept_stream = "Accept: application/x-ndjson",
    .accept_whole = "Accept: application/x-ndjson",
    .stream_mode = HTTPSTREAM_NDJSON,
    .body = s_body,
    .state_new = s_state_new,
    .state_free = s_state_free,
    .on_event = s_on_line,
    .on_whole = s_on_line,
    .ok = s_ok,
};
