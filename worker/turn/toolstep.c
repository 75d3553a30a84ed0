/* toolstep: see toolstep.h. */
#include "toolstep.h"
#include "agents.h"
#include "batch.h"
#include "hookstep.h"
#include "log.h"
#include "mcpset.h"
#include "mem.h"
#include "stepbundle.h"
#include "steer.h"
#include "toolfiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *s_str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* A step's MCP calls between their phases (ARCHITECTURE.md §7.9). */
typedef struct {
    json_t *calls;   /* the pending MCP calls */
    json_t *enabled; /* the chat's MCP servers */
    bool hooked;     /* under pre_tool_use and post_tool_use (ARCHITECTURE.md §7.10) */
    char request_id[ID_UUID_LEN + 1]; /* hooked: the open request a failed hook fails */
} s_mcp_t;

static void s_mcp_free(void *arg) {
    s_mcp_t *m = arg;
    json_decref(m->calls);
    json_decref(m->enabled);
    free(m);
}

static provider_call_t *s_mcp_start(taskctx_t *ctx, provider_done_fn *done, void *arg) {
    s_mcp_t *m = ctx->body;
    if (m->hooked) {
        return hookstep_start(ctx->env->hooks, ctx->env->loop, ctx->chat_id,
                              ctx->fence.history_version, m->calls, ctx->env->mcp, m->enabled, done,
                              arg);
    }
    return mcpset_start(ctx->env->mcp, ctx->env->loop, m->calls, m->enabled, done, arg);
}

static taskctx_rc_t s_hook_failed(taskctx_t *ctx, PGconn *conn, const char *request_id);

/* The phase after the MCP calls: their results in one CommitStep. A database failure runs
 * the step again from its read (the calls are made again; the fence lets one result in). */
static taskctx_rc_t s_mcp_commit(taskctx_t *ctx, PGconn *conn) {
    s_mcp_t *m = ctx->body;
    if (ctx->call_rc == PROVIDER_CANCELLED) {
        return TASKCTX_QUIET;
    }
    if (conn && m->hooked && ctx->call_rc == PROVIDER_ERROR) { /* fail closed (§7.10) */
        return s_hook_failed(ctx, conn, m->request_id[0] ? m->request_id : NULL);
    }
    if (!conn || ctx->call_rc != PROVIDER_OK) {
        return TASKCTX_RETRY;
    }
    /* A tool's images become the chat's files, linked by the CommitStep (toolfiles.h). */
    json_t *stored = json_array();
    if (toolfiles_store(conn, ctx->chat_id, ctx->call_res.content, stored) != 0) {
        toolfiles_discard(conn, stored);
        json_decref(stored);
        provider_result_clear(&ctx->call_res);
        return TASKCTX_RETRY;
    }
    batch_t *b = batch_new();
    batch_pending(b, m->calls, NULL, NULL, ctx->call_res.content);
    batch_hook_context(b, m->calls, ctx->call_res.content);
    log_info("mcp_results", "chat_id=%s calls=%zu files=%zu", ctx->chat_id,
             json_array_size(m->calls), json_array_size(stored));
    provider_result_clear(&ctx->call_res);
    taskctx_rc_t rc = stepbundle_commit_batch(ctx, conn, &b, false);
    if (rc != TASKCTX_DONE) {
        toolfiles_discard(conn, stored);
    }
    json_decref(stored);
    return rc;
}

/* A failed hook call (ARCHITECTURE.md §7.10, fail closed): FinishError with the hook's error,
 * and the failed receipt of request_id when one is open. */
static taskctx_rc_t s_hook_failed(taskctx_t *ctx, PGconn *conn, const char *request_id) {
    char q[300];
    log_warn("hook_step_failed", "chat_id=%s reason=%s", ctx->chat_id,
             log_quote(ctx->call_res.error, q, sizeof q));
    taskctx_rc_t rc =
        stepbundle_fail_request(ctx, conn, request_id, request_id ? "generation_failed" : NULL,
                                "hook_dispatch_failed", ctx->call_res.error);
    provider_result_clear(&ctx->call_res);
    return rc;
}

/* A step's local tool calls under the lifecycle hooks (ARCHITECTURE.md §7.10). */
typedef struct {
    json_t *calls;                    /* the pending local calls */
    char request_id[ID_UUID_LEN + 1]; /* the open structured request, or "" */
} s_hooked_t;

static void s_hooked_free(void *arg) {
    s_hooked_t *m = arg;
    json_decref(m->calls);
    free(m);
}

static provider_call_t *s_hooked_start(taskctx_t *ctx, provider_done_fn *done, void *arg) {
    s_hooked_t *m = ctx->body;
    return hookstep_start(ctx->env->hooks, ctx->env->loop, ctx->chat_id, ctx->fence.history_version,
                          m->calls, NULL, NULL, done, arg);
}

/* The phase after the hooked tools: their results in one CommitStep, or FinishError when a
 * hook failed (fail closed). A database failure runs the step again, hooks included: the
 * consumer sees the same event ids again. */
static taskctx_rc_t s_hooked_commit(taskctx_t *ctx, PGconn *conn) {
    s_hooked_t *m = ctx->body;
    if (ctx->call_rc == PROVIDER_CANCELLED) {
        return TASKCTX_QUIET;
    }
    if (!conn) {
        return TASKCTX_RETRY;
    }
    if (ctx->call_rc != PROVIDER_OK) {
        return s_hook_failed(ctx, conn, m->request_id[0] ? m->request_id : NULL);
    }
    batch_t *b = batch_new();
    batch_set_hooked(b, true);
    batch_pending(b, m->calls, NULL, NULL, ctx->call_res.content);
    batch_hook_context(b, m->calls, ctx->call_res.content);
    provider_result_clear(&ctx->call_res);
    return stepbundle_commit_batch(ctx, conn, &b, false);
}

/* One hook event of the step as its call (hookstep_event_start), {history_version} its data. */
provider_call_t *toolstep_event_start(taskctx_t *ctx, hooks_event_t event, provider_done_fn *done,
                                      void *arg) {
    json_t *p = json_pack("{s:I}", "history_version", (json_int_t)ctx->fence.history_version);
    provider_call_t *call =
        hookstep_event_start(ctx->env->hooks, ctx->env->loop, event, ctx->chat_id,
                             ctx->fence.history_version, p, done, arg);
    json_decref(p);
    return call;
}

/* In the phase after a hook event: true when the phase ends here (*rc: cancelled, no
 * connection, or FinishError for a failed hook); false when the hook passed (the answer's
 * context in ctx->call_res is cleared then; read it first). */
bool toolstep_event_ended(taskctx_t *ctx, PGconn *conn, taskctx_rc_t *rc) {
    if (ctx->call_rc == PROVIDER_CANCELLED) {
        *rc = TASKCTX_QUIET;
    } else if (!conn) {
        *rc = TASKCTX_RETRY;
    } else if (ctx->call_rc != PROVIDER_OK) {
        *rc = s_hook_failed(ctx, conn, NULL);
    } else {
        provider_result_clear(&ctx->call_res);
        return false;
    }
    return true;
}

static provider_call_t *s_stop_start(taskctx_t *ctx, provider_done_fn *done, void *arg) {
    return toolstep_event_start(ctx, HOOKS_STOP, done, arg);
}

static void s_json_free(void *arg) {
    json_decref(arg);
}

/* Whether the turn went on once already after a stop hook's model_context: a stop context
 * row since the user's latest prompt (§7.10: a stop continues a turn once). */
static bool s_stop_continued(const json_t *messages) {
    for (size_t i = json_array_size(messages); i-- > 0;) {
        const json_t *m = json_array_get(messages, i);
        if (!strcmp(s_str(m, "hook"), "stop")) {
            return true;
        }
        if (!strcmp(s_str(m, "role"), "user") && !json_is_true(json_object_get(m, "control"))) {
            return false;
        }
    }
    return false;
}

/* The phase after the stop hook: FinishTurn with the user_context the answer added; or, when
 * it added model_context and the turn has not gone on once already, that context committed
 * (the turn goes on: the next step calls the model); or FinishError when the hook failed. */
static taskctx_rc_t s_stop_commit(taskctx_t *ctx, PGconn *conn) {
    taskctx_rc_t rc;
    json_t *answer = json_incref(ctx->call_res.content);
    if (toolstep_event_ended(ctx, conn, &rc)) {
        json_decref(answer);
        return rc;
    }
    bool again = !ctx->body && json_object_get(answer, "model_context");
    batch_t *b = batch_new();
    batch_event_context(b, answer, "stop", again);
    json_decref(answer);
    stepbundle_args_t a = {.fence = &ctx->fence};
    a.msgs = batch_rows(b, &a.count);
    if (again) {
        log_info("stop_continues", "chat_id=%s", ctx->chat_id);
        rc = taskctx_bundle(ctx, conn, stepbundle_commit_step, &a, "CommitStep(stop context)");
    } else {
        rc = taskctx_bundle(ctx, conn, stepbundle_finish_turn, &a, "FinishTurn");
        if (rc == TASKCTX_DONE) {
            atomic_fetch_add(&ctx->env->counters.turns_finished, 1);
            taskctx_outcome(ctx, TURN_COMPLETED);
        }
    }
    batch_destroy(&b);
    return rc;
}

taskctx_rc_t toolstep_stop(taskctx_t *ctx, const json_t *messages) {
    if (s_stop_continued(messages)) {
        ctx->body = json_true(); /* went on once: a model_context ends it now */
        ctx->body_free = s_json_free;
    }
    ctx->call_start = s_stop_start;
    ctx->next = s_stop_commit;
    return TASKCTX_CALL;
}

/* Hook events a step hears before it decides on a fresh read (ARCHITECTURE.md §7.10):
 * post_compact once a compaction is the chat's latest history change, and stop before a
 * structured request's end. The event is the step's call; the phase after reads and decides
 * again with the event marked heard (the fence makes that read the same history), or ends the
 * turn in error when the hook failed. */
typedef struct {
    toolstep_step_fn *step; /* the step to run again once the event is heard */
    unsigned heard;         /* with this event's bit, for the read after it */
    hooks_event_t event;
    json_t *data;
    char request_id[ID_UUID_LEN + 1]; /* stop: the request whose receipt a failure writes */
} s_heard_t;

static void s_heard_free(void *arg) {
    s_heard_t *h = arg;
    json_decref(h->data);
    free(h);
}

static provider_call_t *s_heard_start(taskctx_t *ctx, provider_done_fn *done, void *arg) {
    s_heard_t *h = ctx->body;
    return hookstep_event_start(ctx->env->hooks, ctx->env->loop, h->event, ctx->chat_id,
                                ctx->fence.history_version, h->data, done, arg);
}

/* The phase after a heard event: the step again, or FinishError when the hook failed. */
static taskctx_rc_t s_after_heard(taskctx_t *ctx, PGconn *conn) {
    s_heard_t *h = ctx->body;
    if (ctx->call_rc == PROVIDER_CANCELLED) {
        return TASKCTX_QUIET;
    }
    if (!conn) {
        return TASKCTX_RETRY;
    }
    if (ctx->call_rc != PROVIDER_OK) {
        return s_hook_failed(ctx, conn, h->request_id[0] ? h->request_id : NULL);
    }
    if (h->event == HOOKS_POST_COMPACT && json_object_size(ctx->call_res.content) > 0) {
        /* Its context after the triplet; the step that follows reads it (§7.10). */
        batch_t *b = batch_new();
        batch_event_context(b, ctx->call_res.content, "post_compact", true);
        provider_result_clear(&ctx->call_res);
        stepbundle_args_t a = {.fence = &ctx->fence};
        a.msgs = batch_rows(b, &a.count);
        taskctx_rc_t rc =
            taskctx_bundle(ctx, conn, stepbundle_commit_step, &a, "CommitStep(post_compact)");
        batch_destroy(&b);
        return rc;
    }
    if (h->event == HOOKS_STOP) { /* the structured step decides what it adds (§7.10) */
        json_decref(ctx->stop_answer);
        ctx->stop_answer = json_incref(ctx->call_res.content);
    }
    provider_result_clear(&ctx->call_res);
    unsigned heard = h->heard;
    toolstep_step_fn *step = h->step;
    ctx->body_free(ctx->body);
    ctx->body = NULL;
    ctx->body_free = NULL;
    return step(ctx, conn, heard);
}

/* Makes event (data stolen, {history_version} added) the step's call; TASKCTX_CALL. */
taskctx_rc_t toolstep_hear(taskctx_t *ctx, hooks_event_t event, json_t *data, unsigned heard,
                           const char *request_id, toolstep_step_fn *step) {
    s_heard_t *h = mem_calloc(1, sizeof *h);
    h->event = event;
    h->step = step;
    h->heard = heard;
    h->data = data;
    json_object_set_new(data, "history_version", json_integer(ctx->fence.history_version));
    snprintf(h->request_id, sizeof h->request_id, "%s", request_id ? request_id : "");
    ctx->body = h;
    ctx->body_free = s_heard_free;
    ctx->call_start = s_heard_start;
    ctx->next = s_after_heard;
    log_info("hook_event", "chat_id=%s hook=%s history_version=%lld", ctx->chat_id,
             hooks_event_name(event), (long long)ctx->fence.history_version);
    return TASKCTX_CALL;
}

/* With hooks on, the pending local calls (not MCP, dynamic or the finalizer) as a new array,
 * or NULL when there are none or hooks are off. */
static json_t *s_hooked_calls(const taskctx_t *ctx, const json_t *pending, const history_t *h) {
    if (!hooks_enabled(ctx->env->hooks)) {
        return NULL;
    }
    json_t *local = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(pending, i, c) {
        if (batch_runs_locally(h->dynamic_tools, s_str(c, "tool_name"))) {
            json_array_append(local, c);
        }
    }
    if (json_array_size(local) == 0) {
        json_decref(local);
        return NULL;
    }
    return local;
}

/* Runs the pending subagent calls but wait_agent (agents.h; pending holds no dynamic call)
 * with conn, in call order. Returns their answers ({tool_call_id: {"result", "is_error"}}),
 * the calls in *calls; NULL when there are none, or (*failed) when the database failed. */
static json_t *s_agent_answers(taskctx_t *ctx, PGconn *conn, const json_t *pending, json_t **calls,
                               bool *failed) {
    const taskctx_options_t *o = &ctx->env->opts;
    agents_ctx_t a = {.chat_id = ctx->chat_id,
                      .settings = &ctx->env->chat_settings,
                      .sink = &ctx->env->sink,
                      .max_depth = (int)o->subagent_max_depth,
                      .max_children = (int)o->subagent_max_children,
                      .max_queue = (int)o->queue_max};
    json_t *answers = json_object();
    *calls = json_array();
    *failed = false;
    size_t i;
    json_t *c;
    json_array_foreach(pending, i, c) {
        const char *name = s_str(c, "tool_name");
        if (!agents_is_tool(name) || !strcmp(name, CS_AGENT_WAIT_TOOL)) {
            continue;
        }
        /* The prompt a spawn or a message makes is in this turn's trace, a child of the call's
         * tool_call span, so the child's turn joins it (ARCHITECTURE.md §7.11). */
        char span[TRACE_SPAN_HEX + 1];
        char tp[TRACE_PARENT_LEN + 1];
        taskctx_child_trace(ctx, span, tp);
        a.traceparent = tp[0] ? tp : NULL;
        int64_t t0 = id_now_us();
        bool is_error = false;
        json_t *result = agents_run(conn, &a, c, &is_error);
        taskctx_stage_as(ctx, STAGE_TOOL_CALL, t0, span);
        if (!result) {
            *failed = true;
            break;
        }
        json_object_set_new(answers, s_str(c, "tool_call_id"),
                            json_pack("{s:o, s:b}", "result", result, "is_error", is_error));
        json_array_append(*calls, c);
    }
    if (*failed || json_array_size(*calls) == 0) {
        json_decref(answers);
        json_decref(*calls);
        *calls = NULL;
        return NULL;
    }
    log_info("agent_calls", "chat_id=%s calls=%zu", ctx->chat_id, json_array_size(*calls));
    return answers;
}

/* Plan mode (steer.h): the pending calls of tools it withholds, made before it was turned on
 * (a reply's own are answered in its step, batch_set_plan), answered with an error in a
 * CommitStep of their own and never run. false when there are none (or plan mode is off). */
static bool s_plan_refused(taskctx_t *ctx, PGconn *conn, const json_t *pending, const history_t *h,
                           const structured_turn_t *turn, taskctx_rc_t *rc) {
    if (!h->plan_mode) {
        return false;
    }
    json_t *offer = steer_tools(ctx->env, h, turn);
    json_t *withheld = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(pending, i, c) {
        const char *name = s_str(c, "tool_name");
        if (strcmp(name, OUTFORMAT_FINALIZER) != 0 && !steer_offers(offer, name)) {
            json_array_append(withheld, c);
        }
    }
    bool any = json_array_size(withheld) > 0;
    if (any) {
        log_info("plan_mode_refused", "chat_id=%s calls=%zu", ctx->chat_id,
                 json_array_size(withheld));
        batch_t *b = batch_new();
        batch_set_plan(b, offer);
        batch_pending(b, withheld, h->dynamic_tools, turn, NULL);
        *rc = stepbundle_commit_batch(ctx, conn, &b, false);
    }
    json_decref(withheld);
    json_decref(offer);
    return any;
}

/* Pending calls read back from history (DECIDE_RUN_LOCAL): local ones answered here; once
 * only MCP calls are left, they are made on the loop with no connection held, and the phase
 * after commits their results. In plan mode, the calls of tools it withholds are answered
 * with an error first. */
taskctx_rc_t toolstep_run_pending(taskctx_t *ctx, PGconn *conn, const json_t *pending,
                                  const history_t *h, const structured_turn_t *turn) {
    taskctx_rc_t refused = TASKCTX_RETRY;
    if (s_plan_refused(ctx, conn, pending, h, turn, &refused)) {
        return refused;
    }
    json_t *calls = NULL;
    bool failed = false;
    json_t *answers = s_agent_answers(ctx, conn, pending, &calls, &failed);
    if (failed) {
        return TASKCTX_RETRY;
    }
    if (answers) { /* subagent calls first, unhooked, in a CommitStep of their own */
        batch_t *b = batch_new();
        batch_pending(b, calls, h->dynamic_tools, turn, answers);
        json_decref(calls);
        json_decref(answers);
        return stepbundle_commit_batch(ctx, conn, &b, false);
    }
    json_t *local = s_hooked_calls(ctx, pending, h);
    if (local) {
        s_hooked_t *hk = mem_calloc(1, sizeof *hk);
        hk->calls = local;
        snprintf(hk->request_id, sizeof hk->request_id, "%s", turn ? turn->request_id : "");
        ctx->body = hk;
        ctx->body_free = s_hooked_free;
        ctx->call_start = s_hooked_start;
        ctx->next = s_hooked_commit;
        log_info("hooked_calls", "chat_id=%s calls=%zu", ctx->chat_id, json_array_size(local));
        return TASKCTX_CALL;
    }
    json_t *mcp = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(pending, i, c) {
        if (mcpset_is_tool(s_str(c, "tool_name"))) {
            json_array_append(mcp, c);
        }
    }
    if (json_array_size(mcp) < json_array_size(pending)) {
        json_decref(mcp);
        batch_t *b = batch_new();
        batch_set_task(b, ctx);
        batch_pending(b, pending, h->dynamic_tools, turn, NULL);
        return stepbundle_commit_batch(ctx, conn, &b, false);
    }
    s_mcp_t *m = mem_calloc(1, sizeof *m);
    m->calls = mcp;
    m->enabled = json_incref(h->mcp_servers);
    m->hooked = hooks_enabled(ctx->env->hooks);
    snprintf(m->request_id, sizeof m->request_id, "%s", turn ? turn->request_id : "");
    ctx->body = m;
    ctx->body_free = s_mcp_free;
    ctx->call_start = s_mcp_start;
    ctx->next = s_mcp_commit;
    log_info("mcp_calls", "chat_id=%s calls=%zu", ctx->chat_id, json_array_size(mcp));
    return TASKCTX_CALL;
}
