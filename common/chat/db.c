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

typedef struct {
    unsigned char prepared[DB_STATEMENTS_MAX / 8];
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
            memset(st, 0, sizeof *st); /* a new session has no prepared statements */
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

/* Runs sql prepared on conn when it can, unprepared otherwise. */
static PGresult *s_exec(PGconn *conn, const char *sql, int n, const char *const *params) {
    conn_state_t *st = PQinstanceData(conn, s_event);
    long id = st ? s_stmt_id(sql) : -1;
    if (id < 0) {
        return PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    }
    char name[24];
    snprintf(name, sizeof name, "cf%ld", id);
    if (!(st->prepared[id / 8] & (1u << (id % 8)))) {
        PGresult *prep = PQprepare(conn, name, sql, n, NULL);
        if (PQresultStatus(prep) != PGRES_COMMAND_OK) {
            return prep; /* the caller reports it like any failed statement */
        }
        PQclear(prep);
        st->prepared[id / 8] |= (unsigned char)(1u << (id % 8));
    }
    return PQexecPrepared(conn, name, n, params, NULL, NULL, 0);
}

PGconn *db_connect(const char *url, const char *application_name) {
    /* Keepalives and a TCP user timeout come first, so the URL may override them: without
     * them a host cut off mid-transaction holds its row locks until TCP gives up. */
    const char *keys[] = {"keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "dbname",
                          "application_name",
                          "connect_timeout",
                          "options",
                          NULL};
    const char *vals[] = {
        "1", "10", "5", "3", "30000", url, application_name, "10", "-c client_min_messages=warning",
        NULL};
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
     * 57P01..03 admin shutdown / crash / cannot connect now. */
    if (!strcmp(state, "40001") || !strcmp(state, "40P01") || !strcmp(state, "55P03") ||
        !strcmp(state, "57014")) {
        return DB_ERR_RETRYABLE;
    }
    if (!strncmp(state, "08", 2) || !strncmp(state, "57P", 3)) {
        return DB_ERR_CONNECTION;
    }
    return DB_ERR_QUERY;
}

PGresult *db_query(PGconn *conn, db_err_t *err, char *errbuf, int errlen, const char *sql,
                   int nparams, const char *const *params) {
    PGresult *res = s_exec(conn, sql, nparams, params);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        *err = DB_OK;
        return res;
    }
    *err = db_classify(conn, res);
    if (errbuf && errlen > 0) {
        const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        snprintf(errbuf, (size_t)errlen, "%s", msg ? msg : PQerrorMessage(conn));
        char *nl = strchr(errbuf, '\n');
        if (nl) {
            *nl = '\0';
        }
    }
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
