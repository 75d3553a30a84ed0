/*
 * dbpool (worker/env/dbpool.h) on a real PostgreSQL: a pooled connection carries the pool's
 * session settings, the bound on a statement and on a transaction left idle, and plans each
 * prepared statement once, where a connection with the server's default makes custom plans
 * first (ARCHITECTURE.md §6.5).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "db.h"
#include "dbpool.h"
#include "mem.h"
#include "testdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static testdb_t *s_db;

/* The statement the checks prepare, and how many times they run it. */
#define S_SQL  "SELECT count(*) FROM chats WHERE id = $1::uuid"
#define S_RUNS 3

/* Runs S_SQL S_RUNS times on conn through common/chat/db (prepared once, run by name), then
 * returns "GENERIC CUSTOM": how many of those runs used the statement's generic plan (built
 * once, then cached) and how many a custom plan made for the run (caller frees). */
static char *s_plans_after_runs(PGconn *conn) {
    const char *p[] = {"00000000-0000-0000-0000-000000000000"};
    for (int i = 0; i < S_RUNS; i++) {
        db_err_t e;
        char msg[200];
        PGresult *res = db_query(conn, &e, msg, sizeof msg, S_SQL, 1, p);
        if (!res) {
            fail_msg("%s: %s", S_SQL, msg);
        }
        assert_string_equal(PQgetvalue(res, 0, 0), "0");
        PQclear(res);
    }
    char *plans = testdb_scalar(conn, "SELECT generic_plans || ' ' || custom_plans"
                                      " FROM pg_prepared_statements WHERE statement = '" S_SQL "'");
    assert_non_null(plans);
    return plans;
}

static void test_a_pooled_connection_has_the_pools_settings(void **state) {
    (void)state;
    dbpool_t *pool = dbpool_new(testdb_url(s_db), "test-dbpool", 4321, 1);
    PGconn *conn = dbpool_get(pool, 10000);
    assert_non_null(conn);
    char *v = testdb_scalar(conn, "SELECT current_setting('statement_timeout') || ' ' ||"
                                  " current_setting('idle_in_transaction_session_timeout')"
                                  " || ' ' || current_setting('plan_cache_mode')");
    assert_non_null(v);
    assert_string_equal(v, "4321ms 4321ms force_generic_plan");
    free(v);
    dbpool_put(pool, conn);
    dbpool_destroy(&pool);
    assert_null(pool);
}

static void test_a_pooled_connection_plans_a_statement_once(void **state) {
    (void)state;
    dbpool_t *pool = dbpool_new(testdb_url(s_db), "test-dbpool", 5000, 1);
    PGconn *conn = dbpool_get(pool, 10000);
    assert_non_null(conn);
    char *plans = s_plans_after_runs(conn);
    assert_string_equal(plans, "3 0"); /* the generic plan at every run, made at the first */
    free(plans);
    dbpool_put(pool, conn);
    dbpool_destroy(&pool);

    /* The server's default, on a connection of the same kind outside the pool: a custom plan
     * for each of the first runs. */
    PGconn *plain = db_connect(testdb_url(s_db), "test-dbpool-plain");
    assert_non_null(plain);
    plans = s_plans_after_runs(plain);
    assert_string_equal(plans, "0 3");
    free(plans);
    PQfinish(plain);
}

static int s_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    testdb_destroy(&s_db);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_pooled_connection_has_the_pools_settings),
        cmocka_unit_test(test_a_pooled_connection_plans_a_statement_once),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
