/* The gateway's id cache (api-gateway/core/idcache.h): an id found for a key is answered from
 * memory for ttl_ms and then checked again; 0 keeps nothing; a full cache makes room from
 * expired entries only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "idcache.h"

#define S_USER  "0b1f3c52-6f0e-4c33-9f1c-2b8f5a4d7e01"
#define S_OTHER "9a7c2e14-3b5d-4f68-8e90-1c2d3e4f5a6b"

static void test_a_verified_token_is_answered_until_its_ttl(void **u) {
    (void)u;
    idcache_t *c = idcache_new(1000);
    char user[ID_UUID_LEN + 1] = "";
    assert_false(idcache_get(c, "tok-a", 0, user));
    idcache_put(c, "tok-a", S_USER, 100);
    assert_true(idcache_get(c, "tok-a", 100, user));
    assert_string_equal(user, S_USER);
    assert_true(idcache_get(c, "tok-a", 1099, user));
    /* At ttl_ms after the query, the entry is gone and the next request queries again. */
    assert_false(idcache_get(c, "tok-a", 1100, user));
    assert_int_equal(idcache_size(c), 0);
    idcache_destroy(&c);
    assert_null(c);
}

static void test_tokens_are_told_apart_and_a_new_check_replaces_the_old(void **u) {
    (void)u;
    idcache_t *c = idcache_new(1000);
    char user[ID_UUID_LEN + 1] = "";
    idcache_put(c, "tok-a", S_USER, 0);
    assert_false(idcache_get(c, "tok-b", 0, user));
    assert_false(idcache_get(c, "tok-", 0, user));
    assert_false(idcache_get(c, "tok-aa", 0, user));
    idcache_put(c, "tok-a", S_OTHER, 500);
    assert_true(idcache_get(c, "tok-a", 1200, user));
    assert_string_equal(user, S_OTHER);
    assert_int_equal(idcache_size(c), 1);
    idcache_destroy(&c);
}

static void test_a_zero_ttl_keeps_nothing(void **u) {
    (void)u;
    idcache_t *c = idcache_new(0);
    char user[ID_UUID_LEN + 1] = "";
    idcache_put(c, "tok-a", S_USER, 0);
    assert_false(idcache_get(c, "tok-a", 0, user));
    assert_int_equal(idcache_size(c), 0);
    idcache_destroy(&c);
}

static void test_a_full_cache_makes_room_from_expired_entries_only(void **u) {
    (void)u;
    idcache_t *c = idcache_new(1000);
    char tok[32];
    for (int i = 0; i < IDCACHE_MAX; i++) {
        snprintf(tok, sizeof tok, "tok-%d", i);
        idcache_put(c, tok, S_USER, i < IDCACHE_MAX / 2 ? 0 : 600);
    }
    assert_int_equal(idcache_size(c), IDCACHE_MAX);
    char user[ID_UUID_LEN + 1] = "";
    /* Full of fresh entries: the newcomer is not kept, and no fresh entry is evicted. */
    idcache_put(c, "late", S_OTHER, 900);
    assert_false(idcache_get(c, "late", 900, user));
    assert_int_equal(idcache_size(c), IDCACHE_MAX);
    /* At 1000 the first half has expired: the next put sweeps it and finds room. */
    idcache_put(c, "late", S_OTHER, 1000);
    assert_true(idcache_get(c, "late", 1000, user));
    assert_string_equal(user, S_OTHER);
    assert_int_equal(idcache_size(c), IDCACHE_MAX / 2 + 1);
    snprintf(tok, sizeof tok, "tok-%d", IDCACHE_MAX - 1);
    assert_true(idcache_get(c, tok, 1000, user));
    idcache_destroy(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_verified_token_is_answered_until_its_ttl),
        cmocka_unit_test(test_tokens_are_told_apart_and_a_new_check_replaces_the_old),
        cmocka_unit_test(test_a_zero_ttl_keeps_nothing),
        cmocka_unit_test(test_a_full_cache_makes_room_from_expired_entries_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
