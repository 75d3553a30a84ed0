/* mem: checked allocation; see mem.h. */
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mem_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "chatfleet: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

static void *s_check(void *p, size_t size) {
    if (!p && size) {
        fprintf(stderr, "chatfleet: out of memory allocating %zu bytes\n", size);
        abort();
    }
    return p;
}

void *mem_alloc(size_t size) {
    return s_check(malloc(size ? size : 1), size);
}

void *mem_calloc(size_t count, size_t size) {
    return s_check(calloc(count ? count : 1, size ? size : 1), count * size);
}

void *mem_realloc(void *ptr, size_t size) {
    return s_check(realloc(ptr, size ? size : 1), size);
}

char *mem_strdup(const char *s) {
    return mem_strndup(s, strlen(s));
}

char *mem_strndup(const char *s, size_t n) {
    char *copy = mem_alloc(n + 1);
    memcpy(copy, s, n);
    copy[n] = '\0';
    return copy;
}

char *mem_vprintf(const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int len = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    ASSERT(len >= 0);
    char *out = mem_alloc((size_t)len + 1);
    vsnprintf(out, (size_t)len + 1, fmt, ap);
    return out;
}

char *mem_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = mem_vprintf(fmt, ap);
    va_end(ap);
    return out;
}
