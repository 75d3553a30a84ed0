/*
 * acquirer: the acquisition loop actor (ARCHITECTURE.md §6.2).
 *
 * Wakes on chat:ownership hints and on a poll timer. Each pass is one transaction
 * (leasedb_acquire) that takes up to a batch of chats (below): it picks free slots of the
 * deployment-wide limiter (refusing when none is free, logged once per episode as
 * admission_refused), locks the oldest runnable chats without a fresh lease with FOR UPDATE
 * SKIP LOCKED (the chats_runnable_by_age index keeps the scan to runnable rows),
 * applies Acquire with a fresh runner id to each, claiming a slot with its heartbeat row,
 * and, once committed, PUSHes one ["SPAWN"][hint_update_t] per chat to the manager's inbox.
 * No lock is shared with other workers: the limiter is the unique index on the slots.
 *
 * A full pass also runs the auto-archive tick when one is due (ARCHITECTURE.md §3, "Families";
 * chatstate_auto_archive): with auto_archive_days > 0, every auto_archive_interval_ms, or at the
 * next full pass after a tick that filled its batch. One worker ticks at a time (the tick's
 * advisory lock; another worker's tick meanwhile does nothing), on the acquirer's connection
 * between acquisition transactions, each family in a short transaction of its own. It logs
 * auto_archive_tick when it archived or skipped anything, auto_archive_failed on a failure.
 *
 * Actor pipe protocol (wrapped by the functions below):
 *   start-up   args: acquirer_args_t (copied); signals 0
 *   "PAUSE"    stops acquiring for good (shutdown); replies "PAUSED"
 *   "STATUS"   replies "888": passes, chats acquired, of which takeovers of a stale lease
 *   "$TERM"    exits
 * It sends nothing unprompted. A failed pass is logged and retried on the next wake-up.
 */
#ifndef CHATFLEET_ACQUIRER_H
#define CHATFLEET_ACQUIRER_H

#include <stdatomic.h>
#include <stdint.h>

#include "hint.h"
#include "id.h"
#include "leasedb.h"

/* Chats per pass (one transaction): ACQUIRER_BATCH_SMALL after a pass that filled no batch
 * (a hint then names a chat or two, and the limiter's scan probes twice the batch in slots),
 * ACQUIRER_BATCH_MAX after one that did, which also runs the next pass at once. */
#define ACQUIRER_BATCH_MAX   LEASEDB_BATCH_MAX
#define ACQUIRER_BATCH_SMALL 4
/* The most agent waits one full pass tries to resume (chatstate_agents_sweep). */
#define ACQUIRER_SWEEP_MAX 16
/* A hint's pass is quick; a full pass (stale leases too) follows within this interval, and
 * hints cause at most one full pass per interval (ARCHITECTURE.md §6.2, "Quick and full
 * passes"). */
#define ACQUIRER_HINT_FULL_MS 1000

typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    const char *database_url;
    const char *broker_sub; /* for chat:ownership hints */
    const char *inbox;      /* the manager's inbox */
    int64_t poll_ms;
    int64_t max_chats; /* chats held by fresh leases deployment-wide; 0: no limit */
    /* With max_chats: subagent chats held at once deployment-wide, in a pool of their own
     * (slots max_chats+1..max_chats+max_subagents; max_chats then bounds root chats only);
     * 0: subagents share the one pool. */
    int64_t max_subagents;
    int64_t user_max_chats; /* leasedb_acquire_args_t.user_max_chats; 0: no cap */
    int64_t lease_stale_ms;
    int64_t statement_timeout_ms;
    hint_sink_t sink; /* where Acquire's hints go (and the auto-archive's) */
    /* Set after each pass: whether a pool's quick pass had no limiter slot to spare (none was
     * free, or each free slot it found went to a chat) (taskctx_env_t.limiter_full);
     * borrowed, may be NULL */
    atomic_bool *limiter_full;
    /* The auto-archive tick (below): CHATFLEET_AUTO_ARCHIVE_DAYS (0: off), _INTERVAL_MS and
     * _BATCH; its clock is the wall clock plus CHATFLEET_TEST_CLOCK_OFFSET_S (tests only). */
    int64_t auto_archive_days;
    int64_t auto_archive_interval_ms;
    int64_t auto_archive_batch;
    int64_t clock_offset_s;
} acquirer_args_t;

typedef struct {
    int64_t passes;
    int64_t acquired;
    int64_t takeovers;
} acquirer_status_t;

typedef struct acquirer acquirer_t;

acquirer_t *acquirer_new(const acquirer_args_t *args);
void acquirer_destroy(acquirer_t **self_p);

/* Stops acquiring; returns once the actor confirmed (0) or -1. */
int acquirer_pause(acquirer_t *self);

int acquirer_status(acquirer_t *self, acquirer_status_t *out);

#endif
