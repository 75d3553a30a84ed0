/*
 * jsonnumber: jansson values for JSON numbers that keep their text (ARCHITECTURE.md §8, the
 * number policy). A number is carried exactly from the body that brought it to every reader:
 * an int64 as a jansson integer, a real whose literal is the text jsonout prints for its double
 * as a plain jansson real, and any other literal (1e300, 1.50, -0, integers beyond int64,
 * decimals a double cannot hold) as a text real.
 *
 * jansson has no number type that keeps text, so a text real is a jansson real whose value is
 * the literal's nearest double (the largest finite double of its sign beyond the range) with
 * the literal stored after it in the same allocation: every reader that asks jansson for a
 * number gets that double, json_is_string and json_is_integer are false for it (a field typed
 * as an integer or a string refuses it as it refuses any real), json_decref frees it whole,
 * and jsonout_dumps, the tape and the validator read its text. jansson allocates with malloc
 * (chatfleet never installs other allocation functions), so a text real is told from a plain
 * one by its allocation's size (malloc_usable_size: a plain real's is smaller) and a tag.
 * json_deep_copy and json_copy make plain reals; jsonnumber_deep_copy keeps the text. The
 * parser (jsonstrict_parse, jsonstrict_load_stored) decides which literal is which.
 */
#ifndef CHATFLEET_JSONNUMBER_H
#define CHATFLEET_JSONNUMBER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A text real holding lit[0..len) with the value d, whatever the literal. NULL when malloc
 * fails. */
json_t *jsonnumber_text_real(const char *lit, size_t len, double d);

/* The literal of a text real (NUL-terminated) and its length in *len; NULL for any other
 * value. */
const char *jsonnumber_text(const json_t *v, size_t *len);

/* Whether v is a number whose value a double holds exactly as its shortest form (what a
 * client that reads numbers as doubles gets unchanged): an integer whose double is exactly
 * it, any plain real, a text real such as 1.50 or 1e300 but not 0.1000000000000000001. */
bool jsonnumber_fits_double(const json_t *v);

/* json_deep_copy that keeps text reals (NULL only when malloc fails). */
json_t *jsonnumber_deep_copy(const json_t *v);

#endif
