/* Timed waits run on the monotonic clock end to end: a deadline from id_timespec_at and a
 * condition variable from id_cond_init agree (a wait lasts its timeout, not zero and not
 * forever, which is what a deadline read on one clock and waited on with another does), and
 * the waits built on them (cancel_wait_ms, pool_get_within) time out after their timeout and
 * wake early when their condition comes true. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cancel.h"
#include "id.h"
#include "pool.h"

#define WAIT_MS  80   /* the timeout every wait below is given */
#define SLACK_MS 2000 /* a loaded machine may wake a waiter this late, never earlier */
#define WAKE_MS  30   /* when the helper thread makes the condition true */

static void s_sleep_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void s_expect_elapsed(int64_t start, int64_t at_least, int64_t below) {
    int64_t took = id_now_ms() - start;
    if (took < at_least || took >= below) {
        fail_msg("the wait took %lld ms, want [%lld, %lld)", (long long)took, (long long)at_least,
                 (long long)below);
    }
}

static void test_timespec_at_is_the_monotonic_instant(void **u) {
    (void)u;
    int64_t at = id_now_ms() + 1234;
    struct timespec ts = id_timespec_at(at);
    assert_int_equal((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, at);
    assert_true(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    int64_t now = (int64_t)mono.tv_sec * 1000 + mono.tv_nsec / 1000000;
    assert_true(at - now > 1200 && at - now <= 1234);
    ts = id_timespec_at(-5); /* already past: an expired deadline, never a negative field */
    assert_int_equal(ts.tv_sec, 0);
    assert_int_equal(ts.tv_nsec, 0);
}

static void test_cond_wait_lasts_its_timeout_on_the_monotonic_clock(void **u) {
    (void)u;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond;
    id_cond_init(&cond);
    int64_t start = id_now_ms();
    struct timespec until = id_timespec_at(start + WAIT_MS);
    pthread_mutex_lock(&lock);
    int rc = 0;
    while (rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&cond, &lock, &until);
        assert_true(rc == 0 || rc == ETIMEDOUT);
    }
    pthread_mutex_unlock(&lock);
    s_expect_elapsed(start, WAIT_MS, WAIT_MS + SLACK_MS);
    pthread_cond_destroy(&cond);
}

static void *s_cancel_later(void *c) {
    s_sleep_ms(WAKE_MS);
    cancel_set(c);
    return NULL;
}

static void test_cancel_wait_times_out_then_wakes_on_cancel(void **u) {
    (void)u;
    cancel_t *c = cancel_new();
    int64_t start = id_now_ms();
    assert_false(cancel_wait_ms(c, WAIT_MS));
    s_expect_elapsed(start, WAIT_MS, WAIT_MS + SLACK_MS);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, s_cancel_later, c), 0);
    start = id_now_ms();
    assert_true(cancel_wait_ms(c, 60000));
    s_expect_elapsed(start, 0, SLACK_MS);
    pthread_join(t, NULL);
    cancel_destroy(&c);
}

typedef struct {
    pool_t *pool;
    PGconn *conn;
} put_t;

static void *s_put_later(void *arg) {
    put_t *p = arg;
    s_sleep_ms(WAKE_MS);
    pool_put(p->pool, p->conn);
    return NULL;
}

static void test_pool_get_within_times_out_then_wakes_on_a_put(void **u) {
    (void)u;
    /* A connection that failed to open is still a pool slot (pool_new_unverified). */
    pool_t *pool = pool_new_unverified("host=/nonexistent-chatfleet-socket-dir", 1);
    assert_non_null(pool);
    PGconn *held = pool_get_within(pool, WAIT_MS);
    assert_non_null(held);
    int64_t start = id_now_ms();
    assert_null(pool_get_within(pool, WAIT_MS));
    s_expect_elapsed(start, WAIT_MS, WAIT_MS + SLACK_MS);
    put_t p = {pool, held};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, s_put_later, &p), 0);
    start = id_now_ms();
    PGconn *again = pool_get_within(pool, 60000);
    s_expect_elapsed(start, 0, SLACK_MS);
    assert_ptr_equal(again, held);
    pthread_join(t, NULL);
    pool_put(pool, again);
    pool_destroy(&pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timespec_at_is_the_monotonic_instant),
        cmocka_unit_test(test_cond_wait_lasts_its_timeout_on_the_monotonic_clock),
        cmocka_unit_test(test_cancel_wait_times_out_then_wakes_on_cancel),
        cmocka_unit_test(test_pool_get_within_times_out_then_wakes_on_a_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
