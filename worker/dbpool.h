/*
 * dbpool: idle PostgreSQL connections for the worker's task threads.
 *
 * A task takes a connection for the length of one attempt and puts it back; a connection
 * that failed, or is left inside a transaction, is closed instead of pooled, so the next
 * taker reconnects. At most DBPOOL_IDLE_MAX stay idle. Thread-safe.
 */
#ifndef CHATFLEET_DBPOOL_H
#define CHATFLEET_DBPOOL_H

#include <libpq-fe.h>

#define DBPOOL_IDLE_MAX 32

typedef struct dbpool dbpool_t;

/* A pool for url; connects lazily. statement_timeout_ms (> 0) bounds every statement of
 * its connections. Never NULL. */
dbpool_t *dbpool_new(const char *url, const char *application_name, int statement_timeout_ms);
void dbpool_destroy(dbpool_t **self_p);

/* An idle connection, or a new one; NULL when the server cannot be reached (logged). */
PGconn *dbpool_get(dbpool_t *self);

/* Returns conn (may be NULL) to the pool, or closes it when it is unhealthy. */
void dbpool_put(dbpool_t *self, PGconn *conn);

#endif
