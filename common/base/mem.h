/*
 * mem: the one checked allocator and the project's ASSERT.
 *
 * Out-of-memory is not a recoverable condition for chatfleet's processes: every allocation
 * goes through these wrappers, which abort with a message instead of returning NULL.
 * ASSERT is for programmer invariants only and stays on in release builds.
 */
#ifndef CHATFLEET_MEM_H
#define CHATFLEET_MEM_H

#include <stdarg.h>
#include <stddef.h>

#define ASSERT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            mem_assert_fail(#cond, __FILE__, __LINE__);                                            \
    } while (0)

/* Aborts the process after printing the failed expression and its location. */
_Noreturn void mem_assert_fail(const char *expr, const char *file, int line);

/* Allocate, zero-fill, resize or duplicate; never returns NULL (aborts on exhaustion). */
void *mem_alloc(size_t size);
void *mem_calloc(size_t count, size_t size);
void *mem_realloc(void *ptr, size_t size);
char *mem_strdup(const char *s);
char *mem_strndup(const char *s, size_t n);

/* A newly allocated formatted string, owned by the caller (free()). */
char *mem_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *mem_vprintf(const char *fmt, va_list ap);

#endif
