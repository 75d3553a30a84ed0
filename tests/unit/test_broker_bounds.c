/* The broker's bounds (broker/README.md "Counters", ARCHITECTURE.md §9 "Trust"): the
 * registry refuses new workers past its cap and binds a worker id to the key that registered
 * it; the rate limiter lets a burst through, then one line per interval, and counts what it
 * left out; curve reads certificates and refuses bad ones with the file named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "curve.h"
#include "ratelog.h"
#include "registry.h"

static void s_id(char *out, int i) {
    snprintf(out, 37, "00000000-0000-4000-8000-%012d", i);
}

static void test_registry_refuses_new_workers_past_its_cap(void **u) {
    (void)u;
    registry_t *r = registry_new(3);
    char id[37];
    for (int i = 0; i < 3; i++) {
        s_id(id, i);
        assert_int_equal(registry_touch(r, id, "r", 1, "", 1000, 0), REGISTRY_NEW);
    }
    s_id(id, 3);
    assert_int_equal(registry_touch(r, id, "r", 1, "", 1000, 0), REGISTRY_FULL);
    assert_int_equal(registry_size(r), 3);
    /* A known worker still beats; once one expires, a new one fits. */
    s_id(id, 0);
    assert_int_equal(registry_touch(r, id, "r", 1, "", 1000, 2500), REGISTRY_KNOWN);
    assert_int_equal(registry_expire(r, 3500), 2); /* ids 1 and 2: silent for 3.5 s */
    s_id(id, 3);
    assert_int_equal(registry_touch(r, id, "r", 1, "", 1000, 3500), REGISTRY_NEW);
    registry_destroy(&r);
    assert_null(r);
}

static bool s_keep_a(void *ctx, const char *key) {
    (void)ctx;
    return strcmp(key, "A") == 0;
}

static void test_registry_binds_a_worker_id_to_its_key(void **u) {
    (void)u;
    registry_t *r = registry_new(0);
    char id[37];
    s_id(id, 1);
    assert_int_equal(registry_touch(r, id, "r1", 2, "A", 1000, 0), REGISTRY_NEW);
    assert_int_equal(registry_touch(r, id, "r2", 2, "B", 1000, 10), REGISTRY_KEY_MISMATCH);
    assert_int_equal(registry_touch(r, id, "r1", 2, "B", 1000, 10), REGISTRY_KEY_MISMATCH);
    const registry_entry_t *e = registry_lookup(r, id, 20);
    assert_non_null(e);
    assert_memory_equal(e->route, "r1", 2); /* the refused touches changed nothing */
    assert_string_equal(e->key, "A");
    assert_int_equal(registry_touch(r, id, "r3", 2, "A", 1000, 30), REGISTRY_REROUTED);
    char other[37];
    s_id(other, 2);
    assert_int_equal(registry_touch(r, other, "r4", 2, "B", 1000, 30), REGISTRY_NEW);
    assert_int_equal(registry_retain(r, s_keep_a, NULL), 1); /* B revoked */
    assert_null(registry_lookup(r, other, 40));
    assert_non_null(registry_lookup(r, id, 40));
    registry_destroy(&r);
}

static void test_ratelog_bounds_lines_and_counts_the_rest(void **u) {
    (void)u;
    ratelog_t *rl = ratelog_new();
    const char *k = "kind";
    int64_t s = -1;
    int written = 0;
    for (int i = 0; i < 10000; i++) {
        written += ratelog_allow(rl, k, 0, &s);
    }
    assert_int_equal(written, RATELOG_BURST);
    assert_int_equal(ratelog_suppressed_total(rl), 10000 - RATELOG_BURST);
    /* One more line per interval, which reports what was left out before it. */
    assert_true(ratelog_allow(rl, k, RATELOG_INTERVAL_MS, &s));
    assert_int_equal(s, 10000 - RATELOG_BURST);
    assert_false(ratelog_allow(rl, k, RATELOG_INTERVAL_MS, &s));
    /* Another kind has its own bucket. */
    assert_true(ratelog_allow(rl, "other", RATELOG_INTERVAL_MS, &s));
    assert_int_equal(s, 0);
    ratelog_destroy(&rl);
    assert_null(rl);
}

static void test_curve_keygen_and_reading(void **u) {
    (void)u;
    char dir[] = "/tmp/cf-curve-unit.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[512];
    assert_int_equal(curve_keygen("worker", "w", dir, err, sizeof err), 0);
    assert_int_equal(curve_keygen("broker", "b", dir, err, sizeof err), 0);
    assert_int_equal(curve_keygen("root", "x", dir, err, sizeof err), -1);
    assert_int_equal(curve_keygen("worker", "../x", dir, err, sizeof err), -1);
    char pub[128];
    char sec[128];
    char bpub[128];
    snprintf(pub, sizeof pub, "%s/w.cert", dir);
    snprintf(sec, sizeof sec, "%s/w.cert_secret", dir);
    snprintf(bpub, sizeof bpub, "%s/b.cert", dir);
    struct stat st;
    assert_int_equal(stat(sec, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    curve_key_t k;
    assert_int_equal(curve_key_read(pub, false, &k, err, sizeof err), 0);
    assert_string_equal(k.role, "worker");
    assert_int_equal(strlen(k.public_txt), CURVE_KEY_TXT_LEN);
    assert_int_equal(curve_key_read(pub, true, &k, err, sizeof err), -1); /* no secret */
    assert_non_null(strstr(err, pub));
    curve_t *c = curve_new(sec, bpub, err, sizeof err);
    assert_non_null(c);
    assert_string_equal(curve_role(c), "worker");
    curve_destroy(&c);
    assert_null(c);
    /* A secret file whose secret key is not the public key's. */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/bad.cert_secret", dir);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fprintf(f, "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n", k.public_txt,
            "0000000000000000000000000000000000000000");
    fclose(f);
    assert_null(curve_new(bad, bpub, err, sizeof err));
    assert_non_null(strstr(err, "bad.cert_secret"));
    assert_null(curve_new("/nonexistent/x", bpub, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/x"));
    zdir_t *d = zdir_new(dir, NULL);
    zdir_remove(d, true);
    zdir_destroy(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_refuses_new_workers_past_its_cap),
        cmocka_unit_test(test_registry_binds_a_worker_id_to_its_key),
        cmocka_unit_test(test_ratelog_bounds_lines_and_counts_the_rest),
        cmocka_unit_test(test_curve_keygen_and_reading),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
