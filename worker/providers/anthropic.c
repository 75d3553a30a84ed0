/* anthropic: see anthropic.h; the wire format is in worker/providers/README.md. */
#include "anthropic.h"
#include "dynbuf.h"
#include "httpstream.h"
#include "usage.h"
#include "mem.h"

#include <stdlib.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* --- Request. --- */

/* A reasoning part as a thinking block, or NULL when it cannot be replayed: the API refuses
 * a thinking block whose signature is missing or does not match its text. */
static json_t *s_thinking_block(const json_t *p) {
    const char *redacted = json_string_value(json_object_get(p, "redacted_data"));
    if (redacted) {
        return json_pack("{s:s, s:s}", "type", "redacted_thinking", "data", redacted);
    }
    const char *sig = s_str(p, "signature");
    if (!sig[0]) {
        return NULL;
    }
    return json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", s_str(p, "text"),
                     "signature", sig);
}

static json_t *s_tool_use_block(const json_t *p) {
    const json_t *args = json_object_get(p, "args");
    return json_pack("{s:s, s:s, s:s, s:O}", "type", "tool_use", "id", s_str(p, "tool_call_id"),
                     "name", s_str(p, "tool_name"), "input",
                     json_is_object(args) ? args : json_object());
}

static json_t *s_tool_result_block(const json_t *p) {
    char *text = httpstream_result_text(p);
    json_t *b = json_pack("{s:s, s:s, s:s}", "type", "tool_result", "tool_use_id",
                          s_str(p, "tool_call_id"), "content", text);
    free(text);
    if (json_is_true(json_object_get(p, "is_error"))) {
        json_object_set_new(b, "is_error", json_true());
    }
    return b;
}

/* A file part of a user message as an image or document block, or as a text block holding
 * the placeholder of a file the API does not take. */
static json_t *s_file_block(const json_t *p) {
    const char *type = "image";
    switch (httpstream_user_part(p, HTTPSTREAM_TAKES_IMAGE | HTTPSTREAM_TAKES_PDF)) {
        case HTTPSTREAM_PART_IMAGE:
            break;
        case HTTPSTREAM_PART_PDF:
            type = "document";
            break;
        default: {
            char *text = httpstream_file_placeholder(p);
            json_t *b = json_pack("{s:s, s:s}", "type", "text", "text", text);
            free(text);
            return b;
        }
    }
    return json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", type, "source", "type", "base64",
                     "media_type", s_str(p, "media_type"), "data", s_str(p, "data"));
}

/* The blocks of one history message, in its part order. */
static json_t *s_blocks(const json_t *msg, bool assistant) {
    json_t *blocks = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        const char *type = s_str(p, "type");
        json_t *b = NULL;
        if (!strcmp(type, "text") && s_str(p, "text")[0]) {
            b = json_pack("{s:s, s:s}", "type", "text", "text", s_str(p, "text"));
        } else if (assistant && !strcmp(type, "reasoning")) {
            b = s_thinking_block(p);
        } else if (assistant && !strcmp(type, "tool-call")) {
            b = s_tool_use_block(p);
        } else if (!assistant && !strcmp(type, "tool-result")) {
            b = s_tool_result_block(p);
        } else if (!assistant && !strcmp(type, "file")) {
            b = s_file_block(p);
        }
        if (b) {
            json_array_append_new(blocks, b);
        }
    }
    return blocks;
}

/* Messages alternate user/assistant: tool results travel in user messages, and adjacent
 * messages of one role are merged (tool results first, as the API wants them). */
static json_t *s_messages(const json_t *history, json_t *system) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(history, i, m) {
        const char *role = s_str(m, "role");
        if (!strcmp(role, "system")) {
            char *text = httpstream_text_of(m);
            if (text[0]) {
                json_array_append_new(system,
                                      json_pack("{s:s, s:s}", "type", "text", "text", text));
            }
            free(text);
            continue;
        }
        bool assistant = !strcmp(role, "assistant");
        if (!assistant && strcmp(role, "user") && strcmp(role, "tool")) {
            continue;
        }
        const char *wire = assistant ? "assistant" : "user";
        json_t *blocks = s_blocks(m, assistant);
        json_t *last = json_array_get(out, json_array_size(out) - 1);
        if (json_array_size(blocks) == 0) {
            json_decref(blocks);
        } else if (last && !strcmp(s_str(last, "role"), wire)) {
            json_array_extend(json_object_get(last, "content"), blocks);
            json_decref(blocks);
        } else {
            json_array_append_new(out, json_pack("{s:s, s:o}", "role", wire, "content", blocks));
        }
    }
    return out;
}

static json_t *s_tools(const json_t *tools) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *schema = json_object_get(t, "input_schema");
        json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "name", s_str(t, "name"),
                                             "description", s_str(t, "description"), "input_schema",
                                             json_is_object(schema)
                                                 ? json_incref(schema)
                                                 : json_pack("{s:s}", "type", "object")));
    }
    return out;
}

/* The thinking budget of an effort (anthropic.h, ANTHROPIC_BUDGET_*): 0 for none, minimal or
 * no effort at all (no thinking is asked for). */
static int s_budget(const char *effort) {
    static const struct {
        const char *effort;
        int tokens;
    } budgets[] = {{"low", ANTHROPIC_BUDGET_LOW},
                   {"medium", ANTHROPIC_BUDGET_MEDIUM},
                   {"high", ANTHROPIC_BUDGET_HIGH},
                   {"xhigh", ANTHROPIC_BUDGET_XHIGH},
                   {"max", ANTHROPIC_BUDGET_MAX}};
    for (size_t i = 0; effort && i < sizeof budgets / sizeof budgets[0]; i++) {
        if (!strcmp(effort, budgets[i].effort)) {
            return budgets[i].tokens;
        }
    }
    return 0;
}

static json_t *s_body(const provider_request_t *req) {
    json_t *system = json_array();
    /* Thinking counts toward max_tokens, which must exceed its budget: the reply keeps its
     * ANTHROPIC_MAX_TOKENS beside the budget. */
    int budget = s_budget(req->reasoning_effort);
    json_t *body =
        json_pack("{s:s, s:i, s:o, s:b}", "model", req->model->model ? req->model->model : "",
                  "max_tokens", ANTHROPIC_MAX_TOKENS + budget, "messages",
                  s_messages(req->messages, system), "stream", !req->summary);
    if (budget > 0) {
        json_object_set_new(body, "thinking",
                            json_pack("{s:s, s:i}", "type", "enabled", "budget_tokens", budget));
    }
    if (json_array_size(system) > 0) {
        json_object_set_new(body, "system", system);
    } else {
        json_decref(system);
    }
    if (json_array_size(req->tools) > 0) {
        json_object_set_new(body, "tools", s_tools(req->tools));
    }
    if (req->native_schema) {
        /* "O" takes a new reference to the borrowed schema. */
        json_object_set_new(body, "output_config",
                            json_pack("{s:{s:s, s:O}}", "format", "type", "json_schema", "schema",
                                      req->native_schema));
    }
    return body;
}

/* --- Stream. --- */

typedef enum { S_UNUSED = 0, S_TEXT, S_TOOL, S_THINKING, S_REDACTED, S_OTHER } s_kind_t;

typedef struct {
    s_kind_t kind;
    char id[128];
    char name[128];
    dynbuf_t buf; /* text, input JSON, thinking or redacted data */
    dynbuf_t sig; /* thinking: the signature (replaced, not appended) */
    json_t *part; /* owned: the finished non-text part, at content_block_stop */
} s_block_t;

typedef struct {
    provider_part_fn *on_part;
    void *ctx;
    provider_result_t *out;
    s_block_t blocks[ANTHROPIC_BLOCKS_MAX];
    bool started;  /* message_start seen */
    usage_t usage; /* cumulative over the stream's events */
} s_state_t;

static httpstream_verdict_t s_fail(s_state_t *st, const char *what) {
    (void)provider_fail(st->out, 0, true, -1, "anthropic: protocol: %s", what);
    return HTTPSTREAM_ABORT;
}

static s_block_t *s_block(s_state_t *st, const json_t *ev) {
    const json_t *index = json_object_get(ev, "index");
    json_int_t i = json_integer_value(index);
    if (!json_is_integer(index) || i < 0 || i >= ANTHROPIC_BLOCKS_MAX) {
        return NULL;
    }
    return &st->blocks[i];
}

static httpstream_verdict_t s_block_start(s_state_t *st, const json_t *ev) {
    s_block_t *b = s_block(st, ev);
    const json_t *cb = json_object_get(ev, "content_block");
    if (!b || b->kind != S_UNUSED || !json_is_object(cb)) {
        return s_fail(st, "content_block_start without a fresh index");
    }
    const char *type = s_str(cb, "type");
    b->kind = !strcmp(type, "text")                ? S_TEXT
              : !strcmp(type, "tool_use")          ? S_TOOL
              : !strcmp(type, "thinking")          ? S_THINKING
              : !strcmp(type, "redacted_thinking") ? S_REDACTED
                                                   : S_OTHER;
    snprintf(b->id, sizeof b->id, "%s", s_str(cb, "id"));
    snprintf(b->name, sizeof b->name, "%s", s_str(cb, "name"));
    const char *initial = b->kind == S_TEXT       ? s_str(cb, "text")
                          : b->kind == S_REDACTED ? s_str(cb, "data")
                                                  : "";
    if (dynbuf_add(&b->buf, initial, strlen(initial)) != 0) {
        return s_fail(st, "block over its cap");
    }
    return HTTPSTREAM_CONTINUE;
}

static httpstream_verdict_t s_block_delta(s_state_t *st, const json_t *ev) {
    s_block_t *b = s_block(st, ev);
    const json_t *d = json_object_get(ev, "delta");
    if (!b || b->kind == S_UNUSED || b->part) {
        return s_fail(st, "content_block_delta for a block that is not open");
    }
    const char *type = s_str(d, "type");
    const char *piece = NULL;
    if (!strcmp(type, "text_delta") && b->kind == S_TEXT) {
        piece = s_str(d, "text");
        json_t *part = json_pack("{s:s, s:s}", "type", "text", "text", piece);
        if (piece[0]) {
            httpstream_emit(st->on_part, st->ctx, part);
        }
        json_decref(part);
    } else if (!strcmp(type, "input_json_delta") && b->kind == S_TOOL) {
        piece = s_str(d, "partial_json");
    } else if (!strcmp(type, "thinking_delta") && b->kind == S_THINKING) {
        piece = s_str(d, "thinking");
    } else if (!strcmp(type, "signature_delta") && b->kind == S_THINKING) {
        const char *sig = s_str(d, "signature");
        dynbuf_reset(&b->sig);
        if (dynbuf_add(&b->sig, sig, strlen(sig)) != 0) {
            return s_fail(st, "signature over its cap");
        }
    }
    if (piece && dynbuf_add(&b->buf, piece, strlen(piece)) != 0) {
        return s_fail(st, "block over its cap");
    }
    return HTTPSTREAM_CONTINUE;
}

/* The finished part of a non-text block (NULL for text and unknown blocks). */
static json_t *s_block_part(s_block_t *b) {
    const char *buf = dynbuf_str(&b->buf);
    switch (b->kind) {
        case S_TOOL:
            return httpstream_tool_call(b->id, b->name, buf, b->buf.len);
        case S_THINKING: {
            json_t *p = json_pack("{s:s, s:s%}", "type", "reasoning", "text", buf, b->buf.len);
            if (b->sig.len > 0) {
                json_object_set_new(p, "signature", json_stringn(b->sig.data, b->sig.len));
            }
            return p;
        }
        case S_REDACTED:
            return json_pack("{s:s, s:s, s:s%}", "type", "reasoning", "text", "", "redacted_data",
                             buf, b->buf.len);
        default:
            return NULL;
    }
}

static httpstream_verdict_t s_block_stop(s_state_t *st, const json_t *ev) {
    s_block_t *b = s_block(st, ev);
    if (!b || b->kind == S_UNUSED || b->part) {
        return s_fail(st, "content_block_stop for a block that is not open");
    }
    b->part = s_block_part(b);
    if (b->part) {
        httpstream_emit(st->on_part, st->ctx, b->part);
    }
    return HTTPSTREAM_CONTINUE;
}

/* Counts are cumulative: the latest value of each wins. */
static void s_usage(s_state_t *st, const json_t *usage) {
    usage_anthropic_merge(&st->usage, usage);
}

static httpstream_verdict_t s_dispatch(s_state_t *st, const char *type, const json_t *ev) {
    if (!strcmp(type, "ping")) {
        return HTTPSTREAM_CONTINUE;
    }
    if (!strcmp(type, "error")) {
        return httpstream_stream_error("anthropic", json_object_get(ev, "error"), st->out);
    }
    if (!strcmp(type, "message_start")) {
        st->started = true;
        s_usage(st, json_object_get(json_object_get(ev, "message"), "usage"));
        return HTTPSTREAM_CONTINUE;
    }
    if (!st->started) {
        return s_fail(st, "an event before message_start");
    }
    if (!strcmp(type, "content_block_start")) {
        return s_block_start(st, ev);
    }
    if (!strcmp(type, "content_block_delta")) {
        return s_block_delta(st, ev);
    }
    if (!strcmp(type, "content_block_stop")) {
        return s_block_stop(st, ev);
    }
    if (!strcmp(type, "message_delta")) {
        s_usage(st, json_object_get(ev, "usage"));
        json_t *reason = json_object_get(json_object_get(ev, "delta"), "stop_reason");
        if (json_is_string(reason)) {
            httpstream_stop_reason(st->out, json_string_value(reason));
        }
        return HTTPSTREAM_CONTINUE;
    }
    if (!strcmp(type, "message_stop")) {
        return HTTPSTREAM_DONE;
    }
    return HTTPSTREAM_CONTINUE; /* events added later are ignored (worker/providers/README.md) */
}

static httpstream_verdict_t s_on_event(void *arg, const char *event, const char *data, size_t len) {
    s_state_t *st = arg;
    json_t *ev = httpstream_parse_event("anthropic", data, len);
    if (!json_is_object(ev)) {
        json_decref(ev);
        return s_fail(st, "a data event that is not a JSON object");
    }
    /* The data's type names the event; the event: line is only a copy of it. */
    const char *type = json_string_value(json_object_get(ev, "type"));
    httpstream_verdict_t v = s_dispatch(st, type ? type : event, ev);
    json_decref(ev);
    return v;
}

/* A non-streaming reply (a summary call, provider.h): one message object whose text blocks
 * are kept, not streamed; a summary offers no tools, so other blocks are not read. */
static httpstream_verdict_t s_on_whole(void *arg, const char *event, const char *data, size_t len) {
    (void)event;
    s_state_t *st = arg;
    json_t *doc = httpstream_parse_event("anthropic", data, len);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return s_fail(st, "a response that is not a JSON object");
    }
    httpstream_verdict_t v = HTTPSTREAM_DONE;
    if (!strcmp(s_str(doc, "type"), "error")) {
        v = httpstream_stream_error("anthropic", json_object_get(doc, "error"), st->out);
    } else if (!json_is_array(json_object_get(doc, "content"))) {
        v = s_fail(st, "a message without content");
    }
    size_t i;
    json_t *cb;
    json_array_foreach(json_object_get(doc, "content"), i, cb) {
        const char *text = s_str(cb, "text");
        if (v != HTTPSTREAM_DONE || i >= ANTHROPIC_BLOCKS_MAX ||
            strcmp(s_str(cb, "type"), "text")) {
            continue;
        }
        st->blocks[i].kind = S_TEXT;
        if (dynbuf_add(&st->blocks[i].buf, text, strlen(text)) != 0) {
            v = s_fail(st, "text block over its cap");
        }
    }
    if (v == HTTPSTREAM_DONE) {
        s_usage(st, json_object_get(doc, "usage"));
        const json_t *reason = json_object_get(doc, "stop_reason");
        httpstream_stop_reason(st->out,
                               json_is_string(reason) ? json_string_value(reason) : "stop");
    }
    json_decref(doc);
    return v;
}

/* The reply's parts in block order; a text block becomes one text part. */
static json_t *s_content(s_state_t *st) {
    json_t *content = json_array();
    for (size_t i = 0; i < ANTHROPIC_BLOCKS_MAX; i++) {
        s_block_t *b = &st->blocks[i];
        if (b->kind == S_TEXT && b->buf.len > 0) {
            json_array_append_new(
                content, json_pack("{s:s, s:s%}", "type", "text", "text", b->buf.data, b->buf.len));
            continue;
        }
        if (!b->part) {
            b->part = s_block_part(b); /* a block the stream never stopped */
        }
        if (b->part) {
            json_array_append(content, b->part);
        }
    }
    return content;
}

static void s_state_free(void *arg) {
    s_state_t *st = arg;
    for (size_t i = 0; i < ANTHROPIC_BLOCKS_MAX; i++) {
        dynbuf_free(&st->blocks[i].buf);
        dynbuf_free(&st->blocks[i].sig);
        json_decref(st->blocks[i].part);
    }
    free(st);
}

static void s_ok(void *arg, provider_result_t *out) {
    s_state_t *st = arg;
    out->content = s_content(st);
    out->usage = usage_json(&st->usage);
}

static void *s_state_new(provider_call_t *call) {
    s_state_t *st = mem_calloc(1, sizeof *st);
    st->on_part = call->on_part;
    st->ctx = call->part_ctx;
    st->out = &call->out;
    st->usage = usage_none();
    for (size_t i = 0; i < ANTHROPIC_BLOCKS_MAX; i++) {
        dynbuf_init(&st->blocks[i].buf, ANTHROPIC_BLOCK_MAX_BYTES);
        dynbuf_init(&st->blocks[i].sig, ANTHROPIC_SIGNATURE_BYTES - 1); /* and its NUL */
    }
    return st;
}

const netprovider_spec_t anthropic_spec = {
    .name = "anthropic",
    .base_url_default = ANTHROPIC_BASE_URL_DEFAULT,
    .path = "/v1/messages",
    .key_name = "x-api-key",
    .key_prefix = "",
    .accept_stream = "Accept: text/event-stream",
    .accept_whole = "Accept: application/json",
    .fixed_header = "anthropic-version: " ANTHROPIC_VERSION,
    .stream_mode = HTTPSTREAM_SSE,
    .body = s_body,
    .state_new = s_state_new,
    .state_free = s_state_free,
    .on_event = s_on_event,
    .on_whole = s_on_whole,
    .ok = s_ok,
};
