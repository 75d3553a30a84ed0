/* pool: shared PostgreSQL connections; see pool.h. */
#include "pool.h"
#include "db.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* An idle connection and the loss count it was last checked against. */
typedef struct {
    PGconn *conn;
    int64_t losses;
} idle_t;

struct pool {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    idle_t *free_list;
    int nfree;
    int size;
    int64_t losses;     /* connections found lost: every idle one from before is suspect */
    int64_t backoff_ms; /* after a failed reset: the current interval, doubling; 0: none */
    int64_t next_reset; /* no reset before this (id_now_ms) */
};

#define POOL_BACKOFF_MIN_MS 100
#define POOL_BACKOFF_MAX_MS 1000 /* after a promotion, writes wait at most this long */

/* A pool of size connections to url. Verified: NULL when one cannot be opened. Unverified:
 * a connection that failed to open is kept, and every query on it fails as on a lost server. */
static pool_t *s_new(const char *url, int size, const char *application_name, bool verified) {
    ASSERT(size > 0);
    pool_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    id_cond_init(&self->freed);
    self->free_list = mem_calloc((size_t)size, sizeof *self->free_list);
    for (int i = 0; i < size; i++) {
        PGconn *c = verified ? db_connect(url, application_name) : PQconnectdb(url);
        if (!c) {
            ASSERT(verified); /* PQconnectdb is NULL only when libpq is out of memory */
            pool_destroy(&self);
            return NULL;
        }
        self->free_list[self->nfree++] = (idle_t){c, 0};
    }
    self->size = size;
    return self;
}

pool_t *pool_new(const char *url, int size, const char *application_name) {
    return s_new(url, size, application_name, true);
}

pool_t *pool_new_unverified(const char *conninfo, int size) {
    return s_new(conninfo, size, NULL, false);
}

void pool_destroy(pool_t **self_p) {
    pool_t *self = *self_p;
    if (!self) {
        return;
    }
    for (int i = 0; i < self->nfree; i++) {
        PQfinish(self->free_list[i].conn);
    }
    free(self->free_list);
    pthread_mutex_destroy(&self->lock);
    pthread_cond_destroy(&self->freed);
    free(self);
    *self_p = NULL;
}

/* Reconnects conn (every host of a multi-host URL in turn, the primary kept), unless a reset
 * failed less than the backoff ago: during an outage or a failover a request then fails at
 * once, as on a lost server, instead of each one dialing every host again. */
static void s_reset(pool_t *self, PGconn *conn, const char *reason) {
    pthread_mutex_lock(&self->lock);
    bool wait = id_now_ms() < self->next_reset;
    pthread_mutex_unlock(&self->lock);
    if (wait) {
        return;
    }
    log_info("db_reconnect", "reason=\"%s\"", reason);
    PQreset(conn);
    bool ok = PQstatus(conn) == CONNECTION_OK;
    pthread_mutex_lock(&self->lock);
    if (ok) {
        self->backoff_ms = 0;
        self->next_reset = 0;
    } else if (id_now_ms() >= self->next_reset) { /* resets failing together count once */
        self->backoff_ms = self->backoff_ms ? self->backoff_ms * 2 : POOL_BACKOFF_MIN_MS;
        if (self->backoff_ms > POOL_BACKOFF_MAX_MS) {
            self->backoff_ms = POOL_BACKOFF_MAX_MS;
        }
        self->next_reset = id_now_ms() + self->backoff_ms;
        log_warn("db_reconnect_failed", "backoff_ms=%lld", (long long)self->backoff_ms);
    }
    pthread_mutex_unlock(&self->lock);
}

/* Takes the top idle connection (lock held, one is idle). A connection idle since another
 * was found lost is reset first: a server restart kills them all, and each would otherwise
 * fail one request before its own reset. */
static PGconn *s_take(pool_t *self) {
    idle_t t = self->free_list[--self->nfree];
    bool suspect = t.losses < self->losses;
    pthread_mutex_unlock(&self->lock);
    if (suspect) {
        s_reset(self, t.conn, "another connection was lost");
    }
    return t.conn;
}

PGconn *pool_get(pool_t *self) {
    pthread_mutex_lock(&self->lock);
    while (self->nfree == 0) {
        pthread_cond_wait(&self->freed, &self->lock);
    }
    return s_take(self);
}

PGconn *pool_get_within(pool_t *self, int64_t timeout_ms) {
    struct timespec until = id_timespec_at(id_now_ms() + timeout_ms);
    pthread_mutex_lock(&self->lock);
    while (self->nfree == 0) {
        if (pthread_cond_timedwait(&self->freed, &self->lock, &until) != 0) {
            break;
        }
    }
    if (self->nfree == 0) {
        pthread_mutex_unlock(&self->lock);
        return NULL;
    }
    return s_take(self);
}

void pool_put(pool_t *self, PGconn *conn) {
    db_flush(conn, NULL, 0); /* nothing is left sent ahead (db.h); ROLLBACK needs none */
    bool lost = !db_usable(conn);
    if (lost) {
        s_reset(self, conn, "connection lost");
    } else if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        PQclear(PQexec(conn, "ROLLBACK"));
    }
    pthread_mutex_lock(&self->lock);
    ASSERT(self->nfree < self->size);
    if (lost) {
        self->losses++;
    }
    self->free_list[self->nfree++] = (idle_t){conn, self->losses};
    pthread_cond_signal(&self->freed);
    pthread_mutex_unlock(&self->lock);
}
