/*
 * worker: one chatfleet-worker, assembled (ARCHITECTURE.md §1.2): its id, the bus publisher, the
 * part buffer and its relay, the lease set, the task environment and the three actors (acquirer,
 * heartbeater, manager). main.c parses config and calls worker_new; tests can run a worker
 * in-process the same way.
 *
 * Shutdown (worker_shutdown) is the graceful path of SIGTERM: stop acquiring, cancel every
 * task, Abandon every owned chat (publishing ownership hints, so another worker takes each
 * over at once instead of after the lease goes stale), then stop the actors.
 */
#ifndef CHATFLEET_WORKER_H
#define CHATFLEET_WORKER_H

#include <stdint.h>

#include "taskctx.h"
#include "config.h"
#include "id.h"

/* Worker settings beyond config_t, from the environment (worker/README.md). */
#define WORKER_DB_CONNS_MIN 4 /* three actors' connections and at least one for tasks */

typedef struct {
    int64_t max_chats;      /* CHATFLEET_WORKER_MAX_CHATS: deployment-wide limiter; 0: none */
    int64_t max_subagents;  /* CHATFLEET_WORKER_MAX_SUBAGENTS: the subagent pool; 0: shared */
    int64_t user_max_chats; /* CHATFLEET_WORKER_USER_MAX_CHATS: a user's share; 0: no cap */
    int64_t sync_ms;        /* CHATFLEET_WORKER_SYNC_MS: the manager's sync loop */
    int64_t ra_deadline_ms; /* CHATFLEET_REQUIRES_ACTION_DEADLINE_MS */
    int64_t drain_ms;       /* CHATFLEET_WORKER_DRAIN_MS: how long shutdown waits to abandon */
    int64_t db_conns;       /* CHATFLEET_WORKER_DB_CONNS: every PostgreSQL connection of the
                               worker (acquirer, heartbeater and sync loop one each, the task
                               jobs the rest); ARCHITECTURE.md §6.5 */
    taskctx_options_t turn; /* what a turn is allowed (taskctx.h): CHATFLEET_MAX_GENERATION_RETRIES,
                               CHATFLEET_MAX_STEPS_PER_TURN, CHATFLEET_WORKER_RETRY_BASE_MS and
                               _MAX_MS, CHATFLEET_SIM_CHUNK_MS, the compaction settings (§7.6),
                               CHATFLEET_TITLE_MODEL (§7.8) */
} worker_options_t;

/* Reads the options from the environment over their defaults. Returns -1 and prints the
 * offending variable on stderr when one is malformed. */
int worker_options_load(worker_options_t *out);

typedef struct worker worker_t;

/* Starts a worker with a new random id. NULL when the database URL is missing or the bus
 * endpoints are invalid (logged). cfg and opts are copied where kept. */
worker_t *worker_new(const config_t *cfg, const worker_options_t *opts);

/* The graceful stop (see above); waits up to opts->drain_ms for the abandons. Returns 0
 * when every owned chat was abandoned in time. Idempotent. */
int worker_shutdown(worker_t *self);

/* Stops everything (without abandoning, when worker_shutdown was not called) and frees. */
void worker_destroy(worker_t **self_p);

const char *worker_id(const worker_t *self);

/* Logs one line of counters (event worker_counters). Call from the owner thread. */
void worker_log_counters(worker_t *self);

/* The same counters as Prometheus text (caller frees). Call from the owner thread. */
char *worker_metrics(worker_t *self);

#endif
