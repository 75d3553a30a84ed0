/*
 * testdb: a fresh, migrated database for one test program, in the private cluster that the
 * ctest fixture started (CHATFLEET_TEST_PG_DIR). Dropped by testdb_destroy().
 */
#ifndef CHATFLEET_TESTDB_H
#define CHATFLEET_TESTDB_H

#include <libpq-fe.h>
#include <stdint.h>

#include "id.h"

typedef struct testdb testdb_t;

/* Creates database cf_test_<random>, applies migrations. Aborts the test on failure. */
testdb_t *testdb_new(void);
void testdb_destroy(testdb_t **self_p);

/* The libpq URL of the test database. */
const char *testdb_url(const testdb_t *self);

/* A new connection to the test database (caller PQfinishes it). Aborts on failure. */
PGconn *testdb_connect(const testdb_t *self);

/* Runs SQL on conn and returns the first column of the first row as a newly allocated
 * string (NULL for SQL NULL or no rows). Aborts on a failed statement. */
char *testdb_scalar(PGconn *conn, const char *sql);

/* Runs SQL on conn; returns 0 on success, -1 on failure (message in errbuf when non-NULL). */
int testdb_try(PGconn *conn, const char *sql, char *errbuf, int errlen);

/* The SQL that fmt makes (printf), run on conn: its first column of the first row as an
 * integer, or -1 for no row, SQL NULL or not an integer. Aborts on a failed statement. */
int64_t testdb_intf(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The SQL that fmt makes (printf), run on conn. Aborts, naming the statement and the error,
 * when it fails. */
void testdb_execf(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Inserts a user named name with a new random id, written into id. Returns 0, or -1. */
int testdb_user_new(PGconn *conn, const char *name, char id[ID_UUID_LEN + 1]);

#endif
