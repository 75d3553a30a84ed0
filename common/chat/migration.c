/* migration: advisory-locked, idempotent schema migrations; see migration.h. */
#include "migration.h"
#include "db.h"
#include "log.h"

#include <stdio.h>

/* An arbitrary constant shared by every chatfleet process: "cfmigrat". */
#define MIGRATION_LOCK_KEY "7162145419391312244"

static int s_apply_one(PGconn *conn, const migration_t *m) {
    char err[512];
    const char *p[] = {m->name};
    PGresult *res;
    db_err_t e;
    if (db_exec(conn, err, sizeof err, "BEGIN", 0, NULL) != DB_OK) {
        goto fail;
    }
    res = db_query(conn, &e, err, sizeof err, "SELECT 1 FROM schema_migrations WHERE name = $1", 1,
                   p);
    if (!res) {
        goto fail;
    }
    int done = PQntuples(res) > 0;
    PQclear(res);
    if (done) {
        return db_exec(conn, err, sizeof err, "COMMIT", 0, NULL) == DB_OK ? 0 : -1;
    }
    res = PQexec(conn, m->sql); /* multi-statement file: the simple query protocol */
    if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, sizeof err, "%s", PQresultErrorMessage(res));
        PQclear(res);
        goto fail;
    }
    PQclear(res);
    if (db_exec(conn, err, sizeof err, "INSERT INTO schema_migrations (name) VALUES ($1)", 1, p) !=
            DB_OK ||
        db_exec(conn, err, sizeof err, "COMMIT", 0, NULL) != DB_OK) {
        goto fail;
    }
    log_info("migration_applied", "name=%s", m->name);
    return 1;
fail : {
    char q[600];
    log_error("migration_failed", "name=%s reason=%s", m->name, log_quote(err, q, sizeof q));
    PQclear(PQexec(conn, "ROLLBACK"));
    return -1;
}
}

int migration_apply(PGconn *conn) {
    char err[512];
    if (db_exec(conn, err, sizeof err, "SELECT pg_advisory_lock(" MIGRATION_LOCK_KEY ")", 0,
                NULL) != DB_OK ||
        db_exec(conn, err, sizeof err,
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                0, NULL) != DB_OK) {
        char q[600];
        log_error("migration_failed", "reason=%s", log_quote(err, q, sizeof q));
        PQclear(PQexec(conn, "SELECT pg_advisory_unlock_all()"));
        return -1;
    }
    int applied = 0;
    for (int i = 0; i < migration_count; i++) {
        int rc = s_apply_one(conn, &migration_list[i]);
        if (rc < 0) {
            applied = -1;
            break;
        }
        applied += rc;
    }
    PQclear(PQexec(conn, "SELECT pg_advisory_unlock(" MIGRATION_LOCK_KEY ")"));
    if (applied >= 0) {
        log_info("migrations_done", "applied=%d total=%d", applied, migration_count);
    }
    return applied;
}
