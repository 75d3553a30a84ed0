/*
 * cancel: a cancellation token shared by a task and the actor that spawned it.
 *
 * The owner (the manager, on behalf of a runner) sets it; a task looks at it between its
 * phases (the cancel itself reaches a model call or a wait on the event loop), and a
 * synchronous provider_generate polls it. Reference-counted,
 * because a cancelled task may outlive its runner: each side drops its own reference.
 * Thread-safe.
 */
#ifndef CHATFLEET_CANCEL_H
#define CHATFLEET_CANCEL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct cancel cancel_t;

/* A new, uncancelled token with one reference. Never NULL (aborts on exhaustion). */
cancel_t *cancel_new(void);

/* Adds a reference; returns self. */
cancel_t *cancel_ref(cancel_t *self);

/* Drops the caller's reference (freeing the token with the last one) and nulls *self_p.
 * Safe on NULL. */
void cancel_destroy(cancel_t **self_p);

/* Cancels: every waiter wakes, and cancel_is_set() is true from now on. Idempotent. */
void cancel_set(cancel_t *self);

bool cancel_is_set(cancel_t *self);

/* Waits up to ms milliseconds (monotonic) or until cancelled, whichever comes first.
 * Returns true when the token is cancelled. ms <= 0 only checks. */
bool cancel_wait_ms(cancel_t *self, int64_t ms);

/* Waits until the monotonic deadline (id_now_ms() scale) or cancellation. Returns true when
 * cancelled. */
bool cancel_wait_until(cancel_t *self, int64_t deadline_ms);

#endif
