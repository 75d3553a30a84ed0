/*
 * registry: the broker's table of live workers, by worker id, for relay routing.
 *
 * A worker is known by the ZeroMQ routing id of its relay connection and the heartbeat
 * interval it announced. It stays live while it beats at least once every
 * PROTO_WORKER_LIVENESS intervals; registry_expire() forgets the others. A worker that
 * reconnects (a new routing id under the same worker id) replaces its old entry.
 *
 * The table is bounded (max_workers): a registration beyond it is refused, so a flood of
 * registrations with fresh ids costs a bounded amount of memory. With CURVE, an entry is
 * bound to the public key that registered it (ARCHITECTURE.md §9 "Trust"): a registration or
 * heartbeat of that worker id from any other key is refused. Without CURVE every key is "".
 */
#ifndef CHATFLEET_REGISTRY_H
#define CHATFLEET_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

typedef struct registry registry_t;

#define REGISTRY_MAX_WORKERS 4096 /* default bound of the table */
#define REGISTRY_KEY_MAX     40   /* z85 text of a CURVE public key */

/* registry_touch results. */
#define REGISTRY_KNOWN        0  /* a heartbeat of a known worker on its known route */
#define REGISTRY_NEW          1  /* a new registration */
#define REGISTRY_REROUTED     2  /* a known worker on a new route (it reconnected) */
#define REGISTRY_BAD_ROUTE    -1 /* a route over PROTO_ROUTE_MAX_BYTES, or empty */
#define REGISTRY_FULL         -2 /* new, and the table holds max_workers: refused */
#define REGISTRY_KEY_MISMATCH -3 /* the worker id is bound to another key: refused */

typedef struct {
    uint8_t route[PROTO_ROUTE_MAX_BYTES]; /* bounded by the ZeroMQ routing id limit */
    size_t route_len;
    int64_t heartbeat_ms;
    int64_t last_seen_ms;           /* monotonic */
    char key[REGISTRY_KEY_MAX + 1]; /* the key it registered with, "" without CURVE */
} registry_entry_t;

/* A table of at most max_workers entries (0: REGISTRY_MAX_WORKERS). */
registry_t *registry_new(size_t max_workers);
void registry_destroy(registry_t **self_p);

/* Records a registration or heartbeat of worker_id from route, sent with key ("" without
 * CURVE), at now_ms. Returns one of the REGISTRY_* results above; a refused one changes
 * nothing. */
int registry_touch(registry_t *self, const char *worker_id, const void *route, size_t route_len,
                   const char *key, int64_t heartbeat_ms, int64_t now_ms);

/* The live entry of worker_id, or NULL (unknown, or past its liveness at now_ms). The
 * pointer is valid until the next call that modifies the registry. */
const registry_entry_t *registry_lookup(registry_t *self, const char *worker_id, int64_t now_ms);

/* Forgets worker_id (no-op when unknown). */
void registry_forget(registry_t *self, const char *worker_id);

/* Forgets every worker past its liveness at now_ms, logging the first few of each sweep and
 * a count of the rest. Returns how many. */
size_t registry_expire(registry_t *self, int64_t now_ms);

/* Forgets every worker whose key keep() refuses (a key removed from the allow directory).
 * Returns how many. */
typedef bool registry_keep_fn(void *ctx, const char *key);
size_t registry_retain(registry_t *self, registry_keep_fn *keep, void *ctx);

/* Number of known workers. */
size_t registry_size(registry_t *self);

#endif
