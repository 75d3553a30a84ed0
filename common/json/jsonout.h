/*
 * jsonout: JSON text from jansson values with every real in its shortest round-trip form.
 *
 * json_dumps() writes reals with 17 significant digits (0.1 becomes 0.10000000000000001),
 * which changes the decimal a client sees and is refused by the strict boundary when read
 * back. Every JSON the system emits (HTTP responses, stored metadata) goes through here.
 * Output is compact; object members keep jansson's insertion order; integral reals keep a
 * ".0" so they stay reals; a text real (jsonnumber.h) is its literal, byte for byte.
 */
#ifndef CHATFLEET_JSONOUT_H
#define CHATFLEET_JSONOUT_H

#include <jansson.h>
#include <stddef.h>

/* A newly allocated compact text of v (any JSON value), owned by the caller (free()). */
char *jsonout_dumps(const json_t *v);

#define JSONOUT_REAL_MAX                                                                           \
    32 /* bytes of one real's text, NUL included ("-1.2345678901234567e-308") */

/* The text jsonout_dumps gives the finite double d: its shortest round-trip "%g" form, with
 * ".0" appended when that has neither a point nor an exponent. Writes it, NUL-terminated, to
 * buf and returns its length. This text is what PostgreSQL receives for every stored real, so
 * the strict boundary derives its number policy from it (jsonstrict.h). */
size_t jsonout_real(double d, char buf[JSONOUT_REAL_MAX]);

#endif
