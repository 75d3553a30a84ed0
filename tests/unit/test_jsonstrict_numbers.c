/* Tests for the number policy of the strict JSON boundary (jsonstrict.h, "The number policy"):
 * PostgreSQL's numeric text as modelled, the storage rule at its edges, the rule as a property
 * over seeded random doubles (accepted exactly when the stored text reads back unchanged), and
 * the nearest-double reading of stored text that keeps legacy rows readable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"
#include "jsonstrict.h"

/* PostgreSQL 15's jsonb text for these literals, as `SELECT ('[LIT]'::jsonb)->>0` printed it
 * (the figures the model was derived from; the integration test checks it live too). */
static void test_pgnumeric_text_matches_postgres(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"1e19", "10000000000000000000"},
        {"-0", "0"},
        {"-0.0", "0.0"},
        {"-0e0", "0"},
        {"-0e-3", "0.000"},
        {"0.0", "0.0"},
        {"1.0", "1.0"},
        {"1", "1"},
        {"1.10", "1.10"},
        {"1E2", "100"},
        {"1.5e2", "150"},
        {"1.50e1", "15.0"},
        {"0.00e2", "0"},
        {"0.5e1", "5"},
        {"-0.05e2", "-5"},
        {"-1.5e-3", "-0.0015"},
        {"1e-5", "0.00001"},
        {"100e-2", "1.00"},
        {"12.50", "12.50"},
        {"1.5e-10", "0.00000000015"},
        {"123.456e-5", "0.00123456"},
        {"-9223372036854775809", "-9223372036854775809"},
        {"1.7976931348623157e308", "17976931348623157"}, /* a prefix: see the length below */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64];
        size_t n = jsonstrict_pgnumeric_text(cases[i][0], strlen(cases[i][0]), out, sizeof out);
        if (i + 1 == sizeof cases / sizeof cases[0]) {
            assert_int_equal(n, 309);
            assert_int_equal(strncmp(out, cases[i][1], strlen(cases[i][1])), 0);
            continue;
        }
        if (strcmp(out, cases[i][1]) != 0) {
            print_error("%s: got %s, want %s\n", cases[i][0], out, cases[i][1]);
        }
        assert_string_equal(out, cases[i][1]);
        assert_int_equal(n, strlen(cases[i][1]));
    }
    /* Lengths PostgreSQL printed for the long ones. */
    char out[8];
    assert_int_equal(jsonstrict_pgnumeric_text("1e-300", 6, out, sizeof out), 302);
    assert_string_equal(out, "0.00000");
    assert_int_equal(jsonstrict_pgnumeric_text("5e-324", 6, out, sizeof out), 326);
    assert_int_equal(jsonstrict_pgnumeric_text("1.0000e-124", 11, out, sizeof out), 130);
    assert_int_equal(jsonstrict_pgnumeric_text("0e-1000", 7, out, sizeof out), 1002);
    assert_int_equal(jsonstrict_pgnumeric_text("1e1000", 6, out, sizeof out), 1001);
    assert_int_equal(jsonstrict_pgnumeric_text("0e999999999", 11, out, sizeof out), 1);
}

static jsonstrict_error_t s_refused(const char *text, jsonstrict_code_t code) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    assert_int_equal(jsonstrict_parse(text, strlen(text), NULL, &v, &err), -1);
    if (err.code != code) {
        print_error("%s: got %s (%s)\n", text, jsonstrict_code_name(err.code), err.message);
    }
    assert_int_equal(err.code, code);
    return err;
}

static double s_accepted(const char *text) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    int rc = jsonstrict_parse(text, strlen(text), NULL, &v, &err);
    if (rc != 0) {
        print_error("%s refused: %s\n", text, err.message);
    }
    assert_int_equal(rc, 0);
    double d = json_number_value(v);
    json_decref(v);
    return d;
}

static void test_storage_rule_at_its_edges_names_the_field(void **state) {
    (void)state;
    jsonstrict_error_t err = s_refused("{\"a\": [0, 1e19]}", JSONSTRICT_E_NUMBER_STORAGE);
    assert_string_equal(err.path, "/a/1");
    assert_non_null(strstr(err.message, "10000000000000000000"));
    assert_non_null(strstr(err.message, "int64"));
    err = s_refused("{\"b\": {\"c\": 1e-300}}", JSONSTRICT_E_NUMBER_STORAGE);
    assert_string_equal(err.path, "/b/c");
    assert_non_null(strstr(err.message, "302 characters"));
    static const char *const refused[] = {
        "1e300",
        "-1e19",
        "1.5e20",
        "9.223372036854776e18",
        "-9.223372036854776e18",
        "1e22",
        "1e-127",
        "-1e-126",
        "5e-324",
        "1e308",
        "1.7976931348623157e308",
        "2.2250738585072014e-308",
        "12345678901234567000.0",
        "1.2345678901234567e-120",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        s_refused(refused[i], JSONSTRICT_E_NUMBER_STORAGE);
    }
    /* Largest double below 2^63 is stored as an int64; 1e-126 as 128 characters exactly. */
    assert_true(s_accepted("9.223372036854775e18") == 9.223372036854775e18);
    assert_true(s_accepted("-9.223372036854775e18") == -9.223372036854775e18);
    assert_true(s_accepted("1e18") == 1e18);
    assert_true(s_accepted("1e-126") == 1e-126);
    assert_true(s_accepted("-1e-125") == -1e-125);
    assert_true(s_accepted("1.5e-125") == 1.5e-125);
    assert_true(s_accepted("1.0000e-124") == 1e-124); /* the literal's zeros are not stored */
    assert_true(s_accepted("-0.0") == 0);
    assert_true(s_accepted("0e-1000") == 0);
    assert_true(s_accepted("0e99999") == 0);
    assert_true(s_accepted("9223372036854775807") == (double)INT64_MAX);
    /* The rule is the boundary's, whatever the other caps. */
    json_t *v = NULL;
    assert_int_equal(jsonstrict_parse("1e300", 5, &jsonstrict_limits_schema, &v, NULL), -1);
}

/* The stored text of d: jsonout's text as PostgreSQL's numeric prints it. */
static size_t s_stored(double d, char *out, size_t cap) {
    char text[JSONOUT_REAL_MAX];
    size_t n = jsonout_real(d, text);
    return jsonstrict_pgnumeric_text(text, n, out, cap);
}

/* The number policy as a property: for seeded random doubles over the whole exponent range,
 * the boundary accepts the shortest literal of d exactly when d's stored text reads back, with
 * the default caps, as the same number; and a refusal is always the storage rule's. */
static void test_accepted_exactly_when_stored_text_reads_back(void **state) {
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15u; /* the seed: xorshift64, deterministic */
    int accepted = 0;
    int refused = 0;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double d;
        uint64_t bits = x;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d)) {
            continue;
        }
        if (i % 4 == 0) { /* also short mantissas: 1 to 17 digits at any exponent */
            char lit[40];
            snprintf(lit, sizeof lit, "%.*e", (int)(x % 17), d);
            d = strtod(lit, NULL);
            if (!isfinite(d)) {
                continue;
            }
        }
        char lit[JSONOUT_REAL_MAX];
        jsonout_real(d, lit);
        json_t *v = NULL;
        jsonstrict_error_t err;
        bool ok = jsonstrict_parse(lit, strlen(lit), NULL, &v, &err) == 0;
        char stored[JSONSTRICT_STORED_NUMBER_CHARS + 64];
        size_t n = s_stored(d, stored, sizeof stored);
        bool readable = false;
        if (n < sizeof stored) {
            json_t *back = NULL;
            readable =
                jsonstrict_parse(stored, n, NULL, &back, NULL) == 0 && json_number_value(back) == d;
            if (readable && !strchr(stored, '.')) {
                readable = json_is_integer(back);
            }
            json_decref(back);
        }
        if (ok != readable) {
            print_error("%s: boundary %s, stored text %s %s\n", lit, ok ? "accepts" : "refuses",
                        stored, readable ? "reads back" : "does not read back");
        }
        assert_int_equal(ok, readable);
        if (ok) {
            assert_true(json_number_value(v) == d);
            accepted++;
        } else {
            assert_int_equal(err.code, JSONSTRICT_E_NUMBER_STORAGE);
            refused++;
        }
        json_decref(v);
    }
    /* Both sides of the rule were exercised. */
    assert_true(accepted > 10000);
    assert_true(refused > 10000);
}

static void test_stored_text_reads_to_the_nearest_double(void **state) {
    (void)state;
    char big[400];
    big[0] = '1';
    memset(big + 1, '0', 300);
    snprintf(big + 301, sizeof big - 301, "%s", "");
    json_t *v = NULL;
    /* A legacy row: 1e300 as PostgreSQL gives it back. */
    assert_int_equal(jsonstrict_parse(big, strlen(big), &jsonstrict_limits_stored, &v, NULL), 0);
    assert_true(json_is_real(v) && json_real_value(v) == 1e300);
    json_decref(v);
    char tiny[400] = "[0.";
    memset(tiny + 3, '0', 299);
    snprintf(tiny + 302, sizeof tiny - 302, "1, 7, -9223372036854775809, 1e400, -1e400, 1.0]");
    assert_int_equal(jsonstrict_parse(tiny, strlen(tiny), &jsonstrict_limits_stored, &v, NULL), 0);
    assert_true(json_real_value(json_array_get(v, 0)) == 1e-300);
    assert_true(json_is_integer(json_array_get(v, 1)));
    assert_true(json_real_value(json_array_get(v, 2)) == -9223372036854775808.0);
    assert_true(json_real_value(json_array_get(v, 3)) == DBL_MAX);
    assert_true(json_real_value(json_array_get(v, 4)) == -DBL_MAX);
    assert_true(json_is_real(json_array_get(v, 5)));
    json_decref(v);
    /* Longer than the boundary's number ceiling: still read. */
    char huge[3000] = "-";
    memset(huge + 1, '7', 2500);
    huge[2501] = '\0';
    assert_int_equal(jsonstrict_parse(huge, strlen(huge), &jsonstrict_limits_stored, &v, NULL), 0);
    assert_true(json_real_value(v) == -DBL_MAX);
    json_decref(v);
    /* The same texts at the boundary are refused. */
    assert_int_equal(jsonstrict_parse(big, strlen(big), NULL, &v, NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pgnumeric_text_matches_postgres),
        cmocka_unit_test(test_storage_rule_at_its_edges_names_the_field),
        cmocka_unit_test(test_accepted_exactly_when_stored_text_reads_back),
        cmocka_unit_test(test_stored_text_reads_to_the_nearest_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
