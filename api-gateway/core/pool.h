/*
 * pool: a fixed set of PostgreSQL connections shared by the gateway's HTTP threads.
 * pool_get() blocks until a connection is free; pool_put() returns it, resetting it first
 * when the server dropped it. A connection found lost also marks every idle one as suspect,
 * and pool_get() resets a suspect one before handing it out, so a PostgreSQL restart costs
 * the request that found it, not one request per pooled connection. A reset that fails holds
 * the next one back (100 ms doubling to 1 s), so that during an outage or a failover requests
 * fail at once instead of each dialing every host of the URL.
 */
#ifndef CHATFLEET_POOL_H
#define CHATFLEET_POOL_H

#include <libpq-fe.h>
#include <stdint.h>

typedef struct pool pool_t;

/* Opens size connections to url. NULL (logged) when the first cannot be opened. */
pool_t *pool_new(const char *url, int size, const char *application_name);

/* Opens size connections to conninfo and keeps each, whether or not it connected: one that
 * did not fails every query like a connection whose server went away, and pool_put() tries
 * to reset it. Never NULL. For tests of what the gateway answers without a database (with
 * "host=/nonexistent" every attempt fails at once, with no network involved). */
pool_t *pool_new_unverified(const char *conninfo, int size);
void pool_destroy(pool_t **self_p);

/* Borrows a connection; never NULL. Give it back with pool_put(). */
PGconn *pool_get(pool_t *self);

/* The same, waiting at most timeout_ms; NULL when every connection stayed busy (a health
 * probe must answer, not hang). */
PGconn *pool_get_within(pool_t *self, int64_t timeout_ms);
void pool_put(pool_t *self, PGconn *conn);

#endif
