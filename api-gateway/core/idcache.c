/* idcache: see idcache.h. */
#include "idcache.h"
#include "hex.h"
#include "mem.h"

#include <czmq.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char id[ID_UUID_LEN + 1];
    int64_t found_ms;
} entry_t;

struct idcache {
    int64_t ttl_ms;
    pthread_mutex_t lock;
    zhashx_t *entries; /* hex SHA-256 of a key -> entry_t */
};

static void s_free_entry(void **item) {
    free(*item);
    *item = NULL;
}

idcache_t *idcache_new(int64_t ttl_ms) {
    idcache_t *self = mem_calloc(1, sizeof *self);
    self->ttl_ms = ttl_ms;
    pthread_mutex_init(&self->lock, NULL);
    self->entries = zhashx_new();
    ASSERT(self->entries);
    zhashx_set_destructor(self->entries, s_free_entry);
    return self;
}

void idcache_destroy(idcache_t **self_p) {
    idcache_t *self = *self_p;
    if (!self) {
        return;
    }
    zhashx_destroy(&self->entries);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The hex SHA-256 of key into hex. */
static void s_hash(const char *key, char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    int ok = EVP_Digest(key, strlen(key), md, &len, EVP_sha256(), NULL);
    ASSERT(ok == 1 && len == 32);
    hex_encode(md, len, hex);
}

static bool s_fresh(const idcache_t *self, const entry_t *e, int64_t now_ms) {
    return now_ms - e->found_ms < self->ttl_ms;
}

bool idcache_get(idcache_t *self, const char *key, int64_t now_ms, char id[ID_UUID_LEN + 1]) {
    if (self->ttl_ms <= 0) {
        return false;
    }
    char hex[65];
    s_hash(key, hex);
    pthread_mutex_lock(&self->lock);
    entry_t *e = zhashx_lookup(self->entries, hex);
    bool hit = e && s_fresh(self, e, now_ms);
    if (hit) {
        memcpy(id, e->id, ID_UUID_LEN + 1);
    } else if (e) {
        zhashx_delete(self->entries, hex);
    }
    pthread_mutex_unlock(&self->lock);
    return hit;
}

/* Drops every expired entry; the lock is held. */
static void s_sweep(idcache_t *self, int64_t now_ms) {
    zlistx_t *keys = zhashx_keys(self->entries);
    ASSERT(keys);
    for (const char *k = zlistx_first(keys); k; k = zlistx_next(keys)) {
        if (!s_fresh(self, zhashx_lookup(self->entries, k), now_ms)) {
            zhashx_delete(self->entries, k);
        }
    }
    zlistx_destroy(&keys);
}

void idcache_put(idcache_t *self, const char *key, const char *id, int64_t now_ms) {
    if (self->ttl_ms <= 0) {
        return;
    }
    char hex[65];
    s_hash(key, hex);
    entry_t *e = mem_calloc(1, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    e->found_ms = now_ms;
    pthread_mutex_lock(&self->lock);
    if (zhashx_size(self->entries) >= IDCACHE_MAX) {
        s_sweep(self, now_ms);
    }
    if (zhashx_size(self->entries) < IDCACHE_MAX || zhashx_lookup(self->entries, hex)) {
        zhashx_update(self->entries, hex, e);
        e = NULL;
    }
    pthread_mutex_unlock(&self->lock);
    free(e);
}

int idcache_size(idcache_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = (int)zhashx_size(self->entries);
    pthread_mutex_unlock(&self->lock);
    return n;
}
