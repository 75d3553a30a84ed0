/*
 * hookstep: see hookstep.h. Two rounds of dispatches on the loop, the tools in between; the
 * batch is reference-counted because a cancelled call's dispatches still answer later.
 */
#include "hookstep.h"
#include "jsonnumber.h"

#include "mem.h"
#include "tools.h"

#include <stdio.h>
#include <string.h>

static void s_post(void *ctx, hooks_fn *fn, void *arg) {
    evloop_post(ctx, fn, arg);
}

static void s_curl_add(void *ctx, CURL *easy, hooks_curl_done_fn *done, void *arg) {
    evloop_curl_add(ctx, easy, done, arg);
}

hooks_runner_t hookstep_runner(evloop_t *loop) {
    return (hooks_runner_t){.ctx = loop, .post = s_post, .curl_add = s_curl_add};
}

typedef struct s_batch s_batch_t;

typedef struct {
    s_batch_t *batch;
    json_t *call;  /* the tool-call part */
    json_t *input; /* what the tool runs with: the override, or the model's args */
    bool deny;
    char reason[256];
    json_t *result;
    bool is_error;
    json_t *context; /* {"model_context"?, "user_context"?}: what the answers added */
} s_slot_t;

struct s_batch {
    provider_call_t *call; /* NULL once the call ended or was cancelled */
    hooks_t *hooks;
    evloop_t *loop;
    mcpset_t *mcp;          /* NULL: local tools */
    json_t *enabled;        /* mcp: the chat's servers */
    provider_call_t *inner; /* mcp: the allowed calls in flight, or NULL */
    char chat_id[64];
    int64_t history_version;
    s_slot_t *slots;
    size_t n;
    size_t left;     /* dispatches of the current round not answered */
    bool post;       /* the round is post_tool_use */
    char error[256]; /* the first failure, or "" (provider_result_t.error) */
    int refs;        /* the call's, plus one per dispatch in flight; loop thread */
};

static const char *s_str(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void s_unref(s_batch_t *b) {
    if (--b->refs > 0) {
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        json_decref(b->slots[i].call);
        json_decref(b->slots[i].input);
        json_decref(b->slots[i].result);
        json_decref(b->slots[i].context);
    }
    free(b->slots);
    json_decref(b->enabled);
    free(b);
}

static void s_round(s_batch_t *b);

/* Ends the call with the answers, or with the first failure. */
static void s_end(s_batch_t *b) {
    provider_call_t *call = b->call;
    if (b->error[0]) {
        snprintf(call->out.error, sizeof call->out.error, "%s", b->error);
        call->out.retryable = false;
        provider_call_end(call, PROVIDER_ERROR);
        return;
    }
    call->out.content = json_object();
    for (size_t i = 0; i < b->n; i++) {
        s_slot_t *s = &b->slots[i];
        json_t *a = json_pack("{s:O, s:b}", "result", s->result, "is_error", s->is_error);
        json_object_update(a, s->context);
        json_object_set_new(call->out.content, s_str(s->call, "tool_call_id"), a);
    }
    provider_call_end(call, PROVIDER_OK);
}

/* The MCP calls' results (loop thread): each allowed slot's, then the post_tool_use round. */
static void s_on_mcp(void *arg, provider_rc_t rc, provider_result_t *res) {
    s_batch_t *b = arg;
    b->inner = NULL;
    if (b->call && rc == PROVIDER_OK) {
        for (size_t i = 0; i < b->n; i++) {
            s_slot_t *s = &b->slots[i];
            const json_t *a = json_object_get(res->content, s_str(s->call, "tool_call_id"));
            if (!s->deny && json_object_get(a, "result")) {
                s->result = json_incref(json_object_get(a, "result"));
                s->is_error = json_is_true(json_object_get(a, "is_error"));
            } else if (!s->deny) {
                s->result = json_pack("{s:s}", "error", "no answer from the MCP server");
                s->is_error = true;
            }
        }
        b->post = true;
        s_round(b);
    }
    s_unref(b);
}

/* Runs every tool the pre_tool_use round allowed, with its input, and answers the denied ones;
 * then the post_tool_use round (after the MCP calls, when they are MCP calls). */
static void s_run_tools(s_batch_t *b) {
    json_t *remote = b->mcp ? json_array() : NULL;
    for (size_t i = 0; i < b->n; i++) {
        s_slot_t *s = &b->slots[i];
        if (s->deny) {
            char why[300];
            snprintf(why, sizeof why, "denied by a pre_tool_use hook%s%s", s->reason[0] ? ": " : "",
                     s->reason);
            s->result = json_pack("{s:s}", "error", why);
            s->is_error = true;
        } else if (remote) {
            json_t *c = jsonnumber_deep_copy(s->call);
            json_object_set(c, "args", s->input);
            json_array_append_new(remote, c);
        } else {
            s->result = tools_run(s_str(s->call, "tool_name"), s->input, &s->is_error);
        }
    }
    if (json_array_size(remote) > 0) {
        b->refs++;
        b->inner = mcpset_start(b->mcp, b->loop, remote, b->enabled, s_on_mcp, b);
        json_decref(remote);
        return;
    }
    json_decref(remote);
    b->post = true;
    s_round(b);
}

/* Keeps the context an answer added for audience key, after what an earlier answer added. */
static void s_add_context(s_slot_t *s, const char *key, const char *text) {
    if (!text) {
        return;
    }
    const char *had = json_string_value(json_object_get(s->context, key));
    char *joined = had ? mem_printf("%s\n%s", had, text) : mem_strdup(text);
    json_object_set_new(s->context, key, json_string(joined));
    free(joined);
}

/* One dispatch's answer (loop thread). */
static void s_on_hook(void *arg, const hooks_result_t *res) {
    s_slot_t *s = arg;
    s_batch_t *b = s->batch;
    if (b->call) {
        if (res->rc != HOOKS_OK && !b->error[0]) {
            snprintf(b->error, sizeof b->error, "%s hook failed: %.200s",
                     b->post ? "post_tool_use" : "pre_tool_use", res->error);
        }
        if (res->rc == HOOKS_OK) {
            s_add_context(s, "model_context", res->model_context);
            s_add_context(s, "user_context", res->user_context);
        }
        if (res->rc == HOOKS_OK && !b->post) {
            s->deny = res->deny;
            snprintf(s->reason, sizeof s->reason, "%s", res->reason ? res->reason : "");
            if (res->input) {
                json_decref(s->input);
                s->input = jsonnumber_deep_copy(res->input);
            }
        }
        if (--b->left == 0) {
            if (b->error[0] || b->post) {
                s_end(b);
            } else {
                s_run_tools(b);
            }
        }
    }
    s_unref(b);
}

/* Dispatches the current round's event for every call. */
static void s_round(s_batch_t *b) {
    hooks_event_t ev = b->post ? HOOKS_POST_TOOL_USE : HOOKS_PRE_TOOL_USE;
    b->left = b->n;
    for (size_t i = 0; i < b->n; i++) {
        s_slot_t *s = &b->slots[i];
        const char *id = s_str(s->call, "tool_call_id");
        char event_id[HOOKS_EVENT_ID_LEN + 1];
        hooks_event_id(b->chat_id, b->history_version, 0, ev, id, event_id);
        json_t *p = json_pack("{s:s, s:s, s:I, s:O}", "tool_name", s_str(s->call, "tool_name"),
                              "tool_call_id", id, "history_version", (json_int_t)b->history_version,
                              "input", s->input);
        if (b->post) {
            json_object_set(p, "result", s->result);
            json_object_set_new(p, "is_error", json_boolean(s->is_error));
        }
        b->refs++;
        hooks_dispatch(b->hooks, HOOKS_ADMITTED, ev, event_id, b->chat_id, p, s_on_hook, s);
        json_decref(p);
    }
}

static void s_stop(void *impl) {
    s_batch_t *b = impl;
    b->call = NULL; /* dispatches in flight still answer; s_on_hook drops them */
    if (b->inner) {
        provider_cancel(b->inner); /* the MCP calls end too (s_on_mcp drops them) */
    }
}

static void s_free(void *impl) {
    s_batch_t *b = impl;
    b->call = NULL;
    s_unref(b);
}

provider_call_t *hookstep_start(hooks_t *hooks, evloop_t *loop, const char *chat_id,
                                int64_t history_version, const json_t *calls, mcpset_t *mcp,
                                const json_t *enabled, provider_done_fn *done, void *ctx) {
    provider_call_t *call = provider_call_new(loop, NULL, NULL, done, ctx);
    s_batch_t *b = mem_calloc(1, sizeof *b);
    b->call = call;
    b->hooks = hooks;
    b->loop = loop;
    b->mcp = mcp;
    b->enabled = mcp && enabled ? json_incref((json_t *)enabled) : NULL;
    snprintf(b->chat_id, sizeof b->chat_id, "%s", chat_id);
    b->history_version = history_version;
    b->n = json_array_size(calls);
    b->slots = mem_calloc(b->n ? b->n : 1, sizeof *b->slots);
    b->refs = 1;
    call->impl = b;
    call->stop = s_stop;
    call->impl_free = s_free;
    for (size_t i = 0; i < b->n; i++) {
        s_slot_t *s = &b->slots[i];
        s->batch = b;
        s->context = json_object();
        s->call = json_incref(json_array_get(calls, i));
        const json_t *args = json_object_get(s->call, "args");
        s->input = args ? json_incref((json_t *)args) : json_object();
    }
    /* Every done runs on the loop after this returns (hooks.h), so no end happens inside. */
    if (b->n == 0) {
        s_end(b);
    } else {
        s_round(b);
    }
    call->starting = false;
    return call;
}

/* One event as a call: the call's end, or NULL once it ended or was cancelled. */
typedef struct {
    provider_call_t *call;
    hooks_event_t event;
    int refs; /* the call's and the dispatch's; loop thread */
} s_one_t;

static void s_one_unref(s_one_t *o) {
    if (--o->refs == 0) {
        free(o);
    }
}

static void s_one_done(void *arg, const hooks_result_t *res) {
    s_one_t *o = arg;
    if (o->call) {
        provider_call_t *call = o->call;
        if (res->rc != HOOKS_OK) {
            snprintf(call->out.error, sizeof call->out.error, "%s hook failed: %.200s",
                     hooks_event_name(o->event), res->error);
            call->out.retryable = false;
        } else {
            call->out.content = json_object(); /* the context the answer added */
            if (res->model_context) {
                json_object_set_new(call->out.content, "model_context",
                                    json_string(res->model_context));
            }
            if (res->user_context) {
                json_object_set_new(call->out.content, "user_context",
                                    json_string(res->user_context));
            }
        }
        provider_call_end(call, res->rc == HOOKS_OK ? PROVIDER_OK : PROVIDER_ERROR);
    }
    s_one_unref(o);
}

static void s_one_stop(void *impl) {
    ((s_one_t *)impl)->call = NULL; /* the dispatch still answers; s_one_done drops it */
}

static void s_one_free(void *impl) {
    s_one_t *o = impl;
    o->call = NULL;
    s_one_unref(o);
}

provider_call_t *hookstep_event_start(hooks_t *hooks, evloop_t *loop, hooks_event_t event,
                                      const char *chat_id, int64_t history_version,
                                      const json_t *payload, provider_done_fn *done, void *ctx) {
    provider_call_t *call = provider_call_new(loop, NULL, NULL, done, ctx);
    s_one_t *o = mem_calloc(1, sizeof *o);
    o->call = call;
    o->event = event;
    o->refs = 2;
    call->impl = o;
    call->stop = s_one_stop;
    call->impl_free = s_one_free;
    char id[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id(chat_id, history_version, 0, event, NULL, id);
    hooks_dispatch(hooks, HOOKS_ADMITTED, event, id, chat_id, payload, s_one_done, o);
    call->starting = false;
    return call;
}
