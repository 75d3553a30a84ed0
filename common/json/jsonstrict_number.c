/* jsonstrict_number: number literals for the strict JSON boundary (jsonstrict.h): which are
 * int64s, which are plain reals (Clinger's fast path, or strtod and jsonout's text) and which
 * keep their text, and the magnitude cap; see jsonstrict_internal.h. */
#include "jsondecimal.h"
#include "jsonout.h"
#include "jsonstrict_internal.h"
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

/* The powers of ten that a double holds exactly. */
static const double s_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Clinger's fast path for the real literal [p, end) (its syntax already checked): at most 15
 * significant digits times 10^e with |e| <= 22 is one correctly rounded product or quotient of
 * two exact doubles, so it is the double strtod returns, and (at most 15 digits, DBL_DIG) the
 * literal's value is exactly that double's shortest form. Returns false, leaving the literal to
 * s_read_slow, for anything else, zero included. */
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

/* Whether the plain real literal at[0..len) (no exponent; s_real_fast read it, so at most
 * 15 significant digits) is what jsonout prints for its double: "%.15g" gives its digits back,
 * in plain notation when its leading digit is between 10^-4 and 10^14, with no trailing zero
 * but the one of "N.0". */
static bool s_plain_canonical(const unsigned char *at, size_t len) {
    const unsigned char *end = at + len;
    const unsigned char *p = at + (*at == '-');
    const unsigned char *dot = memchr(p, '.', (size_t)(end - p));
    if (!dot || memchr(at, 'e', len) || memchr(at, 'E', len) || dot - p > 15) {
        return false;
    }
    size_t frac = (size_t)(end - dot - 1);
    if (end[-1] == '0' && frac != 1) {
        return false;
    }
    if (dot - p == 1 && *p == '0') { /* 0.xxx: at most three zeros before the first digit */
        size_t zeros = 0;
        while (zeros < frac && dot[1 + zeros] == '0') {
            zeros++;
        }
        return zeros == frac ? frac == 1 : zeros <= 3;
    }
    return true;
}

/* The literal as the tape keeps it, when it is not a plain int64 or a plain real: out of line,
 * so that its buffers are never on the stack of a nesting level. */
__attribute__((noinline)) static jsonstrict_code_t s_read_slow(const unsigned char *at, size_t len,
                                                               bool is_int,
                                                               jsonstrict_numbers_t numbers,
                                                               jsonstrict_num_t *out) {
    if (len > JSONDECIMAL_DIGITS_MAX) { /* stored text only: the caps stop it elsewhere */
        char *lit = mem_alloc(len + 1);
        memcpy(lit, at, len);
        lit[len] = '\0';
        double d = strtod(lit, NULL);
        free(lit);
        *out = (jsonstrict_num_t){.d = isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d};
        return JSONSTRICT_OK;
    }
    char lit[JSONDECIMAL_DIGITS_MAX + 1];
    memcpy(lit, at, len);
    lit[len] = '\0';
    jsondecimal_t dec;
    jsondecimal_of_literal(lit, len, &dec);
    long mag = jsondecimal_magnitude(&dec);
    double d = strtod(lit, NULL);
    d = isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d;
    *out = (jsonstrict_num_t){.d = d};
    if (mag > JSONSTRICT_NUMBER_EXP_MAX || mag < -JSONSTRICT_NUMBER_EXP_MAX) {
        return numbers == JSONSTRICT_NUMBERS_NEAREST ? JSONSTRICT_OK : JSONSTRICT_E_NUMBER_RANGE;
    }
    if (is_int && !(len == 2 && lit[0] == '-' && lit[1] == '0')) {
        errno = 0;
        long long v = strtoll(lit, NULL, 10);
        if (errno != ERANGE) {
            *out = (jsonstrict_num_t){.is_int = true, .i = v};
            return JSONSTRICT_OK;
        }
    }
    char text[JSONOUT_REAL_MAX];
    if (!is_int && jsonout_real(d, text) == len && memcmp(text, lit, len) == 0) {
        return JSONSTRICT_OK; /* a plain real */
    }
    out->text = true;
    out->integral = jsondecimal_is_integer(&dec);
    return JSONSTRICT_OK;
}

jsonstrict_code_t jsonstrict_number_read(const unsigned char *at, size_t len, bool is_int,
                                         jsonstrict_numbers_t numbers, jsonstrict_num_t *out) {
    double d = 0;
    if ((len == 3 && !memcmp(at, "0.0", 3)) || (len == 4 && !memcmp(at, "-0.0", 4))) {
        *out = (jsonstrict_num_t){.d = len == 3 ? 0.0 : -0.0}; /* jsonout's text of a zero */
        return JSONSTRICT_OK;
    }
    if (!is_int && s_real_fast(at, at + len, &d) && s_plain_canonical(at, len)) {
        *out = (jsonstrict_num_t){.d = d};
        return JSONSTRICT_OK;
    }
    return s_read_slow(at, len, is_int, numbers, out);
}
