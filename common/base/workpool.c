/* workpool: see workpool.h. */
#include "workpool.h"
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct job {
    workpool_fn *fn;
    void *arg;
    struct job *next;
} job_t;

struct workpool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    job_t *head;
    job_t *tail;
    int64_t queued;
    bool stop;
    int nthreads;
    pthread_t *threads;
};

static void *s_run(void *arg) {
    workpool_t *self = arg;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (!self->head && !self->stop) {
            pthread_cond_wait(&self->wake, &self->lock);
        }
        job_t *j = self->head;
        if (!j) {
            break; /* stopping, and nothing is left */
        }
        self->head = j->next;
        if (!self->head) {
            self->tail = NULL;
        }
        self->queued--;
        pthread_mutex_unlock(&self->lock);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

workpool_t *workpool_new(const char *name, int threads) {
    ASSERT(threads >= 1);
    workpool_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->threads = mem_calloc((size_t)threads, sizeof *self->threads);
    for (; self->nthreads < threads; self->nthreads++) {
        if (pthread_create(&self->threads[self->nthreads], NULL, s_run, self) != 0) {
            log_error("workpool_start_failed", "name=%s threads=%d started=%d", name, threads,
                      self->nthreads);
            workpool_destroy(&self);
            return NULL;
        }
    }
    log_info("workpool_started", "name=%s threads=%d", name, threads);
    return self;
}

void workpool_destroy(workpool_t **self_p) {
    workpool_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_broadcast(&self->wake);
    pthread_mutex_unlock(&self->lock);
    for (int i = 0; i < self->nthreads; i++) {
        pthread_join(self->threads[i], NULL);
    }
    free(self->threads);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

void workpool_post(workpool_t *self, workpool_fn *fn, void *arg) {
    job_t *j = mem_calloc(1, sizeof *j);
    j->fn = fn;
    j->arg = arg;
    pthread_mutex_lock(&self->lock);
    if (self->tail) {
        self->tail->next = j;
    } else {
        self->head = j;
    }
    self->tail = j;
    self->queued++;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}

int64_t workpool_queued(workpool_t *self) {
    pthread_mutex_lock(&self->lock);
    int64_t n = self->queued;
    pthread_mutex_unlock(&self->lock);
    return n;
}
