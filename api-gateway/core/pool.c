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
    int64_t losses; /* connections found lost: every idle one from before is suspect */
};

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

/* Takes the top idle connection (lock held, one is idle). A connection idle since another
 * was found lost is reset first: a server restart kills them all, and each would otherwise
 * fail one request before its own reset. */
static PGconn *s_take(pool_t *self) {
    idle_t t = self->free_list[--self->nfree];
    bool suspect = t.losses < self->losses;
    pthread_mutex_unlock(&self->lock);
    if (suspect) {
        log_info("db_reconnect", "reason=\"another connection was lost\"");
        PQreset(t.conn);
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
    bool lost = PQstatus(conn) != CONNECTION_OK;
    if (lost) {
        log_warn("db_reconnect", "reason=\"connection lost\"");
        PQreset(conn);
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
