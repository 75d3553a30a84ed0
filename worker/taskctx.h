/*
 * taskctx: what a task body sees (ARCHITECTURE.md §1.2): the worker's shared environment and
 * counters, the task's fence and cancellation token, the result a body returns, and the one
 * way a body writes, taskctx_bundle. The bodies (the generation step in generation.c; the
 * interrupt, deadline and abandon bodies in task.c) sit above this module, and the task
 * threads that run them (task.h) above those: nothing here knows a task thread.
 */
#ifndef CHATFLEET_TASKCTX_H
#define CHATFLEET_TASKCTX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cancel.h"
#include "chatstate.h"
#include "dbpool.h"
#include "hint.h"
#include "partbuf.h"

/* What one attempt of a task body achieved. */
typedef enum {
    TASKCTX_DONE = 0, /* a transition committed (or the work is complete) */
    TASKCTX_QUIET,    /* fenced out, chat gone, or cancelled: an expected exit */
    TASKCTX_RETRY,    /* database or other unexpected failure: back off and try again */
} taskctx_rc_t;

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
    taskctx_counters_t counters;
} taskctx_env_t;

/* What a task body sees: its fence, its token, and where to leave its last commit. */
typedef struct {
    taskctx_env_t *env;
    char chat_id[ID_UUID_LEN + 1];
    char status[16];  /* the fence's expected status (fence.status points here) */
    cs_fence_t fence; /* generation_attempt is updated by the body as it advances */
    cancel_t *cancel;
    bool have_after;
    hint_update_t after;
} taskctx_t;

/* Applies fn inside a bundle on chat ctx->chat_id and commits it, publishing the hints and
 * keeping the committed row in ctx->after. Maps chatstate's result: committed ->
 * TASKCTX_DONE; fenced, not found or conflict -> TASKCTX_QUIET; everything else ->
 * TASKCTX_RETRY. what names the move in the logs. */
typedef int(taskctx_bundle_fn)(chatstate_t *cs, void *arg, cs_error_t *err);
taskctx_rc_t taskctx_bundle(taskctx_t *ctx, PGconn *conn, taskctx_bundle_fn *fn, void *arg,
                            const char *what);

#endif
