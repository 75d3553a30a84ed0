/*
 * workpool: a fixed number of threads that run posted jobs in the order they were posted, so
 * that what waits for work (a connection, a turn in flight) owns no thread. The gateway runs
 * request handlers on one and stream reads on another (ARCHITECTURE.md §1.1); the worker's
 * database jobs run on one (worker/dbexec, §6.5).
 */
#ifndef CHATFLEET_WORKPOOL_H
#define CHATFLEET_WORKPOOL_H

#include <stdint.h>

typedef struct workpool workpool_t;
typedef void(workpool_fn)(void *arg);

/* Starts threads (>= 1), named name in logs. NULL (logged) when a thread could not start. */
workpool_t *workpool_new(const char *name, int threads);

/* Runs the jobs still queued, then joins the threads. Safe on NULL. */
void workpool_destroy(workpool_t **self_p);

/* Queues fn(arg) to run on one of the threads. Never blocks for long; never fails. */
void workpool_post(workpool_t *self, workpool_fn *fn, void *arg);

/* Jobs queued and not yet started (for /metrics). */
int64_t workpool_queued(workpool_t *self);

#endif
