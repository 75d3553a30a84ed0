/* dbexec: a workpool whose jobs hold a pooled connection; see dbexec.h. */
#include "dbexec.h"
#include "mem.h"
#include "workpool.h"

#include <stdlib.h>

struct dbexec {
    dbpool_t *pool;
    workpool_t *threads;
};

typedef struct {
    dbexec_t *exec;
    dbexec_fn *fn;
    void *arg;
} s_job_t;

static void s_run(void *arg) {
    s_job_t *job = arg;
    PGconn *conn = dbpool_get(job->exec->pool, -1);
    job->fn(job->arg, conn);
    dbpool_put(job->exec->pool, conn);
    free(job);
}

dbexec_t *dbexec_new(dbpool_t *pool, int threads) {
    ASSERT(threads >= 1);
    workpool_t *wp = workpool_new("worker_db", threads);
    if (!wp) {
        return NULL;
    }
    dbexec_t *self = mem_calloc(1, sizeof *self);
    self->pool = pool;
    self->threads = wp;
    return self;
}

void dbexec_destroy(dbexec_t **self_p) {
    dbexec_t *self = *self_p;
    if (!self) {
        return;
    }
    workpool_destroy(&self->threads); /* every job queued runs first */
    free(self);
    *self_p = NULL;
}

void dbexec_submit(dbexec_t *self, dbexec_fn *fn, void *arg) {
    s_job_t *job = mem_alloc(sizeof *job);
    *job = (s_job_t){self, fn, arg};
    workpool_post(self->threads, s_run, job);
}

size_t dbexec_queued(dbexec_t *self) {
    return (size_t)workpool_queued(self->threads);
}
