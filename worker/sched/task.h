/*
 * task: the side effects a runner spawns (ARCHITECTURE.md §1.2, §6.5): generation, interrupt,
 * requires-action deadline and abandon. A task owns no thread: its phases run as short jobs on
 * the worker's database threads (dbexec.h), its model calls and waits on the worker's event
 * loop (evloop.h), so thousands can be in flight on a fixed number of threads and connections.
 *
 * A task carries the fence it was spawned with (worker, runner, status, history version)
 * and holds the process-wide in-memory lock of (chat, history_version, status) while it
 * runs, so two tasks for the same intent never race. A task's body sees a taskctx_t
 * (taskctx.h; the generation body is generation.h, the others live in task.c), and every
 * database access goes through history_load or taskctx_bundle, both fenced; a fence
 * mismatch, a missing chat or cancellation ends the task quietly, any other failure is
 * retried with bounded exponential backoff (TASK_BACKOFF_MIN_MS doubling to TASK_BACKOFF_MAX_MS).
 * When it ends, the task sends the manager's inbox one message:
 *
 *   ["DONE"][task id: uint64][hint_update_t of its last commit, or an empty frame]
 *
 * so the runner learns the committed row at once (the fast path) instead of waiting for a
 * hint or the sync loop.
 */
#ifndef CHATFLEET_TASK_H
#define CHATFLEET_TASK_H

#include <stdint.h>

#include "taskctx.h"

#define TASK_BACKOFF_MIN_MS TASKCTX_BACKOFF_MIN_MS
#define TASK_BACKOFF_MAX_MS TASKCTX_BACKOFF_MAX_MS

typedef enum {
    TASK_GENERATION = 0,
    TASK_INTERRUPT,
    TASK_DEADLINE,
    TASK_ABANDON,
} task_kind_t;

typedef struct task task_t;

/* Starts a task for chat_id as (env->worker_id, runner_id) with the expected status and
 * history version: its first phase is queued, or it waits behind the holder of its intent
 * lock. id identifies it in the DONE message. Never NULL. */
task_t *task_start(taskctx_env_t *env, task_kind_t kind, uint64_t id, const char *chat_id,
                   const char *runner_id, const char *status, int64_t history_version);

/* Cancels the task: a model call or wait in progress stops at once, a database phase in
 * progress finishes first. Does not wait. */
void task_cancel(task_t *self);

uint64_t task_id(const task_t *self);
task_kind_t task_kind(const task_t *self);
const char *task_kind_name(task_kind_t kind);

/* Frees the task. Blocks until the task ends: call it after its DONE message arrived (or
 * after task_cancel when shutting down). Safe on NULL. */
void task_destroy(task_t **self_p);

#endif
