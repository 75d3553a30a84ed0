/*
 * Tests for jsondecimal, the exact values of JSON number literals (ARCHITECTURE.md §8, the
 * number policy): a literal's normal form, order and equality across spellings, signs, zero
 * and -0, magnitudes and digit tails, integrality, the magnitude, multipleOf (the
 * JSON-Schema-Test-Suite cases and exact ones no double can decide), a hash that agrees with
 * equality, and the shortest decimal of a double (the value of what jsonout prints).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsondecimal.h"
#include "jsonout.h"

/* 12345678910111213141516171819202122232425262728293031: the JSON-Schema-Test-Suite's style of
 * bignum. Its remainders, from python3 -c "n=1234...3031; print(n%3, n%7, n%29)": 1 5 0. */
#define S_BIG "12345678910111213141516171819202122232425262728293031"

static jsondecimal_t s_dec(const char *lit) {
    jsondecimal_t d;
    jsondecimal_of_literal(lit, strlen(lit), &d);
    return d;
}

/* "1" followed by zeros zeros, NUL-terminated in out (zeros + 2 bytes). */
static char *s_pow10_text(char *out, size_t zeros) {
    out[0] = '1';
    memset(out + 1, '0', zeros);
    out[zeros + 1] = '\0';
    return out;
}

static void test_of_literal_keeps_significant_digits_and_exponent(void **state) {
    (void)state;
    static const struct {
        const char *lit;
        bool neg;
        const char *digits;
        long exp10;
    } cases[] = {
        {"1.50", false, "15", -1},
        {"15e-1", false, "15", -1},
        {"0.15e1", false, "15", -1},
        {"-0.000120e3", true, "12", -2},
        {"100", false, "1", 2},
        {"1E+2", false, "1", 2},
        {"-9223372036854775808", true, "9223372036854775808", 0},
        {S_BIG, false, "12345678910111213141516171819202122232425262728293031", 0},
        {"0", false, "", 0},
        {"-0", false, "", 0}, /* zero is never negative */
        {"-0.000e-5", false, "", 0},
        {"0e99999", false, "", 0},
        {"0.10000000000000000001", false, "10000000000000000001", -20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jsondecimal_t d = s_dec(cases[i].lit);
        if (strcmp(d.digits, cases[i].digits) != 0 || d.exp10 != cases[i].exp10) {
            print_error("%s: digits %s exp10 %ld\n", cases[i].lit, d.digits, d.exp10);
        }
        assert_int_equal(d.neg, cases[i].neg);
        assert_string_equal(d.digits, cases[i].digits);
        assert_int_equal(d.ndigits, strlen(cases[i].digits));
        assert_int_equal(d.exp10, cases[i].exp10);
    }
    /* An exponent beyond 2^40 is saturated there, either way, and keeps its sign. */
    jsondecimal_t d = s_dec("1e99999999999999999999999");
    assert_true(jsondecimal_magnitude(&d) >= (1L << 40));
    d = s_dec("-1e-99999999999999999999999");
    assert_true(jsondecimal_magnitude(&d) <= -(1L << 40));
    assert_true(d.neg);
}

/* cmp(a, b) is want and cmp(b, a) its opposite; equal values hash alike. */
static void s_cmp(const char *a, const char *b, int want) {
    jsondecimal_t da = s_dec(a);
    jsondecimal_t db = s_dec(b);
    int got = jsondecimal_cmp(&da, &db);
    if (got != want) {
        print_error("cmp(%s, %s) = %d, want %d\n", a, b, got, want);
    }
    assert_int_equal(got, want);
    assert_int_equal(jsondecimal_cmp(&db, &da), -want);
    if (want == 0) {
        assert_int_equal(jsondecimal_hash(&da), jsondecimal_hash(&db));
    }
}

static void test_cmp_orders_by_exact_value(void **state) {
    (void)state;
    /* Signs and zero: -0 is 0 in every spelling. */
    s_cmp("-1", "1", -1);
    s_cmp("0", "-0", 0);
    s_cmp("-0.0", "0e5", 0);
    s_cmp("-0", "0.000e-9", 0);
    s_cmp("0", "1e-400", -1);
    s_cmp("-1e-400", "0", -1);
    s_cmp("-0", "-1e-400", 1);
    /* One value, many spellings. */
    s_cmp("1", "1.0", 0);
    s_cmp("1", "1e0", 0);
    s_cmp("1", "1.000", 0);
    s_cmp("1", "100e-2", 0);
    s_cmp("1", "0.01E2", 0);
    s_cmp("-1.5", "-15e-1", 0);
    char big[320];
    s_cmp("1e300", s_pow10_text(big, 300), 0);
    s_cmp("1e301", big, 1);
    s_cmp("9.99e299", big, -1);
    /* Magnitudes decide before digits, and flip under a minus sign. */
    s_cmp("9.99", "10", -1);
    s_cmp("99", "100", -1);
    s_cmp("-99", "-100", 1);
    s_cmp("1e2", "99.999999999999999999999999", 1);
    s_cmp("1e-5", "9.9999e-6", 1);
    s_cmp("1e400", "9.9e399", 1);
    /* Digit tails a double cannot see. */
    s_cmp("0.1", "0.10000000000000000001", -1);
    s_cmp("-0.1", "-0.10000000000000000001", 1);
    s_cmp("123456789012345678901", "123456789012345678902", -1);
    s_cmp("1.2345", "1.23451", -1);
    s_cmp("1.23450", "1.2345", 0);
    s_cmp(S_BIG, "1.2345678910111213141516171819202122232425262728293031e52", 0);
    s_cmp(S_BIG, "12345678910111213141516171819202122232425262728293032", -1);
    s_cmp("9223372036854775808", "9223372036854775807", 1);
    /* 2^62 as an integer and as the shortest text of its double are different decimals. */
    s_cmp("4611686018427387904", "4.611686018427388e18", -1);
}

static void test_is_integer_and_magnitude(void **state) {
    (void)state;
    static const struct {
        const char *lit;
        bool integer;
        long magnitude;
    } cases[] = {
        {"0", true, 0},       {"-0", true, 0},           {"1", true, 0},
        {"9.99", false, 0},   {"10", true, 1},           {"1.0", true, 0},
        {"1e2", true, 2},     {"1.5e1", true, 1},        {"1.05e1", false, 1},
        {"1e-1", false, -1},  {"100e-2", true, 0},       {"123e-2", false, 0},
        {"-123.4", false, 2}, {"0.000120", false, -4},   {"0.001", false, -3},
        {"1e400", true, 400}, {"9.9e-401", false, -401}, {S_BIG, true, 52},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jsondecimal_t d = s_dec(cases[i].lit);
        if (jsondecimal_is_integer(&d) != cases[i].integer ||
            jsondecimal_magnitude(&d) != cases[i].magnitude) {
            print_error("%s: integer %d magnitude %ld\n", cases[i].lit, jsondecimal_is_integer(&d),
                        jsondecimal_magnitude(&d));
        }
        assert_int_equal(jsondecimal_is_integer(&d), cases[i].integer);
        assert_int_equal(jsondecimal_magnitude(&d), cases[i].magnitude);
    }
}

static void test_multiple_of_is_exact(void **state) {
    (void)state;
    char e40[48];
    char e39[48];
    static const char *const m40 = "1099511627776"; /* 2^40 */
    const struct {
        const char *x;
        const char *m;
        bool want;
    } cases[] = {
        /* JSON-Schema-Test-Suite draft7 multipleOf.json and optional/float-overflow.json. */
        {"10", "2", true},
        {"7", "2", false},
        {"0", "1.5", true},
        {"4.5", "1.5", true},
        {"-4.5", "1.5", true},
        {"35", "1.5", false},
        {"0.0075", "0.0001", true},
        {"0.00751", "0.0001", false},
        {"1e308", "0.123456789", false},
        {"12391239123", "1e-8", true},
        {"1e308", "0.5", true},
        /* Where binary doubles go wrong. */
        {"1.1", "0.1", true},
        {"0.3", "0.1", true},
        {"19.99", "0.01", true},
        {"0.1", "0.3", false},
        /* Exponents far apart: only the powers of 2 and 5 in m matter past its length. */
        {"1e300", "1e-300", true},
        {"1e-300", "1e300", false},
        {"1e400", "1e-400", true},
        {"1e400", "2.5", true},
        {"1e400", "1.28", true}, /* 10^402 / 2^7 */
        {"1e400", "3", false},
        {"3e400", "3", true},
        {"1.5e-400", "1e-401", true},
        {"1e-401", "1.5e-400", false},
        /* S_BIG's remainders by 3, 7 and 29 are 1, 5 and 0 (python3, see S_BIG). */
        {S_BIG, "3", false},
        {S_BIG, "7", false},
        {S_BIG, "29", true},
        {S_BIG, S_BIG, true},
        {S_BIG, "1e-400", true},
        {"1", S_BIG, false},
        /* 10^40 = 2^40 * 5^40; 10^39 has only 39 twos. */
        {s_pow10_text(e40, 40), m40, true},
        {"1e40", m40, true},
        {s_pow10_text(e39, 39), m40, false},
        {"1e39", m40, false},
        {"-1e40", m40, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jsondecimal_t x = s_dec(cases[i].x);
        jsondecimal_t m = s_dec(cases[i].m);
        bool got = jsondecimal_multiple_of(&x, &m);
        if (got != cases[i].want) {
            print_error("%s multipleOf %s: %d, want %d\n", cases[i].x, cases[i].m, got,
                        cases[i].want);
        }
        assert_int_equal(got, cases[i].want);
    }
}

/* xorshift64: the tests' random numbers are the same on every run. */
static uint64_t s_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Writes the value digits[0..n) * 10^e (digits with no leading zero) as a literal in spelling
 * k: a point at any place, leading "0.00" or trailing zeros, an exponent of either case, with
 * or without "+", or none when the spelling needs none. */
/* A spelling takes at most a sign, "0.00", the digits, a point, three zeros and an exponent. */
#define ASSERT_SPELL_FITS(cap, n) assert_true((size_t)(n) + 32 <= (cap))

static void s_spell(char *out, size_t cap, bool neg, const char *digits, int n, int e, uint64_t k) {
    ASSERT_SPELL_FITS(cap, n);
    int point = (int)(k % (uint64_t)(n + 1));         /* digits before the point */
    int zeros = (int)((k >> 8) % 4);                  /* trailing zeros after the point */
    int lead = point == 0 ? (int)((k >> 12) % 3) : 0; /* zeros between "0." and the digits */
    size_t len = 0;
    if (neg) {
        out[len++] = '-';
    }
    if (point == 0) {
        out[len++] = '0';
    }
    memcpy(out + len, digits, (size_t)point);
    len += (size_t)point;
    if (point < n || zeros > 0) {
        out[len++] = '.';
    }
    memset(out + len, '0', (size_t)lead);
    len += (size_t)lead;
    memcpy(out + len, digits + point, (size_t)(n - point));
    len += (size_t)(n - point);
    memset(out + len, '0', (size_t)zeros);
    len += (size_t)zeros;
    int exp = e + (n - point) + lead; /* the exponent that keeps the value */
    if (exp == 0 && ((k >> 17) & 1)) {
        out[len] = '\0';
        return;
    }
    snprintf(out + len, cap - len, "%s%s%d", (k >> 16) & 1 ? "E" : "e",
             exp > 0 && ((k >> 18) & 1) ? "+" : "", exp);
}

/* Random values, each in five spellings: all compare equal and hash alike; and a value and the
 * same with one digit changed compare as their digits do, and hash apart (nearly always). */
static void test_hash_agrees_with_cmp_across_spellings(void **state) {
    (void)state;
    uint64_t x = 0x2545f4914f6cdd1du;
    int collisions = 0;
    for (int i = 0; i < 20000; i++) {
        char digits[64];
        int n = 1 + (int)(s_next(&x) % 40);
        for (int k = 0; k < n; k++) {
            digits[k] = (char)('0' + s_next(&x) % 10);
        }
        digits[0] = (char)('1' + s_next(&x) % 9);
        int e = (int)(s_next(&x) % 801) - 400;
        bool neg = s_next(&x) & 1;
        char first[160];
        s_spell(first, sizeof first, neg, digits, n, e, s_next(&x));
        jsondecimal_t a = s_dec(first);
        for (int s = 0; s < 4; s++) {
            char other[160];
            s_spell(other, sizeof other, neg, digits, n, e, s_next(&x));
            jsondecimal_t b = s_dec(other);
            if (jsondecimal_cmp(&a, &b) != 0) {
                print_error("%s and %s differ\n", first, other);
            }
            assert_int_equal(jsondecimal_cmp(&a, &b), 0);
            assert_int_equal(jsondecimal_hash(&a), jsondecimal_hash(&b));
        }
        int at = (int)(s_next(&x) % (uint64_t)n);
        char changed[64];
        memcpy(changed, digits, (size_t)n);
        changed[at] = changed[at] == '9' ? '8' : (char)(changed[at] + 1);
        char third[160];
        s_spell(third, sizeof third, neg, changed, n, e, s_next(&x));
        jsondecimal_t c = s_dec(third);
        int want = memcmp(changed, digits, (size_t)n) > 0 ? 1 : -1;
        assert_int_equal(jsondecimal_cmp(&c, &a), neg ? -want : want);
        collisions += jsondecimal_hash(&c) == jsondecimal_hash(&a);
    }
    assert_true(collisions < 5);
}

static void test_shortest_gives_round_trip_digits(void **state) {
    (void)state;
    char digits[JSONDECIMAL_SHORTEST_MAX + 1];
    int exp10 = 0;
    assert_int_equal(jsondecimal_shortest(0.1, digits, &exp10), 1);
    assert_string_equal(digits, "1");
    assert_int_equal(exp10, -1);
    assert_int_equal(jsondecimal_shortest(0.1 + 0.2, digits, &exp10), 17);
    assert_string_equal(digits, "30000000000000004");
    assert_int_equal(exp10, -17);
    assert_int_equal(jsondecimal_shortest(-1500.0, digits, &exp10), 2);
    assert_string_equal(digits, "15");
    assert_int_equal(exp10, 2);
    assert_int_equal(jsondecimal_shortest(0.0, digits, &exp10), 1);
    assert_string_equal(digits, "0");
    assert_int_equal(exp10, 0);
    jsondecimal_shortest(5e-324, digits, &exp10);
    assert_string_equal(digits, "5");
    assert_int_equal(exp10, -324);
    jsondecimal_shortest(DBL_MAX, digits, &exp10);
    assert_string_equal(digits, "17976931348623157");
    assert_int_equal(exp10, 292);
}

/* of_double is the value of the text jsonout prints for d, and that text has the fewest
 * digits that read back as d: checked on named doubles and on seeded random bit patterns. */
static void s_check_of_double(double d) {
    jsondecimal_t dec;
    jsondecimal_of_double(d, &dec);
    char text[JSONOUT_REAL_MAX];
    size_t n = jsonout_real(d, text);
    jsondecimal_t printed = s_dec(text);
    if (jsondecimal_cmp(&dec, &printed) != 0) {
        print_error("%.17g: of_double %se%ld, jsonout %s\n", d, dec.digits, dec.exp10, text);
    }
    assert_int_equal(jsondecimal_cmp(&dec, &printed), 0);
    assert_true(n < JSONOUT_REAL_MAX);
    if (d == 0) {
        assert_int_equal(dec.ndigits, 0);
        assert_false(dec.neg);
        return;
    }
    assert_int_equal(dec.neg, d < 0);
    assert_true(dec.ndigits >= 1 && dec.ndigits <= JSONDECIMAL_SHORTEST_MAX);
    char lit[JSONDECIMAL_DIGITS_MAX + 32];
    snprintf(lit, sizeof lit, "%s%se%ld", d < 0 ? "-" : "", dec.digits, dec.exp10);
    assert_true(strtod(lit, NULL) == d);
    if (dec.ndigits > 1) { /* one digit fewer, correctly rounded, does not read back */
        snprintf(lit, sizeof lit, "%.*e", (int)dec.ndigits - 2, d);
        assert_false(strtod(lit, NULL) == d);
    }
}

static void test_of_double_is_the_shortest_form_jsonout_prints(void **state) {
    (void)state;
    static const double named[] = {0.0,    -0.0,    0.1,     0.1 + 0.2, 1.0,     -1500.0, 1e23,
                                   1e300,  5e-324,  DBL_MAX, -DBL_MAX,  DBL_MIN, 0x1p53,  0x1p62,
                                   0.0001, 0.00001, 1e15,    1e16,      1e-7,    123.456, 2.5e-8};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        s_check_of_double(named[i]);
    }
    jsondecimal_t d;
    jsondecimal_of_double(0x1p62, &d);
    assert_string_equal(d.digits, "4611686018427388");
    assert_int_equal(d.exp10, 3);
    jsondecimal_of_double(-1500.0, &d);
    assert_true(d.neg);
    assert_string_equal(d.digits, "15");
    assert_int_equal(d.exp10, 2);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 100000; i++) {
        uint64_t bits = s_next(&x);
        double v;
        memcpy(&v, &bits, sizeof v);
        if (isfinite(v)) {
            s_check_of_double(v);
        }
    }
}

static void test_of_int64_is_exact_at_the_ends(void **state) {
    (void)state;
    jsondecimal_t d;
    jsondecimal_of_int64(INT64_MIN, &d);
    assert_true(d.neg);
    assert_string_equal(d.digits, "9223372036854775808");
    assert_int_equal(d.exp10, 0);
    jsondecimal_of_int64(INT64_MAX, &d);
    assert_string_equal(d.digits, "9223372036854775807");
    jsondecimal_of_int64(0, &d);
    assert_int_equal(d.ndigits, 0);
    jsondecimal_of_int64(-1000, &d);
    assert_true(d.neg);
    assert_string_equal(d.digits, "1");
    assert_int_equal(d.exp10, 3);
    /* 2^62 as an int64 and as its double's shortest text are different values. */
    jsondecimal_t a;
    jsondecimal_t b;
    jsondecimal_of_int64(INT64_C(4611686018427387904), &a);
    jsondecimal_of_double(0x1p62, &b);
    assert_int_equal(jsondecimal_cmp(&a, &b), -1);
    jsondecimal_of_int64(INT64_C(4611686018427388000), &a);
    assert_int_equal(jsondecimal_cmp(&a, &b), 0);
    assert_int_equal(jsondecimal_hash(&a), jsondecimal_hash(&b));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_of_literal_keeps_significant_digits_and_exponent),
        cmocka_unit_test(test_cmp_orders_by_exact_value),
        cmocka_unit_test(test_is_integer_and_magnitude),
        cmocka_unit_test(test_multiple_of_is_exact),
        cmocka_unit_test(test_hash_agrees_with_cmp_across_spellings),
        cmocka_unit_test(test_shortest_gives_round_trip_digits),
        cmocka_unit_test(test_of_double_is_the_shortest_form_jsonout_prints),
        cmocka_unit_test(test_of_int64_is_exact_at_the_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
