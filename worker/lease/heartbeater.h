/*
 * heartbeater: the heartbeat loop actor (ARCHITECTURE.md §6.1).
 *
 * Every heartbeat_ms it renews, in one transaction (leasedb_renew), the leases in the lease
 * set whose heartbeat row is still fresh and whose chat this worker's runner still owns; a
 * stale lease is never revived, and a renewed one keeps its limiter slot. No lock is shared
 * with other workers. Each lease it could not renew is reported to the manager's inbox as
 * ["CLEANUP"][chat_id][runner_id] at once. A tick is bounded by a third of the stale
 * threshold (lock_timeout, statement_timeout, idle_in_transaction_session_timeout); a tick
 * that fails renews nothing and cleans nothing up, and the next one retries. Each tick also
 * deletes heartbeat rows older than the stale threshold (leasedb_sweep).
 *
 * Actor pipe protocol (wrapped by the functions below):
 *   start-up   args: heartbeater_args_t (copied); signals 0
 *   "STATUS"   replies "8888": ticks, failed ticks, leases renewed, leases lost (totals)
 *   "$TERM"    exits
 */
#ifndef CHATFLEET_HEARTBEATER_H
#define CHATFLEET_HEARTBEATER_H

#include <stdint.h>

#include "id.h"
#include "leaseset.h"

typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    const char *database_url;
    const char *inbox;  /* the manager's inbox */
    leaseset_t *leases; /* borrowed */
    int64_t heartbeat_ms;
    int64_t lease_stale_ms;
} heartbeater_args_t;

typedef struct {
    int64_t ticks;
    int64_t failed;
    int64_t renewed;
    int64_t lost;
} heartbeater_status_t;

typedef struct heartbeater heartbeater_t;

heartbeater_t *heartbeater_new(const heartbeater_args_t *args);
void heartbeater_destroy(heartbeater_t **self_p);
int heartbeater_status(heartbeater_t *self, heartbeater_status_t *out);

#endif
