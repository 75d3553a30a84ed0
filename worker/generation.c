/* generation: see generation.h. */
#include "generation.h"
#include "history.h"
#include "log.h"
#include "mem.h"
#include "provider.h"
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

json_t *generation_partial(const char *const *parts, size_t count) {
    json_t *out = json_array();
    char *text = NULL;
    for (size_t i = 0; i < count; i++) {
        json_t *p = json_loads(parts[i], 0, NULL);
        if (!json_is_object(p)) {
            json_decref(p);
            continue;
        }
        if (!strcmp(s_str(p, "type"), "text")) {
            char *next = mem_printf("%s%s", text ? text : "", s_str(p, "text"));
            free(text);
            text = next;
            json_decref(p);
            continue;
        }
        if (text) {
            json_array_append_new(out, json_pack("{s:s, s:s}", "type", "text", "text", text));
            free(text);
            text = NULL;
        }
        json_array_append_new(out, p);
    }
    if (text) {
        json_array_append_new(out, json_pack("{s:s, s:s}", "type", "text", "text", text));
        free(text);
    }
    return out;
}

/* --- Transitions, as task_bundle_fn. --- */

typedef struct {
    const cs_fence_t *fence;
    const cs_message_t *msgs;
    int count;
    const char *error_json;
    int64_t attempt;
} s_args_t;

static int s_commit_step(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_args_t *a = arg;
    return chatstate_commit_step(cs, a->fence, a->msgs, a->count, err);
}

static int s_enter_ra(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_args_t *a = arg;
    return chatstate_enter_requires_action(cs, a->fence, err);
}

static int s_finish_turn(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_args_t *a = arg;
    return chatstate_finish_turn(cs, a->fence, NULL, 0, err);
}

static int s_finish_error(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_args_t *a = arg;
    return chatstate_finish_error(cs, a->fence, a->error_json, NULL, 0, err);
}

static int s_record_attempt(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_args_t *a = arg;
    return chatstate_record_generation_attempt(cs, a->fence, &a->attempt, err);
}

static int s_record_retry(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_args_t *a = arg;
    return chatstate_record_retry_state(cs, a->fence, a->error_json, err);
}

/* --- Tool results. --- */

/* Appends one tool message per call in calls that is not a dynamic tool: the result of
 * running it locally. Returns the number of messages; their content strings are owned by
 * contents (freed by the caller). */
static int s_run_local(const json_t *calls, const json_t *dynamic_tools, cs_message_t *msgs,
                       char **contents, int cap) {
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (n >= cap || strcmp(s_str(c, "type"), "tool-call") != 0) {
            continue;
        }
        const char *name = s_str(c, "tool_name");
        bool dynamic = false;
        size_t k;
        json_t *t;
        json_array_foreach(dynamic_tools, k, t) {
            dynamic |= !strcmp(s_str(t, "name"), name);
        }
        if (dynamic) {
            continue;
        }
        bool is_error = false;
        json_t *result = tools_run(name, json_object_get(c, "args"), &is_error);
        /* "o" steals result. */
        json_t *content = json_pack("[{s:s, s:s, s:s, s:o, s:b}]", "type", "tool-result",
                                    "tool_call_id", s_str(c, "tool_call_id"), "tool_name", name,
                                    "result", result, "is_error", is_error);
        contents[n] = json_dumps(content, JSON_COMPACT);
        json_decref(content);
        msgs[n] = (cs_message_t){.role = "tool", .content = contents[n]};
        n++;
    }
    return n;
}

#define S_TOOL_CALLS_MAX 128 /* local tool calls answered in one step */

static task_rc_t s_commit_with_tools(task_ctx_t *ctx, PGconn *conn, const char *assistant,
                                     const char *usage, const char *model_config_id,
                                     const json_t *calls, const json_t *dynamic_tools) {
    cs_message_t msgs[S_TOOL_CALLS_MAX + 1];
    char *contents[S_TOOL_CALLS_MAX] = {0};
    int n = 0;
    if (assistant) {
        msgs[n++] = (cs_message_t){.role = "assistant",
                                   .content = assistant,
                                   .usage = usage,
                                   .model_config_id = model_config_id};
    }
    int tools = s_run_local(calls, dynamic_tools, msgs + n, contents, S_TOOL_CALLS_MAX);
    n += tools;
    s_args_t a = {.fence = &ctx->fence, .msgs = msgs, .count = n};
    task_rc_t rc = task_bundle(ctx, conn, s_commit_step, &a, "CommitStep");
    for (int i = 0; i < tools; i++) {
        free(contents[i]);
    }
    return rc;
}

/* --- Model calls. --- */

typedef struct {
    task_ctx_t *ctx;
    int64_t attempt;
} s_stream_t;

static void s_on_part(void *arg, const char *part_json) {
    s_stream_t *s = arg;
    /* Best-effort: a full or closed episode drops the part (reference "Generation
     * goroutine"). */
    (void)partbuf_add(s->ctx->env->partbuf, s->ctx->chat_id, s->ctx->fence.history_version,
                      s->attempt, "assistant", part_json, strlen(part_json));
}

static json_t *s_tools_on_offer(const json_t *dynamic_tools) {
    json_t *tools = tools_local_specs();
    size_t i;
    json_t *t;
    json_array_foreach(dynamic_tools, i, t) {
        json_array_append_new(tools, json_pack("{s:s, s:s, s:O?}", "name", s_str(t, "name"),
                                               "description", s_str(t, "description"),
                                               "input_schema", json_object_get(t, "input_schema")));
    }
    return tools;
}

static char *s_error_json(const provider_result_t *r, int64_t attempt, bool retrying,
                          int64_t delay_ms) {
    time_t now = time(NULL) + (time_t)(delay_ms / 1000);
    struct tm tm;
    gmtime_r(&now, &tm);
    char at[40];
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *j =
        json_pack("{s:s, s:s, s:i, s:b, s:I}", "kind", "provider", "message", r->error, "status",
                  r->status, "retryable", r->retryable, "attempt", (json_int_t)attempt);
    if (retrying) {
        json_object_set_new(j, "delay_ms", json_integer(delay_ms));
        json_object_set_new(j, "retrying_at", json_string(at));
    }
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

static task_rc_t s_call_model(task_ctx_t *ctx, PGconn *conn, const history_t *h) {
    task_env_t *env = ctx->env;
    if (!json_is_object(h->model)) {
        const char *e = "{\"kind\":\"config\",\"message\":\"no model config is available\"}";
        s_args_t a = {.fence = &ctx->fence, .error_json = e};
        return task_bundle(ctx, conn, s_finish_error, &a, "FinishError");
    }
    const char *key_env = json_string_value(json_object_get(h->model, "api_key_env"));
    provider_model_t model = {
        .name = s_str(h->model, "name"),
        .provider = s_str(h->model, "provider"),
        .model = s_str(h->model, "model"),
        .base_url = json_string_value(json_object_get(h->model, "base_url")),
        .api_key = key_env ? getenv(key_env) : NULL,
    };
    const char *model_config_id = json_string_value(json_object_get(h->model, "id"));
    json_t *prompt = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(h->messages, i, m) {
        json_array_append_new(prompt, json_pack("{s:O, s:O}", "role", json_object_get(m, "role"),
                                                "content", json_object_get(m, "content")));
    }
    json_t *tools = s_tools_on_offer(h->dynamic_tools);
    task_rc_t rc = TASK_QUIET;
    for (;;) {
        s_args_t a = {.fence = &ctx->fence};
        rc = task_bundle(ctx, conn, s_record_attempt, &a, "RecordGenerationAttempt");
        if (rc != TASK_DONE) {
            break;
        }
        int64_t attempt = a.attempt;
        ctx->fence.generation_attempt = attempt;
        partbuf_t *pb = env->partbuf;
        int64_t hv = ctx->fence.history_version;
        (void)partbuf_create(pb, ctx->chat_id, hv, attempt);
        (void)partbuf_start_model(pb, ctx->chat_id, hv, attempt);
        provider_request_t req = {.model = &model,
                                  .messages = prompt,
                                  .tools = tools,
                                  .attempt = attempt,
                                  .chunk_ms = env->sim_chunk_ms};
        s_stream_t stream = {ctx, attempt};
        provider_result_t res;
        atomic_fetch_add(&env->counters.model_calls, 1);
        int64_t t0 = id_now_ms();
        provider_rc_t prc = provider_generate(&req, ctx->cancel, s_on_part, &stream, &res);
        partbuf_close(pb, ctx->chat_id, hv, attempt);
        if (prc == PROVIDER_CANCELLED) {
            rc = TASK_QUIET;
            break;
        }
        if (prc == PROVIDER_OK) {
            log_info("model_reply", "chat_id=%s provider=%s attempt=%lld ms=%lld parts=%zu",
                     ctx->chat_id, model.provider, (long long)attempt,
                     (long long)(id_now_ms() - t0), json_array_size(res.content));
            char *content = json_dumps(res.content, JSON_COMPACT);
            char *usage = res.usage ? json_dumps(res.usage, JSON_COMPACT) : NULL;
            rc = s_commit_with_tools(ctx, conn, content, usage, model_config_id, res.content,
                                     h->dynamic_tools);
            free(content);
            free(usage);
            provider_result_clear(&res);
            break;
        }
        atomic_fetch_add(&env->counters.model_errors, 1);
        bool give_up = !res.retryable || attempt > env->max_retries;
        int64_t delay = env->retry_base_ms;
        for (int64_t k = 1; k < attempt && delay < env->retry_max_ms; k++) {
            delay *= 2;
        }
        delay = delay > env->retry_max_ms ? env->retry_max_ms : delay;
        if (res.retry_after_ms >= 0) {
            delay = res.retry_after_ms;
        }
        char q[300];
        log_info("model_error",
                 "chat_id=%s provider=%s attempt=%lld status=%d retryable=%d give_up=%d "
                 "delay_ms=%lld reason=%s",
                 ctx->chat_id, model.provider, (long long)attempt, res.status, res.retryable,
                 give_up, (long long)delay, log_quote(res.error, q, sizeof q));
        char *ej = s_error_json(&res, attempt, !give_up, delay);
        provider_result_clear(&res);
        a = (s_args_t){.fence = &ctx->fence, .error_json = ej};
        if (give_up) {
            rc = task_bundle(ctx, conn, s_finish_error, &a, "FinishError");
            if (rc == TASK_DONE) {
                atomic_fetch_add(&env->counters.turns_failed, 1);
            }
            free(ej);
            break;
        }
        rc = task_bundle(ctx, conn, s_record_retry, &a, "RecordRetryState");
        free(ej);
        if (rc != TASK_DONE) {
            break;
        }
        if (cancel_wait_ms(ctx->cancel, delay)) {
            rc = TASK_QUIET;
            break;
        }
    }
    json_decref(prompt);
    json_decref(tools);
    return rc;
}

task_rc_t generation_step(task_ctx_t *ctx, PGconn *conn) {
    history_t h;
    ctx->fence.generation_attempt = -1;
    history_rc_t hr = history_load(conn, ctx->chat_id, &ctx->fence, true, &h);
    if (hr != HISTORY_OK) {
        if (hr == HISTORY_FENCED) {
            atomic_fetch_add(&ctx->env->counters.fence_rejects, 1);
        }
        return hr == HISTORY_DB ? TASK_RETRY : TASK_QUIET;
    }
    /* Every write of this step also fences the attempt it read. */
    ctx->fence.generation_attempt = h.generation_attempt;
    json_t *pending = NULL;
    decide_t d = history_decide(h.messages, h.dynamic_tools, ctx->env->max_steps, &pending);
    log_info("generation_step", "chat_id=%s history_version=%lld attempt=%lld decision=%s",
             ctx->chat_id, (long long)h.history_version, (long long)h.generation_attempt,
             history_decision_name(d));
    task_rc_t rc;
    s_args_t a = {.fence = &ctx->fence};
    switch (d) {
        case DECIDE_RUN_LOCAL:
            rc = s_commit_with_tools(ctx, conn, NULL, NULL, NULL, pending, h.dynamic_tools);
            break;
        case DECIDE_REQUIRES_ACTION:
            rc = task_bundle(ctx, conn, s_enter_ra, &a, "EnterRequiresAction");
            break;
        case DECIDE_FINISH_TURN:
            rc = task_bundle(ctx, conn, s_finish_turn, &a, "FinishTurn");
            if (rc == TASK_DONE) {
                atomic_fetch_add(&ctx->env->counters.turns_finished, 1);
            }
            break;
        case DECIDE_CALL_MODEL:
        default:
            rc = s_call_model(ctx, conn, &h);
            break;
    }
    json_decref(pending);
    history_clear(&h);
    return rc;
}
