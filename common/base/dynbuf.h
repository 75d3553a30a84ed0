/*
 * dynbuf: a growable byte buffer with a hard cap, for everything that outside input fills (an
 * HTTP answer, a server's line, a provider's stream block). Appending past the cap fails and
 * appends nothing, so a caller turns an oversized input into an error instead of memory
 * growth. The bytes are always NUL-terminated (the NUL is not counted and fits under the cap).
 */
#ifndef CHATFLEET_DYNBUF_H
#define CHATFLEET_DYNBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;     /* bytes allocated */
    size_t max_len; /* the hard cap on len */
} dynbuf_t;

/* An empty buffer that holds at most max_len bytes. Allocates nothing. */
void dynbuf_init(dynbuf_t *b, size_t max_len);

/* Appends n bytes: 0, or -1 (and nothing appended) when len would pass the cap. */
int dynbuf_add(dynbuf_t *b, const void *bytes, size_t n);

/* Appends a formatted string: 0, or -1 as dynbuf_add. */
int dynbuf_addf(dynbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The bytes ("" while empty: never NULL). Valid until the next append or free. */
const char *dynbuf_str(const dynbuf_t *b);

/* Drops the first n bytes (n at most len: a programmer error otherwise) and moves the rest to
 * the front, so a reader that took whole lines or events off the front frees their room under
 * the cap. Keeps the memory. */
void dynbuf_consume(dynbuf_t *b, size_t n);

/* Empties the buffer, keeping its memory and its cap. */
void dynbuf_reset(dynbuf_t *b);

/* Hands the bytes to the caller (free(); NULL while empty) and empties the buffer. */
char *dynbuf_take(dynbuf_t *b);

/* Frees the bytes; the buffer is empty (its cap kept) and may be used again. */
void dynbuf_free(dynbuf_t *b);

#endif
