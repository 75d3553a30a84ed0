/* jsondecimal: exact decimal values of JSON number literals; see jsondecimal.h. */
#include "jsondecimal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_EXP_SATURATE (1L << 40)

/* Drops trailing zeros into the exponent; a value with no digit left is zero. */
static void s_normalise(jsondecimal_t *out) {
    while (out->ndigits > 0 && out->digits[out->ndigits - 1] == '0') {
        out->ndigits--;
        out->exp10++;
    }
    if (out->ndigits == 0) {
        out->neg = false;
        out->exp10 = 0;
    }
    out->digits[out->ndigits] = '\0';
}

void jsondecimal_of_literal(const char *lit, size_t len, jsondecimal_t *out) {
    size_t i = 0;
    long frac_digits = 0;
    bool in_frac = false;
    out->neg = len > 0 && lit[0] == '-';
    out->ndigits = 0;
    i += out->neg;
    for (; i < len && lit[i] != 'e' && lit[i] != 'E'; i++) {
        if (lit[i] == '.') {
            in_frac = true;
            continue;
        }
        frac_digits += in_frac;
        if (out->ndigits == 0 && lit[i] == '0') {
            continue;
        }
        if (out->ndigits < JSONDECIMAL_DIGITS_MAX) {
            out->digits[out->ndigits++] = lit[i];
        } else {
            frac_digits--; /* beyond the cap (the callers' literals never are): dropped */
        }
    }
    long exp = 0;
    if (i < len) {
        i++;
        bool exp_neg = i < len && lit[i] == '-';
        i += i < len && (lit[i] == '-' || lit[i] == '+');
        for (; i < len; i++) {
            if (exp < S_EXP_SATURATE) {
                exp = exp * 10 + (lit[i] - '0');
            }
        }
        exp = exp_neg ? -exp : exp;
    }
    out->exp10 = exp - frac_digits;
    s_normalise(out);
}

void jsondecimal_of_int64(int64_t i, jsondecimal_t *out) {
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%lld", (long long)i);
    jsondecimal_of_literal(buf, (size_t)n, out);
}

int jsondecimal_shortest(double d, char digits[JSONDECIMAL_SHORTEST_MAX + 1], int *exp10) {
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
    for (; prec < JSONDECIMAL_SHORTEST_MAX; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) {
            break;
        }
    }
    if (prec == JSONDECIMAL_SHORTEST_MAX) {
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

void jsondecimal_of_double(double d, jsondecimal_t *out) {
    int exp10 = 0;
    char digits[JSONDECIMAL_SHORTEST_MAX + 1];
    int n = jsondecimal_shortest(d, digits, &exp10);
    out->neg = signbit(d) != 0;
    memcpy(out->digits, digits, (size_t)n + 1);
    out->ndigits = d == 0 ? 0 : (uint32_t)n;
    out->exp10 = exp10;
    s_normalise(out);
}

long jsondecimal_magnitude(const jsondecimal_t *a) {
    return a->ndigits == 0 ? 0 : a->exp10 + (long)a->ndigits - 1;
}

bool jsondecimal_is_integer(const jsondecimal_t *a) {
    return a->ndigits == 0 || a->exp10 >= 0;
}

/* The order of |a| and |b|, both nonzero. */
static int s_cmp_abs(const jsondecimal_t *a, const jsondecimal_t *b) {
    long ma = jsondecimal_magnitude(a);
    long mb = jsondecimal_magnitude(b);
    if (ma != mb) {
        return ma < mb ? -1 : 1;
    }
    uint32_t n = a->ndigits < b->ndigits ? a->ndigits : b->ndigits;
    int c = memcmp(a->digits, b->digits, n);
    if (c != 0) {
        return c < 0 ? -1 : 1;
    }
    /* Equal so far: the one with digits left (never trailing zeros) is the larger. */
    return a->ndigits == b->ndigits ? 0 : a->ndigits < b->ndigits ? -1 : 1;
}

int jsondecimal_cmp(const jsondecimal_t *a, const jsondecimal_t *b) {
    int sa = a->ndigits == 0 ? 0 : a->neg ? -1 : 1;
    int sb = b->ndigits == 0 ? 0 : b->neg ? -1 : 1;
    if (sa != sb || sa == 0) {
        return sa < sb ? -1 : sa > sb;
    }
    int c = s_cmp_abs(a, b);
    return sa < 0 ? -c : c;
}

/* --- the remainder of a long decimal by another, for multipleOf --- */

/* A nonnegative integer as decimal digits, most significant first, no leading zero. */
typedef struct {
    uint32_t n;
    char d[JSONDECIMAL_DIGITS_MAX + 2];
} s_big_t;

static int s_big_cmp(const s_big_t *a, const s_big_t *b) {
    if (a->n != b->n) {
        return a->n < b->n ? -1 : 1;
    }
    int c = memcmp(a->d, b->d, a->n);
    return c < 0 ? -1 : c > 0;
}

/* a -= b, given a >= b. */
static void s_big_sub(s_big_t *a, const s_big_t *b) {
    int borrow = 0;
    for (uint32_t k = 0; k < a->n; k++) {
        uint32_t ia = a->n - 1 - k;
        int v = (a->d[ia] - '0') - borrow - (k < b->n ? b->d[b->n - 1 - k] - '0' : 0);
        borrow = v < 0;
        a->d[ia] = (char)('0' + (v + (borrow ? 10 : 0)));
    }
    uint32_t lead = 0;
    while (lead < a->n && a->d[lead] == '0') {
        lead++;
    }
    memmove(a->d, a->d + lead, a->n - lead);
    a->n -= lead;
}

/* r = (r * 10 + digit) mod m, given r < m. */
static void s_big_step(s_big_t *r, int digit, const s_big_t *m) {
    if (r->n > 0 || digit != 0) {
        r->d[r->n++] = (char)('0' + digit);
    }
    while (s_big_cmp(r, m) >= 0) {
        s_big_sub(r, m);
    }
}

bool jsondecimal_multiple_of(const jsondecimal_t *x, const jsondecimal_t *m) {
    if (x->ndigits == 0) {
        return true;
    }
    /* x = X * 10^p and m = M * 10^q, X and M free of trailing zeros. For q > p, M * 10^(q-p)
     * would have to divide X, which is not a multiple of 10. Otherwise M must divide
     * X * 10^k, k = p - q; once k is at least M's powers of 2 and 5 (each below 4 digits'
     * worth of bits per digit) more zeros change nothing, so k is cut there. */
    if (x->exp10 < m->exp10) {
        return false;
    }
    long k = x->exp10 - m->exp10;
    long k_cap = 4 * (long)m->ndigits + 4;
    k = k < k_cap ? k : k_cap;
    if (m->ndigits <= JSONDECIMAL_MULTIPLE_FAST_DIGITS) {
        /* M < 10^36, so r * 10 + 9 < 10^37 < 2^128: one remainder a digit, and k cut to M's
         * own powers of 2 and 5. */
        unsigned __int128 mm = 0;
        for (uint32_t i = 0; i < m->ndigits; i++) {
            mm = mm * 10 + (unsigned)(m->digits[i] - '0');
        }
        long twos = 0;
        long fives = 0;
        for (unsigned __int128 t = mm; t % 2 == 0; t /= 2) {
            twos++;
        }
        for (unsigned __int128 t = mm; t % 5 == 0; t /= 5) {
            fives++;
        }
        long need = twos > fives ? twos : fives;
        k = k < need ? k : need;
        unsigned __int128 r = 0;
        for (uint32_t i = 0; i < x->ndigits; i++) {
            r = (r * 10 + (unsigned)(x->digits[i] - '0')) % mm;
        }
        for (long i = 0; i < k && r != 0; i++) {
            r = r * 10 % mm;
        }
        return r == 0;
    }
    s_big_t mb = {.n = m->ndigits};
    memcpy(mb.d, m->digits, m->ndigits);
    s_big_t r = {0};
    for (uint32_t i = 0; i < x->ndigits; i++) {
        s_big_step(&r, x->digits[i] - '0', &mb);
    }
    for (long i = 0; i < k && r.n > 0; i++) {
        s_big_step(&r, 0, &mb);
    }
    return r.n == 0;
}

uint32_t jsondecimal_hash(const jsondecimal_t *a) {
    uint32_t h = 2166136261u; /* FNV-1a over sign, digits and exponent */
    h = (h ^ (uint32_t)a->neg) * 16777619u;
    for (uint32_t i = 0; i < a->ndigits; i++) {
        h = (h ^ (unsigned char)a->digits[i]) * 16777619u;
    }
    uint64_t e = (uint64_t)a->exp10;
    for (int i = 0; i < 8; i++) {
        h = (h ^ (uint32_t)((e >> (8 * i)) & 0xff)) * 16777619u;
    }
    return h;
}
