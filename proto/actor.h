/*
 * actor: starts a CZMQ actor and learns whether it started.
 *
 * zactor_new() returns only after the actor's start-up signal but throws the signal's value
 * away, so a caller cannot tell an actor that bound its sockets from one that could not.
 * actor_new() hands the actor a start record instead of its arguments; the actor reads its
 * arguments with actor_args() and reports with actor_ready() (which stores the result, then
 * signals). On failure the actor returns at once and actor_new() reaps it and returns NULL.
 *
 *   static void s_actor(zsock_t *pipe, void *start) {
 *       const my_args_t *args = actor_args(start);   // valid until actor_ready() only
 *       if (bind fails) { actor_ready(pipe, start, -1); return; }
 *       actor_ready(pipe, start, 0);
 *       ... loop until $TERM ...
 *   }
 */
#ifndef CHATFLEET_ACTOR_H
#define CHATFLEET_ACTOR_H

#include <czmq.h>

/* Starts fn on args (read by the actor only until it reports). Returns the running actor, or
 * NULL when the actor reported -1 (it has exited; nothing is left running). */
zactor_t *actor_new(zactor_fn *fn, void *args);

/* In the actor: the args given to actor_new. */
void *actor_args(void *start);

/* In the actor: reports 0 (started) or -1 (failed, and the actor returns next) and sends the
 * start-up signal. Called exactly once, before the actor's loop. */
void actor_ready(zsock_t *pipe, void *start, int status);

#endif
