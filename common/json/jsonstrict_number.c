/* jsonstrict_number: number literals for the strict JSON boundary (jsonstrict.h): the exact
 * int64 range check, reals by Clinger's fast path or strtod with the round-trip precision check,
 * and jsonstrict_shortest; see jsonstrict_internal.h. */
#include "jsonstrict_internal.h"

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

jsonstrict_code_t jsonstrict_number_real(const unsigned char *at, size_t len, double *out) {
    if (s_real_fast(at, at + len, out)) {
        return JSONSTRICT_OK;
    }
    return s_real(at, len, out);
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
