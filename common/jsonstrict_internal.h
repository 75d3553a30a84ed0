/*
 * jsonstrict_internal: what the parser (jsonstrict.c) takes from the number conversions
 * (jsonstrict_number.c), split for size. Not part of the public interface; include
 * jsonstrict.h instead. The conversions neither touch the parser nor format messages: they
 * return a code, and jsonstrict.c reports it at the literal's offset.
 */
#ifndef CHATFLEET_JSONSTRICT_INTERNAL_H
#define CHATFLEET_JSONSTRICT_INTERNAL_H

#include "jsonstrict.h"

#include <stddef.h>
#include <stdint.h>

/* The integer literal at[0..len): its syntax already checked (an optional '-', then digits
 * with no leading zero, no fraction, no exponent), len at most JSONSTRICT_NUMBER_CHARS_CEILING.
 * Returns JSONSTRICT_OK and sets *out, or JSONSTRICT_E_INTEGER_RANGE when it is outside int64
 * (leaving *out alone). The parser calls it only for 19 digits or more. */
jsonstrict_code_t jsonstrict_number_integer(const unsigned char *at, size_t len, int64_t *out);

/* The real literal at[0..len) (a fraction or an exponent or both): its syntax already checked,
 * len at most JSONSTRICT_NUMBER_CHARS_CEILING. Always sets *out to the nearest double (strtod's
 * value) and returns JSONSTRICT_OK when the literal is exactly that double's shortest form (or
 * zero); JSONSTRICT_E_NUMBER_RANGE when it overflows (*out infinite) or underflows to zero (*out
 * zero); JSONSTRICT_E_NUMBER_PRECISION when it has digits the double does not keep. */
jsonstrict_code_t jsonstrict_number_real(const unsigned char *at, size_t len, double *out);

#endif
