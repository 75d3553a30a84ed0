/*
 * db: thin, checked access to PostgreSQL through libpq.
 *
 * Every query is parameterised, prepared once per connection and then run by name, sent in
 * libpq's pipeline mode so that a first prepare, and statements sent ahead (db_send), cost no
 * round trip of their own; errors are classified by SQLSTATE so callers
 * can branch on the kind (serialization failure, lock timeout, lost connection) instead of
 * parsing messages. Results are owned by the caller and released with PQclear exactly once.
 */
#ifndef CHATFLEET_DB_H
#define CHATFLEET_DB_H

#include <libpq-events.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    DB_OK = 0,
    DB_ERR_QUERY,      /* the statement failed (constraint, trigger exception, syntax) */
    DB_ERR_RETRYABLE,  /* serialization failure, deadlock, lock timeout: retry the bundle */
    DB_ERR_CONNECTION, /* the connection is gone: reconnect */
} db_err_t;

/* Opens a connection (blocking) with a short connect timeout and application_name set.
 * Returns NULL and logs once when the server is unreachable or the URL is bad. */
PGconn *db_connect(const char *url, const char *application_name);

/* Runs one parameterised statement (text parameters; NULL entries are SQL NULL). On success
 * returns the result (caller PQclears it) and sets *err = DB_OK; on failure returns NULL,
 * sets *err, and writes the server's message into errbuf (bounded by errlen). */
PGresult *db_query(PGconn *conn, db_err_t *err, char *errbuf, int errlen, const char *sql,
                   int nparams, const char *const *params);

/* What db_query_bin adds to a statement: binary parameters, binary results. */
typedef struct {
    const int *lengths; /* each parameter's length, read where formats says binary */
    const int *formats; /* 1: parameter i is lengths[i] bytes, 0: text; NULL: all text */
    int result_format;  /* 1: values come as their bytes (bytea unescaped, text as is) */
} db_bin_t;

/* db_query with bin's formats (NULL: db_query itself). */
PGresult *db_query_bin(PGconn *conn, db_err_t *err, char *errbuf, int errlen, const char *sql,
                       int nparams, const char *const *params, const db_bin_t *bin);

/* Statements sent ahead (libpq pipeline mode, ARCHITECTURE.md §4.4): db_send sends one
 * statement without waiting for its result; the next db_query on the connection joins them
 * and one round trip runs them all, in order, or db_flush runs them on their own. A queued
 * statement's failure is reported by that db_query (or db_flush) as its own, and the
 * statements queued after it do not run. Meanwhile the connection is in pipeline mode: only
 * db_send, db_query and db_flush may use it (not PQexec). fn (may be NULL) receives each
 * successful result (owned by db) when it is read. Returns 0, or -1 when it could not be
 * sent (what was queued before still runs at the next read). */
typedef void db_result_fn(void *ctx, const PGresult *res);
int db_send(PGconn *conn, const char *sql, int nparams, const char *const *params, db_result_fn *fn,
            void *ctx);

/* A db_result_fn that keeps a copy of the result in *(PGresult **)ctx (replacing, and
 * clearing, what was there; NULL when the copy could not be made), for the caller to PQclear. */
void db_keep(void *ctx, const PGresult *res);

/* Runs what db_send queued on conn; DB_OK when nothing was queued or all of it succeeded,
 * else the first failure's kind with its message in errbuf. */
db_err_t db_flush(PGconn *conn, char *errbuf, int errlen);

/* Runs a statement that returns no rows of interest. Returns DB_OK or the error kind. */
db_err_t db_exec(PGconn *conn, char *errbuf, int errlen, const char *sql, int nparams,
                 const char *const *params);

/* An int64 as a text parameter: writes v in decimal into out and returns out, so that a
 * parameter array can name it in place (const char *p[] = {id, db_param_int64(buf, n)}). */
#define DB_PARAM_INT64_LEN 21 /* "-9223372036854775808" and its NUL */
const char *db_param_int64(char out[DB_PARAM_INT64_LEN], int64_t v);

/* True while conn may be used again: its session is up and no statement found its server
 * unable to take writes (a standby after a failover). A pool closes or resets one that is not. */
bool db_usable(PGconn *conn);

/* Classifies a failed result (or a NULL result) on conn. */
db_err_t db_classify(PGconn *conn, const PGresult *res);

/* Accessors for a result's text values: NULL for SQL NULL. */
const char *db_text(const PGresult *res, int row, int col);
int64_t db_int64(const PGresult *res, int row, int col);
bool db_bool(const PGresult *res, int row, int col);

#endif
