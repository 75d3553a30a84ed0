/*
 * jsondecimal: the exact value of a JSON number literal, as a decimal. Every number the system
 * accepts is worth what its text says (ARCHITECTURE.md §8, the number policy): 1.50 is 1.5,
 * 1e2 is 100, 12345678910111213141516171819202122232425262728293031 is that integer. These are
 * the comparisons the validator needs on such values when an int64 or a double cannot hold
 * them: order, equality (and a hash that agrees with it), integrality and multipleOf.
 */
#ifndef CHATFLEET_JSONDECIMAL_H
#define CHATFLEET_JSONDECIMAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSONDECIMAL_DIGITS_MAX   1024 /* significant digits held: a literal's length, at most */
#define JSONDECIMAL_SHORTEST_MAX 17   /* significant digits of the shortest form of a double */

/* value = (neg ? -1 : 1) * digits * 10^exp10; digits has no leading or trailing zero ("" and
 * exp10 0 for zero, which is never negative). */
typedef struct jsondecimal {
    bool neg;
    uint32_t ndigits;
    long exp10;
    char digits[JSONDECIMAL_DIGITS_MAX + 1];
} jsondecimal_t;

/* The value of the literal lit[0..len) (valid JSON number syntax, len at most
 * JSONDECIMAL_DIGITS_MAX). An exponent beyond +-2^40 is saturated there. */
void jsondecimal_of_literal(const char *lit, size_t len, jsondecimal_t *out);
void jsondecimal_of_int64(int64_t i, jsondecimal_t *out);
/* The shortest decimal that reads back as the finite double d (what jsonout prints). */
void jsondecimal_of_double(double d, jsondecimal_t *out);

/* The shortest decimal that reads back as the finite double d: writes its significant digits
 * (no leading or trailing zeros, NUL-terminated; "0" for zero) to digits and sets *exp10 so
 * that |d| = digits * 10^exp10. Returns the number of digits. */
int jsondecimal_shortest(double d, char digits[JSONDECIMAL_SHORTEST_MAX + 1], int *exp10);

/* -1, 0 or 1 as a is below, equal to or above b. */
int jsondecimal_cmp(const jsondecimal_t *a, const jsondecimal_t *b);

/* Whether a has no fractional part. */
bool jsondecimal_is_integer(const jsondecimal_t *a);

/* The decimal exponent of a's leading digit (10^m <= |a| < 10^(m+1)); 0 for zero. */
long jsondecimal_magnitude(const jsondecimal_t *a);

/* The most significant digits of a divisor that jsondecimal_multiple_of handles in 128-bit
 * arithmetic; the schema compiler refuses a longer multipleOf (JSONSCHEMA.md). */
#define JSONDECIMAL_MULTIPLE_FAST_DIGITS 36

/* Whether x / m is an integer, exactly; m must be greater than zero. Costs at most x's digits
 * plus 121 steps of a 128-bit remainder when m has at most JSONDECIMAL_MULTIPLE_FAST_DIGITS
 * significant digits; beyond, (x's digits + 4 * m's digits + 4) long remainders by m. */
bool jsondecimal_multiple_of(const jsondecimal_t *x, const jsondecimal_t *m);

/* A hash of a's value: equal values hash alike, whatever literal they came from. */
uint32_t jsondecimal_hash(const jsondecimal_t *a);

#endif
