/* dbpool: see dbpool.h. */
#include "dbpool.h"
#include "db.h"
#include "mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct dbpool {
    pthread_mutex_t lock;
    char *url;
    char *app;
    int timeout_ms;
    PGconn *idle[DBPOOL_IDLE_MAX];
    int count;
};

dbpool_t *dbpool_new(const char *url, const char *application_name, int statement_timeout_ms) {
    dbpool_t *self = mem_calloc(1, sizeof *self);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    self->url = mem_strdup(url);
    self->app = mem_strdup(application_name);
    self->timeout_ms = statement_timeout_ms;
    return self;
}

void dbpool_destroy(dbpool_t **self_p) {
    dbpool_t *self = *self_p;
    if (!self) {
        return;
    }
    for (int i = 0; i < self->count; i++) {
        PQfinish(self->idle[i]);
    }
    pthread_mutex_destroy(&self->lock);
    free(self->url);
    free(self->app);
    free(self);
    *self_p = NULL;
}

static void s_quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

PGconn *dbpool_get(dbpool_t *self) {
    pthread_mutex_lock(&self->lock);
    PGconn *conn = self->count ? self->idle[--self->count] : NULL;
    pthread_mutex_unlock(&self->lock);
    if (conn) {
        return conn;
    }
    conn = db_connect(self->url, self->app);
    if (!conn) {
        return NULL;
    }
    /* Notices (a nested BEGIN's warning, say) are not errors and must not reach stderr. */
    PQsetNoticeProcessor(conn, s_quiet, NULL);
    char ms[24];
    snprintf(ms, sizeof ms, "%d", self->timeout_ms);
    const char *p[] = {ms};
    char err[200];
    if (db_exec(conn, err, sizeof err, "SELECT set_config('statement_timeout', $1, false)", 1, p) !=
        DB_OK) {
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

void dbpool_put(dbpool_t *self, PGconn *conn) {
    if (!conn) {
        return;
    }
    if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_IDLE) {
        PQfinish(conn);
        return;
    }
    pthread_mutex_lock(&self->lock);
    if (self->count < DBPOOL_IDLE_MAX) {
        self->idle[self->count++] = conn;
        conn = NULL;
    }
    pthread_mutex_unlock(&self->lock);
    PQfinish(conn);
}
