/* authcache: see authcache.h. */
#include "authcache.h"
#include "mem.h"

#include <czmq.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char user_id[ID_UUID_LEN + 1];
    int64_t verified_ms;
} entry_t;

struct authcache {
    int64_t ttl_ms;
    pthread_mutex_t lock;
    zhashx_t *entries; /* hex SHA-256 of a token -> entry_t */
};

static void s_free_entry(void **item) {
    free(*item);
    *item = NULL;
}

authcache_t *authcache_new(int64_t ttl_ms) {
    authcache_t *self = mem_calloc(1, sizeof *self);
    self->ttl_ms = ttl_ms;
    pthread_mutex_init(&self->lock, NULL);
    self->entries = zhashx_new();
    ASSERT(self->entries);
    zhashx_set_destructor(self->entries, s_free_entry);
    return self;
}

void authcache_destroy(authcache_t **self_p) {
    authcache_t *self = *self_p;
    if (!self) {
        return;
    }
    zhashx_destroy(&self->entries);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The hex SHA-256 of token into key. */
static void s_key(const char *token, char key[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    int ok = EVP_Digest(token, strlen(token), md, &len, EVP_sha256(), NULL);
    ASSERT(ok == 1 && len == 32);
    for (unsigned i = 0; i < len; i++) {
        snprintf(key + 2 * i, 3, "%02x", md[i]);
    }
}

static bool s_fresh(const authcache_t *self, const entry_t *e, int64_t now_ms) {
    return now_ms - e->verified_ms < self->ttl_ms;
}

bool authcache_get(authcache_t *self, const char *token, int64_t now_ms,
                   char user_id[ID_UUID_LEN + 1]) {
    if (self->ttl_ms <= 0) {
        return false;
    }
    char key[65];
    s_key(token, key);
    pthread_mutex_lock(&self->lock);
    entry_t *e = zhashx_lookup(self->entries, key);
    bool hit = e && s_fresh(self, e, now_ms);
    if (hit) {
        memcpy(user_id, e->user_id, ID_UUID_LEN + 1);
    } else if (e) {
        zhashx_delete(self->entries, key);
    }
    pthread_mutex_unlock(&self->lock);
    return hit;
}

/* Drops every expired entry; the lock is held. */
static void s_sweep(authcache_t *self, int64_t now_ms) {
    zlistx_t *keys = zhashx_keys(self->entries);
    ASSERT(keys);
    for (const char *k = zlistx_first(keys); k; k = zlistx_next(keys)) {
        if (!s_fresh(self, zhashx_lookup(self->entries, k), now_ms)) {
            zhashx_delete(self->entries, k);
        }
    }
    zlistx_destroy(&keys);
}

void authcache_put(authcache_t *self, const char *token, const char *user_id, int64_t now_ms) {
    if (self->ttl_ms <= 0) {
        return;
    }
    char key[65];
    s_key(token, key);
    entry_t *e = mem_calloc(1, sizeof *e);
    snprintf(e->user_id, sizeof e->user_id, "%s", user_id);
    e->verified_ms = now_ms;
    pthread_mutex_lock(&self->lock);
    if (zhashx_size(self->entries) >= AUTHCACHE_MAX) {
        s_sweep(self, now_ms);
    }
    if (zhashx_size(self->entries) < AUTHCACHE_MAX || zhashx_lookup(self->entries, key)) {
        zhashx_update(self->entries, key, e);
        e = NULL;
    }
    pthread_mutex_unlock(&self->lock);
    free(e);
}

int authcache_size(authcache_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = (int)zhashx_size(self->entries);
    pthread_mutex_unlock(&self->lock);
    return n;
}
