/* testdb: per-test databases in the fixture's private cluster; see testdb.h. */
#include "testdb.h"
#include "db.h"
#include "id.h"
#include "mem.h"
#include "migration.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct testdb {
    char *admin_url;
    char *url;
    char name[64];
};

static char *s_read_url(void) {
    const char *dir = getenv("CHATFLEET_TEST_PG_DIR");
    if (!dir) {
        fprintf(stderr, "testdb: CHATFLEET_TEST_PG_DIR is not set (run under ctest)\n");
        abort();
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/url", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "testdb: cannot read %s: is the pg_start fixture running?\n", path);
        abort();
    }
    char line[512] = "";
    if (!fgets(line, sizeof line, f)) {
        line[0] = '\0';
    }
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    return mem_strdup(line);
}

testdb_t *testdb_new(void) {
    testdb_t *self = mem_calloc(1, sizeof *self);
    self->admin_url = s_read_url();
    char uuid[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(uuid) == 0);
    snprintf(self->name, sizeof self->name, "cf_test_%.8s%.4s", uuid, uuid + 9);
    PGconn *admin = db_connect(self->admin_url, "testdb");
    ASSERT(admin);
    char *sql = mem_printf("CREATE DATABASE %s", self->name);
    char err[256];
    if (testdb_try(admin, sql, err, sizeof err) != 0) {
        fprintf(stderr, "testdb: %s\n", err);
        abort();
    }
    free(sql);
    PQfinish(admin);
    char *slash = strrchr(self->admin_url, '/');
    ASSERT(slash);
    self->url = mem_printf("%.*s/%s", (int)(slash - self->admin_url), self->admin_url, self->name);
    PGconn *conn = testdb_connect(self);
    if (migration_apply(conn) < 0) {
        fprintf(stderr, "testdb: migrations failed\n");
        abort();
    }
    PQfinish(conn);
    return self;
}

void testdb_destroy(testdb_t **self_p) {
    testdb_t *self = *self_p;
    if (!self) {
        return;
    }
    PGconn *admin = db_connect(self->admin_url, "testdb");
    if (admin) {
        char *sql = mem_printf("DROP DATABASE IF EXISTS %s WITH (FORCE)", self->name);
        (void)testdb_try(admin, sql, NULL, 0); /* best effort: the cluster is temporary */
        free(sql);
        PQfinish(admin);
    }
    free(self->admin_url);
    free(self->url);
    free(self);
    *self_p = NULL;
}

const char *testdb_url(const testdb_t *self) {
    return self->url;
}

PGconn *testdb_connect(const testdb_t *self) {
    PGconn *conn = db_connect(self->url, "testdb");
    if (!conn) {
        fprintf(stderr, "testdb: cannot connect to %s\n", self->url);
        abort();
    }
    PQclear(PQexec(conn, "SET client_min_messages = warning"));
    return conn;
}

char *testdb_scalar(PGconn *conn, const char *sql) {
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "testdb: %s: %s\n", sql, PQresultErrorMessage(res));
        abort();
    }
    char *out = NULL;
    if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
        out = mem_strdup(PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return out;
}

int testdb_try(PGconn *conn, const char *sql, char *errbuf, int errlen) {
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok && errbuf) {
        snprintf(errbuf, (size_t)errlen, "%s", PQresultErrorMessage(res));
    }
    PQclear(res);
    return ok ? 0 : -1;
}

int testdb_user_new(PGconn *conn, const char *name, char id[ID_UUID_LEN + 1]) {
    if (id_uuid_new(id) != 0) {
        return -1;
    }
    const char *p[] = {id, name};
    PGresult *res = PQexecParams(conn, "INSERT INTO users (id, name) VALUES ($1::uuid, $2)", 2,
                                 NULL, p, NULL, NULL, 0);
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : -1;
    PQclear(res);
    return rc;
}

int64_t testdb_intf(PGconn *conn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char *text = testdb_scalar(conn, sql);
    int64_t v = -1;
    if (text) {
        errno = 0;
        char *end = NULL;
        long long x = strtoll(text, &end, 10);
        v = errno == 0 && end != text && *end == '\0' ? (int64_t)x : -1;
    }
    free(text);
    free(sql);
    return v;
}

void testdb_execf(PGconn *conn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char err[256];
    if (testdb_try(conn, sql, err, sizeof err) != 0) {
        fprintf(stderr, "testdb: %s: %s\n", sql, err);
        abort();
    }
    free(sql);
}
