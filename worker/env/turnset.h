/*
 * turnset: the turns this worker's runners have open, so that every turn closes with exactly
 * one outcome (ARCHITECTURE.md §7.11; the seed's "Turn span lifecycle"). A turn is one prompt
 * (the chat's latest real user row) on one runner; a task joins it when it reads that prompt
 * and holds it until the task ends. It closes with the outcome a holder records, when a newer
 * prompt's task joins the runner's turns, or when the runner exits (lost ownership, release,
 * shutdown). A closed turn nobody holds is gone; one that closed without an outcome is
 * abandoned: the set hands a copy to the abandon callback, once. Thread-safe: tasks join and
 * release on the job threads, the manager's runners exit on its loop.
 */
#ifndef CHATFLEET_TURNSET_H
#define CHATFLEET_TURNSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "id.h"
#include "trace.h"

/* What a turn is: its chat, runner and prompt, and what its chat_turn span names. */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    char runner_id[ID_UUID_LEN + 1];
    int64_t prompt_id; /* the prompt's chat_messages.id: the turn's identity on its runner */
    bool subagent;
    trace_ctx_t trace;                /* trace_id "": the turn has no trace */
    char span_id[TRACE_SPAN_HEX + 1]; /* its chat_turn span */
    int64_t start_ns;                 /* wall clock, nanoseconds since the epoch */
    int64_t end_ns;                   /* set when it closed; 0 while open */
} turnset_turn_t;

/* Called with a copy of each abandoned turn, outside the set's lock, on the thread whose call
 * closed or released it. */
typedef void(turnset_abandon_fn)(const turnset_turn_t *turn, void *arg);

typedef struct turnset turnset_t;
typedef struct turnset_rec turnset_ref_t; /* a holder's handle of its turn */

turnset_t *turnset_new(turnset_abandon_fn *on_abandon, void *arg);

/* Frees the set; turns still in it are dropped without a callback. Safe on NULL. */
void turnset_destroy(turnset_t **self_p);

/* Makes *held the holder's handle of t's turn: kept when *held is that prompt's turn already;
 * else *held is released, and the open turn of (t->chat_id, t->runner_id) for t->prompt_id is
 * joined, or opened from t (t->end_ns ignored). Every other open turn of that runner for an
 * older prompt closes now (a newer prompt); one nobody holds is abandoned. */
void turnset_join(turnset_t *self, const turnset_turn_t *t, turnset_ref_t **held);

/* Records outcome o (>= 0) for the holder's turn and closes it. true when it is the turn's
 * first outcome (count it), false when it has one already (or ref is NULL). */
bool turnset_outcome(turnset_t *self, turnset_ref_t *ref, int o);

/* Ends the holder's hold and sets *ref_p to NULL; a closed turn nobody holds is gone then,
 * abandoned when it had no outcome. Safe on NULL. */
void turnset_release(turnset_t *self, turnset_ref_t **ref_p);

/* The runner exited: each of its turns closes; those nobody holds are gone now (abandoned
 * without an outcome), the others when their holders release them. */
void turnset_runner_exit(turnset_t *self, const char *chat_id, const char *runner_id);

/* The turns in the set (open, or closed and still held), for tests and logs. */
size_t turnset_size(turnset_t *self);

#endif
