/* histo (common/base): an observation lands in the first bucket whose bound it does not
 * exceed (a bound itself included, past the last one +Inf), buckets print cumulatively with
 * the sum in seconds and the count, label values are escaped, a family makes a label set once
 * and refuses past its capacity, and threads observing at once lose nothing. */
#include "histo.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The value of the exposition line that begins with line (up to its space), or -1. */
static double s_value(const char *text, const char *line) {
    char want[256];
    int n = snprintf(want, sizeof want, "\n%s ", line);
    assert_true(n > 0 && (size_t)n < sizeof want);
    const char *at = strstr(text, want);
    if (!at && !strncmp(text, want + 1, strlen(want + 1))) {
        at = text - 1;
    }
    if (!at) {
        return -1;
    }
    char *end = NULL;
    double v = strtod(at + strlen(want), &end);
    assert_true(end != at + strlen(want)); /* a number follows the name */
    return v;
}

static void test_observations_land_in_the_right_bucket(void **state) {
    (void)state;
    histo_t h = {0};
    histo_observe_us(&h, 0);         /* le 0.001 */
    histo_observe_us(&h, 1000);      /* exactly 1 ms: still le 0.001 */
    histo_observe_us(&h, 1001);      /* le 0.0025 */
    histo_observe_us(&h, 700000);    /* le 1 */
    histo_observe_us(&h, 600000000); /* exactly 10 min: le 600 */
    histo_observe_us(&h, 600000001); /* +Inf */
    histo_observe_us(&h, -5);        /* counted as 0 */
    assert_int_equal(histo_count(&h), 7);
    dynbuf_t b;
    dynbuf_init(&b, 1 << 16);
    assert_int_equal(histo_append(&b, "x_seconds", "k=\"v\"", &h), 0);
    const char *t = dynbuf_str(&b);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"0.001\"}") == 3);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"0.0025\"}") == 4);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"0.5\"}") == 4);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"1\"}") == 5);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"300\"}") == 5);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"600\"}") == 6);
    assert_true(s_value(t, "x_seconds_bucket{k=\"v\",le=\"+Inf\"}") == 7);
    assert_true(s_value(t, "x_seconds_count{k=\"v\"}") == 7);
    double sum = s_value(t, "x_seconds_sum{k=\"v\"}");
    assert_true(sum > 1200.702 && sum < 1200.7021); /* 0.001+0.001001+0.7+600+600.000001 */
    /* Buckets in order, +Inf last among them. */
    assert_true(strstr(t, "le=\"0.001\"") < strstr(t, "le=\"0.0025\""));
    assert_true(strstr(t, "le=\"600\"") < strstr(t, "le=\"+Inf\""));
    dynbuf_reset(&b);
    assert_int_equal(histo_append(&b, "y", "", &h), 0);
    assert_true(s_value(dynbuf_str(&b), "y_bucket{le=\"+Inf\"}") == 7);
    assert_true(s_value(dynbuf_str(&b), "y_count") == 7);
    dynbuf_free(&b);
}

static void test_label_values_are_escaped_and_cut_whole(void **state) {
    (void)state;
    char buf[64];
    assert_string_equal(histo_label_escape("a\"b\\c\nd", buf, sizeof buf), "a\\\"b\\\\c\\nd");
    assert_string_equal(histo_label_escape("plain-name_1", buf, sizeof buf), "plain-name_1");
    char small[4];
    /* "ab" then an escape that would not fit with the NUL: cut before it, never half of it. */
    assert_string_equal(histo_label_escape("ab\"c", small, sizeof small), "ab");
}

static void test_a_family_makes_each_label_set_once_up_to_its_capacity(void **state) {
    (void)state;
    histo_family_t *f = histo_family_new("z_seconds", "Test.", 2);
    histo_t *a = histo_family_get(f, "s=\"a\"");
    assert_non_null(a);
    assert_ptr_equal(histo_family_get(f, "s=\"a\""), a);
    histo_family_observe_us(f, "s=\"a\"", 2000);
    histo_family_observe_us(f, "s=\"b\"", 3000);
    histo_family_observe_us(f, "s=\"c\"", 4000); /* full: refused and counted */
    assert_null(histo_family_get(f, "s=\"d\""));
    assert_int_equal(histo_family_dropped(f), 2);
    dynbuf_t b;
    dynbuf_init(&b, 1 << 16);
    assert_int_equal(histo_family_append(&b, f, "w=\"1\""), 0);
    const char *t = dynbuf_str(&b);
    assert_non_null(strstr(t, "# TYPE z_seconds histogram\n"));
    assert_true(s_value(t, "z_seconds_count{w=\"1\",s=\"a\"}") == 1);
    assert_true(s_value(t, "z_seconds_count{w=\"1\",s=\"b\"}") == 1);
    assert_true(s_value(t, "z_seconds_bucket{w=\"1\",s=\"b\",le=\"0.005\"}") == 1);
    assert_null(strstr(t, "s=\"c\""));
    dynbuf_free(&b);
    histo_family_destroy(&f);
    assert_null(f);
}

typedef struct {
    histo_family_t *f;
    int k;
} s_arg_t;

static void *s_observer(void *arg) {
    s_arg_t *a = arg;
    char labels[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(labels, sizeof labels, "n=\"%d\"", (i + a->k) % 8);
        histo_family_observe_us(a->f, labels, i % 3000);
    }
    return NULL;
}

static void test_threads_observing_at_once_lose_nothing(void **state) {
    (void)state;
    histo_family_t *f = histo_family_new("c", "Test.", 8);
    pthread_t t[4];
    s_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (s_arg_t){f, i};
        assert_int_equal(pthread_create(&t[i], NULL, s_observer, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
    }
    long long total = 0;
    for (int n = 0; n < 8; n++) {
        char labels[32];
        snprintf(labels, sizeof labels, "n=\"%d\"", n);
        histo_t *h = histo_family_get(f, labels);
        assert_non_null(h);
        total += histo_count(h);
    }
    assert_int_equal(total, 4 * 20000);
    assert_int_equal(histo_family_dropped(f), 0);
    histo_family_destroy(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_observations_land_in_the_right_bucket),
        cmocka_unit_test(test_label_values_are_escaped_and_cut_whole),
        cmocka_unit_test(test_a_family_makes_each_label_set_once_up_to_its_capacity),
        cmocka_unit_test(test_threads_observing_at_once_lose_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
