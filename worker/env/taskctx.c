/* taskctx: what a task body sees and how it writes; see taskctx.h. */
#include "taskctx.h"
#include "id.h"
#include "log.h"
#include "mem.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

const int64_t taskctx_model_bucket_ms[TASKCTX_MODEL_BUCKETS - 1] = {50,   100,  250,  500,
                                                                    1000, 2500, 10000};
const char *const taskctx_error_class_names[TASKCTX_ERROR_CLASSES] = {"429", "4xx", "5xx", "none"};

int taskctx_error_class(int status) {
    return status == 429 ? 0 : status >= 400 && status < 500 ? 1 : status >= 500 ? 2 : 3;
}

void taskctx_count_model_call(taskctx_counters_t *c, int64_t ms) {
    int b = 0;
    while (b < TASKCTX_MODEL_BUCKETS - 1 && ms > taskctx_model_bucket_ms[b]) {
        b++;
    }
    atomic_fetch_add(&c->model_ms_buckets[b], 1);
    atomic_fetch_add(&c->model_ms_sum, ms);
}

void taskctx_set_turn(taskctx_t *ctx, bool subagent, const trace_ctx_t *trace,
                      int64_t trigger_age_us, int64_t prompt_id) {
    char old[TRACE_SPAN_HEX + 1];
    snprintf(old, sizeof old, "%s", ctx->turn_span);
    int64_t start = otlp_now_ns() - (trigger_age_us > 0 ? trigger_age_us * 1000 : 0);
    ctx->subagent = subagent;
    ctx->trace = *trace;
    /* FNV-1a over the trace id, the chat id and the runner id: one id per (prompt, chat,
     * runner), never zero. A turn another runner takes over (or a parent's turn resumed after
     * its agent wait) is a turn of its own, and its span must not share the first one's id. */
    uint64_t h = 1469598103934665603ULL;
    const char *parts[] = {trace->trace_id, ctx->chat_id, ctx->fence.runner_id};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        for (const char *p = parts[i]; *p; p++) {
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        }
    }
    snprintf(ctx->turn_span, sizeof ctx->turn_span, "%016llx", (unsigned long long)(h ? h : 1));
    /* The same turn read again: its start stays the earliest reading (the age is read on the
     * database's clock, the span's on this one; a later read lands later by its latency). */
    if (strcmp(old, ctx->turn_span) || !ctx->turn_start_ns || start < ctx->turn_start_ns) {
        ctx->turn_start_ns = start;
    }
    if (ctx->env->turns && prompt_id > 0) {
        turnset_turn_t t = {.prompt_id = prompt_id,
                            .subagent = subagent,
                            .trace = *trace,
                            .start_ns = ctx->turn_start_ns};
        snprintf(t.chat_id, sizeof t.chat_id, "%s", ctx->chat_id);
        snprintf(t.runner_id, sizeof t.runner_id, "%s", ctx->fence.runner_id);
        snprintf(t.span_id, sizeof t.span_id, "%s", ctx->turn_span);
        turnset_join(ctx->env->turns, &t, &ctx->turn);
    }
}

void taskctx_release_turn(taskctx_t *ctx) {
    if (ctx->env->turns) {
        turnset_release(ctx->env->turns, &ctx->turn);
    }
}

void taskctx_runner_exit(taskctx_env_t *env, const char *chat_id, const char *runner_id) {
    if (env->turns) {
        turnset_runner_exit(env->turns, chat_id, runner_id);
    }
}

/* Names s as a span of chat_id's turn in trace_id and queues it. */
static void s_export(taskctx_env_t *env, otlp_span_t *s, const char *chat_id, bool subagent,
                     const char *trace_id) {
    snprintf(s->trace_id, sizeof s->trace_id, "%s", trace_id);
    snprintf(s->chat_id, sizeof s->chat_id, "%s", chat_id);
    snprintf(s->chat_kind, sizeof s->chat_kind, "%s", subagent ? "subagent" : "root");
    (void)otlp_add(env->otlp, s); /* a full queue drops it (counted) */
}

/* A span of this task's turn, ended now after us, with id span_id (NULL or "": a new one);
 * with outcome set the chat_turn span. */
static void s_span(taskctx_t *ctx, const char *name, int64_t us, const char *model,
                   const char *outcome, bool error, const char *span_id) {
    if (!ctx->env->otlp || !ctx->trace.trace_id[0]) {
        return;
    }
    otlp_span_t s = {.end_ns = otlp_now_ns(), .error = error};
    snprintf(s.name, sizeof s.name, "%s", name);
    snprintf(s.model, sizeof s.model, "%s", model ? model : "");
    if (outcome) { /* chat_turn: a child of the request that made the prompt */
        snprintf(s.span_id, sizeof s.span_id, "%s", ctx->turn_span);
        snprintf(s.parent_id, sizeof s.parent_id, "%s", ctx->trace.span_id);
        snprintf(s.outcome, sizeof s.outcome, "%s", outcome);
        s.start_ns = ctx->turn_start_ns;
    } else {
        if (span_id && span_id[0]) {
            snprintf(s.span_id, sizeof s.span_id, "%s", span_id);
        } else if (trace_span_id(s.span_id) != 0) {
            return;
        }
        snprintf(s.parent_id, sizeof s.parent_id, "%s", ctx->turn_span);
        s.start_ns = s.end_ns - us * 1000;
    }
    s_export(ctx->env, &s, ctx->chat_id, ctx->subagent, ctx->trace.trace_id);
}

void taskctx_turn_abandoned(const turnset_turn_t *turn, void *arg) {
    taskctx_env_t *env = arg;
    if (env->stages) {
        stagemeter_count_outcome(env->stages, TURN_ABANDONED, turn->subagent);
    }
    log_info("turn_abandoned", "chat_id=%s runner_id=%s prompt_id=%lld trace_id=%s", turn->chat_id,
             turn->runner_id, (long long)turn->prompt_id,
             turn->trace.trace_id[0] ? turn->trace.trace_id : "-");
    if (!env->otlp || !turn->trace.trace_id[0]) {
        return;
    }
    otlp_span_t s = {.start_ns = turn->start_ns, .end_ns = turn->end_ns};
    snprintf(s.name, sizeof s.name, "chat_turn");
    snprintf(s.span_id, sizeof s.span_id, "%s", turn->span_id);
    snprintf(s.parent_id, sizeof s.parent_id, "%s", turn->trace.span_id);
    snprintf(s.outcome, sizeof s.outcome, "%s", stagemeter_outcome_name(TURN_ABANDONED));
    s_export(env, &s, turn->chat_id, turn->subagent, turn->trace.trace_id);
}

void taskctx_child_trace(const taskctx_t *ctx, char span_id[TRACE_SPAN_HEX + 1],
                         char traceparent[TRACE_PARENT_LEN + 1]) {
    trace_ctx_t t = ctx->trace;
    span_id[0] = traceparent[0] = '\0';
    if (!t.trace_id[0] && trace_new(&t) != 0) {
        return;
    }
    if (trace_span_id(span_id) != 0) {
        return;
    }
    snprintf(t.span_id, sizeof t.span_id, "%s", span_id);
    trace_format(&t, traceparent);
}

/* taskctx_stage_us, the span's id given (NULL or "": a new one). */
static void s_stage(taskctx_t *ctx, stage_t s, int64_t us, const char *model, const char *span_id) {
    if (ctx->env->stages) {
        if (model) {
            stagemeter_observe_model(ctx->env->stages, s, ctx->subagent, model, us);
        } else {
            stagemeter_observe(ctx->env->stages, s, STAGE_SCOPE_TURN, ctx->subagent, us);
        }
    }
    s_span(ctx, stagemeter_stage_name(s), us, model, NULL, false, span_id);
    if (s == STAGE_GENERATION_STEP || s == STAGE_COMPACTION) {
        taskctx_flush_turn(ctx); /* the step that closed the turn has ended */
    }
}

void taskctx_stage_us(taskctx_t *ctx, stage_t s, int64_t us, const char *model) {
    s_stage(ctx, s, us, model, NULL);
}

void taskctx_stage(taskctx_t *ctx, stage_t s, int64_t since_us) {
    if (since_us > 0) {
        taskctx_stage_us(ctx, s, id_now_us() - since_us, NULL);
    }
}

void taskctx_stage_as(taskctx_t *ctx, stage_t s, int64_t since_us, const char *span_id) {
    if (since_us > 0) {
        s_stage(ctx, s, id_now_us() - since_us, NULL, span_id);
    }
}

void taskctx_outcome(taskctx_t *ctx, turn_outcome_t o) {
    if (ctx->env->turns && ctx->turn && !turnset_outcome(ctx->env->turns, ctx->turn, (int)o)) {
        log_info("turn_outcome_kept", "chat_id=%s outcome=%s", ctx->chat_id,
                 stagemeter_outcome_name(o));
        return;
    }
    if (ctx->env->stages) {
        stagemeter_count_outcome(ctx->env->stages, o, ctx->subagent);
    }
    taskctx_flush_turn(ctx); /* an earlier one is closed first */
    ctx->pending_outcome = (int)o + 1;
    if (!ctx->step_us) {
        taskctx_flush_turn(ctx);
    }
}

void taskctx_flush_turn(taskctx_t *ctx) {
    if (ctx->pending_outcome) {
        turn_outcome_t o = (turn_outcome_t)(ctx->pending_outcome - 1);
        ctx->pending_outcome = 0;
        s_span(ctx, "chat_turn", 0, NULL, stagemeter_outcome_name(o), o == TURN_ERROR, NULL);
    }
}

/* Ends ctx->carry, if any: done with whether it was committed. */
static void s_carry_end(taskctx_t *ctx, bool committed) {
    taskctx_carry_t c = ctx->carry;
    ctx->carry = (taskctx_carry_t){0};
    if (c.write) {
        c.done(c.arg, committed);
    }
}

void taskctx_carry_drop(taskctx_t *ctx) {
    s_carry_end(ctx, false);
}

/* The carry's write, then fn; rc as fn's. */
static int s_carried(chatstate_t *cs, taskctx_t *ctx, taskctx_bundle_fn *fn, void *arg, bool joined,
                     cs_error_t *err) {
    const taskctx_carry_t *c = &ctx->carry;
    if (c->write && c->write(cs, &ctx->fence, joined, c->arg, err) != 0) {
        return -1;
    }
    return fn ? fn(cs, arg, err) : 0;
}

/* taskctx_bundle with fn NULL: the carry alone, cancelled or not (its call has ended: what
 * it came to is written under the owner's fence, as it would have been beside the body). */
static taskctx_rc_t s_bundle(taskctx_t *ctx, PGconn *conn, taskctx_bundle_fn *fn, void *arg,
                             const char *what) {
    if (fn && cancel_is_set(ctx->cancel)) {
        return TASKCTX_QUIET;
    }
    int64_t t0 = id_now_us();
    cs_error_t err;
    /* Started ahead: a step's reads go out behind the start, in its round trip. */
    chatstate_t *cs = chatstate_begin_ahead(conn, &ctx->env->chat_settings, ctx->chat_id, &err);
    int rc = cs ? s_carried(cs, ctx, fn, arg, fn != NULL, &err) : -1;
    if (rc == TASKCTX_BUNDLE_EMPTY) {
        chatstate_destroy(&cs); /* rolls back; the carry waits for a bundle that writes */
        return TASKCTX_DONE;
    }
    if (cs && rc == 0) {
        rc = chatstate_commit_wake(&cs, &ctx->env->sink, &ctx->after, &err);
    }
    chatstate_destroy(&cs);
    s_carry_end(ctx, rc == 0); /* either way: a failed bundle's retry goes on without it */
    if (rc == 0) {
        ctx->have_after = true;
        atomic_fetch_add(&ctx->env->counters.commits, 1);
        if (!strncmp(what, "CommitStep", 10)) {
            taskctx_stage(ctx, STAGE_COMMIT, t0);
        }
        log_info("task_commit",
                 "chat_id=%s worker_id=%s runner_id=%s move=%s snapshot_version=%lld "
                 "history_version=%lld status=%s",
                 ctx->chat_id, ctx->fence.worker_id, ctx->fence.runner_id, what,
                 (long long)ctx->after.snapshot_version, (long long)ctx->after.history_version,
                 ctx->after.status);
        return TASKCTX_DONE;
    }
    char q[300];
    switch (err.rc) {
        case CS_FENCED:
            atomic_fetch_add(&ctx->env->counters.fence_rejects, 1);
            return TASKCTX_QUIET;
        case CS_NOT_FOUND:
            return TASKCTX_QUIET;
        case CS_CONFLICT:
        case CS_INVALID_STATE:
        case CS_BAD_INPUT:
            /* The fence held but the move table refused: the chat moved somewhere this task
             * has no business in (archived, say). Retrying cannot help; the runner sees the
             * new state and decides. */
            log_warn("task_refused", "chat_id=%s move=%s reason=%s", ctx->chat_id, what,
                     log_quote(err.message, q, sizeof q));
            return TASKCTX_QUIET;
        default:
            log_warn("task_bundle_failed", "chat_id=%s move=%s reason=%s", ctx->chat_id, what,
                     log_quote(err.message, q, sizeof q));
            return TASKCTX_RETRY;
    }
}

taskctx_rc_t taskctx_bundle(taskctx_t *ctx, PGconn *conn, taskctx_bundle_fn *fn, void *arg,
                            const char *what) {
    ASSERT(fn);
    return s_bundle(ctx, conn, fn, arg, what);
}

taskctx_rc_t taskctx_carry_alone(taskctx_t *ctx, PGconn *conn) {
    if (!ctx->carry.write) {
        return TASKCTX_DONE;
    }
    if (!conn) {
        taskctx_carry_drop(ctx);
        return TASKCTX_RETRY;
    }
    return s_bundle(ctx, conn, NULL, NULL, "Carried");
}

void taskctx_reset(taskctx_t *ctx) {
    taskctx_flush_turn(ctx);
    if (ctx->body_free) {
        ctx->body_free(ctx->body);
    }
    ctx->body = NULL;
    ctx->body_free = NULL;
    ctx->next = NULL;
    ctx->call_start = NULL;
    json_decref(ctx->stop_answer);
    ctx->stop_answer = NULL;
    provider_result_clear(&ctx->call_res);
}

void taskctx_price(taskctx_t *ctx, const json_t *cfg, const char *name) {
    provider_result_t *res = &ctx->call_res;
    const json_t *cl = json_object_get(cfg, "context_limit");
    json_t *priced = usage_priced(res->usage, json_object_get(cfg, "prices"),
                                  json_is_integer(cl) ? (int64_t)json_integer_value(cl) : 0);
    json_decref(res->usage);
    res->usage = priced;
    usagemeter_add(ctx->env->usage, name, res->usage);
}
