/*
 * jsonout: JSON text from jansson values with every real in its shortest round-trip form.
 *
 * json_dumps() writes reals with 17 significant digits (0.1 becomes 0.10000000000000001),
 * which changes the decimal a client sees and is refused by the strict boundary when read
 * back. Every JSON the system emits (HTTP responses, stored metadata) goes through here.
 * Output is compact; object members keep jansson's insertion order; integral reals keep a
 * ".0" so they stay reals.
 */
#ifndef CHATFLEET_JSONOUT_H
#define CHATFLEET_JSONOUT_H

#include <jansson.h>

/* A newly allocated compact text of v (any JSON value), owned by the caller (free()). */
char *jsonout_dumps(const json_t *v);

#endif
