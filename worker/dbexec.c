/* dbexec: see dbexec.h. */
#include "dbexec.h"
#include "mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct s_job {
    dbexec_fn *fn;
    void *arg;
    struct s_job *next;
} s_job_t;

struct dbexec {
    dbpool_t *pool;
    pthread_mutex_t lock;
    pthread_cond_t ready;
    s_job_t *head, *tail;
    size_t queued;
    bool stop;
    int nthreads;
    pthread_t *threads;
};

static void *s_thread(void *arg) {
    dbexec_t *self = arg;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (!self->head && !self->stop) {
            pthread_cond_wait(&self->ready, &self->lock);
        }
        s_job_t *job = self->head;
        if (!job) {
            break; /* stopping, and nothing is left */
        }
        self->head = job->next;
        if (!self->head) {
            self->tail = NULL;
        }
        self->queued--;
        pthread_mutex_unlock(&self->lock);
        PGconn *conn = dbpool_get(self->pool, -1);
        job->fn(job->arg, conn);
        dbpool_put(self->pool, conn);
        free(job);
        pthread_mutex_lock(&self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

dbexec_t *dbexec_new(dbpool_t *pool, int threads) {
    ASSERT(threads >= 1);
    dbexec_t *self = mem_calloc(1, sizeof *self);
    self->pool = pool;
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    ASSERT(pthread_cond_init(&self->ready, NULL) == 0);
    self->threads = mem_calloc((size_t)threads, sizeof *self->threads);
    for (; self->nthreads < threads; self->nthreads++) {
        if (pthread_create(&self->threads[self->nthreads], NULL, s_thread, self) != 0) {
            dbexec_destroy(&self);
            return NULL;
        }
    }
    return self;
}

void dbexec_destroy(dbexec_t **self_p) {
    dbexec_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_broadcast(&self->ready);
    pthread_mutex_unlock(&self->lock);
    for (int i = 0; i < self->nthreads; i++) {
        pthread_join(self->threads[i], NULL);
    }
    ASSERT(!self->head); /* with at least one thread, every job ran */
    pthread_cond_destroy(&self->ready);
    pthread_mutex_destroy(&self->lock);
    free(self->threads);
    free(self);
    *self_p = NULL;
}

void dbexec_submit(dbexec_t *self, dbexec_fn *fn, void *arg) {
    s_job_t *job = mem_calloc(1, sizeof *job);
    *job = (s_job_t){fn, arg, NULL};
    pthread_mutex_lock(&self->lock);
    if (self->tail) {
        self->tail->next = job;
    } else {
        self->head = job;
    }
    self->tail = job;
    self->queued++;
    pthread_cond_signal(&self->ready);
    pthread_mutex_unlock(&self->lock);
}

size_t dbexec_queued(dbexec_t *self) {
    pthread_mutex_lock(&self->lock);
    size_t n = self->queued;
    pthread_mutex_unlock(&self->lock);
    return n;
}
