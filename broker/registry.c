/* registry: live workers by id; see registry.h. */
#include "registry.h"
#include <czmq.h>

#include "log.h"
#include "mem.h"

#include <string.h>

#define S_EXPIRE_LOG_MAX 20 /* worker_expired lines per sweep; the rest are counted */

struct registry {
    zhashx_t *workers; /* worker_id -> registry_entry_t * (owned) */
    size_t max_workers;
};

static void s_entry_free(void **item) {
    free(*item);
    *item = NULL;
}

static void *s_key_dup(const void *item) {
    return mem_strdup(item);
}

registry_t *registry_new(size_t max_workers) {
    registry_t *self = mem_calloc(1, sizeof *self);
    self->max_workers = max_workers ? max_workers : REGISTRY_MAX_WORKERS;
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
                   const char *key, int64_t heartbeat_ms, int64_t now_ms) {
    if (route_len == 0 || route_len > PROTO_ROUTE_MAX_BYTES) {
        return REGISTRY_BAD_ROUTE;
    }
    if (!key || strlen(key) > REGISTRY_KEY_MAX) {
        key = "";
    }
    registry_entry_t *e = zhashx_lookup(self->workers, worker_id);
    int fresh = REGISTRY_KNOWN;
    if (!e) {
        if (zhashx_size(self->workers) >= self->max_workers) {
            return REGISTRY_FULL;
        }
        e = mem_calloc(1, sizeof *e);
        snprintf(e->key, sizeof e->key, "%s", key);
        zhashx_insert(self->workers, worker_id, e);
        fresh = REGISTRY_NEW;
    } else if (strcmp(e->key, key) != 0) {
        /* Bound to the key that registered it, for as long as the entry lives (expiry or
         * revocation ends it): no other key can beat or re-route for this worker id. */
        return REGISTRY_KEY_MISMATCH;
    } else if (e->route_len != route_len || memcmp(e->route, route, route_len) != 0) {
        /* The worker reconnected (its old connection is gone or will be): route to the new
         * one. Acknowledged like a registration. */
        fresh = REGISTRY_REROUTED;
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
        if (n < S_EXPIRE_LOG_MAX) {
            log_info("worker_expired", "worker_id=%s silent_ms=%lld", id,
                     (long long)(now_ms - e->last_seen_ms));
        }
        zhashx_delete(self->workers, id);
        n++;
    }
    if (n > S_EXPIRE_LOG_MAX) {
        log_info("worker_expired_more", "count=%zu", n - S_EXPIRE_LOG_MAX);
    }
    zlistx_destroy(&dead);
    return n;
}

size_t registry_retain(registry_t *self, registry_keep_fn *keep, void *ctx) {
    zlistx_t *gone = zlistx_new();
    ASSERT(gone);
    zlistx_set_duplicator(gone, s_key_dup);
    zlistx_set_destructor(gone, s_entry_free);
    for (registry_entry_t *e = zhashx_first(self->workers); e; e = zhashx_next(self->workers)) {
        if (!keep(ctx, e->key)) {
            zlistx_add_end(gone, (void *)zhashx_cursor(self->workers));
        }
    }
    size_t n = 0;
    for (const char *id = zlistx_first(gone); id; id = zlistx_next(gone)) {
        if (n < S_EXPIRE_LOG_MAX) {
            log_info("worker_revoked", "worker_id=%s", id);
        }
        zhashx_delete(self->workers, id);
        n++;
    }
    zlistx_destroy(&gone);
    return n;
}

size_t registry_size(registry_t *self) {
    return zhashx_size(self->workers);
}
