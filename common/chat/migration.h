/*
 * migration: applies the numbered SQL files of common/chat/sql (compiled into the binary) to a
 * database, each in its own transaction, recorded in schema_migrations.
 *
 * Runs under a session advisory lock so that any number of processes may start at once:
 * one applies, the others wait and then find nothing to do. A second run is a no-op.
 */
#ifndef CHATFLEET_MIGRATION_H
#define CHATFLEET_MIGRATION_H

#include <libpq-fe.h>

typedef struct {
    const char *name; /* file name without .sql, e.g. "0001_schema" */
    const char *sql;
} migration_t;

extern const migration_t migration_list[];
extern const int migration_count;

/* Applies every migration not yet recorded. Returns the number applied (0 when up to date)
 * or -1 on failure, after logging the failing migration and the server's message. */
int migration_apply(PGconn *conn);

#endif
