/*
 * dbexec: a fixed set of threads that run the worker's short database jobs (ARCHITECTURE.md
 * §6.5): a task's fenced reads and bundles, never a model call or a wait. A job gets a pooled
 * connection for its length only; jobs queue (first in, first out) while every thread is
 * busy, so the number of threads and connections stays fixed however many turns are in
 * flight. Thread-safe.
 */
#ifndef CHATFLEET_DBEXEC_H
#define CHATFLEET_DBEXEC_H

#include "dbpool.h"

#include <stddef.h>

typedef struct dbexec dbexec_t;

/* Runs one job with conn, which is NULL when no connection could be had (the pool is backing
 * off after a failed connect). The job puts nothing back: the thread does. */
typedef void(dbexec_fn)(void *arg, PGconn *conn);

/* threads (>= 1) threads taking connections from pool. NULL when a thread could not start. */
dbexec_t *dbexec_new(dbpool_t *pool, int threads);

/* Finishes every job queued so far, then stops and joins the threads. Safe on NULL. */
void dbexec_destroy(dbexec_t **self_p);

/* Queues fn(arg, conn). Any thread. */
void dbexec_submit(dbexec_t *self, dbexec_fn *fn, void *arg);

/* Jobs waiting for a thread now. */
size_t dbexec_queued(dbexec_t *self);

#endif
