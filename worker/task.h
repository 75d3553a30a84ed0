/*
 * task: the side effects a runner spawns, each on its own thread with a pooled connection
 * (ARCHITECTURE.md §1.2): generation, interrupt,
 * requires-action deadline and abandon.
 *
 * A task carries the fence it was spawned with (worker, runner, status, history version)
 * and holds the process-wide in-memory lock of (chat, history_version, status) while it
 * runs, so two tasks for the same intent never race. Every database access goes through
 * history_load or a chatstate bundle, both fenced; a fence mismatch, a missing chat or
 * cancellation ends the task quietly, any other failure is retried with bounded
 * exponential backoff (TASK_BACKOFF_MIN_MS doubling to TASK_BACKOFF_MAX_MS). When it ends,
 * the task sends the manager's inbox one message:
 *
 *   ["DONE"][task id: uint64][hint_update_t of its last commit, or an empty frame]
 *
 * so the runner learns the committed row at once (the fast path) instead of waiting for a
 * hint or the sync loop.
 */
#ifndef CHATFLEET_TASK_H
#define CHATFLEET_TASK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cancel.h"
#include "chatstate.h"
#include "dbpool.h"
#include "hint.h"
#include "partbuf.h"

#define TASK_BACKOFF_MIN_MS 100
#define TASK_BACKOFF_MAX_MS 5000

typedef enum {
    TASK_GENERATION = 0,
    TASK_INTERRUPT,
    TASK_DEADLINE,
    TASK_ABANDON,
} task_kind_t;

/* What one attempt of a task body achieved. */
typedef enum {
    TASK_DONE = 0, /* a transition committed (or the work is complete) */
    TASK_QUIET,    /* fenced out, chat gone, or cancelled: an expected exit */
    TASK_RETRY,    /* database or other unexpected failure: back off and try again */
} task_rc_t;

#define TASK_MODEL_BUCKETS 8 /* model call latency histogram: the bounds below, then +Inf */
#define TASK_ERROR_CLASSES 4
extern const int64_t task_model_bucket_ms[TASK_MODEL_BUCKETS - 1];
extern const char *const task_error_class_names[TASK_ERROR_CLASSES];

/* Counters every task updates (read by the worker's status and logs). */
typedef struct {
    atomic_llong commits;       /* bundles committed by this worker's tasks */
    atomic_llong fence_rejects; /* writes or reads refused by a fence */
    atomic_llong retries;       /* task attempts retried after a failure */
    atomic_llong model_calls;   /* provider calls made */
    atomic_llong model_errors;  /* provider calls that failed */
    atomic_llong turns_finished;
    atomic_llong turns_failed;
    atomic_llong model_ms_buckets[TASK_MODEL_BUCKETS]; /* per TASK_MODEL_BUCKET_MS bound */
    atomic_llong model_ms_sum;
    atomic_llong model_errors_by_class[TASK_ERROR_CLASSES]; /* see task_error_class */
} task_counters_t;

/* The classes a failed model call is counted under: 429, other 4xx, 5xx, not HTTP. */
int task_error_class(int status);

/* Counts one model call's duration (any outcome). */
void task_count_model_call(task_counters_t *c, int64_t ms);

/* Shared by every task of a worker; owned by the worker, outlives every task. */
typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    dbpool_t *pool;
    partbuf_t *partbuf;
    hint_sink_t sink;      /* where committed hints go (the bus publisher) */
    char inbox[128];       /* the manager's inbox endpoint (inproc) */
    int64_t max_retries;   /* generation retries per history version (25) */
    int64_t max_steps;     /* assistant responses per turn (1200) */
    int64_t retry_base_ms; /* first model retry backoff, doubled per attempt */
    int64_t retry_max_ms;  /* cap of the model retry backoff */
    int64_t sim_chunk_ms;  /* the sim provider's default pace */
    int64_t ra_default_ms; /* deadline used when requires_action has none recorded */
    task_counters_t counters;
} task_env_t;

/* What a task body sees: its fence, its token, and where to leave its last commit. */
typedef struct {
    task_env_t *env;
    task_kind_t kind;
    char chat_id[ID_UUID_LEN + 1];
    char status[16];  /* the fence's expected status (fence.status points here) */
    cs_fence_t fence; /* generation_attempt is updated by the body as it advances */
    cancel_t *cancel;
    bool have_after;
    hint_update_t after;
} task_ctx_t;

typedef struct task task_t;

/* Starts a task thread for chat_id as (env->worker_id, runner_id) with the expected status
 * and history version. id identifies it in the DONE message. Returns NULL when the thread
 * cannot be created (logged). */
task_t *task_start(task_env_t *env, task_kind_t kind, uint64_t id, const char *chat_id,
                   const char *runner_id, const char *status, int64_t history_version);

/* Cancels the task (it exits at its next check, without waiting here). */
void task_cancel(task_t *self);

uint64_t task_id(const task_t *self);
task_kind_t task_kind(const task_t *self);
const char *task_kind_name(task_kind_t kind);

/* Joins the thread and frees the task. Blocks until the task ends: call it after its DONE
 * message arrived (or after task_cancel when shutting down). Safe on NULL. */
void task_destroy(task_t **self_p);

/* Applies fn inside a bundle on chat ctx->chat_id and commits it, publishing the hints and
 * keeping the committed row in ctx->after. Maps chatstate's result: committed ->
 * TASK_DONE; fenced, not found or conflict -> TASK_QUIET; everything else -> TASK_RETRY. */
typedef int(task_bundle_fn)(chatstate_t *cs, void *arg, cs_error_t *err);
task_rc_t task_bundle(task_ctx_t *ctx, PGconn *conn, task_bundle_fn *fn, void *arg,
                      const char *what);

#endif
