/* leaseset: see leaseset.h. An array (copied whole by a snapshot) and an index of it by
 * "chat_id/runner_id", under a mutex: a worker holds thousands of leases, and adding or
 * removing one must not scan them all. */
#include "leaseset.h"
#include "mem.h"

#include <czmq.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>

struct leaseset {
    pthread_mutex_t lock;
    lease_t *items;
    size_t count;
    size_t cap;
    zhashx_t *index; /* "chat_id/runner_id" -> its position in items, plus one */
};

void leaseset_key(const char *chat_id, const char *runner_id, char key[LEASESET_KEY_LEN]) {
    snprintf(key, LEASESET_KEY_LEN, "%s/%s", chat_id, runner_id);
}

leaseset_t *leaseset_new(void) {
    leaseset_t *self = mem_calloc(1, sizeof *self);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    self->index = zhashx_new();
    return self;
}

void leaseset_destroy(leaseset_t **self_p) {
    leaseset_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_destroy(&self->lock);
    zhashx_destroy(&self->index);
    free(self->items);
    free(self);
    *self_p = NULL;
}

static ssize_t s_index(leaseset_t *self, const char *chat_id, const char *runner_id) {
    char key[LEASESET_KEY_LEN];
    leaseset_key(chat_id, runner_id, key);
    uintptr_t at = (uintptr_t)zhashx_lookup(self->index, key);
    return at ? (ssize_t)(at - 1) : -1;
}

void leaseset_add(leaseset_t *self, const char *chat_id, const char *runner_id) {
    pthread_mutex_lock(&self->lock);
    if (s_index(self, chat_id, runner_id) < 0) {
        if (self->count == self->cap) {
            self->cap = self->cap ? self->cap * 2 : 16;
            self->items = mem_realloc(self->items, self->cap * sizeof *self->items);
        }
        lease_t *l = &self->items[self->count++];
        snprintf(l->chat_id, sizeof l->chat_id, "%s", chat_id);
        snprintf(l->runner_id, sizeof l->runner_id, "%s", runner_id);
        char key[LEASESET_KEY_LEN];
        leaseset_key(chat_id, runner_id, key);
        zhashx_insert(self->index, key, (void *)(uintptr_t)self->count);
    }
    pthread_mutex_unlock(&self->lock);
}

bool leaseset_remove(leaseset_t *self, const char *chat_id, const char *runner_id) {
    pthread_mutex_lock(&self->lock);
    ssize_t i = s_index(self, chat_id, runner_id);
    if (i >= 0) {
        char key[LEASESET_KEY_LEN];
        leaseset_key(chat_id, runner_id, key);
        zhashx_delete(self->index, key);
        self->items[i] = self->items[--self->count];
        if ((size_t)i < self->count) { /* the last lease moved into the gap */
            leaseset_key(self->items[i].chat_id, self->items[i].runner_id, key);
            zhashx_update(self->index, key, (void *)(uintptr_t)(i + 1));
        }
    }
    pthread_mutex_unlock(&self->lock);
    return i >= 0;
}

bool leaseset_has(leaseset_t *self, const char *chat_id, const char *runner_id) {
    pthread_mutex_lock(&self->lock);
    bool has = s_index(self, chat_id, runner_id) >= 0;
    pthread_mutex_unlock(&self->lock);
    return has;
}

size_t leaseset_snapshot(leaseset_t *self, lease_t **out) {
    pthread_mutex_lock(&self->lock);
    size_t n = self->count;
    *out = n ? mem_alloc(n * sizeof **out) : NULL;
    if (n) {
        memcpy(*out, self->items, n * sizeof **out);
    }
    pthread_mutex_unlock(&self->lock);
    return n;
}

size_t leaseset_size(leaseset_t *self) {
    pthread_mutex_lock(&self->lock);
    size_t n = self->count;
    pthread_mutex_unlock(&self->lock);
    return n;
}
