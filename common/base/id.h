/*
 * id: identifiers and time. Random v4 UUIDs from the kernel's CSPRNG (chat, runner, worker
 * and request ids; API tokens), and the monotonic clock for every timing decision.
 */
#ifndef CHATFLEET_ID_H
#define CHATFLEET_ID_H

#include <stddef.h>
#include <stdint.h>

#define ID_UUID_LEN 36 /* characters, without the terminating NUL */

/* Writes a new random UUID (lowercase, 36 chars + NUL) into out. Returns 0 or -1. */
int id_uuid_new(char out[ID_UUID_LEN + 1]);

/* Fills buf with len random bytes from getrandom(). Returns 0 or -1. */
int id_random(void *buf, size_t len);

/* True when s is a canonical UUID (8-4-4-4-12 hex digits). */
int id_uuid_valid(const char *s);

/* Milliseconds on the monotonic clock. */
int64_t id_now_ms(void);

#endif
