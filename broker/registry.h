/*
 * registry: the broker's table of live workers, by worker id, for relay routing.
 *
 * A worker is known by the ZeroMQ routing id of its relay connection and the heartbeat
 * interval it announced. It stays live while it beats at least once every
 * PROTO_WORKER_LIVENESS intervals; registry_expire() forgets the others. A worker that
 * reconnects (a new routing id under the same worker id) replaces its old entry.
 */
#ifndef CHATFLEET_REGISTRY_H
#define CHATFLEET_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

typedef struct registry registry_t;

typedef struct {
    uint8_t route[PROTO_ROUTE_MAX_BYTES]; /* bounded by the ZeroMQ routing id limit */
    size_t route_len;
    int64_t heartbeat_ms;
    int64_t last_seen_ms; /* monotonic */
} registry_entry_t;

registry_t *registry_new(void);
void registry_destroy(registry_t **self_p);

/* Records a registration or heartbeat of worker_id from route at now_ms. Returns 1 when the
 * worker was not known (a new registration), 0 when it was, -1 on a route over the bound. */
int registry_touch(registry_t *self, const char *worker_id, const void *route, size_t route_len,
                   int64_t heartbeat_ms, int64_t now_ms);

/* The live entry of worker_id, or NULL (unknown, or past its liveness at now_ms). The
 * pointer is valid until the next call that modifies the registry. */
const registry_entry_t *registry_lookup(registry_t *self, const char *worker_id, int64_t now_ms);

/* Forgets worker_id (no-op when unknown). */
void registry_forget(registry_t *self, const char *worker_id);

/* Forgets every worker past its liveness at now_ms, logging each. Returns how many. */
size_t registry_expire(registry_t *self, int64_t now_ms);

/* Number of known workers. */
size_t registry_size(registry_t *self);

#endif
