/*
 * taskctx: what a task body sees (ARCHITECTURE.md §1.2, §6.5): the worker's shared environment
 * and counters, the task's fence and cancellation token, the result a body returns, and the
 * one way a body writes, taskctx_bundle. The bodies (the generation step in generation.c; the
 * interrupt, deadline and abandon bodies in task.c) sit above this module, and the task
 * machinery that runs them (task.h) above those: nothing here knows how a task is scheduled.
 *
 * A body runs in phases. Each phase is a short database job with a connection; a phase that
 * must wait (a model call, a backoff, a deadline) returns TASKCTX_CALL or TASKCTX_WAIT with
 * ctx->next set, gives its connection back, and the task runs ctx->next as a new phase once
 * the call ended or the wait ran out. State a body keeps between phases lives in ctx->body.
 */
#ifndef CHATFLEET_TASKCTX_H
#define CHATFLEET_TASKCTX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cancel.h"
#include "chatstate.h"
#include "dbexec.h"
#include "dbpool.h"
#include "evloop.h"
#include "hint.h"
#include "otlp.h"
#include "partbuf.h"
#include "provider.h"
#include "stagemeter.h"
#include "turnset.h"
#include "usagemeter.h"

#include <czmq.h>
#include <pthread.h>

#define COMPACTION_MODEL_NAME_MAX 128 /* a model config name in the configuration, NUL included */

/* The deployment's compaction settings (ARCHITECTURE.md §10). */
typedef struct {
    char model[COMPACTION_MODEL_NAME_MAX]; /* CHATFLEET_COMPACTION_MODEL: the override's model
                                              config name; "": none */
    int default_threshold; /* CHATFLEET_COMPACTION_THRESHOLD_PERCENT: when neither the owner nor
                              the model config sets one */
} compaction_config_t;

/* What one attempt of a task body achieved. */
typedef enum {
    TASKCTX_DONE = 0, /* a transition committed (or the work is complete) */
    TASKCTX_QUIET,    /* fenced out, chat gone, or cancelled: an expected exit */
    TASKCTX_RETRY,    /* database or other unexpected failure: back off and try again */
    TASKCTX_CALL,     /* make the model call in ctx->call, then run ctx->next */
    TASKCTX_WAIT,     /* wait ctx->wait_ms (cancellable), then run ctx->next */
} taskctx_rc_t;

/* A phase's own retries after a database failure (as the task's): this, doubling to the max. */
#define TASKCTX_BACKOFF_MIN_MS 100
#define TASKCTX_BACKOFF_MAX_MS 5000

#define TASKCTX_MODEL_BUCKETS 8 /* model call latency histogram: the bounds below, then +Inf */
#define TASKCTX_ERROR_CLASSES 4
extern const int64_t taskctx_model_bucket_ms[TASKCTX_MODEL_BUCKETS - 1];
extern const char *const taskctx_error_class_names[TASKCTX_ERROR_CLASSES];

/* Counters every task updates (read by the worker's status and logs). */
typedef struct {
    atomic_llong commits;       /* bundles committed by this worker's tasks */
    atomic_llong fence_rejects; /* writes or reads refused by a fence */
    atomic_llong retries;       /* task attempts retried after a failure */
    atomic_llong model_calls;   /* provider calls made */
    atomic_llong model_errors;  /* provider calls that failed */
    atomic_llong turns_finished;
    atomic_llong turns_failed;
    atomic_llong model_ms_buckets[TASKCTX_MODEL_BUCKETS]; /* per taskctx_model_bucket_ms bound */
    atomic_llong model_ms_sum;
    atomic_llong model_errors_by_class[TASKCTX_ERROR_CLASSES]; /* see taskctx_error_class */
} taskctx_counters_t;

/* The classes a failed model call is counted under: 429, other 4xx, 5xx, not HTTP. */
int taskctx_error_class(int status);

/* Counts one model call's duration (any outcome). */
void taskctx_count_model_call(taskctx_counters_t *c, int64_t ms);

#define TASKCTX_PLAN_INSTRUCTIONS_MAX 4096 /* CHATFLEET_PLAN_MODE_INSTRUCTIONS, NUL included */

/* What a turn is allowed (the worker's options embed this struct; worker.h reads each from
 * its CHATFLEET_* setting). */
typedef struct {
    int64_t max_retries;            /* generation retries per history version (25) */
    int64_t max_steps;              /* assistant responses per turn (1200) */
    int64_t retry_base_ms;          /* first model retry backoff, doubled per attempt */
    int64_t retry_max_ms;           /* cap of the model retry backoff */
    int64_t sim_chunk_ms;           /* the sim provider's default pace */
    compaction_config_t compaction; /* automatic compaction's settings (ARCHITECTURE.md §7.6) */
    char title_model[COMPACTION_MODEL_NAME_MAX]; /* CHATFLEET_TITLE_MODEL; "": the chat's */
    /* Subagents (ARCHITECTURE.md §3, "Families"): CHATFLEET_SUBAGENT_MAX_DEPTH (3; 0: the
     * subagent tools are not offered), CHATFLEET_SUBAGENT_MAX_CHILDREN (16 per parent), and
     * CHATFLEET_QUEUE_MAX for message_agent's queued sends. */
    int64_t subagent_max_depth;
    int64_t subagent_max_children;
    int64_t queue_max;
    /* CHATFLEET_PLAN_MODE_INSTRUCTIONS: the system block a plan-mode turn's prompt begins with
     * (worker/turn/steer.h); "": the built-in one. */
    char plan_instructions[TASKCTX_PLAN_INSTRUCTIONS_MAX];
} taskctx_options_t;

/* Shared by every task of a worker; owned by the worker, outlives every task. */
typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    dbpool_t *pool; /* every connection of the worker (dbpool.h) */
    dbexec_t *exec; /* runs the phases of tasks (dbexec.h) */
    evloop_t *loop; /* model calls and timers (evloop.h) */
    zsock_t *done;  /* PUSH to the manager's inbox, for task ends; under done_lock */
    pthread_mutex_t done_lock;
    partbuf_t *partbuf;
    hint_sink_t sink;            /* where committed hints go (the bus publisher) */
    char inbox[128];             /* the manager's inbox endpoint (inproc) */
    taskctx_options_t opts;      /* the turn's settings, as the worker's options hold them */
    cs_settings_t chat_settings; /* what every bundle of the worker's tasks passes */
    usagemeter_t *usage;         /* tokens and cost by model (ARCHITECTURE.md §7.7) */
    stagemeter_t *stages;        /* stage timings and turn outcomes; NULL: not measured */
    otlp_t *otlp;                /* span export (CHATFLEET_OTLP_ENDPOINT); NULL: none */
    turnset_t *turns;            /* the open turns (turnset.h); NULL: not tracked */
    struct mcpset *mcp;          /* the deployment's MCP servers (mcpset.h); never NULL */
    struct hooks *hooks;         /* the lifecycle hook dispatcher (hooks.h); never NULL */
    taskctx_counters_t counters;
    /* The acquirer's last pass had no limiter slot to spare (none was free, or every free one
     * it found went to a chat): a lease that ends then hints every acquirer (the manager's
     * runner cleanup), which would otherwise wait for its poll to see the freed slot
     * (ARCHITECTURE.md §6.2, "Fair share"). */
    atomic_bool limiter_full;
} taskctx_env_t;

typedef struct taskctx taskctx_t;

/* A call a phase asks for beside its own (ARCHITECTURE.md §6.5 "Side calls"; a new chat's
 * title, §7.8): the task starts it on the loop at once, runs next with a connection (NULL
 * when none could be had, or when the call was cancelled) once it ends, and ends only after
 * it. Both run on a context of their own (the task's env, chat and fence, a copy made when
 * the call starts; the task's cancellation token), which owns body; next's result is not
 * retried. One at a time per task: asked while one runs, the new one's body is freed. */
typedef struct {
    provider_call_t *(*start)(taskctx_t *side, provider_done_fn *done, void *done_arg);
    taskctx_rc_t (*next)(taskctx_t *side, PGconn *conn);
    void *body;
    void (*body_free)(void *body);
} taskctx_side_t;

/* A write a side call leaves for the body (ARCHITECTURE.md §6.5 "Side calls"): the body's
 * next bundle that commits runs it first, with the body's fence, so the two share one
 * transaction. write runs in that bundle (joined: true) or, when the body ends without one
 * (cancelled, say), in one of its own (false); done runs exactly once, with whether a bundle
 * that ran write committed, and frees arg. A write must fail only where the body's own move
 * would (its owner's fence). */
typedef struct {
    int (*write)(chatstate_t *cs, const cs_fence_t *fence, bool joined, void *arg, cs_error_t *err);
    void (*done)(void *arg, bool committed);
    void *arg;
} taskctx_carry_t;

/* One phase of a body, with a connection (NULL when none could be had: the phase returns
 * TASKCTX_RETRY). */
typedef taskctx_rc_t(taskctx_phase_fn)(taskctx_t *ctx, PGconn *conn);

/* What a task body sees: its fence, its token, where to leave its last commit, and the
 * phase protocol's fields. */
struct taskctx {
    taskctx_env_t *env;
    char chat_id[ID_UUID_LEN + 1];
    char status[16];  /* the fence's expected status (fence.status points here) */
    cs_fence_t fence; /* generation_attempt is updated by the body as it advances */
    cancel_t *cancel;
    bool have_after;
    hint_update_t after;
    taskctx_phase_fn *next;  /* TASKCTX_CALL and TASKCTX_WAIT: the phase that follows */
    int64_t wait_ms;         /* TASKCTX_WAIT */
    provider_request_t call; /* TASKCTX_CALL; what it points to lives in body */
    /* TASKCTX_CALL: NULL for the model call in call; else the call this starts on the loop
     * (the step's MCP calls, mcpset.h), whose outcome arrives in call_rc and call_res alike.
     * The task clears it when it starts the call. */
    provider_call_t *(*call_start)(taskctx_t *ctx, provider_done_fn *done, void *done_arg);
    provider_part_fn *on_part; /* TASKCTX_CALL: receives the streamed parts, on the loop */
    void *part_arg;
    provider_rc_t call_rc;      /* the call's outcome, for next */
    provider_result_t call_res; /* likewise; next clears it */
    void *body;                 /* the body's state between phases */
    /* The answer of the stop hook heard at a structured request's end (toolstep_hear), kept
     * for the step that reads again with it heard; that step takes and clears it
     * (ARCHITECTURE.md §7.10). NULL otherwise. */
    json_t *stop_answer;
    void (*body_free)(void *body); /* frees body; run when the task ends or restarts */
    taskctx_side_t side;           /* set by a phase: a side call to start (start != NULL) */
    taskctx_carry_t carry;         /* a side call's write for the next bundle (write != NULL) */
    /* Stage timings (stagemeter.h): the chat is a subagent (set by every history read), and
     * when the step in progress began (id_now_us; 0 outside a step). */
    bool subagent;
    int64_t step_us;
    /* The turn's trace (from its latest user row; trace_id "" when it has none: no spans),
     * its chat_turn span's id (derived from the trace and the chat, so every task of the turn
     * names the same) and its start on the wall clock (the row's creation). */
    trace_ctx_t trace;
    char turn_span[TRACE_SPAN_HEX + 1];
    int64_t turn_start_ns;
    /* An outcome whose chat_turn span waits for the end of the step that closed the turn
     * (so that the step ends inside it): 0, or the turn_outcome_t + 1. */
    int pending_outcome;
    turnset_ref_t *turn; /* the turn this task joined (env->turns), until the task ends */
};

/* Sets what the stages and spans of the turn being read name: the chat's kind, the turn's
 * trace, and its start trigger_age_us ago (< 0: now); and joins the turn of prompt prompt_id
 * (the prompt's chat_messages.id; 0: none, nothing joined) on this task's runner, which this
 * task then holds until taskctx_release_turn. */
void taskctx_set_turn(taskctx_t *ctx, bool subagent, const trace_ctx_t *trace,
                      int64_t trigger_age_us, int64_t prompt_id);

/* Ends this task's hold of its turn (the task's end); a turn closed without an outcome is
 * abandoned then (taskctx_turn_abandoned). */
void taskctx_release_turn(taskctx_t *ctx);

/* The runner (chat_id, runner_id) exited, every task of it ended: its open turns are
 * abandoned (ARCHITECTURE.md §7.11). */
void taskctx_runner_exit(taskctx_env_t *env, const char *chat_id, const char *runner_id);

/* The turnset's abandon callback (arg: the taskctx_env_t): counts the turn abandoned and
 * exports its chat_turn span, ended when it closed. */
void taskctx_turn_abandoned(const turnset_turn_t *turn, void *arg);

/* The trace a prompt made by this task's turn carries, the first prompt of a subagent it
 * spawns or a message it sends one (ARCHITECTURE.md §7.11): into span_id a new id for the
 * tool call that makes it, into traceparent "00-<the turn's trace>-<span_id>-<flags>"; a new
 * trace when the turn has none. "" in both when no randomness could be had. */
void taskctx_child_trace(const taskctx_t *ctx, char span_id[TRACE_SPAN_HEX + 1],
                         char traceparent[TRACE_PARENT_LEN + 1]);

/* Observes stage s of this task's chat from since_us (id_now_us) to now, scope turn, and
 * exports it as a child span of the turn's when the turn has a trace. */
void taskctx_stage(taskctx_t *ctx, stage_t s, int64_t since_us);

/* Likewise for a stage that lasted us and ended now; model (a model config name, or NULL)
 * also observes it on the model family and names it on the span. */
void taskctx_stage_us(taskctx_t *ctx, stage_t s, int64_t us, const char *model);

/* taskctx_stage with the span's id given (taskctx_child_trace's span_id; "": a new one). */
void taskctx_stage_as(taskctx_t *ctx, stage_t s, int64_t since_us, const char *span_id);

/* Counts the turn this task closed with outcome o; its chat_turn span ends with the step in
 * progress (its generation_step or compaction stage), or now outside a step. A turn that has
 * an outcome already keeps it: o is neither counted nor exported. */
void taskctx_outcome(taskctx_t *ctx, turn_outcome_t o);

/* Ends the chat_turn span an outcome left waiting, if any (a step that ends elsewhere: the
 * next step's start and taskctx_reset call it). */
void taskctx_flush_turn(taskctx_t *ctx);

/* Prices the usage of the call that ended (ctx->call_res.usage, replaced) with cfg's
 * "prices" and "context_limit" (a model_configs row) and counts it under the model name. */
void taskctx_price(taskctx_t *ctx, const json_t *cfg, const char *name);

/* Frees the body's state (ctx->body) and the outcome of a call; the task is back at its
 * first phase. */
void taskctx_reset(taskctx_t *ctx);

/* Applies fn inside a bundle on chat ctx->chat_id and commits it, publishing the hints and
 * keeping the committed row in ctx->after. Maps chatstate's result: committed ->
 * TASKCTX_DONE; fenced, not found or conflict -> TASKCTX_QUIET; everything else ->
 * TASKCTX_RETRY. A fn that returns TASKCTX_BUNDLE_EMPTY found nothing to write: the bundle
 * is rolled back and the result is TASKCTX_DONE (fn's arg says what it found). what names
 * the move in the logs. */
#define TASKCTX_BUNDLE_EMPTY 1
typedef int(taskctx_bundle_fn)(chatstate_t *cs, void *arg, cs_error_t *err);
taskctx_rc_t taskctx_bundle(taskctx_t *ctx, PGconn *conn, taskctx_bundle_fn *fn, void *arg,
                            const char *what);

/* Runs ctx->carry, if any, in a bundle of its own (the body it was left for has ended, even
 * cancelled: the call it carries has ended, and the owner's fence decides): what
 * taskctx_bundle returns, TASKCTX_DONE when there is none. The carry is done after. */
taskctx_rc_t taskctx_carry_alone(taskctx_t *ctx, PGconn *conn);

/* Ends ctx->carry, if any, unwritten (done with committed false). */
void taskctx_carry_drop(taskctx_t *ctx);

#endif
