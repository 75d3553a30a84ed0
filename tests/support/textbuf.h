/*
 * textbuf: a growable text that tests build big or hostile JSON documents in (nothing of the
 * product uses it). A zeroed textbuf_t is empty; free its p when done.
 */
#ifndef CHATFLEET_TEXTBUF_H
#define CHATFLEET_TEXTBUF_H

#include <stddef.h>

typedef struct {
    char *p; /* NUL-terminated once anything was added */
    size_t len;
    size_t cap;
} textbuf_t;

/* Appends the formatted text, growing the buffer (a test fails if memory runs out). */
void textbuf_add(textbuf_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s times times. */
void textbuf_repeat(textbuf_t *t, const char *s, size_t times);

#endif
