/* db: checked libpq access; see db.h. */
#include "db.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Statements are prepared once per connection and then executed by name: parsing and
 * planning were most of the cost of a state-machine bundle's short statements. The SQL
 * texts get process-wide ids; each connection remembers (in libpq instance data, reset with
 * the connection) which ids it has prepared. */
#define DB_STATEMENTS_MAX 4096 /* distinct SQL texts; beyond this, statements run unprepared */

#define DB_QUEUE_MAX 64 /* statements sent ahead (db_send) before a result is read */

/* A message sent in pipeline mode whose result is not read yet. */
typedef struct {
    long prepare; /* >= 0: the PQsendPrepare of this statement id; -1: a statement */
    db_result_fn *fn;
    void *ctx;
} queued_t;

typedef struct {
    unsigned char prepared[DB_STATEMENTS_MAX / 8];
    queued_t queue[DB_QUEUE_MAX];
    int queued;
    bool stale; /* connected, but to a server that can no longer take writes (db_usable) */
} conn_state_t;

static pthread_mutex_t s_stmt_lock = PTHREAD_MUTEX_INITIALIZER;
static zhashx_t *s_stmt_ids; /* SQL text -> id + 1 (as a pointer-sized integer) */
static size_t s_stmt_count;

static int s_event(PGEventId id, void *info, void *pass) {
    (void)pass;
    if (id == PGEVT_REGISTER) {
        PGEventRegister *e = info;
        return PQsetInstanceData(e->conn, s_event, mem_calloc(1, sizeof(conn_state_t)));
    }
    if (id == PGEVT_CONNRESET) {
        PGEventConnReset *e = info;
        conn_state_t *st = PQinstanceData(e->conn, s_event);
        if (st) {
            memset(st, 0, sizeof *st); /* a new session: no prepared statements, no queue */
        }
    } else if (id == PGEVT_CONNDESTROY) {
        PGEventConnDestroy *e = info;
        free(PQinstanceData(e->conn, s_event));
    }
    return 1;
}

/* The id of sql, or -1 when the registry is full. */
static long s_stmt_id(const char *sql) {
    pthread_mutex_lock(&s_stmt_lock);
    if (!s_stmt_ids) {
        s_stmt_ids = zhashx_new();
        zhashx_set_key_duplicator(s_stmt_ids, (zhashx_duplicator_fn *)strdup);
        zhashx_set_key_destructor(s_stmt_ids, (zhashx_destructor_fn *)zstr_free);
    }
    long id = (long)(intptr_t)zhashx_lookup(s_stmt_ids, sql) - 1;
    if (id < 0 && s_stmt_count < DB_STATEMENTS_MAX) {
        id = (long)s_stmt_count++;
        zhashx_insert(s_stmt_ids, sql, (void *)(intptr_t)(id + 1));
    }
    pthread_mutex_unlock(&s_stmt_lock);
    return id;
}

static bool s_is_prepared(const conn_state_t *st, long id) {
    return st->prepared[id / 8] & (1u << (id % 8));
}

static void s_set_prepared(conn_state_t *st, long id, bool on) {
    if (on) {
        st->prepared[id / 8] |= (unsigned char)(1u << (id % 8));
    } else {
        st->prepared[id / 8] &= (unsigned char)~(1u << (id % 8));
    }
}

static void s_enqueue(conn_state_t *st, long prepare, db_result_fn *fn, void *ctx) {
    ASSERT(st->queued < DB_QUEUE_MAX);
    st->queue[st->queued++] = (queued_t){.prepare = prepare, .fn = fn, .ctx = ctx};
}

/* Sends sql in pipeline mode (entered on the first): prepared once per connection and then
 * run by name (unprepared when the registry is full). Queues its entries; 0 or -1 (nothing
 * queued for it). */
static int s_send(PGconn *conn, conn_state_t *st, const char *sql, int n, const char *const *params,
                  const db_bin_t *bin, db_result_fn *fn, void *ctx) {
    const int *lengths = bin ? bin->lengths : NULL;
    const int *formats = bin ? bin->formats : NULL;
    int result_format = bin ? bin->result_format : 0;
    if (PQpipelineStatus(conn) == PQ_PIPELINE_OFF && PQenterPipelineMode(conn) != 1) {
        return -1;
    }
    long id = s_stmt_id(sql);
    if (id < 0) {
        if (PQsendQueryParams(conn, sql, n, NULL, params, lengths, formats, result_format) != 1) {
            return -1;
        }
        s_enqueue(st, -1, fn, ctx);
        return 0;
    }
    char name[24];
    snprintf(name, sizeof name, "cf%ld", id);
    if (!s_is_prepared(st, id)) {
        if (PQsendPrepare(conn, name, sql, n, NULL) != 1) {
            return -1;
        }
        s_set_prepared(st, id, true); /* undone when its result says it failed */
        s_enqueue(st, id, NULL, NULL);
    }
    if (PQsendQueryPrepared(conn, name, n, params, lengths, formats, result_format) != 1) {
        return -1;
    }
    s_enqueue(st, -1, fn, ctx);
    return 0;
}

/* The next result of the pipeline and the NULL that ends it; NULL when the connection
 * failed. */
static PGresult *s_next(PGconn *conn) {
    PGresult *res = PQgetResult(conn);
    if (res) {
        PGresult *extra;
        while ((extra = PQgetResult(conn)) != NULL) {
            PQclear(extra); /* a statement yields one result; never reached */
        }
    }
    return res;
}

static bool s_ok(const PGresult *res) {
    ExecStatusType t = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    return t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK;
}

/* Syncs the pipeline and reads every queued result in order, handing each successful
 * statement's to its callback; leaves pipeline mode. Returns NULL when all succeeded, or the
 * first failed result (the statements after it did not run). The last queued statement's
 * own result goes to *last when last is given (NULL when it did not run). */
static PGresult *s_drain(PGconn *conn, conn_state_t *st, PGresult **last) {
    PGresult *failed = NULL;
    if (last) {
        *last = NULL;
    }
    bool sent = PQpipelineSync(conn) == 1;
    int n = st->queued;
    st->queued = 0;
    for (int i = 0; i < n; i++) {
        queued_t q = st->queue[i];
        PGresult *res = sent ? s_next(conn) : NULL;
        bool ok = s_ok(res);
        if (q.prepare >= 0 && !ok) {
            s_set_prepared(st, q.prepare, false);
        }
        if (!ok && !failed && (!res || PQresultStatus(res) != PGRES_PIPELINE_ABORTED)) {
            failed = res ? res : PQmakeEmptyPGresult(conn, PGRES_FATAL_ERROR);
            continue;
        }
        if (ok && q.fn) {
            q.fn(q.ctx, res);
        }
        if (ok && last && i == n - 1) {
            *last = res;
            continue;
        }
        PQclear(res);
    }
    if (!failed && !sent) {
        failed = PQmakeEmptyPGresult(conn, PGRES_FATAL_ERROR);
    }
    /* The sync's own result, then out of pipeline mode (a broken connection stays in it
     * until it is reset, which clears the queue state too). */
    for (PGresult *res; sent && (res = PQgetResult(conn)) != NULL;) {
        bool sync = PQresultStatus(res) == PGRES_PIPELINE_SYNC;
        PQclear(res);
        if (sync) {
            break;
        }
    }
    PQexitPipelineMode(conn);
    return failed;
}

/* Marks conn stale when err says its server is gone while libpq still has a session: a
 * primary demoted to a standby under it answers every write with read_only_sql_transaction. */
static void s_mark(PGconn *conn, db_err_t err) {
    conn_state_t *st = PQinstanceData(conn, s_event);
    if (st && err == DB_ERR_CONNECTION && PQstatus(conn) == CONNECTION_OK) {
        st->stale = true;
    }
}

/* db_query's error report of a failed result. */
static void s_report(PGconn *conn, const PGresult *res, db_err_t *err, char *errbuf, int errlen) {
    *err = db_classify(conn, res);
    s_mark(conn, *err);
    if (errbuf && errlen > 0) {
        const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        snprintf(errbuf, (size_t)errlen, "%s", msg ? msg : PQerrorMessage(conn));
        char *nl = strchr(errbuf, '\n');
        if (nl) {
            *nl = '\0';
        }
    }
}

int db_send(PGconn *conn, const char *sql, int nparams, const char *const *params, db_result_fn *fn,
            void *ctx) {
    conn_state_t *st = PQinstanceData(conn, s_event);
    if (!st || st->queued + 2 > DB_QUEUE_MAX) {
        /* No statement cache on this connection, or a full queue: run it now. */
        db_err_t e;
        PGresult *res = db_query(conn, &e, NULL, 0, sql, nparams, params);
        if (res && fn) {
            fn(ctx, res);
        }
        PQclear(res);
        return res ? 0 : -1;
    }
    if (s_send(conn, st, sql, nparams, params, NULL, fn, ctx) != 0) {
        /* What was queued before still runs (or fails) at the next read. */
        return -1;
    }
    return 0;
}

void db_keep(void *ctx, const PGresult *res) {
    PGresult **out = ctx;
    PQclear(*out);
    *out = PQcopyResult(res, PG_COPYRES_ATTRS | PG_COPYRES_TUPLES);
}

db_err_t db_flush(PGconn *conn, char *errbuf, int errlen) {
    conn_state_t *st = PQinstanceData(conn, s_event);
    if (!st || st->queued == 0) {
        return DB_OK;
    }
    PGresult *failed = s_drain(conn, st, NULL);
    db_err_t e = DB_OK;
    if (failed) {
        s_report(conn, failed, &e, errbuf, errlen);
        PQclear(failed);
    }
    return e;
}

PGconn *db_connect(const char *url, const char *application_name) {
    /* Keepalives, a TCP user timeout and the connect timeout come first, so the URL may
     * override them: without them a host cut off mid-transaction holds its row locks until TCP
     * gives up. The connect timeout counts per host of a multi-host URL. */
    const char *keys[] = {"keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "connect_timeout",
                          "dbname",
                          "application_name",
                          "options",
                          NULL};
    const char *vals[] = {
        "1", "10", "5", "3", "30000", "10", url, application_name,
        /* JIT compiles a plan whose estimate passes jit_above_cost: tens of ms for statements
         * that run in one or two (the acquisition scan took 60 ms with it, 17 without). Seq
         * scans are priced out (a statement with no usable index still gets one): the hot
         * statements are keyed lookups, and a prepared plan made while a churned table
         * (chat_heartbeats) looked empty would keep scanning it whole once it holds a row per
         * turn in flight (ARCHITECTURE.md §6.2, "Probes, not hashes"). */
        "-c client_min_messages=warning -c jit=off -c enable_seqscan=off", NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (!conn) {
        log_error("db_connect_failed", "reason=\"out of memory\"");
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        char q[256];
        log_error("db_connect_failed", "reason=%s", log_quote(PQerrorMessage(conn), q, sizeof q));
        PQfinish(conn);
        return NULL;
    }
    if (!PQregisterEventProc(conn, s_event, "chatfleet-db", NULL)) {
        log_warn("db_statement_cache_off", "reason=\"event registration failed\"");
    }
    return conn;
}

const char *db_param_int64(char out[DB_PARAM_INT64_LEN], int64_t v) {
    snprintf(out, DB_PARAM_INT64_LEN, "%lld", (long long)v);
    return out;
}

bool db_usable(PGconn *conn) {
    const conn_state_t *st = PQinstanceData(conn, s_event);
    return PQstatus(conn) == CONNECTION_OK && !(st && st->stale);
}

db_err_t db_classify(PGconn *conn, const PGresult *res) {
    if (PQstatus(conn) != CONNECTION_OK) {
        return DB_ERR_CONNECTION;
    }
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (!state) {
        return DB_ERR_CONNECTION;
    }
    /* 40001 serialization_failure, 40P01 deadlock_detected, 55P03 lock_not_available,
     * 57014 query_canceled (statement_timeout), 08xxx connection exceptions,
     * 57P01..03 admin shutdown / crash / cannot connect now, 25006 read_only_sql_transaction
     * (the server is a standby now: after a failover, the primary is another host). */
    if (!strcmp(state, "40001") || !strcmp(state, "40P01") || !strcmp(state, "55P03") ||
        !strcmp(state, "57014")) {
        return DB_ERR_RETRYABLE;
    }
    if (!strncmp(state, "08", 2) || !strncmp(state, "57P", 3) || !strcmp(state, "25006")) {
        return DB_ERR_CONNECTION;
    }
    return DB_ERR_QUERY;
}

PGresult *db_query(PGconn *conn, db_err_t *err, char *errbuf, int errlen, const char *sql,
                   int nparams, const char *const *params) {
    return db_query_bin(conn, err, errbuf, errlen, sql, nparams, params, NULL);
}

PGresult *db_query_bin(PGconn *conn, db_err_t *err, char *errbuf, int errlen, const char *sql,
                       int nparams, const char *const *params, const db_bin_t *bin) {
    conn_state_t *st = PQinstanceData(conn, s_event);
    PGresult *res = NULL;
    if (!st) {
        res = PQexecParams(conn, sql, nparams, NULL, params, bin ? bin->lengths : NULL,
                           bin ? bin->formats : NULL, bin ? bin->result_format : 0);
    } else {
        /* With whatever was sent ahead, and its own first prepare: one round trip. */
        PGresult *failed;
        if (s_send(conn, st, sql, nparams, params, bin, NULL, NULL) == 0) {
            failed = s_drain(conn, st, &res);
        } else {
            failed = s_drain(conn, st, NULL);
            if (!failed) {
                failed = PQmakeEmptyPGresult(conn, PGRES_FATAL_ERROR);
            }
        }
        if (failed) {
            res = failed;
        }
    }
    if (s_ok(res)) {
        *err = DB_OK;
        return res;
    }
    s_report(conn, res, err, errbuf, errlen);
    PQclear(res);
    return NULL;
}

db_err_t db_exec(PGconn *conn, char *errbuf, int errlen, const char *sql, int nparams,
                 const char *const *params) {
    db_err_t err;
    PGresult *res = db_query(conn, &err, errbuf, errlen, sql, nparams, params);
    PQclear(res);
    return err;
}

const char *db_text(const PGresult *res, int row, int col) {
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

int64_t db_int64(const PGresult *res, int row, int col) {
    const char *v = db_text(res, row, col);
    return v ? strtoll(v, NULL, 10) : 0;
}

bool db_bool(const PGresult *res, int row, int col) {
    const char *v = db_text(res, row, col);
    return v && v[0] == 't';
}
