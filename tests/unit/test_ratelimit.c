/*
 * test_ratelimit: token buckets by key (common/base/ratelimit): a burst, then one token per
 * 1/rate seconds with the wait until the next one; keys apart from each other; a table
 * flooded with more keys than it holds never hands a key another key's empty bucket.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "ratelimit.h"

static void test_a_burst_then_the_rate_with_the_wait_named(void **u) {
    (void)u;
    ratelimit_t *r = ratelimit_new(10, 3, 64); /* 3 at once, then one per 100 ms */
    int64_t wait = 0;
    for (int i = 0; i < 3; i++) {
        assert_true(ratelimit_take(r, "10.0.0.1", 1000, &wait));
    }
    assert_false(ratelimit_take(r, "10.0.0.1", 1000, &wait));
    assert_int_equal(wait, 100);
    assert_false(ratelimit_take(r, "10.0.0.1", 1040, &wait));
    assert_int_equal(wait, 60);
    assert_true(ratelimit_take(r, "10.0.0.1", 1100, &wait));
    assert_false(ratelimit_take(r, "10.0.0.1", 1100, NULL));
    /* A long quiet refills to the burst, never past it. */
    for (int i = 0; i < 3; i++) {
        assert_true(ratelimit_take(r, "10.0.0.1", 60000, NULL));
    }
    assert_false(ratelimit_take(r, "10.0.0.1", 60000, NULL));
    ratelimit_destroy(&r);
    assert_null(r);
}

static void test_keys_have_their_own_buckets(void **u) {
    (void)u;
    ratelimit_t *r = ratelimit_new(1, 2, 64);
    assert_true(ratelimit_take(r, "a", 0, NULL));
    assert_true(ratelimit_take(r, "a", 0, NULL));
    assert_false(ratelimit_take(r, "a", 0, NULL));
    assert_true(ratelimit_take(r, "b", 0, NULL));
    assert_true(ratelimit_take(r, "b", 0, NULL));
    assert_false(ratelimit_take(r, "b", 0, NULL));
    ratelimit_destroy(&r);
}

/* 100,000 keys through a table of 64 entries, each emptying its bucket: any key asked again
 * afterwards starts from a full bucket or its own, never from one another key emptied. */
static void test_a_flood_of_keys_never_shares_an_empty_bucket(void **u) {
    (void)u;
    ratelimit_t *r = ratelimit_new(0.001, 2, 64); /* practically no refill */
    char key[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof key, "flood-%d", i);
        assert_true(ratelimit_take(r, key, i, NULL));
        assert_true(ratelimit_take(r, key, i, NULL));
        assert_false(ratelimit_take(r, key, i, NULL));
    }
    /* A key emptied long ago was evicted: it starts again from a full bucket. */
    assert_true(ratelimit_take(r, "flood-0", 100000, NULL));
    /* The last key still holds its own empty bucket. */
    assert_false(ratelimit_take(r, "flood-99999", 100000, NULL));
    ratelimit_destroy(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_burst_then_the_rate_with_the_wait_named),
        cmocka_unit_test(test_keys_have_their_own_buckets),
        cmocka_unit_test(test_a_flood_of_keys_never_shares_an_empty_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
