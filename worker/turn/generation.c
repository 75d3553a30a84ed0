/* generation: see generation.h. */
#include "generation.h"
#include "jsonnumber.h"
#include "jsonstrict.h"
#include "stepbundle.h"
#include "toolstep.h"
#include "batch.h"
#include "compaction.h"
#include "history.h"
#include "jsonout.h"
#include "log.h"
#include "hooks.h"
#include "mem.h"
#include "outformat.h"
#include "provider.h"
#include "steer.h"
#include "structured.h"
#include "titlestep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* One step: reads and decides, knowing the hook events heard before (toolstep.h). */
static taskctx_rc_t s_step(taskctx_t *ctx, PGconn *conn, unsigned heard);

char *generation_partial(const char *const *parts, size_t count) {
    json_t *out = json_array();
    char *text = NULL;
    for (size_t i = 0; i < count; i++) {
        json_t *p = jsonstrict_load_stored(parts[i], strlen(parts[i]));
        if (!json_is_object(p)) {
            json_decref(p);
            continue;
        }
        if (!strcmp(s_str(p, "type"), COMPACTION_PART_TYPE)) {
            json_decref(p); /* progress, never content (ARCHITECTURE.md §7.6) */
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
    char *content = json_array_size(out) > 0 ? jsonout_dumps(out) : NULL;
    json_decref(out);
    return content;
}

/* Whether content holds a tool call (the turn goes on after the step). */
static bool s_has_tool_call(const json_t *content) {
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        if (!strcmp(s_str(p, "type"), "tool-call")) {
            return true;
        }
    }
    return false;
}

/* One model reply in one CommitStep (batch.h). */
static taskctx_rc_t s_commit_reply(taskctx_t *ctx, PGconn *conn, const history_t *h,
                                   const structured_turn_t *turn, provider_result_t *res,
                                   const char *model_config_id, const json_t *plan_offer) {
    char *usage = res->usage ? jsonout_dumps(res->usage) : NULL;
    /* A reply without tool calls ends the turn (the next step would decide FinishTurn on
     * it): both go in one bundle, one commit fewer per turn (ARCHITECTURE.md §7.3), unless
     * the stop hook must be heard first (§7.10). */
    bool last = !turn && !s_has_tool_call(res->content) && !hooks_enabled(ctx->env->hooks);
    batch_t *b = batch_new();
    batch_set_task(b, ctx);
    batch_set_hooked(b, hooks_enabled(ctx->env->hooks));
    batch_set_plan(b, plan_offer); /* plan mode: a call of a withheld tool is an error (steer.h) */
    const char *rejection = NULL;
    bool candidate = false;
    batch_reply(b, res->content, res->finish, usage, model_config_id, h->dynamic_tools, turn,
                &rejection, &candidate);
    if (turn) {
        log_info("structured_step",
                 "chat_id=%s request_id=%s native=%d finish=%s rejection=%s candidate=%d"
                 " rejections_before=%d",
                 ctx->chat_id, turn->request_id, turn->native,
                 res->finish[0] ? res->finish : "stop", rejection ? rejection : "-", candidate,
                 turn->st.rejections);
    }
    taskctx_rc_t rc = stepbundle_commit_batch(ctx, conn, &b, last);
    free(usage);
    return rc;
}

/* --- Model calls. --- */

typedef struct {
    taskctx_t *ctx;
    int64_t attempt;
    int64_t t0_us;     /* when the call began */
    bool first;        /* a part has arrived (time_to_first_token observed) */
    const char *model; /* the model config name (the step's state holds it) */
} s_stream_t;

static void s_on_part(void *arg, const char *part_json) {
    s_stream_t *s = arg;
    if (!s->first) {
        s->first = true;
        taskctx_stage_us(s->ctx, STAGE_TIME_TO_FIRST_TOKEN, id_now_us() - s->t0_us, s->model);
    }
    /* Best-effort: a full or closed episode drops the part (ARCHITECTURE.md §7.3). */
    (void)partbuf_add(s->ctx->env->partbuf, s->ctx->chat_id, s->ctx->fence.history_version,
                      s->attempt, "assistant", part_json, strlen(part_json));
}

/* The prompt: the model-visible rows, with the plan block first in plan mode (steer.h) and
 * the finalizer's instruction first when a request is open (neither is stored: ARCHITECTURE.md
 * §8). New reference. */
static json_t *s_prompt(const taskctx_options_t *opts, const history_t *h,
                        const structured_turn_t *turn) {
    json_t *prompt = json_array();
    if (h->plan_mode) {
        json_array_append_new(prompt, steer_plan_block(opts));
    }
    if (turn) {
        json_array_append_new(
            prompt,
            json_pack("{s:s, s:[{s:s, s:s}]}", "role", "system", "content", "type", "text", "text",
                      turn->native ? structured_native_instruction() : structured_instruction()));
    }
    size_t i;
    json_t *m;
    json_array_foreach(h->messages, i, m) {
        json_t *row = json_pack("{s:O, s:O}", "role", json_object_get(m, "role"), "content",
                                json_object_get(m, "content"));
        if (json_is_true(json_object_get(m, "control"))) {
            json_object_set_new(row, "control", json_true());
        }
        json_array_append_new(prompt, row);
    }
    return prompt;
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
    char *text = jsonout_dumps(j);
    json_decref(j);
    return text;
}

static int64_t s_backoff(const taskctx_env_t *env, int64_t attempt, const provider_result_t *res) {
    int64_t delay = env->opts.retry_base_ms;
    for (int64_t k = 1; k < attempt && delay < env->opts.retry_max_ms; k++) {
        delay *= 2;
    }
    delay = delay > env->opts.retry_max_ms ? env->opts.retry_max_ms : delay;
    return res->retry_after_ms >= 0 ? res->retry_after_ms : delay;
}

/* A failed model call: FinishError (with a generation_failed receipt when a request is
 * open) past the retry limit or for a non-retryable failure, else RecordRetryState and a
 * backoff (*delay_ms set: another attempt should follow it). */
static taskctx_rc_t s_model_failed(taskctx_t *ctx, PGconn *conn, const provider_model_t *model,
                                   const structured_turn_t *turn, provider_result_t *res,
                                   int64_t attempt, int64_t *delay_ms) {
    taskctx_env_t *env = ctx->env;
    *delay_ms = -1;
    atomic_fetch_add(&env->counters.model_errors, 1);
    atomic_fetch_add(&env->counters.model_errors_by_class[taskctx_error_class(res->status)], 1);
    bool give_up = !res->retryable || attempt > env->opts.max_retries;
    int64_t delay = s_backoff(env, attempt, res);
    char q[300];
    log_info("model_error",
             "chat_id=%s provider=%s attempt=%lld status=%d retryable=%d give_up=%d "
             "delay_ms=%lld reason=%s",
             ctx->chat_id, model->provider, (long long)attempt, res->status, res->retryable,
             give_up, (long long)delay, log_quote(res->error, q, sizeof q));
    char *ej = s_error_json(res, attempt, !give_up, delay);
    provider_result_clear(res);
    stepbundle_args_t a = {.fence = &ctx->fence, .error_json = ej};
    taskctx_rc_t rc;
    if (give_up) {
        if (turn) {
            a.receipt_id = turn->request_id;
            a.receipt_status = "failed";
            a.receipt_code = "generation_failed";
        }
        rc = taskctx_bundle(ctx, conn, stepbundle_finish_error, &a, "FinishError");
        if (rc == TASKCTX_DONE) {
            atomic_fetch_add(&env->counters.turns_failed, 1);
            taskctx_outcome(ctx, TURN_ERROR);
        }
        free(ej);
        return rc;
    }
    rc = taskctx_bundle(ctx, conn, stepbundle_record_retry, &a, "RecordRetryState");
    free(ej);
    if (rc == TASKCTX_DONE) {
        *delay_ms = delay;
    }
    return rc;
}

/* What a step that calls the model keeps between its phases (taskctx.h). */
typedef struct s_gen s_gen_t;
static taskctx_rc_t s_commit_summary(taskctx_t *ctx, PGconn *conn, provider_result_t *res);

struct s_gen {
    history_t h;
    structured_turn_t *turn; /* the open structured request, or NULL (most turns: its state
                                holds a 512-byte reason, kept out of every plain turn's) */
    provider_model_t model;
    const json_t *model_cfg; /* the config model was made from (in h): its prices, its window */
    const char *model_config_id;
    const char *effort; /* the call's reasoning effort (steer.h; a static name), or NULL */
    json_t *prompt;
    json_t *tools;
    s_stream_t stream;
    int64_t t0;             /* when the call began */
    bool prepared;          /* the step's prepare stage is observed */
    int64_t backoff_us;     /* when a retry's backoff began (0: none) */
    int64_t commit_backoff; /* the next wait before the reply's commit is tried again */
    const char *source;     /* a summary call (ARCHITECTURE.md §7.6): COMPACTION_MANUAL or
                               COMPACTION_AUTOMATIC; NULL for any other call */
    bool compact;           /* source is set */
    json_t *replay;         /* compact: the trailing user rows' contents, replayed after it */
    char call_id[COMPACTION_CALL_ID_MAX]; /* compact: the chat_summarized call's id */
    int64_t hooked_attempt; /* compact under hooks: the attempt the pre_compact hook holds */
};

static void s_gen_free(void *arg) {
    s_gen_t *g = arg;
    json_decref(g->prompt);
    json_decref(g->tools);
    json_decref(g->replay);
    if (g->turn) {
        structured_turn_close(g->turn);
        free(g->turn);
    }
    history_clear(&g->h);
    free(g);
}

static taskctx_rc_t s_attempt(taskctx_t *ctx, PGconn *conn);

/* Commits the reply in ctx->call_res. A database failure keeps the reply and tries this
 * phase again after a backoff: a reply in hand is never asked of the model twice (its
 * fences make a late commit as safe as the first). */
static taskctx_rc_t s_commit_phase(taskctx_t *ctx, PGconn *conn) {
    s_gen_t *g = ctx->body;
    provider_result_t *res = &ctx->call_res;
    json_t *kept = jsonnumber_deep_copy(res->content); /* batch_reply screens content in place */
    const json_t *plan = g->h.plan_mode ? g->tools : NULL;
    taskctx_rc_t rc =
        !conn        ? TASKCTX_RETRY
        : g->compact ? s_commit_summary(ctx, conn, res)
                     : s_commit_reply(ctx, conn, &g->h, g->turn, res, g->model_config_id, plan);
    if (rc != TASKCTX_RETRY) {
        json_decref(kept);
        provider_result_clear(res);
        taskctx_stage(ctx, g->compact ? STAGE_COMPACTION : STAGE_GENERATION_STEP, ctx->step_us);
        ctx->step_us = 0;
        return rc;
    }
    json_decref(res->content);
    res->content = kept;
    atomic_fetch_add(&ctx->env->counters.retries, 1);
    log_warn("commit_retry", "chat_id=%s attempt=%lld backoff_ms=%lld", ctx->chat_id,
             (long long)g->stream.attempt, (long long)g->commit_backoff);
    ctx->wait_ms = g->commit_backoff;
    g->commit_backoff = g->commit_backoff * 2 > TASKCTX_BACKOFF_MAX_MS ? TASKCTX_BACKOFF_MAX_MS
                                                                       : g->commit_backoff * 2;
    ctx->next = s_commit_phase;
    return TASKCTX_WAIT;
}

/* A summary without text would replace the history with nothing: it fails like a truncated
 * reply (retryable), so the usual retry budget applies. */
static void s_check_summary(taskctx_t *ctx) {
    char *text = compaction_summary_text(ctx->call_res.content);
    if (!text[0]) {
        provider_result_clear(&ctx->call_res);
        ctx->call_rc = provider_fail(&ctx->call_res, 0, true, -1, "summary: no text in the reply");
    }
    free(text);
}

/* The provider stages of the call that ended (not cancelled): provider_attempt, and stream
 * when it answered. */
static void s_observe_call(taskctx_t *ctx, const s_gen_t *g) {
    if (g->compact) { /* a summary is the compaction stage */
        return;
    }
    int64_t us = id_now_us() - g->stream.t0_us;
    taskctx_stage_us(ctx, STAGE_PROVIDER_ATTEMPT, us, g->model.name);
    if (ctx->call_rc == PROVIDER_OK) {
        taskctx_stage_us(ctx, STAGE_STREAM, us, g->model.name);
    }
}

/* The phase after a model call: commit the reply, or handle the failure. */
static taskctx_rc_t s_after_call(taskctx_t *ctx, PGconn *conn) {
    s_gen_t *g = ctx->body;
    taskctx_env_t *env = ctx->env;
    int64_t attempt = g->stream.attempt;
    int64_t ms = id_now_ms() - g->t0;
    taskctx_count_model_call(&env->counters, ms);
    partbuf_close(env->partbuf, ctx->chat_id, ctx->fence.history_version, attempt);
    if (ctx->call_rc == PROVIDER_CANCELLED) {
        return TASKCTX_QUIET;
    }
    s_observe_call(ctx, g);
    structured_turn_t *turn = g->turn;
    provider_result_t *res = &ctx->call_res;
    if (ctx->call_rc == PROVIDER_OK && g->compact) {
        s_check_summary(ctx);
    }
    if (ctx->call_rc == PROVIDER_OK) {
        taskctx_price(ctx, g->model_cfg, g->model.name);
        log_info("model_reply", "chat_id=%s provider=%s attempt=%lld ms=%lld parts=%zu finish=%s",
                 ctx->chat_id, g->model.provider, (long long)attempt, (long long)ms,
                 json_array_size(res->content), res->finish[0] ? res->finish : "stop");
        g->commit_backoff = TASKCTX_BACKOFF_MIN_MS;
        return s_commit_phase(ctx, conn);
    }
    if (!conn) {
        return TASKCTX_RETRY;
    }
    int64_t delay;
    taskctx_rc_t rc = s_model_failed(ctx, conn, &g->model, turn, res, attempt, &delay);
    if (rc == TASKCTX_DONE && delay >= 0) {
        ctx->wait_ms = delay;
        ctx->next = s_attempt;
        g->backoff_us = id_now_us();
        return TASKCTX_WAIT;
    }
    taskctx_stage(ctx, g->compact ? STAGE_COMPACTION : STAGE_GENERATION_STEP, ctx->step_us);
    ctx->step_us = 0;
    return rc;
}

/* A summary's text is not streamed (it shows its progress part). */
static void s_on_hidden_part(void *arg, const char *part_json) {
    (void)arg;
    (void)part_json;
}

/* The "Summarizing..." part of a summary call's episode (ARCHITECTURE.md §7.6). */
static void s_progress(taskctx_t *ctx, int64_t attempt) {
    s_gen_t *g = ctx->body;
    char *part = compaction_progress_part(g->call_id, g->source);
    (void)partbuf_add(ctx->env->partbuf, ctx->chat_id, ctx->fence.history_version, attempt,
                      "assistant", part, strlen(part));
    free(part);
}

/* The compaction CommitStep: the triplet, the replayed user rows, the request consumed. */
static taskctx_rc_t s_commit_summary(taskctx_t *ctx, PGconn *conn, provider_result_t *res) {
    s_gen_t *g = ctx->body;
    char *summary = compaction_summary_text(res->content);
    char *usage = res->usage ? jsonout_dumps(res->usage) : NULL;
    compaction_meta_t meta = {.call_id = g->call_id,
                              .source = g->source,
                              .usage = usage,
                              .model_config_id = g->model_config_id,
                              .summary_model = g->model.name,
                              .trigger = &g->h.trigger};
    compaction_step_t *step = compaction_step_new(summary, g->replay, &meta);
    stepbundle_args_t a = {.fence = &ctx->fence,
                           .automatic = !strcmp(g->source, COMPACTION_AUTOMATIC)};
    a.msgs = compaction_step_rows(step, &a.count);
    taskctx_rc_t rc =
        taskctx_bundle(ctx, conn, stepbundle_commit_compaction, &a, "CommitStep(compaction)");
    if (rc == TASKCTX_DONE) {
        log_info("compaction_committed",
                 "chat_id=%s source=%s summary_model=%s summary_bytes=%zu replayed=%zu"
                 " threshold_percent=%d trigger_context_limit_tokens=%lld",
                 ctx->chat_id, g->source, g->model.name, strlen(summary),
                 json_array_size(g->replay), g->h.trigger.threshold_percent,
                 (long long)g->h.trigger.trigger_limit);
    }
    compaction_step_destroy(&step);
    free(usage);
    free(summary);
    return rc;
}

/* The model call of a recorded attempt, as the next phase. */
static taskctx_rc_t s_start_call(taskctx_t *ctx, int64_t attempt) {
    s_gen_t *g = ctx->body;
    taskctx_env_t *env = ctx->env;
    ctx->fence.generation_attempt = attempt;
    int64_t hv = ctx->fence.history_version;
    (void)partbuf_create(env->partbuf, ctx->chat_id, hv, attempt);
    (void)partbuf_start_model(env->partbuf, ctx->chat_id, hv, attempt);
    structured_turn_t *turn = g->turn;
    ctx->call =
        (provider_request_t){.model = &g->model,
                             .messages = g->prompt,
                             .tools = g->tools,
                             .attempt = attempt,
                             .chunk_ms = env->opts.sim_chunk_ms,
                             .native_schema = turn && turn->native ? turn->fmt->schema : NULL,
                             .native_name = turn && turn->native ? turn->fmt->name : NULL,
                             .summary = g->compact,
                             .reasoning_effort = g->effort};
    g->stream = (s_stream_t){ctx, attempt, id_now_us(), false, g->model.name};
    if (!g->prepared) {
        g->prepared = true;
        taskctx_stage(ctx, STAGE_PREPARE, ctx->step_us);
    }
    if (g->compact) {
        s_progress(ctx, attempt);
    }
    ctx->on_part = g->compact ? s_on_hidden_part : s_on_part;
    ctx->part_arg = &g->stream;
    g->t0 = id_now_ms();
    atomic_fetch_add(&env->counters.model_calls, 1);
    ctx->next = s_after_call;
    return TASKCTX_CALL;
}

/* RecordGenerationAttempt, then the model call as the next phase. */
static taskctx_rc_t s_attempt(taskctx_t *ctx, PGconn *conn) {
    if (!conn) {
        return TASKCTX_RETRY;
    }
    s_gen_t *g = ctx->body;
    if (g->backoff_us) {
        taskctx_stage(ctx, STAGE_RETRY_BACKOFF, g->backoff_us);
        g->backoff_us = 0;
    }
    stepbundle_args_t a = {.fence = &ctx->fence};
    taskctx_rc_t rc =
        taskctx_bundle(ctx, conn, stepbundle_record_attempt, &a, "RecordGenerationAttempt");
    return rc == TASKCTX_DONE ? s_start_call(ctx, a.attempt) : rc;
}

static provider_call_t *s_pre_compact_start(taskctx_t *ctx, provider_done_fn *done, void *arg) {
    return toolstep_event_start(ctx, HOOKS_PRE_COMPACT, done, arg);
}

/* The phase after the pre_compact hook (§7.10): the summary call, or FinishError. */
static taskctx_rc_t s_after_pre_compact(taskctx_t *ctx, PGconn *conn) {
    taskctx_rc_t rc;
    s_gen_t *g = ctx->body;
    if (ctx->call_rc == PROVIDER_OK) {
        /* The context the answer added guides the summary (§7.10). */
        compaction_guide(g->prompt, ctx->call_res.content);
    }
    if (toolstep_event_ended(ctx, conn, &rc)) {
        return rc;
    }
    return s_start_call(ctx, g->hooked_attempt);
}

/* Frees what of h only the request was built from (the prompt and the tools hold it, and a
 * retry reuses them), so that a turn in flight does not keep it for the minute its reply may
 * stream (ARCHITECTURE.md §6.5): the messages, the title and MCP configs, and the summarizer
 * unless the call is the summary. */
static void s_drop_sources(history_t *h, bool compact) {
    json_decref(h->messages);
    json_decref(h->title_model);
    json_decref(h->mcp_servers);
    h->messages = h->title_model = h->mcp_servers = NULL;
    if (!compact) {
        json_decref(h->summarizer);
        h->summarizer = NULL;
    }
}

/* Takes h and turn over into the step's state and starts the first attempt (recorded
 * already when attempt > 0). source: a summary call of that compaction source (on the
 * compaction model override when one resolves, ARCHITECTURE.md §7.6), or NULL. */
static taskctx_rc_t s_call_model(taskctx_t *ctx, PGconn *conn, history_t *h,
                                 structured_turn_t *turn, bool open, int64_t attempt,
                                 const char *source) {
    bool compact = source != NULL;
    if (!json_is_object(h->model)) {
        return stepbundle_fail_request(ctx, conn, open ? turn->request_id : NULL,
                                       "configuration_error", "config",
                                       "no model config is available");
    }
    s_gen_t *g = mem_calloc(1, sizeof *g);
    g->h = *h;
    *h = (history_t){0};
    if (open) {
        g->turn = mem_calloc(1, sizeof *g->turn);
        *g->turn = *turn;
        *turn = (structured_turn_t){0};
        g->turn->request_id = g->h.request_id; /* it borrowed from the history that moved */
    }
    /* The override makes only the summary: the rows keep the chat's model. */
    g->model_cfg = compact && g->h.summarizer ? g->h.summarizer : g->h.model;
    provider_model_of(g->model_cfg, &g->model);
    g->model_config_id = json_string_value(json_object_get(g->h.model, "id"));
    g->compact = compact;
    g->source = source;
    if (compact && compaction_call_id(g->call_id) != 0) {
        ctx->body = g;
        ctx->body_free = s_gen_free;
        return TASKCTX_RETRY; /* no randomness: try the step again later */
    }
    g->prompt = compact ? compaction_prompt(g->h.messages, &g->replay)
                        : s_prompt(&ctx->env->opts, &g->h, g->turn);
    g->tools = compact ? json_array() : steer_tools(ctx->env, &g->h, g->turn);
    g->effort = compact ? NULL : steer_effort(&g->h); /* a summary is no turn of the chat's */
    ctx->body = g;
    ctx->body_free = s_gen_free;
    if (!compact) {
        titlestep_ask(ctx, &g->h); /* beside this call, not before it (§7.8) */
    }
    s_drop_sources(&g->h, compact);
    if (compact && attempt > 0 && hooks_enabled(ctx->env->hooks)) {
        g->hooked_attempt = attempt;             /* pre_compact first (§7.10) */
        ctx->fence.generation_attempt = attempt; /* recorded in the read's bundle */
        ctx->call_start = s_pre_compact_start;
        ctx->next = s_after_pre_compact;
        return TASKCTX_CALL;
    }
    return attempt > 0 ? s_start_call(ctx, attempt) : s_attempt(ctx, conn);
}

/* The structured side of a step: configuration failures, and the decisions that end the
 * request or commit feedback instead of the ordinary step. Returns true when it handled the
 * step (*rc set). */
static bool s_structured_step(taskctx_t *ctx, PGconn *conn, const history_t *h,
                              structured_turn_t *turn, bool *open, decide_t d, unsigned heard,
                              taskctx_rc_t *rc) {
    char why[STRUCTURED_ERROR_MAX];
    /* The stop answer heard before this read is this step's to use, and only this step's. */
    json_t *stop = ctx->stop_answer;
    ctx->stop_answer = NULL;
    if (structured_turn_open(turn, h->request_id, h->response_format, h->evidence, h->dynamic_tools,
                             why, sizeof why) != 0) {
        json_decref(stop);
        log_warn("structured_config", "chat_id=%s request_id=%s reason=%s", ctx->chat_id,
                 h->request_id, why);
        *rc =
            stepbundle_fail_request(ctx, conn, h->request_id, "configuration_error", "config", why);
        return true;
    }
    *open = true;
    /* Derived each step from the model config and the chat's tools, like the rest. */
    turn->native = structured_native(h->model, h->dynamic_tools);
    if (d != DECIDE_CALL_MODEL && d != DECIDE_FINISH_TURN) {
        json_decref(stop);
        return false;
    }
    structured_decision_t sd =
        structured_decide(&turn->st, d == DECIDE_FINISH_TURN, (long long)ctx->env->opts.max_steps);
    log_info("structured_decision",
             "chat_id=%s request_id=%s native=%d steps=%d rejections=%d candidate=%d"
             " decision=%s",
             ctx->chat_id, turn->request_id, turn->native, turn->st.steps, turn->st.rejections,
             turn->st.candidate != NULL, structured_decision_name(sd));
    if (sd == STRUCTURED_CONTINUE) {
        json_decref(stop);
        return false;
    }
    /* The request's end (not feedback, after which the turn goes on): stop first; its answer
     * may continue the request once, or adds its user_context to the receipt's bundle. */
    if (sd != STRUCTURED_FEEDBACK && hooks_enabled(ctx->env->hooks) &&
        !(heard & TOOLSTEP_HEARD_STOP)) {
        *rc = toolstep_hear(ctx, HOOKS_STOP,
                            json_pack("{s:s, s:s}", "request_id", turn->request_id, "outcome",
                                      structured_decision_name(sd)),
                            heard | TOOLSTEP_HEARD_STOP, turn->request_id, s_step);
        json_decref(stop);
        return true;
    }
    *rc = stepbundle_turn_end(ctx, conn, turn, sd, stop);
    json_decref(stop);
    return true;
}

/* The terminal "still over limit" error (ARCHITECTURE.md §7.6), with a failed receipt when a
 * structured request is open. */
static taskctx_rc_t s_over_limit(taskctx_t *ctx, PGconn *conn, const compaction_trigger_t *t,
                                 int64_t tokens, const char *request_id) {
    char *ej = compaction_over_limit_error(t, tokens);
    log_warn(
        "compaction_over_limit",
        "chat_id=%s context_tokens=%lld threshold_percent=%d trigger_context_limit_tokens=%lld",
        ctx->chat_id, (long long)tokens, t->threshold_percent, (long long)t->trigger_limit);
    taskctx_rc_t rc = stepbundle_finish_failed(ctx, conn, request_id, "generation_failed", ej);
    free(ej);
    return rc;
}

/* What a step's first bundle read, decided and recorded. */
typedef struct {
    taskctx_t *ctx;
    PGconn *conn;
    history_rc_t hr;
    history_t h;
    decide_t d;
    json_t *pending;
    int64_t attempt;   /* > 0: RecordGenerationAttempt is in the bundle */
    int64_t tokens;    /* the latest context size the automatic gate read (-1: none) */
    bool automatic;    /* DECIDE_COMPACT came from the automatic gate */
    unsigned heard;    /* hook events heard before this read (S_HEARD_*) */
    bool post_compact; /* post_compact is due first: the read wrote nothing */
} s_read_t;

/* The step's reads under the chat row lock and, when the step is a plain model call (no
 * structured request, a model to call), RecordGenerationAttempt in the same transaction:
 * one transaction where a read snapshot and a bundle were two. Anything else writes
 * nothing here (the bundle rolls back) and goes on as its own bundles. */
static int s_read_step(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_read_t *r = arg;
    taskctx_t *ctx = r->ctx;
    r->hr = history_read_locked(r->conn, ctx->chat_id, &ctx->fence, &ctx->env->opts.compaction,
                                ctx->env->opts.title_model, &r->h);
    if (r->hr != HISTORY_OK) {
        return TASKCTX_BUNDLE_EMPTY;
    }
    /* Every write of this step also fences the attempt it read. */
    ctx->fence.generation_attempt = r->h.generation_attempt;
    /* A compaction that is the latest history change has not been announced yet in this
     * task: post_compact first, with nothing recorded (a step made again after a takeover
     * sends it again, with the same id). */
    r->post_compact = !(r->heard & TOOLSTEP_HEARD_POST_COMPACT) && hooks_enabled(ctx->env->hooks) &&
                      r->h.summary && r->h.summary_revision == r->h.history_version;
    if (r->post_compact) {
        return TASKCTX_BUNDLE_EMPTY;
    }
    bool resume = r->h.summary && !strcmp(s_str(r->h.summary, "source"), COMPACTION_AUTOMATIC);
    unsigned flags = (r->h.compaction_requested ? HISTORY_COMPACTION_REQUESTED : 0) |
                     (resume ? HISTORY_RESUME_AFTER_SUMMARY : 0);
    r->d = history_decide(r->h.messages, r->h.dynamic_tools, ctx->env->opts.max_steps, flags,
                          &r->pending);
    /* The automatic gate, while preparing a model call (ARCHITECTURE.md §7.6). */
    if (r->d == DECIDE_CALL_MODEL) {
        compaction_gate_t gate =
            compaction_gate(r->h.messages, r->h.summary, &r->h.trigger, &r->tokens);
        r->automatic = gate == COMPACTION_GATE_RUN;
        r->d = gate == COMPACTION_GATE_RUN          ? DECIDE_COMPACT
               : gate == COMPACTION_GATE_OVER_LIMIT ? DECIDE_OVER_LIMIT
                                                    : r->d;
    }
    bool plain = r->d == DECIDE_COMPACT || (r->d == DECIDE_CALL_MODEL && !r->h.request_id[0]);
    if (!plain || !json_is_object(r->h.model)) {
        return TASKCTX_BUNDLE_EMPTY;
    }
    return chatstate_record_generation_attempt(cs, &ctx->fence, &r->attempt, err);
}

/* The chat's kind for the stages, the turn this task joins, and the acquisition stage when
 * this is the first step of a prompt's turn (the latest row is the prompt, no attempt made
 * yet): from the row's creation to now, on the database's clock; with queue_wait, from its
 * queueing to its promotion, when it was queued. */
static void s_observe_acquisition(taskctx_t *ctx, const history_t *h) {
    taskctx_set_turn(ctx, h->subagent, &h->trace, h->trigger_age_us, h->trigger_id);
    size_t n = json_array_size(h->messages);
    const json_t *last = n ? json_array_get(h->messages, n - 1) : NULL;
    if (h->generation_attempt == 0 && h->trigger_age_us >= 0 &&
        !strcmp(s_str(last, "role"), "user") &&
        json_integer_value(json_object_get(last, "id")) == h->trigger_id) {
        taskctx_stage_us(ctx, STAGE_ACQUISITION, h->trigger_age_us, NULL);
        if (h->trigger_queued_us >= 0) {
            taskctx_stage_us(ctx, STAGE_QUEUE_WAIT, h->trigger_queued_us, NULL);
        }
    }
}

taskctx_rc_t generation_step(taskctx_t *ctx, PGconn *conn) {
    return s_step(ctx, conn, 0);
}

/* The step, with the hook events in heard already dispatched in this task. */
static taskctx_rc_t s_step(taskctx_t *ctx, PGconn *conn, unsigned heard) {
    if (!conn) {
        return TASKCTX_RETRY;
    }
    ctx->fence.generation_attempt = -1;
    taskctx_flush_turn(ctx); /* a turn closed by a step that ended elsewhere */
    ctx->step_us = id_now_us();
    s_read_t r = {.ctx = ctx, .conn = conn, .hr = HISTORY_DB, .tokens = -1, .heard = heard};
    taskctx_rc_t brc = taskctx_bundle(ctx, conn, s_read_step, &r, "RecordGenerationAttempt");
    if (brc != TASKCTX_DONE || r.hr != HISTORY_OK) {
        if (r.hr == HISTORY_FENCED) {
            atomic_fetch_add(&ctx->env->counters.fence_rejects, 1);
        }
        json_decref(r.pending);
        history_clear(&r.h);
        return brc != TASKCTX_DONE ? brc : r.hr == HISTORY_DB ? TASKCTX_RETRY : TASKCTX_QUIET;
    }
    if (r.post_compact) {
        json_t *data = json_pack("{s:O?, s:O?}", "source", json_object_get(r.h.summary, "source"),
                                 "summary", json_object_get(r.h.summary, "summary"));
        json_decref(r.pending);
        history_clear(&r.h);
        return toolstep_hear(ctx, HOOKS_POST_COMPACT, data, heard | TOOLSTEP_HEARD_POST_COMPACT,
                             NULL, s_step);
    }
    history_t h = r.h;
    json_t *pending = r.pending;
    decide_t d = r.d;
    s_observe_acquisition(ctx, &h);
    const char *effort = steer_effort(&h);
    log_info("generation_step",
             "chat_id=%s history_version=%lld attempt=%lld decision=%s context_tokens=%lld"
             " effort=%s plan_mode=%d trace_id=%s",
             ctx->chat_id, (long long)h.history_version, (long long)h.generation_attempt,
             history_decision_name(d), (long long)r.tokens, effort ? effort : "-", h.plan_mode,
             h.trace.trace_id[0] ? h.trace.trace_id : "-");
    taskctx_rc_t rc = TASKCTX_QUIET;
    structured_turn_t turn = {0};
    bool open = false;
    /* A compaction is no step of the structured request: it neither offers the finalizer nor
     * counts toward its budget. */
    bool handled = d != DECIDE_COMPACT && h.request_id[0] &&
                   s_structured_step(ctx, conn, &h, &turn, &open, d, heard, &rc);
    structured_turn_t *t = open ? &turn : NULL;
    stepbundle_args_t a = {.fence = &ctx->fence};
    switch (handled ? -1 : (int)d) {
        case DECIDE_RUN_LOCAL:
            rc = toolstep_run_pending(ctx, conn, pending, &h, t);
            break;
        case DECIDE_REQUIRES_ACTION:
            rc = taskctx_bundle(ctx, conn, stepbundle_enter_ra, &a, "EnterRequiresAction");
            if (rc == TASKCTX_DONE) { /* the turn is the client's now (the seed's Complete) */
                taskctx_outcome(ctx, TURN_COMPLETED);
            }
            break;
        case DECIDE_AGENT_WAIT:
            rc = taskctx_bundle(ctx, conn, stepbundle_enter_agent_wait, &a, "EnterAgentWait");
            if (rc == TASKCTX_DONE) { /* EnterRequiresAction that lets the chat go */
                taskctx_outcome(ctx, TURN_COMPLETED);
            }
            break;
        case DECIDE_FINISH_TURN:
            if (hooks_enabled(ctx->env->hooks)) { /* the stop hook first (§7.10) */
                rc = toolstep_stop(ctx, h.messages);
                break;
            }
            rc = taskctx_bundle(ctx, conn, stepbundle_finish_turn, &a, "FinishTurn");
            if (rc == TASKCTX_DONE) {
                atomic_fetch_add(&ctx->env->counters.turns_finished, 1);
                taskctx_outcome(ctx, TURN_COMPLETED);
            }
            break;
        case DECIDE_OVER_LIMIT:
            rc = s_over_limit(ctx, conn, &h.trigger, r.tokens, open ? turn.request_id : NULL);
            break;
        case DECIDE_CALL_MODEL:
            rc = s_call_model(ctx, conn, &h, &turn, open, r.attempt, NULL);
            break;
        case DECIDE_COMPACT:
            rc = s_call_model(ctx, conn, &h, &turn, open, r.attempt,
                              r.automatic ? COMPACTION_AUTOMATIC : COMPACTION_MANUAL);
            break;
        default:
            break;
    }
    structured_turn_close(&turn);
    json_decref(pending);
    history_clear(&h);
    if (rc != TASKCTX_CALL && rc != TASKCTX_WAIT && ctx->step_us) { /* the step ended here */
        taskctx_stage(ctx, STAGE_GENERATION_STEP, ctx->step_us);
        ctx->step_us = 0;
    }
    return rc;
}
