/* dbpool: see dbpool.h. */
#include "dbpool.h"
#include "db.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct dbpool {
    pthread_mutex_t lock;
    pthread_cond_t freed; /* a connection was put back or closed (monotonic clock) */
    char *url;
    char *app;
    int timeout_ms;
    int max;
    PGconn **idle;
    int nidle;
    int open;
    int waiting;
    int64_t backoff_ms;   /* the current interval after a failed connect; 0: none */
    int64_t next_connect; /* no connect before this (id_now_ms) */
    int64_t failures;
};

dbpool_t *dbpool_new(const char *url, const char *application_name, int statement_timeout_ms,
                     int max) {
    ASSERT(max >= 1);
    dbpool_t *self = mem_calloc(1, sizeof *self);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    id_cond_init(&self->freed);
    self->url = mem_strdup(url);
    self->app = mem_strdup(application_name);
    self->timeout_ms = statement_timeout_ms;
    self->max = max;
    self->idle = mem_calloc((size_t)max, sizeof *self->idle);
    return self;
}

void dbpool_destroy(dbpool_t **self_p) {
    dbpool_t *self = *self_p;
    if (!self) {
        return;
    }
    for (int i = 0; i < self->nidle; i++) {
        PQfinish(self->idle[i]);
    }
    pthread_cond_destroy(&self->freed);
    pthread_mutex_destroy(&self->lock);
    free(self->idle);
    free(self->url);
    free(self->app);
    free(self);
    *self_p = NULL;
}

static void s_quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

/* A new connection with the pool's settings, or NULL. */
static PGconn *s_connect(dbpool_t *self) {
    PGconn *conn = db_connect(self->url, self->app);
    if (!conn) {
        return NULL;
    }
    /* Notices (a nested BEGIN's warning, say) are not errors and must not reach stderr. */
    PQsetNoticeProcessor(conn, s_quiet, NULL);
    char ms[24];
    snprintf(ms, sizeof ms, "%d", self->timeout_ms);
    const char *p[] = {ms};
    char err[200];
    /* The same bound on a transaction left idle: a worker stopped inside a bundle (SIGSTOP, a
     * frozen VM) must not hold its chat's row lock, which would keep every other worker from
     * taking the chat over once the lease is stale (ARCHITECTURE.md §6.3). Each prepared
     * statement is planned once: a task's statements are keyed by its chat, and PostgreSQL
     * would choose their generic plans after five custom ones anyway (§6.5). */
    if (db_exec(conn, err, sizeof err,
                "SELECT set_config('statement_timeout', $1, false),"
                " set_config('idle_in_transaction_session_timeout', $1, false),"
                " set_config('plan_cache_mode', 'force_generic_plan', false)",
                1, p) != DB_OK) {
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

/* Records the outcome of a connect (lock held). */
static void s_connected(dbpool_t *self, bool ok) {
    if (ok) {
        self->backoff_ms = 0;
        return;
    }
    self->failures++;
    self->open--;
    self->backoff_ms = self->backoff_ms ? self->backoff_ms * 2 : DBPOOL_BACKOFF_MIN_MS;
    if (self->backoff_ms > DBPOOL_BACKOFF_MAX_MS) {
        self->backoff_ms = DBPOOL_BACKOFF_MAX_MS;
    }
    /* Jitter: workers that lost the server together do not come back together. */
    uint32_t r = 0;
    (void)id_random(&r, sizeof r); /* on failure r stays 0: no jitter, still a backoff */
    int64_t jitter = (int64_t)(r % (uint32_t)(self->backoff_ms / 2 + 1));
    self->next_connect = id_now_ms() + self->backoff_ms / 2 + jitter;
    log_warn("db_connect_backoff", "pool=%s open=%d backoff_ms=%lld failures=%lld", self->app,
             self->open, (long long)(self->next_connect - id_now_ms()), (long long)self->failures);
    pthread_cond_broadcast(&self->freed);
}

PGconn *dbpool_get(dbpool_t *self, int64_t wait_ms) {
    int64_t deadline = wait_ms < 0 ? INT64_MAX : id_now_ms() + wait_ms;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        if (self->nidle > 0) {
            PGconn *conn = self->idle[--self->nidle];
            pthread_mutex_unlock(&self->lock);
            return conn;
        }
        if (self->open < self->max) {
            if (id_now_ms() < self->next_connect) {
                pthread_mutex_unlock(&self->lock);
                return NULL;
            }
            self->open++;
            pthread_mutex_unlock(&self->lock);
            PGconn *conn = s_connect(self);
            pthread_mutex_lock(&self->lock);
            s_connected(self, conn != NULL);
            pthread_mutex_unlock(&self->lock);
            return conn;
        }
        int64_t now = id_now_ms();
        if (now >= deadline) {
            pthread_mutex_unlock(&self->lock);
            return NULL;
        }
        self->waiting++;
        struct timespec ts = id_timespec_at(deadline == INT64_MAX ? now + 1000 : deadline);
        pthread_cond_timedwait(&self->freed, &self->lock, &ts);
        self->waiting--;
    }
}

void dbpool_put(dbpool_t *self, PGconn *conn) {
    if (!conn) {
        return;
    }
    bool healthy = db_usable(conn) && PQtransactionStatus(conn) == PQTRANS_IDLE;
    if (!healthy) {
        PQfinish(conn);
    }
    pthread_mutex_lock(&self->lock);
    if (healthy) {
        self->idle[self->nidle++] = conn;
    } else {
        self->open--;
    }
    pthread_cond_signal(&self->freed);
    pthread_mutex_unlock(&self->lock);
}

void dbpool_stats(dbpool_t *self, dbpool_stats_t *out) {
    pthread_mutex_lock(&self->lock);
    *out = (dbpool_stats_t){.open = self->open,
                            .idle = self->nidle,
                            .waiting = self->waiting,
                            .connect_failures = self->failures};
    pthread_mutex_unlock(&self->lock);
}
