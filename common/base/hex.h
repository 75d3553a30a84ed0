/*
 * hex: the one reader and writer of hexadecimal digits (JSON \u escapes, regex escapes,
 * format checks, digests, tokens).
 */
#ifndef CHATFLEET_HEX_H
#define CHATFLEET_HEX_H

#include <stddef.h>

/* The value of one hex digit (0-9, a-f, A-F), or -1 when c is not one. */
int hex_digit(int c);

/* Writes n bytes as 2n lower-case hex digits and a NUL into out, which holds 2n + 1 bytes. */
void hex_encode(const unsigned char *in, size_t n, char *out);

#endif
