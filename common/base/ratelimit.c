/* ratelimit: token buckets by key in a fixed set-associative table; see ratelimit.h. */
#include "ratelimit.h"

#include "id.h"
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Refills are sums of fractions of a token: a level this close to a whole token is one. */
#define S_EPSILON 1e-9

typedef struct {
    uint64_t hash; /* 0: free */
    double tokens;
    int64_t at_ms; /* when tokens was last brought up to date (and the entry last used) */
} s_entry_t;

struct ratelimit {
    pthread_mutex_t lock;
    double rate_per_ms;
    double burst;
    uint64_t seed;
    size_t sets;
    s_entry_t *entries; /* sets * RATELIMIT_WAYS */
};

ratelimit_t *ratelimit_new(double rate_per_s, double burst, int entries) {
    ASSERT(rate_per_s > 0 && burst >= 1 && entries > 0);
    ratelimit_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->rate_per_ms = rate_per_s / 1000.0;
    self->burst = burst;
    self->sets = ((size_t)entries + RATELIMIT_WAYS - 1) / RATELIMIT_WAYS;
    self->entries = mem_calloc(self->sets * RATELIMIT_WAYS, sizeof *self->entries);
    ASSERT(id_random(&self->seed, sizeof self->seed) == 0);
    return self;
}

void ratelimit_destroy(ratelimit_t **self_p) {
    ratelimit_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_destroy(&self->lock);
    free(self->entries);
    free(self);
    *self_p = NULL;
}

/* FNV-1a over the key from the table's random seed, then splitmix64's finalizer; never 0. */
static uint64_t s_hash(const ratelimit_t *self, const char *key) {
    uint64_t h = 0xcbf29ce484222325ULL ^ self->seed;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h = (h ^ *p) * 0x100000001b3ULL;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h ? h : 1;
}

/* The entry's tokens refilled up to now_ms. */
static double s_level(const ratelimit_t *self, const s_entry_t *e, int64_t now_ms) {
    double t = e->tokens + (double)(now_ms - e->at_ms) * self->rate_per_ms;
    return t > self->burst ? self->burst : t;
}

/* key's entry in its set, or the one it takes over (a free or full one, else the least
 * recently used), reset to a full bucket. */
static s_entry_t *s_entry(ratelimit_t *self, uint64_t hash, int64_t now_ms) {
    s_entry_t *set = &self->entries[(hash % self->sets) * RATELIMIT_WAYS];
    s_entry_t *idle = NULL, *oldest = &set[0];
    for (int i = 0; i < RATELIMIT_WAYS; i++) {
        s_entry_t *e = &set[i];
        if (e->hash == hash) {
            return e;
        }
        if (!idle && (!e->hash || s_level(self, e, now_ms) >= self->burst)) {
            idle = e;
        }
        if (e->at_ms < oldest->at_ms) {
            oldest = e;
        }
    }
    s_entry_t *victim = idle ? idle : oldest;
    *victim = (s_entry_t){.hash = hash, .tokens = self->burst, .at_ms = now_ms};
    return victim;
}

bool ratelimit_take(ratelimit_t *self, const char *key, int64_t now_ms, int64_t *retry_after_ms) {
    uint64_t hash = s_hash(self, key);
    pthread_mutex_lock(&self->lock);
    s_entry_t *e = s_entry(self, hash, now_ms);
    double level = s_level(self, e, now_ms);
    e->at_ms = now_ms;
    bool ok = level >= 1.0 - S_EPSILON;
    e->tokens = ok ? (level > 1.0 ? level - 1.0 : 0.0) : level;
    pthread_mutex_unlock(&self->lock);
    if (!ok && retry_after_ms) {
        double ms = (1.0 - level) / self->rate_per_ms - S_EPSILON;
        int64_t wait = (int64_t)ms + ((double)(int64_t)ms < ms); /* rounded up */
        *retry_after_ms = wait < 1 ? 1 : wait;
    }
    return ok;
}
