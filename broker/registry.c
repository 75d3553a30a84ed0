/* registry: live workers by id; see registry.h. */
#include "registry.h"
#include <czmq.h>

#include "log.h"
#include "mem.h"

#include <czmq.h>

#include "log.h"
#include <string.h>

struct registry {
    zhashx_t *workers; /* worker_id -> registry_entry_t * (owned) */
};

static void s_entry_free(void **item) {
    free(*item);
    *item = NULL;
}

static void *s_key_dup(const void *item) {
    return mem_strdup(item);
}

registry_t *registry_new(void) {
    registry_t *self = mem_calloc(1, sizeof *self);
    self->workers = zhashx_new();
    ASSERT(self->workers);
    zhashx_set_destructor(self->workers, s_entry_free);
    return self;
}

void registry_destroy(registry_t **self_p) {
    registry_t *self = *self_p;
    if (!self) {
        return;
    }
    zhashx_destroy(&self->workers);
    free(self);
    *self_p = NULL;
}

static bool s_expired(const registry_entry_t *e, int64_t now_ms) {
    return now_ms - e->last_seen_ms > e->heartbeat_ms * PROTO_WORKER_LIVENESS;
}

int registry_touch(registry_t *self, const char *worker_id, const void *route, size_t route_len,
                   int64_t heartbeat_ms, int64_t now_ms) {
    if (route_len == 0 || route_len > PROTO_ROUTE_MAX_BYTES) {
        return -1;
    }
    registry_entry_t *e = zhashx_lookup(self->workers, worker_id);
    int fresh = 0;
    if (!e) {
        e = mem_calloc(1, sizeof *e);
        zhashx_insert(self->workers, worker_id, e);
        fresh = 1;
    } else if (e->route_len != route_len || memcmp(e->route, route, route_len) != 0) {
        /* The worker reconnected (its old connection is gone or will be): route to the new
         * one. Counted as a registration so that the broker acknowledges it. */
        log_info("worker_rerouted", "worker_id=%s", worker_id);
        fresh = 1;
    }
    memcpy(e->route, route, route_len);
    e->route_len = route_len;
    e->heartbeat_ms = heartbeat_ms;
    e->last_seen_ms = now_ms;
    return fresh;
}

const registry_entry_t *registry_lookup(registry_t *self, const char *worker_id, int64_t now_ms) {
    registry_entry_t *e = zhashx_lookup(self->workers, worker_id);
    if (!e || s_expired(e, now_ms)) {
        return NULL;
    }
    return e;
}

void registry_forget(registry_t *self, const char *worker_id) {
    zhashx_delete(self->workers, worker_id);
}

size_t registry_expire(registry_t *self, int64_t now_ms) {
    /* Collect first, delete after: deleting under the hash cursor is not allowed. The list
     * keeps its own copies of the ids. */
    zlistx_t *dead = zlistx_new();
    ASSERT(dead);
    zlistx_set_duplicator(dead, s_key_dup);
    zlistx_set_destructor(dead, s_entry_free);
    for (registry_entry_t *e = zhashx_first(self->workers); e; e = zhashx_next(self->workers)) {
        if (s_expired(e, now_ms)) {
            zlistx_add_end(dead, (void *)zhashx_cursor(self->workers));
        }
    }
    size_t n = 0;
    for (const char *id = zlistx_first(dead); id; id = zlistx_next(dead)) {
        const registry_entry_t *e = zhashx_lookup(self->workers, id);
        log_info("worker_expired", "worker_id=%s silent_ms=%lld", id,
                 (long long)(now_ms - e->last_seen_ms));
        zhashx_delete(self->workers, id);
        n++;
    }
    zlistx_destroy(&dead);
    return n;
}

size_t registry_size(registry_t *self) {
    return zhashx_size(self->workers);
}
