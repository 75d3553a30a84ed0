/* actor: CZMQ actors that report whether they started; see actor.h. */
#include "actor.h"

#include <stdatomic.h>

typedef struct {
    void *args;
    atomic_int status;
} s_start_t;

zactor_t *actor_new(zactor_fn *fn, void *args) {
    s_start_t start = {.args = args};
    atomic_init(&start.status, -1);
    /* zactor_new returns after the actor's start-up signal, so start may live on this stack:
     * the actor stored its status before signalling. */
    zactor_t *actor = zactor_new(fn, &start);
    if (actor && atomic_load(&start.status) != 0) {
        zactor_destroy(&actor); /* the actor has returned; this only reaps it */
    }
    return actor;
}

void *actor_args(void *start) {
    return ((s_start_t *)start)->args;
}

void actor_ready(zsock_t *pipe, void *start, int status) {
    atomic_store(&((s_start_t *)start)->status, status);
    zsock_signal(pipe, (byte)status);
}
