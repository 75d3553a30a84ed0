/* jsonstrict_number: number literals for the strict JSON boundary (jsonstrict.h): the exact
 * int64 range check, reals by Clinger's fast path or strtod with the round-trip precision check,
 * the number policy's storage rule (PostgreSQL's numeric text), the nearest-double reading of
 * stored text, and jsonstrict_shortest; see jsonstrict_internal.h. */
#include "jsonstrict_internal.h"
#include "jsonout.h"
#include "mem.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The significant digits of a number literal: value = digits * 10^exp10. */
typedef struct {
    char digits[JSONSTRICT_NUMBER_CHARS_CEILING + 1];
    size_t ndigits;
    long exp10;
} s_decimal_t;

static void s_literal_decimal(const char *lit, size_t len, s_decimal_t *dec) {
    size_t i = 0;
    long frac_digits = 0;
    bool in_frac = false;
    dec->ndigits = 0;
    if (lit[i] == '-') {
        i++;
    }
    for (; i < len && lit[i] != 'e' && lit[i] != 'E'; i++) {
        if (lit[i] == '.') {
            in_frac = true;
            continue;
        }
        if (in_frac) {
            frac_digits++;
        }
        if (dec->ndigits == 0 && lit[i] == '0') {
            continue;
        }
        dec->digits[dec->ndigits++] = lit[i];
    }
    long exp = 0;
    if (i < len) {
        errno = 0;
        exp = strtol(lit + i + 1, NULL, 10); /* saturates at LONG_MIN/LONG_MAX */
    }
    if (exp > LONG_MAX / 2) {
        exp = LONG_MAX / 2;
    } else if (exp < LONG_MIN / 2) {
        exp = LONG_MIN / 2;
    }
    dec->exp10 = exp - frac_digits;
    while (dec->ndigits > 0 && dec->digits[dec->ndigits - 1] == '0') {
        dec->ndigits--;
        dec->exp10++;
    }
    dec->digits[dec->ndigits] = '\0';
}

int jsonstrict_shortest(double d, char digits[JSONSTRICT_DIGITS_MAX + 1], int *exp10) {
    char buf[40];
    if (d == 0) {
        digits[0] = '0';
        digits[1] = '\0';
        *exp10 = 0;
        return 1;
    }
    /* Any decimal of at most 15 digits that reads back as d is the unique such value
     * (DBL_DIG), so the 15-digit form, stripped of trailing zeros, is the shortest. Subnormals
     * carry fewer digits, so for them every precision is tried from one. */
    int prec = fabs(d) < DBL_MIN ? 1 : 15;
    for (; prec < JSONSTRICT_DIGITS_MAX; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) {
            break;
        }
    }
    if (prec == JSONSTRICT_DIGITS_MAX) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    }
    const char *p = buf[0] == '-' ? buf + 1 : buf;
    int n = 0;
    for (; *p && *p != 'e'; p++) {
        if (*p != '.') {
            digits[n++] = *p;
        }
    }
    int e = (int)strtol(p + 1, NULL, 10);
    *exp10 = e - (n - 1);
    while (n > 1 && digits[n - 1] == '0') {
        n--;
        (*exp10)++;
    }
    digits[n] = '\0';
    return n;
}

/* A real literal that needs strtod, and perhaps the round-trip check: kept out of line so
 * that its buffers are not on the stack of every nesting level. */
__attribute__((noinline)) static jsonstrict_code_t s_real(const unsigned char *at, size_t len,
                                                          double *out) {
    char lit[JSONSTRICT_NUMBER_CHARS_CEILING + 1];
    memcpy(lit, at, len);
    lit[len] = '\0';
    s_decimal_t dec;
    s_literal_decimal(lit, len, &dec);
    double d = strtod(lit, NULL);
    if (dec.ndigits == 0) {
        *out = lit[0] == '-' ? -0.0 : 0.0;
        return JSONSTRICT_OK;
    }
    *out = d;
    long magnitude = (long)dec.ndigits + dec.exp10; /* decimal exponent of the leading digit */
    bool easy = dec.ndigits <= 15 && magnitude > -306 && magnitude < 308;
    if (!easy) {
        if (isinf(d) || d == 0) {
            return JSONSTRICT_E_NUMBER_RANGE;
        }
        char digits[JSONSTRICT_DIGITS_MAX + 1];
        int exp10 = 0;
        jsonstrict_shortest(d, digits, &exp10);
        if (strcmp(digits, dec.digits) != 0 || exp10 != dec.exp10) {
            return JSONSTRICT_E_NUMBER_PRECISION;
        }
    }
    return JSONSTRICT_OK;
}

/* The powers of ten that a double holds exactly. */
static const double s_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Clinger's fast path for the real literal [p, end) (its syntax already checked): at most 15
 * significant digits times 10^e with |e| <= 22 is one correctly rounded product or quotient of
 * two exact doubles, so it is the double strtod returns; and such a literal is one that s_real
 * accepts without the round-trip check (at most 15 digits, magnitude well inside the range).
 * Returns false, leaving the literal to s_real, for anything else, zero included. */
static bool s_real_fast(const unsigned char *p, const unsigned char *end, double *out) {
#if FLT_EVAL_METHOD == 0
    bool neg = *p == '-';
    p += neg;
    uint64_t m = 0;
    int ndigits = 0;
    int zeros = 0; /* zeros after the last nonzero digit, not yet in m */
    long frac = 0;
    bool in_frac = false;
    for (; p < end && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            in_frac = true;
            continue;
        }
        frac += in_frac;
        unsigned digit = (unsigned)(*p - '0');
        if (digit == 0) {
            zeros += ndigits > 0; /* leading zeros are not significant */
            continue;
        }
        ndigits += zeros + 1;
        if (ndigits > 15) {
            return false;
        }
        for (; zeros > 0; zeros--) {
            m *= 10;
        }
        m = m * 10 + digit;
    }
    if (ndigits == 0) {
        return false;
    }
    long exp = 0;
    if (p < end) {
        bool exp_neg = *++p == '-';
        p += *p == '-' || *p == '+';
        for (; p < end; p++) {
            if (exp > 1000) {
                return false;
            }
            exp = exp * 10 + (*p - '0');
        }
        exp = exp_neg ? -exp : exp;
    }
    long e10 = exp - frac + zeros;
    if (e10 < -22 || e10 > 22) {
        return false;
    }
    double d = (double)m;
    d = e10 >= 0 ? d * s_pow10[e10] : d / s_pow10[-e10];
    *out = neg ? -d : d;
    return true;
#else
    (void)p;
    (void)end;
    (void)out;
    return false;
#endif
}

/* A bounded writer with snprintf's contract: counts everything, writes what fits. */
typedef struct {
    char *out;
    size_t cap;
    size_t len;
} s_text_t;

static void s_text_run(s_text_t *t, char c, size_t n) {
    size_t room = t->cap > t->len + 1 ? t->cap - t->len - 1 : 0;
    size_t w = n < room ? n : room;
    if (w > 0) {
        memset(t->out + t->len, c, w);
    }
    t->len += n;
}

static void s_text_digits(s_text_t *t, const char *ip, size_t in, const char *fp, size_t from,
                          size_t to) {
    for (size_t k = from; k < to; k++) {
        s_text_run(t, k < in ? ip[k] : fp[k - in], 1);
    }
}

size_t jsonstrict_pgnumeric_text(const char *lit, size_t len, char *out, size_t cap) {
    size_t i = 0;
    bool neg = i < len && lit[i] == '-';
    i += neg;
    const char *ip = lit + i;
    size_t in = 0;
    for (; i < len && lit[i] >= '0' && lit[i] <= '9'; i++) {
        in++;
    }
    const char *fp = lit + i;
    size_t fn = 0;
    if (i < len && lit[i] == '.') {
        fp = lit + ++i;
        for (; i < len && lit[i] >= '0' && lit[i] <= '9'; i++) {
            fn++;
        }
    }
    long exp = 0;
    if (i < len && (lit[i] == 'e' || lit[i] == 'E')) {
        i++;
        bool exp_neg = i < len && lit[i] == '-';
        i += i < len && (lit[i] == '-' || lit[i] == '+');
        for (; i < len && lit[i] >= '0' && lit[i] <= '9'; i++) {
            if (exp < (1L << 40)) { /* beyond anything numeric_in accepts */
                exp = exp * 10 + (lit[i] - '0');
            }
        }
        exp = exp_neg ? -exp : exp;
    }
    /* The literal's digits, int part then fraction, are D; its value is D * 10^(exp - fn) and
     * numeric_in keeps max(0, fn - exp) decimals (its dscale), trailing zeros included. */
    size_t total = in + fn;
    size_t lead = 0;
    while (lead < total && (lead < in ? ip[lead] : fp[lead - in]) == '0') {
        lead++;
    }
    long dscale = (long)fn - exp > 0 ? (long)fn - exp : 0;
    s_text_t t = {out, cap, 0};
    if (lead == total) { /* zero: numeric has no negative zero */
        s_text_run(&t, '0', 1);
        if (dscale > 0) {
            s_text_run(&t, '.', 1);
            s_text_run(&t, '0', (size_t)dscale);
        }
    } else {
        if (neg) {
            s_text_run(&t, '-', 1);
        }
        size_t sig = total - lead;
        if (dscale == 0) { /* an integer: the digits, then exp - fn zeros */
            s_text_digits(&t, ip, in, fp, lead, total);
            s_text_run(&t, '0', (size_t)(exp - (long)fn));
        } else if (sig > (size_t)dscale) {
            s_text_digits(&t, ip, in, fp, lead, total - (size_t)dscale);
            s_text_run(&t, '.', 1);
            s_text_digits(&t, ip, in, fp, total - (size_t)dscale, total);
        } else {
            s_text_run(&t, '0', 1);
            s_text_run(&t, '.', 1);
            s_text_run(&t, '0', (size_t)dscale - sig);
            s_text_digits(&t, ip, in, fp, lead, total);
        }
    }
    if (cap > 0) {
        out[t.len < cap ? t.len : cap - 1] = '\0';
    }
    return t.len;
}

int jsonstrict_storable(double d, char *out, size_t cap, size_t *stored_len) {
    char text[JSONOUT_REAL_MAX];
    size_t n = jsonout_real(d, text);
    /* One more than the cap holds any int64 and shows when a decimal is over the cap. */
    char pg[JSONSTRICT_STORED_NUMBER_CHARS + 2];
    size_t m = jsonstrict_pgnumeric_text(text, n, pg, sizeof pg);
    if (out && cap > 0) {
        jsonstrict_pgnumeric_text(text, n, out, cap);
    }
    if (stored_len) {
        *stored_len = m;
    }
    if (m >= sizeof pg) {
        return -1;
    }
    if (strchr(pg, '.')) {
        return m <= JSONSTRICT_STORED_NUMBER_CHARS ? 0 : -1;
    }
    errno = 0;
    (void)strtoll(pg, NULL, 10);
    return errno == ERANGE ? -1 : 0;
}

/* Stored text read to the nearest double, whatever its length (JSONSTRICT_NUMBERS_NEAREST):
 * beyond the double range, the largest finite double of its sign. */
__attribute__((noinline)) static jsonstrict_code_t s_nearest(const unsigned char *at, size_t len,
                                                             double *out) {
    char small[64];
    char *lit = len < sizeof small ? small : mem_alloc(len + 1);
    memcpy(lit, at, len);
    lit[len] = '\0';
    double d = strtod(lit, NULL);
    if (isinf(d)) {
        d = d > 0 ? DBL_MAX : -DBL_MAX;
    }
    *out = d;
    if (lit != small) {
        free(lit);
    }
    return JSONSTRICT_OK;
}

jsonstrict_code_t jsonstrict_number_real(const unsigned char *at, size_t len,
                                         jsonstrict_numbers_t numbers, double *out) {
    if (numbers == JSONSTRICT_NUMBERS_NEAREST) {
        return s_real_fast(at, at + len, out) ? JSONSTRICT_OK : s_nearest(at, len, out);
    }
    if (s_real_fast(at, at + len, out)) {
        if (numbers == JSONSTRICT_NUMBERS_EXACT) {
            return JSONSTRICT_OK;
        }
        /* At most 15 digits and |exponent| <= 22: tiny values are stored short, and only the
         * integral ones from 2^63 up are stored as integers outside int64 (jsonstrict.h). */
        return fabs(*out) < 0x1p63 ? JSONSTRICT_OK : JSONSTRICT_E_NUMBER_STORAGE;
    }
    jsonstrict_code_t code = s_real(at, len, out);
    if (code == JSONSTRICT_OK && *out != 0 && numbers == JSONSTRICT_NUMBERS_STORABLE &&
        jsonstrict_storable(*out, NULL, 0, NULL) != 0) {
        return JSONSTRICT_E_NUMBER_STORAGE;
    }
    return code;
}

/* Out of line, like s_real, so that its buffer is never on the stack of a nesting level. */
__attribute__((noinline)) jsonstrict_code_t jsonstrict_number_integer(const unsigned char *at,
                                                                      size_t len, int64_t *out) {
    char lit[JSONSTRICT_NUMBER_CHARS_CEILING + 1];
    memcpy(lit, at, len);
    lit[len] = '\0';
    errno = 0;
    long long v = strtoll(lit, NULL, 10);
    if (errno == ERANGE) {
        return JSONSTRICT_E_INTEGER_RANGE;
    }
    *out = (int64_t)v;
    return JSONSTRICT_OK;
}
