/*
 * manager: the runner manager actor (ARCHITECTURE.md §1.2). It hosts every runner of this worker,
 * carries out their actions (spawning and cancelling tasks, cleanups), keeps the lease set the
 * heartbeater renews, subscribes to each owned chat's update hints, and runs the database sync loop
 * (one query for every owned chat, on its own thread so that the main loop never blocks) whose rows
 * it forwards to the runners.
 *
 * Inbox (a PULL socket bound at args->env->inbox; anyone in the process may PUSH):
 *   ["SPAWN"][hint_update_t]        the acquirer took a chat: its committed Acquire row
 *   ["CLEANUP"][chat_id][runner_id] the heartbeater could not renew this lease
 *   ["DONE"][uint64 id][hint_update_t or empty]   a task ended (see task.h)
 *   ["ROWS"][hint_update_t]...      the sync loop's rows, one frame per chat
 *
 * Actor pipe protocol (wrapped by the functions below):
 *   start-up    args: manager_args_t (copied); signals 0 once the inbox is bound, -1 when
 *               it cannot be (manager_new then returns NULL)
 *   "STATUS"    replies "8888": runners, tasks, spawned runners (total), cleanups (total)
 *   "DRAIN"     stops taking new work, cancels every task and abandons every owned chat;
 *               replies "DRAINED" once every abandon task has ended (possibly much later:
 *               the caller waits with its own deadline)
 *   "$TERM"     cancels every task, waits for each to end, and exits
 */
#ifndef CHATFLEET_MANAGER_H
#define CHATFLEET_MANAGER_H

#include <stdint.h>

#include "leaseset.h"
#include "task.h"

#define MANAGER_GC_INTERVAL_MS 1000 /* how often the part buffer is collected */
/* The longest database URL the manager keeps (its parameters, sslrootcert paths included,
 * pass through whole); worker_new refuses a longer one rather than cut it. */
#define MANAGER_URL_MAX 4096

typedef struct {
    taskctx_env_t *env;       /* borrowed; outlives the manager */
    leaseset_t *leases;       /* borrowed; outlives the manager */
    const char *database_url; /* for the sync loop's connection (< MANAGER_URL_MAX bytes) */
    const char *broker_sub;   /* CHATFLEET_BROKER_SUB, for chat:update:<id> hints */
    int64_t sync_ms;          /* sync loop interval */
    int64_t statement_timeout_ms;
} manager_args_t;

typedef struct {
    int64_t runners;
    int64_t tasks;
    int64_t spawned;
    int64_t cleanups;
} manager_status_t;

typedef struct manager manager_t;

manager_t *manager_new(const manager_args_t *args);
void manager_destroy(manager_t **self_p);

/* Sends "DRAIN" and waits up to timeout_ms for "DRAINED". Returns 0 when drained in time. */
int manager_drain(manager_t *self, int timeout_ms);

int manager_status(manager_t *self, manager_status_t *out);

#endif
