/*
 * dbpool: the worker's PostgreSQL connections, bounded (ARCHITECTURE.md §6.5).
 *
 * Every part of a worker that touches the database (the task jobs, the acquirer, the
 * heartbeater, the sync loop) takes a connection for one short unit of work and puts it
 * back; none holds one while a model streams, a tool runs or a deadline waits. At most
 * `max` connections exist at once: a taker waits for one instead of opening more. A
 * connection that failed, or is left inside a transaction, is closed instead of pooled.
 * Failed connects back off for the whole pool (doubling from 100 ms to 5 s, with jitter), so
 * an unreachable or full server sees one attempt per interval, not one per waiting taker.
 * Thread-safe.
 */
#ifndef CHATFLEET_DBPOOL_H
#define CHATFLEET_DBPOOL_H

#include <libpq-fe.h>
#include <stdint.h>

#define DBPOOL_BACKOFF_MIN_MS 100
#define DBPOOL_BACKOFF_MAX_MS 5000

typedef struct dbpool dbpool_t;

/* A pool of at most max (>= 1) connections to url; connects lazily. statement_timeout_ms
 * (> 0) bounds every statement of its connections, and every transaction they leave idle.
 * Never NULL. */
dbpool_t *dbpool_new(const char *url, const char *application_name, int statement_timeout_ms,
                     int max);
void dbpool_destroy(dbpool_t **self_p);

/* A connection: an idle one, a new one while fewer than max exist, or the next one put back.
 * Waits at most wait_ms (< 0: as long as it takes). NULL when the wait ran out, or when a
 * connect failed or the pool is backing off after one (logged once per failure). */
PGconn *dbpool_get(dbpool_t *self, int64_t wait_ms);

/* Returns conn (may be NULL) to the pool, or closes it when it is unhealthy. */
void dbpool_put(dbpool_t *self, PGconn *conn);

/* What the pool holds now. */
typedef struct {
    int open;    /* connections in existence (idle or taken) */
    int idle;    /* of which idle */
    int waiting; /* takers waiting for one */
    int64_t connect_failures;
} dbpool_stats_t;

void dbpool_stats(dbpool_t *self, dbpool_stats_t *out);

#endif
