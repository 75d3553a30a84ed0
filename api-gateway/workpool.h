/*
 * workpool: a fixed number of threads that run posted jobs in the order they were posted.
 * The gateway runs request handlers on one (they block on PostgreSQL) and stream work on
 * another, so that no connection owns a thread (ARCHITECTURE.md §7.1) and a burst of stream
 * syncs never delays an ordinary request.
 */
#ifndef CHATFLEET_WORKPOOL_H
#define CHATFLEET_WORKPOOL_H

#include <stdint.h>

typedef struct workpool workpool_t;
typedef void(workpool_fn)(void *arg);

/* Starts threads (>= 1) named name in logs. Never NULL. */
workpool_t *workpool_new(const char *name, int threads);

/* Runs the jobs still queued, then joins the threads. */
void workpool_destroy(workpool_t **self_p);

/* Queues fn(arg) to run on one of the threads. Never blocks for long; never fails. */
void workpool_post(workpool_t *self, workpool_fn *fn, void *arg);

/* Jobs queued and not yet started (for /metrics). */
int64_t workpool_queued(workpool_t *self);

#endif
