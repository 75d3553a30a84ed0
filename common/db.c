/* db: checked libpq access; see db.h. */
#include "db.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PGconn *db_connect(const char *url, const char *application_name) {
    const char *keys[] = {"dbname", "application_name", "connect_timeout", "options", NULL};
    const char *vals[] = {url, application_name, "10", "-c client_min_messages=warning", NULL};
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
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
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
