/* cancel: see cancel.h. A mutex and a condition variable on the monotonic clock (id.h). */
#include "cancel.h"
#include "id.h"
#include "mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct cancel {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    bool set;
};

cancel_t *cancel_new(void) {
    cancel_t *self = mem_calloc(1, sizeof *self);
    id_cond_init(&self->cond);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    self->refs = 1;
    return self;
}

cancel_t *cancel_ref(cancel_t *self) {
    pthread_mutex_lock(&self->lock);
    self->refs++;
    pthread_mutex_unlock(&self->lock);
    return self;
}

void cancel_destroy(cancel_t **self_p) {
    cancel_t *self = *self_p;
    if (!self) {
        return;
    }
    *self_p = NULL;
    pthread_mutex_lock(&self->lock);
    int left = --self->refs;
    pthread_mutex_unlock(&self->lock);
    if (left == 0) {
        pthread_cond_destroy(&self->cond);
        pthread_mutex_destroy(&self->lock);
        free(self);
    }
}

void cancel_set(cancel_t *self) {
    pthread_mutex_lock(&self->lock);
    self->set = true;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
}

bool cancel_is_set(cancel_t *self) {
    pthread_mutex_lock(&self->lock);
    bool set = self->set;
    pthread_mutex_unlock(&self->lock);
    return set;
}

bool cancel_wait_until(cancel_t *self, int64_t deadline_ms) {
    struct timespec until = id_timespec_at(deadline_ms);
    pthread_mutex_lock(&self->lock);
    while (!self->set && deadline_ms > id_now_ms()) {
        if (pthread_cond_timedwait(&self->cond, &self->lock, &until) == ETIMEDOUT) {
            break;
        }
    }
    bool set = self->set;
    pthread_mutex_unlock(&self->lock);
    return set;
}

bool cancel_wait_ms(cancel_t *self, int64_t ms) {
    return cancel_wait_until(self, id_now_ms() + (ms > 0 ? ms : 0));
}
