/*
 * id: identifiers and time. Random v4 UUIDs from the kernel's CSPRNG (chat, runner, worker
 * and request ids; API tokens), and the monotonic clock for every timing decision (the
 * deadlines of condition-variable waits included). Log timestamps and timestamps sent to
 * other hosts (id_wall_rfc3339_ms) read the real clock.
 */
#ifndef CHATFLEET_ID_H
#define CHATFLEET_ID_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define ID_UUID_LEN 36 /* characters, without the terminating NUL */

/* Writes a new random UUID (lowercase, 36 chars + NUL) into out. Returns 0 or -1. */
int id_uuid_new(char out[ID_UUID_LEN + 1]);

/* Fills buf with len random bytes from getrandom(). Returns 0 or -1. */
int id_random(void *buf, size_t len);

/* True when s is a canonical UUID (8-4-4-4-12 hex digits). */
int id_uuid_valid(const char *s);

/* Milliseconds on the monotonic clock. */
int64_t id_now_ms(void);

/* Microseconds on the same clock (the sim's [sim:clock] stamps, the benches' reads). */
int64_t id_now_us(void);

#define ID_RFC3339_MS_LEN 24 /* "2026-12-06T10:55:01.123Z" */

/* The wall clock now, UTC, as RFC 3339 with milliseconds (ID_RFC3339_MS_LEN chars + NUL):
 * for timestamps another host reads, such as a signed hook body's sent_at. */
void id_wall_rfc3339_ms(char out[ID_RFC3339_MS_LEN + 1]);

/* The monotonic instant at_ms (an id_now_ms() value, e.g. id_now_ms() + timeout) as the
 * deadline pthread_cond_timedwait takes, for a condition variable made by id_cond_init: the
 * one way the project turns "now + ms" into a timespec. An instant already past is a
 * deadline that has expired. */
struct timespec id_timespec_at(int64_t at_ms);

/* Initializes cond so that its timed waits read CLOCK_MONOTONIC, which a wall-clock step
 * does not move. Every condition variable waited on with a deadline is made here. Aborts
 * on failure (only a programming error can fail it). */
void id_cond_init(pthread_cond_t *cond);

#endif
