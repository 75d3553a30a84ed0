/* dynbuf: a growable byte buffer with a hard cap; see dynbuf.h. */
#include "dynbuf.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dynbuf_init(dynbuf_t *b, size_t max_len) {
    *b = (dynbuf_t){.max_len = max_len};
}

int dynbuf_add(dynbuf_t *b, const void *bytes, size_t n) {
    if (n > b->max_len - b->len) {
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            cap *= 2;
        }
        b->data = mem_realloc(b->data, cap);
        b->cap = cap;
    }
    if (n > 0) {
        memcpy(b->data + b->len, bytes, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int dynbuf_addf(dynbuf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = mem_vprintf(fmt, ap);
    va_end(ap);
    int rc = dynbuf_add(b, s, strlen(s));
    free(s);
    return rc;
}

const char *dynbuf_str(const dynbuf_t *b) {
    return b->data ? b->data : "";
}

void dynbuf_consume(dynbuf_t *b, size_t n) {
    ASSERT(n <= b->len);
    if (n == 0) {
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void dynbuf_reset(dynbuf_t *b) {
    b->len = 0;
    if (b->data) {
        b->data[0] = '\0';
    }
}

char *dynbuf_take(dynbuf_t *b) {
    char *out = b->data;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return out;
}

void dynbuf_free(dynbuf_t *b) {
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}
