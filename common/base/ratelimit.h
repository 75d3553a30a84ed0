/*
 * ratelimit: token buckets by key (a client address, a user id), in a fixed table that never
 * grows: what a process admits per key before it spends a database query or a slot on it.
 *
 * Each key's bucket holds up to burst tokens and refills at rate_per_s; a take spends one.
 * The table has a fixed number of sets of RATELIMIT_WAYS entries; a key goes to the set its
 * keyed hash names (the hash's key is random per table, so nobody can aim a key at another's
 * set). A key not in its set takes an entry whose bucket has refilled to full (a full bucket
 * holds no state worth keeping), else the least recently used one: under a flood of more
 * distinct keys than the table holds, a key may start again from a full bucket, never from
 * another key's empty one. Thread-safe (one mutex: callers take only on a path that already
 * costs more, such as a query).
 */
#ifndef CHATFLEET_RATELIMIT_H
#define CHATFLEET_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#define RATELIMIT_WAYS 4

typedef struct ratelimit ratelimit_t;

/* A table of about entries keys (rounded up to whole sets of RATELIMIT_WAYS), each bucket
 * holding up to burst tokens (>= 1) and refilling at rate_per_s (> 0) tokens a second. */
ratelimit_t *ratelimit_new(double rate_per_s, double burst, int entries);
void ratelimit_destroy(ratelimit_t **self_p);

/* Spends one of key's tokens at now_ms (a monotonic clock) and returns true, or returns false
 * with *retry_after_ms (when not NULL) set to when the next token is due (>= 1). */
bool ratelimit_take(ratelimit_t *self, const char *key, int64_t now_ms, int64_t *retry_after_ms);

#endif
