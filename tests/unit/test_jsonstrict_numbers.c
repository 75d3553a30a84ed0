/*
 * Tests for the number policy of the strict JSON boundary (jsonstrict.h, "The number policy";
 * ARCHITECTURE.md §8): every literal is worth exactly what it says and is carried byte for
 * byte. The caps at their edges; then the rule as a property over seeded random literals
 * (digits, signs, fractions, exponents, trailing zeros, -0, magnitudes near and beyond the
 * cap): each is refused with the right code, path and offset, or read as an int64, a plain
 * real or a text real as its literal says, printed back by jsonout unchanged, kept through
 * the tape and back, and ordered, compared and hashed by its exact decimal value, with equal
 * values in other spellings equal and hashed alike; and the nearest-double reading of stored
 * text.
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
#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "jsontape.h"

/* --- helpers --- */

static jsonstrict_error_t s_refused(const char *text, const jsonstrict_limits_t *lim,
                                    jsonstrict_code_t code) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    assert_int_equal(jsonstrict_parse(text, strlen(text), lim, &v, &err), -1);
    if (err.code != code) {
        print_error("%s: got %s (%s)\n", text, jsonstrict_code_name(err.code), err.message);
    }
    assert_int_equal(err.code, code);
    assert_null(v);
    return err;
}

static json_t *s_accepted(const char *text, const jsonstrict_limits_t *lim) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    int rc = jsonstrict_parse(text, strlen(text), lim, &v, &err);
    if (rc != 0) {
        print_error("%.60s refused: %s\n", text, err.message);
    }
    assert_int_equal(rc, 0);
    return v;
}

/* The tape of text (one number) under the default caps; its root is entry 0. */
static void s_tape(jsontape_t *t, const char *text) {
    jsonstrict_error_t err;
    int rc = jsonstrict_parse_tape(text, strlen(text), NULL, t, &err);
    if (rc != 0) {
        print_error("%.60s refused: %s\n", text, err.message);
    }
    assert_int_equal(rc, 0);
}

static void s_tape_free(jsontape_t *t) {
    free(t->entries);
    free(t->bytes);
    *t = (jsontape_t){0};
}

/* xorshift64: the literals are the same on every run. */
static uint64_t s_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* --- the caps at their edges --- */

static void test_number_cap_at_its_edges_names_the_field(void **state) {
    (void)state;
    /* Magnitude: the decimal exponent of the leading digit, within +-400. */
    static const char *const inside[] = {
        "1e400",   "9.9e400", "-9.99999999999999999999e400", "1e-400",   "-1e-400",
        "10e399",  "0.1e401", "0.00000000001e410",           "0e999999", "-0e-999999",
        "1.0e400", "9e+400",
    };
    for (size_t i = 0; i < sizeof inside / sizeof inside[0]; i++) {
        json_t *v = s_accepted(inside[i], NULL);
        char *out = jsonout_dumps(v);
        assert_string_equal(out, inside[i]);
        free(out);
        json_decref(v);
    }
    static const char *const beyond[] = {
        "1e401", "-1e401", "10e400", "1e-401", "0.99e-400", "9.9e-401", "1e999999999999999999999",
    };
    for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
        jsonstrict_error_t err = s_refused(beyond[i], NULL, JSONSTRICT_E_NUMBER_RANGE);
        char want[JSONSTRICT_MESSAGE_MAX];
        snprintf(want, sizeof want, "number %s has a magnitude beyond 10^+-400 (the number cap)",
                 beyond[i]);
        assert_string_equal(err.message, want);
        assert_int_equal(err.offset, 0);
    }
    jsonstrict_error_t err = s_refused("{\"a\": [0, 1e401]}", NULL, JSONSTRICT_E_NUMBER_RANGE);
    assert_string_equal(err.path, "/a/1");
    assert_int_equal(err.offset, 10);
    /* A long literal is shown by its first 40 characters. */
    char lit[129] = "1.";
    memset(lit + 2, '5', 120);
    memcpy(lit + 122, "e-401", 6);
    err = s_refused(lit, NULL, JSONSTRICT_E_NUMBER_RANGE);
    char want[JSONSTRICT_MESSAGE_MAX];
    snprintf(want, sizeof want, "number %.40s has a magnitude beyond 10^+-400 (the number cap)",
             lit);
    assert_string_equal(err.message, want);

    /* Length: 128 characters (the default) accepted, 129 refused; max_number_chars is clamped
     * to the ceiling of 1024. */
    char at[1100] = "-1.";
    memset(at + 3, '7', JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT - 3);
    at[JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT] = '\0';
    json_t *v = s_accepted(at, NULL);
    assert_string_equal(jsonnumber_text(v, NULL), at);
    json_decref(v);
    at[JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT] = '7';
    at[JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT + 1] = '\0';
    err = s_refused(at, NULL, JSONSTRICT_E_NUMBER_LENGTH);
    assert_int_equal(err.offset, 0);
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = 4096;
    lim.max_number_chars = 5000;
    memset(at + 3, '7', JSONSTRICT_NUMBER_CHARS_CEILING - 3);
    at[JSONSTRICT_NUMBER_CHARS_CEILING] = '\0';
    v = s_accepted(at, &lim);
    assert_string_equal(jsonnumber_text(v, NULL), at);
    char *out = jsonout_dumps(v);
    assert_string_equal(out, at);
    free(out);
    json_decref(v);
    at[JSONSTRICT_NUMBER_CHARS_CEILING] = '7';
    at[JSONSTRICT_NUMBER_CHARS_CEILING + 1] = '\0';
    s_refused(at, &lim, JSONSTRICT_E_NUMBER_LENGTH);
    /* The schema caps read numbers the same way. */
    v = s_accepted("[1e400, 1.50]", &jsonstrict_limits_schema);
    assert_string_equal(jsonnumber_text(json_array_get(v, 1), NULL), "1.50");
    json_decref(v);
    s_refused("1e401", &jsonstrict_limits_schema, JSONSTRICT_E_NUMBER_RANGE);
}

/* --- the rule as a property over random literals --- */

/* A literal as the test reads it, independently of the parser and of jsondecimal. */
typedef struct {
    char text[1200];
    size_t len;
    bool neg;
    bool plain_int;   /* neither fraction nor exponent */
    bool zero;        /* every digit is 0 */
    long magnitude;   /* of the leading nonzero digit (exponents saturate at 10^9) */
    bool integral;    /* the value has no fractional part */
    char digits[200]; /* significant digits: no leading or trailing zeros */
    int ndigits;
    long exp10; /* value = digits * 10^exp10 */
} s_lit_t;

static void s_describe(s_lit_t *l) {
    const char *p = l->text;
    const char *end = l->text + l->len;
    l->neg = *p == '-';
    p += l->neg;
    const char *int_start = p;
    while (p < end && *p >= '0' && *p <= '9') {
        p++;
    }
    long int_len = p - int_start;
    const char *frac_start = p;
    long frac_len = 0;
    if (p < end && *p == '.') {
        frac_start = ++p;
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
        }
        frac_len = p - frac_start;
    }
    long exp = 0;
    l->plain_int = p == end && frac_start == int_start + int_len; /* no point, no exponent */
    if (p < end) {
        p++; /* e or E */
        bool exp_neg = *p == '-';
        p += *p == '-' || *p == '+';
        for (; p < end; p++) {
            exp = exp < 1000000000 ? exp * 10 + (*p - '0') : exp;
        }
        exp = exp_neg ? -exp : exp;
    }
    /* All digits in order, the place of the first being int_len - 1. */
    char all[1200];
    long n = 0;
    memcpy(all, int_start, (size_t)int_len);
    n = int_len;
    memcpy(all + n, frac_start, (size_t)frac_len);
    n += frac_len;
    long first = 0;
    while (first < n && all[first] == '0') {
        first++;
    }
    long last = n;
    while (last > first && all[last - 1] == '0') {
        last--;
    }
    l->zero = first == n;
    l->ndigits = 0;
    l->exp10 = 0;
    l->magnitude = 0;
    l->integral = true;
    if (!l->zero) {
        l->magnitude = int_len - 1 - first + exp;
        l->exp10 = exp - frac_len + (n - last);
        l->integral = l->exp10 >= 0;
        l->ndigits = (int)(last - first < 199 ? last - first : 199); /* only compared when short */
        memcpy(l->digits, all + first, (size_t)l->ndigits);
    }
    l->digits[l->ndigits] = '\0';
}

/* Appends k random digits to s (the first nonzero when lead). */
static size_t s_digits(char *s, size_t k, bool lead, uint64_t *x) {
    for (size_t i = 0; i < k; i++) {
        s[i] = (char)('0' + s_next(x) % 10);
    }
    if (lead && k > 0) {
        s[0] = (char)('1' + s_next(x) % 9);
    }
    return k;
}

/* A count of digits: mostly a few, sometimes many, now and then enough to pass the cap. */
static size_t s_count(uint64_t *x) {
    uint64_t r = s_next(x) % 100;
    return r < 55   ? 1 + s_next(x) % 3
           : r < 85 ? 4 + s_next(x) % 22
           : r < 97 ? 26 + s_next(x) % 45
                    : 100 + s_next(x) % 40;
}

/* One random literal: a shortest double text (a plain real, usually), an int64 edge, or parts
 * drawn at random, with the exponent aimed now and then at the magnitude cap's edges. */
static void s_random_literal(s_lit_t *l, uint64_t *x) {
    uint64_t kind = s_next(x) % 20;
    size_t n = 0;
    char *s = l->text;
    if (kind == 0) {
        uint64_t bits = s_next(x);
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d)) {
            d = 1.5;
        }
        if (s_next(x) & 1) { /* a short mantissa at any exponent */
            char buf[40];
            snprintf(buf, sizeof buf, "%.*e", (int)(s_next(x) % 6), d);
            d = strtod(buf, NULL);
        }
        n = jsonout_real(d, s);
    } else if (kind == 1) {
        static const char *const edges[] = {
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "-9223372036854775809",
            "-0",
            "0",
            "-0.0",
            "0.0",
            "999999999999999999",
            "1000000000000000000",
            "-0e0",
            "18446744073709551616",
        };
        const char *e = edges[s_next(x) % (sizeof edges / sizeof edges[0])];
        n = strlen(e);
        memcpy(s, e, n);
    } else {
        if (s_next(x) % 3 == 0) {
            s[n++] = '-';
        }
        size_t int_len = s_next(x) % 5 < 2 ? 0 : s_count(x);
        if (int_len == 0) {
            s[n++] = '0';
        } else {
            n += s_digits(s + n, int_len, true, x);
        }
        if (s_next(x) & 1) {
            s[n++] = '.';
            size_t frac = s_count(x);
            n += s_digits(s + n, frac, false, x);
            uint64_t z = s_next(x) % 10;
            if (z < 3) { /* trailing zeros */
                memset(s + n, '0', z + 1);
                n += z + 1;
            } else if (z == 3) { /* all zeros: "0.000" or "12.00" */
                memset(s + n - frac, '0', frac);
            }
        }
        if (s_next(x) & 1) {
            s[n++] = s_next(x) & 1 ? 'e' : 'E';
            l->len = n;
            memcpy(l->text + n, "0", 2);
            l->len = n + 1;
            s_describe(l); /* the magnitude so far, to aim the exponent */
            long place = l->magnitude;
            long exp = 0;
            uint64_t r = s_next(x) % 10;
            if (r < 4) {
                exp = (long)(s_next(x) % 26) * (s_next(x) & 1 ? 1 : -1);
            } else if (r < 7) {
                static const long targets[] = {400,  401,  -400, -401, 308, 309, -308,
                                               -324, -325, 399,  -399, 18,  19};
                exp = targets[s_next(x) % (sizeof targets / sizeof targets[0])] - place;
            } else if (r < 9) {
                exp = (long)(s_next(x) % 900) - 450;
            } else {
                exp = (long)(s_next(x) % 1000000) * (s_next(x) & 1 ? 1 : -1);
            }
            if (exp < 0) {
                s[n++] = '-';
            } else if (s_next(x) & 1) {
                s[n++] = '+';
            }
            if (s_next(x) % 8 == 0) {
                s[n++] = '0'; /* JSON allows leading zeros in an exponent */
            }
            n += (size_t)snprintf(s + n, 24, "%ld", exp < 0 ? -exp : exp);
        }
    }
    s[n] = '\0';
    l->len = n;
    s_describe(l);
}

/* Whether the plain integer literal l is inside int64. */
static bool s_fits_int64(const s_lit_t *l) {
    const char *d = l->text + l->neg;
    size_t n = l->len - l->neg;
    const char *max = l->neg ? "9223372036854775808" : "9223372036854775807";
    return n < 19 || (n == 19 && strcmp(d, max) <= 0);
}

/* The kinds of entry the boundary makes. */
enum { S_INT, S_PLAIN, S_TEXT, S_KINDS };

/* The number entry at index e of t holds l as its kind says: an int64 of its value, a plain
 * real of its nearest double, or a text real of its literal and nearest double. */
static void s_check_entry(const jsontape_t *t, uint32_t e, const s_lit_t *l, int kind, double d) {
    const jsontape_entry_t *en = jsontape_at(t, e);
    jsontape_num_t num = jsontape_num(t, en);
    if (kind == S_INT) {
        assert_int_equal(en->type, JSONTAPE_INTEGER);
        assert_true(num.is_int);
        assert_true(num.i == strtoll(l->text, NULL, 10));
        return;
    }
    assert_int_equal(en->type, JSONTAPE_REAL);
    assert_false(num.is_int);
    assert_memory_equal(&num.d, &d, sizeof d); /* -0.0 too */
    if (kind == S_PLAIN) {
        assert_int_equal(en->flags, 0);
        assert_null(num.text);
        return;
    }
    assert_true(en->flags & JSONTAPE_F_TEXT);
    assert_int_equal((en->flags & JSONTAPE_F_INTEGRAL) != 0, l->integral);
    assert_int_equal(jsontape_is_integral(en), l->integral);
    assert_non_null(num.text);
    assert_int_equal(num.len, l->len);
    assert_memory_equal(num.text, l->text, l->len);
    assert_int_equal(num.text[l->len], '\0');
}

/* The accepted literals kept for comparisons: each in a tape of its own. */
#define S_RING 16

typedef struct {
    jsontape_t tape[S_RING];
    char text[S_RING][1200];
    size_t count;
} s_ring_t;

/* jsontape_num_cmp, jsontape_equal and the value hash of the new literal (in t) against the
 * kept ones agree with the order of their decimal values (jsondecimal, tested on its own). */
static void s_check_order(s_ring_t *ring, const jsontape_t *t, const char *text, int *orders) {
    jsondecimal_t *dec = malloc(2 * sizeof *dec);
    assert_non_null(dec);
    jsondecimal_of_literal(text, strlen(text), &dec[0]);
    jsontape_num_t a = jsontape_num(t, jsontape_at(t, 0));
    size_t kept = ring->count < S_RING ? ring->count : S_RING;
    for (size_t i = 0; i < kept; i++) {
        const jsontape_t *o = &ring->tape[i];
        jsondecimal_of_literal(ring->text[i], strlen(ring->text[i]), &dec[1]);
        int want = jsondecimal_cmp(&dec[0], &dec[1]);
        int got = jsontape_num_cmp(a, jsontape_num(o, jsontape_at(o, 0)));
        if (got != want) {
            print_error("%s vs %s: num_cmp %d, decimals %d\n", text, ring->text[i], got, want);
        }
        assert_int_equal(got, want);
        assert_int_equal(jsontape_equal(t, 0, o, 0), want == 0);
        if (want == 0) {
            assert_int_equal(jsontape_value_hash(t, 0), jsontape_value_hash(o, 0));
        }
        orders[want + 1]++;
    }
    free(dec);
    jsontape_t *slot = &ring->tape[ring->count % S_RING];
    jsontape_clear(slot);
    s_tape(slot, text);
    snprintf(ring->text[ring->count % S_RING], sizeof ring->text[0], "%s", text);
    ring->count++;
}

/* The value digits * 10^exp10 (neg) spelled anew: as an integer when it is one and short, or
 * with the point after `point` digits, zeros added after it, and the exponent that keeps the
 * value. Returns the length, or 0 when the spelling would pass the length cap. */
static size_t s_respell(const s_lit_t *l, char *out, uint64_t k) {
    int n = l->ndigits;
    size_t len = 0;
    if (l->neg) {
        out[len++] = '-';
    }
    if (l->zero) {
        static const char *const zeros[] = {"0", "0.0", "0e7", "0.000E-3"};
        const char *z = zeros[k % 4];
        memcpy(out + len, z, strlen(z) + 1);
        return len + strlen(z);
    }
    if (l->exp10 >= 0 && l->exp10 + n <= 40 && k % 4 == 0) {
        memcpy(out + len, l->digits, (size_t)n);
        len += (size_t)n;
        memset(out + len, '0', (size_t)l->exp10);
        len += (size_t)l->exp10;
        out[len] = '\0';
        return len;
    }
    int point = (int)((k >> 4) % (uint64_t)(n + 1));
    int zeros = (int)((k >> 12) % 3);
    if (point == 0) {
        out[len++] = '0';
    }
    memcpy(out + len, l->digits, (size_t)point);
    len += (size_t)point;
    if (point < n || zeros > 0) {
        out[len++] = '.';
    }
    memcpy(out + len, l->digits + point, (size_t)(n - point));
    len += (size_t)(n - point);
    memset(out + len, '0', (size_t)zeros);
    len += (size_t)zeros;
    long exp = l->exp10 + (n - point);
    len += (size_t)snprintf(out + len, 32, "%s%ld", (k >> 20) & 1 ? "E" : "e", exp);
    return len <= JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT ? len : 0;
}

/* Equal values in other spellings (possibly another kind: 1.5, 1.50, 15e-1) are equal to the
 * literal on the tape t, compare 0 and hash alike. */
static void s_check_spellings(const s_lit_t *l, const jsontape_t *t, uint64_t *x, int *pairs) {
    if (l->ndigits >= 199) {
        return; /* digits were cut in the description */
    }
    for (int i = 0; i < 3; i++) {
        char other[256];
        if (s_respell(l, other, s_next(x)) == 0) {
            continue;
        }
        jsontape_t o = {0};
        s_tape(&o, other);
        bool eq = jsontape_equal(t, 0, &o, 0);
        if (!eq) {
            print_error("%s and %s are not equal\n", l->text, other);
        }
        assert_true(eq);
        assert_int_equal(jsontape_num_cmp(jsontape_num(t, jsontape_at(t, 0)),
                                          jsontape_num(&o, jsontape_at(&o, 0))),
                         0);
        assert_int_equal(jsontape_value_hash(t, 0), jsontape_value_hash(&o, 0));
        pairs[jsontape_at(&o, 0)->type == JSONTAPE_INTEGER  ? S_INT
              : jsontape_at(&o, 0)->flags & JSONTAPE_F_TEXT ? S_TEXT
                                                            : S_PLAIN]++;
        s_tape_free(&o);
    }
    /* jsonout's text for the nearest double, when it is the same value: a plain real. */
    if (l->plain_int || l->magnitude > 308 || l->magnitude < -307) {
        return;
    }
    char text[JSONOUT_REAL_MAX];
    jsonout_real(strtod(l->text, NULL), text);
    s_lit_t p;
    memcpy(p.text, text, strlen(text) + 1);
    p.len = strlen(text);
    s_describe(&p);
    if (p.zero != l->zero || p.neg != l->neg || p.exp10 != l->exp10 ||
        strcmp(p.digits, l->digits) != 0) {
        return;
    }
    jsontape_t o = {0};
    s_tape(&o, text);
    assert_true(jsontape_equal(t, 0, &o, 0));
    assert_int_equal(jsontape_value_hash(t, 0), jsontape_value_hash(&o, 0));
    pairs[S_PLAIN]++;
    s_tape_free(&o);
}

static void test_literals_are_refused_or_kept_byte_for_byte(void **state) {
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15u;
    int kinds[S_KINDS] = {0};
    int refused_length = 0;
    int refused_range = 0;
    int orders[3] = {0};
    int pairs[S_KINDS] = {0};
    s_ring_t *ring = calloc(1, sizeof *ring);
    assert_non_null(ring);
    s_lit_t *l = malloc(sizeof *l);
    assert_non_null(l);
    for (int i = 0; i < 60000; i++) {
        s_random_literal(l, &x);
        /* Half of them inside a document: the error names the field; the output is the
         * document, byte for byte (compact, one key). */
        bool nested = i & 1;
        char doc[1300];
        snprintf(doc, sizeof doc, nested ? "{\"k\":[0,%s]}" : "%s", l->text);
        json_t *v = NULL;
        jsonstrict_error_t err;
        int rc = jsonstrict_parse(doc, strlen(doc), NULL, &v, &err);
        jsonstrict_code_t want = JSONSTRICT_OK;
        if (l->len > JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT) {
            want = JSONSTRICT_E_NUMBER_LENGTH;
        } else if (!l->zero && (l->magnitude > JSONSTRICT_NUMBER_EXP_MAX ||
                                l->magnitude < -JSONSTRICT_NUMBER_EXP_MAX)) {
            want = JSONSTRICT_E_NUMBER_RANGE;
        }
        if ((rc == 0) != (want == JSONSTRICT_OK) || (rc != 0 && err.code != want)) {
            print_error("%.80s: rc %d (%s), want %s\n", l->text, rc, rc ? err.message : "accepted",
                        jsonstrict_code_name(want));
        }
        if (want != JSONSTRICT_OK) {
            assert_int_equal(rc, -1);
            assert_int_equal(err.code, want);
            assert_string_equal(err.path, nested ? "/k/1" : "");
            assert_int_equal(err.offset, nested ? 8 : 0);
            if (want == JSONSTRICT_E_NUMBER_RANGE) {
                char msg[JSONSTRICT_MESSAGE_MAX];
                snprintf(msg, sizeof msg,
                         "number %.*s has a magnitude beyond 10^+-400 (the number cap)",
                         (int)(l->len > 40 ? 40 : l->len), l->text);
                assert_string_equal(err.message, msg);
                refused_range++;
            } else {
                refused_length++;
            }
            continue;
        }
        assert_int_equal(rc, 0);
        /* The kind its literal calls for. */
        double d = strtod(l->text, NULL);
        d = isinf(d) ? copysign(DBL_MAX, d) : d;
        char shortest[JSONOUT_REAL_MAX];
        int kind = S_TEXT;
        if (l->plain_int && !(l->neg && l->zero) && s_fits_int64(l)) {
            kind = S_INT;
        } else if (!l->plain_int && isfinite(strtod(l->text, NULL)) &&
                   jsonout_real(d, shortest) == l->len && memcmp(shortest, l->text, l->len) == 0) {
            kind = S_PLAIN;
        }
        kinds[kind]++;
        json_t *num = nested ? json_array_get(json_object_get(v, "k"), 1) : v;
        assert_int_equal(json_is_integer(num), kind == S_INT);
        assert_int_equal(jsonnumber_text(num, NULL) != NULL, kind == S_TEXT);
        if (kind == S_TEXT) {
            assert_string_equal(jsonnumber_text(num, NULL), l->text);
        }
        if (kind != S_INT) {
            assert_true(json_real_value(num) == d);
        }
        /* (a) jsonout prints the document back, byte for byte. */
        char *out = jsonout_dumps(v);
        if (strcmp(out, doc) != 0) {
            print_error("%s came back as %s\n", doc, out);
        }
        assert_string_equal(out, doc);
        /* (b) The tape holds the same, parsed directly and from the jansson value; and back to
         * jansson, it prints the same again. Read back as stored text, nothing changes. */
        uint32_t at = nested ? 4 : 0;
        jsontape_t direct = {0};
        s_tape(&direct, doc);
        s_check_entry(&direct, at, l, kind, d);
        jsontape_t via = {0};
        assert_int_equal(jsontape_from_json(&via, v), 0);
        s_check_entry(&via, at, l, kind, d);
        assert_true(jsontape_equal(&direct, 0, &via, 0));
        assert_int_equal(jsontape_value_hash(&direct, 0), jsontape_value_hash(&via, 0));
        json_t *back = jsontape_to_json(&via, 0);
        char *again = jsonout_dumps(back);
        assert_string_equal(again, doc);
        free(again);
        json_decref(back);
        json_t *stored = s_accepted(out, &jsonstrict_limits_stored);
        again = jsonout_dumps(stored);
        assert_string_equal(again, doc);
        free(again);
        json_decref(stored);
        free(out);
        /* (c) Order, equality and hashes against other literals, and against other
         * spellings of the same value. */
        jsontape_t alone = {0};
        s_tape(&alone, l->text);
        s_check_order(ring, &alone, l->text, orders);
        s_check_spellings(l, &alone, &x, pairs);
        s_tape_free(&alone);
        s_tape_free(&direct);
        s_tape_free(&via);
        json_decref(v);
    }
    for (size_t i = 0; i < S_RING; i++) {
        s_tape_free(&ring->tape[i]);
    }
    free(ring);
    free(l);
    printf("literals: %d int64, %d plain reals, %d text reals; refused %d by length, %d by "
           "magnitude; orders %d below, %d equal, %d above; equal spellings as int64 %d, plain "
           "%d, text %d\n",
           kinds[S_INT], kinds[S_PLAIN], kinds[S_TEXT], refused_length, refused_range, orders[0],
           orders[1], orders[2], pairs[S_INT], pairs[S_PLAIN], pairs[S_TEXT]);
    /* Every branch of the rule was taken, often. */
    for (int k = 0; k < S_KINDS; k++) {
        assert_true(kinds[k] > 1000);
        assert_true(pairs[k] > 1000);
    }
    assert_true(refused_length > 500);
    assert_true(refused_range > 1000);
    assert_true(orders[0] > 1000 && orders[1] > 50 && orders[2] > 1000);
}

/* Named groups of equal values across the three kinds, and values a double cannot tell apart
 * that are not equal. */
static void test_equal_values_in_any_spelling_compare_and_hash_alike(void **state) {
    (void)state;
    static const char *const groups[][7] = {
        {"1", "1.0", "1e0", "1.000", "100e-2", "0.1e1", "10E-1"},
        {"1.5", "1.50", "15e-1", "0.15e1", "150E-2", "0.0015e3", "1.5e0"},
        {"0", "-0", "0.0", "-0.0", "0e5", "-0.000E-7", "0.00"},
        {"100", "1E2", "1e+2", "100.0", "10e1", "0.1e3", "1000e-1"},
        {"1e-5", "0.00001", "1.0e-05", "1e-05", "0.000010", "10e-6", "100E-7"},
        {"1e300", "1e+300", "1.0e300", "10e299", "0.1e301", "1E300", "1000e297"},
        {"9223372036854775807", "9.223372036854775807e18", "92233720368547758070e-1",
         "9223372036854775807.0", "9223372036854775807e0", "0.9223372036854775807e19",
         "9223372036854775807.000"},
        {"9223372036854775808", "9.223372036854775808e18", "9223372036854775808.0",
         "92233720368547758080e-1", "9223372036854775808e0", "0.9223372036854775808e19",
         "9223372036854775808.000"},
        {"4611686018427388000", "4.611686018427388e+18", "4611686018427388e3",
         "4611686018427388000.0", "4.611686018427388e18", "46116860184273880e2",
         "4611686018427388000e0"},
        {"12345678910111213141516171819202122232425262728293031",
         "1.2345678910111213141516171819202122232425262728293031e52",
         "12345678910111213141516171819202122232425262728293031.0",
         "123456789101112131415161718192021222324252627282930310e-1",
         "0.12345678910111213141516171819202122232425262728293031e53",
         "12345678910111213141516171819202122232425262728293031E0",
         "12345678910111213141516171819202122232425262728293031e+0"},
    };
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        jsontape_t a = {0};
        s_tape(&a, groups[g][0]);
        for (size_t i = 1; i < 7; i++) {
            jsontape_t b = {0};
            s_tape(&b, groups[g][i]);
            if (!jsontape_equal(&a, 0, &b, 0)) {
                print_error("%s != %s\n", groups[g][0], groups[g][i]);
            }
            assert_true(jsontape_equal(&a, 0, &b, 0));
            assert_int_equal(jsontape_value_hash(&a, 0), jsontape_value_hash(&b, 0));
            assert_int_equal(jsontape_num_cmp(jsontape_num(&a, jsontape_at(&a, 0)),
                                              jsontape_num(&b, jsontape_at(&b, 0))),
                             0);
            s_tape_free(&b);
        }
        s_tape_free(&a);
    }
    static const char *const apart[][2] = {
        {"4611686018427387904", "4.611686018427388e+18"}, /* 2^62 and its double's text */
        {"0.1", "0.10000000000000000001"},
        {"9223372036854775807", "9223372036854775808"},
        {"9007199254740993", "9007199254740992.0"},
        {"1e300", "10000000000000000525047602552044202487044685811081591549158541155118024579889081"
                  "95786371375080447864043704443832883878176942523235360430575644792184786706982848"
                  "38720092657580373783023379478809005936895323497079994508111903896764088007465274"
                  "2780142494579258788820056842838115669472196386865459400540160"},
        {"-1e-400", "0"},
    };
    for (size_t i = 0; i < sizeof apart / sizeof apart[0]; i++) {
        jsontape_t a = {0};
        jsontape_t b = {0};
        jsonstrict_limits_t lim = jsonstrict_limits_default;
        lim.max_number_chars = JSONSTRICT_NUMBER_CHARS_CEILING;
        assert_int_equal(jsonstrict_parse_tape(apart[i][0], strlen(apart[i][0]), &lim, &a, NULL),
                         0);
        assert_int_equal(jsonstrict_parse_tape(apart[i][1], strlen(apart[i][1]), &lim, &b, NULL),
                         0);
        assert_false(jsontape_equal(&a, 0, &b, 0));
        assert_int_not_equal(jsontape_num_cmp(jsontape_num(&a, jsontape_at(&a, 0)),
                                              jsontape_num(&b, jsontape_at(&b, 0))),
                             0);
        s_tape_free(&a);
        s_tape_free(&b);
    }
    /* uniqueItems reads the same equality through the hashes. */
    static const struct {
        const char *array;
        bool unique;
    } arrays[] = {
        {"[1.5, 2, 15e-1]", false},
        {"[1, 1.0]", false},
        {"[0, -0]", false},
        {"[1e300, 1e+300]", false},
        {"[9223372036854775808, 9.223372036854775808e18]", false},
        {"[0.1, 0.10000000000000000001]", true},
        {"[4611686018427387904, 4.611686018427388e+18]", true},
        {"[4611686018427388000, 4.611686018427388e+18]", false},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        jsontape_t t = {0};
        s_tape(&t, arrays[i].array);
        if (jsontape_unique(&t, 0) != arrays[i].unique) {
            print_error("%s: unique %d\n", arrays[i].array, !arrays[i].unique);
        }
        assert_int_equal(jsontape_unique(&t, 0), arrays[i].unique);
        s_tape_free(&t);
    }
}

/* --- stored text --- */

static void test_stored_text_reads_to_the_nearest_double(void **state) {
    (void)state;
    /* A legacy row: 1e300 as PostgreSQL gives it back, 301 characters: no length cap for
     * stored text, and the literal is kept. */
    char big[400];
    big[0] = '1';
    memset(big + 1, '0', 300);
    big[301] = '\0';
    json_t *v = s_accepted(big, &jsonstrict_limits_stored);
    assert_true(json_is_real(v) && json_real_value(v) == 1e300);
    assert_string_equal(jsonnumber_text(v, NULL), big);
    json_decref(v);
    /* The same text at the boundary is over the length cap. */
    s_refused(big, NULL, JSONSTRICT_E_NUMBER_LENGTH);

    char tiny[400] = "[0.";
    memset(tiny + 3, '0', 299);
    snprintf(tiny + 302, sizeof tiny - 302, "1, 7, -9223372036854775809, 1e401, -1e999, 1.0]");
    v = s_accepted(tiny, &jsonstrict_limits_stored);
    assert_true(json_real_value(json_array_get(v, 0)) == 1e-300);
    assert_non_null(jsonnumber_text(json_array_get(v, 0), NULL));
    assert_true(json_is_integer(json_array_get(v, 1)));
    assert_true(json_real_value(json_array_get(v, 2)) == -9223372036854775808.0);
    assert_string_equal(jsonnumber_text(json_array_get(v, 2), NULL), "-9223372036854775809");
    /* Beyond the magnitude cap: the nearest double, a plain real. */
    assert_true(json_real_value(json_array_get(v, 3)) == DBL_MAX);
    assert_null(jsonnumber_text(json_array_get(v, 3), NULL));
    assert_true(json_real_value(json_array_get(v, 4)) == -DBL_MAX);
    assert_null(jsonnumber_text(json_array_get(v, 4), NULL));
    assert_true(json_is_real(json_array_get(v, 5)));
    json_decref(v);

    /* 1024 characters (the ceiling) are kept; 1025 and beyond are read as the nearest
     * double. */
    char lit[3000] = "-1.";
    memset(lit + 3, '3', JSONSTRICT_NUMBER_CHARS_CEILING - 3);
    lit[JSONSTRICT_NUMBER_CHARS_CEILING] = '\0';
    v = s_accepted(lit, &jsonstrict_limits_stored);
    assert_string_equal(jsonnumber_text(v, NULL), lit);
    json_decref(v);
    lit[JSONSTRICT_NUMBER_CHARS_CEILING] = '3';
    lit[JSONSTRICT_NUMBER_CHARS_CEILING + 1] = '\0';
    v = s_accepted(lit, &jsonstrict_limits_stored);
    assert_null(jsonnumber_text(v, NULL));
    assert_true(json_real_value(v) == strtod(lit, NULL));
    json_decref(v);
    char huge[3000] = "-";
    memset(huge + 1, '7', 2500);
    huge[2501] = '\0';
    v = s_accepted(huge, &jsonstrict_limits_stored);
    assert_null(jsonnumber_text(v, NULL));
    assert_true(json_real_value(v) == -DBL_MAX);
    json_decref(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_number_cap_at_its_edges_names_the_field),
        cmocka_unit_test(test_literals_are_refused_or_kept_byte_for_byte),
        cmocka_unit_test(test_equal_values_in_any_spelling_compare_and_hash_alike),
        cmocka_unit_test(test_stored_text_reads_to_the_nearest_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
