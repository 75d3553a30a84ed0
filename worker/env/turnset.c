/* turnset: the open turns of a worker; see turnset.h. Each runner's turns are a short list
 * (one, or two while a newer prompt's task overlaps the old one's end) under an index by
 * "chat_id/runner_id", all under one mutex: a worker holds thousands of turns, and each step
 * joins and releases one. */
#include "turnset.h"
#include "mem.h"
#include "otlp.h"

#include <czmq.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_KEY_LEN (2 * ID_UUID_LEN + 2) /* "chat_id/runner_id" and the NUL */

struct turnset_rec {
    turnset_turn_t turn;
    int outcome; /* the first outcome a holder recorded; -1: none */
    bool closed;
    int holders;
    struct turnset_rec *next; /* the runner's next turn; on a dead list, the next dead one */
};

typedef struct {
    turnset_ref_t *head; /* the runner's turns, newest first */
} s_group_t;

struct turnset {
    pthread_mutex_t lock;
    zhashx_t *groups; /* "chat_id/runner_id" -> s_group_t (owned) */
    size_t count;
    turnset_abandon_fn *on_abandon;
    void *arg;
};

static void s_key(const char *chat_id, const char *runner_id, char key[S_KEY_LEN]) {
    snprintf(key, S_KEY_LEN, "%s/%s", chat_id, runner_id);
}

static void s_group_free(void **item) {
    free(*item);
    *item = NULL;
}

turnset_t *turnset_new(turnset_abandon_fn *on_abandon, void *arg) {
    turnset_t *self = mem_calloc(1, sizeof *self);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    self->groups = zhashx_new();
    ASSERT(self->groups);
    zhashx_set_destructor(self->groups, s_group_free);
    self->on_abandon = on_abandon;
    self->arg = arg;
    return self;
}

void turnset_destroy(turnset_t **self_p) {
    turnset_t *self = *self_p;
    if (!self) {
        return;
    }
    for (s_group_t *g = zhashx_first(self->groups); g; g = zhashx_next(self->groups)) {
        while (g->head) {
            turnset_ref_t *r = g->head;
            g->head = r->next;
            free(r);
        }
    }
    zhashx_destroy(&self->groups);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* Takes r (nobody holds it, it is closed) out of its runner's list onto *dead. */
static void s_unlink(turnset_t *self, turnset_ref_t *r, turnset_ref_t **dead) {
    char key[S_KEY_LEN];
    s_key(r->turn.chat_id, r->turn.runner_id, key);
    s_group_t *g = zhashx_lookup(self->groups, key);
    ASSERT(g);
    turnset_ref_t **pp = &g->head;
    while (*pp != r) {
        pp = &(*pp)->next;
    }
    *pp = r->next;
    if (!g->head) {
        zhashx_delete(self->groups, key);
    }
    self->count--;
    r->next = *dead;
    *dead = r;
}

/* Closes r now (an open turn keeps the end it had otherwise). */
static void s_close(turnset_ref_t *r, int64_t now) {
    if (!r->closed) {
        r->closed = true;
        r->turn.end_ns = now;
    }
}

/* Closes r now, and takes it out when nobody holds it. */
static void s_close_idle(turnset_t *self, turnset_ref_t *r, int64_t now, turnset_ref_t **dead) {
    s_close(r, now);
    if (r->holders == 0) {
        s_unlink(self, r, dead);
    }
}

/* Ends one hold of r; onto *dead when that was the last hold of a closed turn. */
static void s_unhold(turnset_t *self, turnset_ref_t *r, turnset_ref_t **dead) {
    ASSERT(r->holders > 0);
    if (--r->holders == 0 && r->closed) {
        s_unlink(self, r, dead);
    }
}

/* Outside the lock: hands each dead turn without an outcome to the callback; frees them. */
static void s_bury(turnset_t *self, turnset_ref_t *dead) {
    while (dead) {
        turnset_ref_t *r = dead;
        dead = r->next;
        if (r->outcome < 0 && self->on_abandon) {
            self->on_abandon(&r->turn, self->arg);
        }
        free(r);
    }
}

static bool s_same_turn(const turnset_ref_t *r, const turnset_turn_t *t) {
    return r->turn.prompt_id == t->prompt_id && !strcmp(r->turn.chat_id, t->chat_id) &&
           !strcmp(r->turn.runner_id, t->runner_id);
}

void turnset_join(turnset_t *self, const turnset_turn_t *t, turnset_ref_t **held) {
    turnset_ref_t *dead = NULL;
    pthread_mutex_lock(&self->lock);
    if (*held && s_same_turn(*held, t)) {
        pthread_mutex_unlock(&self->lock);
        return;
    }
    if (*held) {
        s_unhold(self, *held, &dead);
        *held = NULL;
    }
    char key[S_KEY_LEN];
    s_key(t->chat_id, t->runner_id, key);
    s_group_t *g = zhashx_lookup(self->groups, key);
    if (!g) {
        g = mem_calloc(1, sizeof *g);
        zhashx_insert(self->groups, key, g);
    }
    turnset_ref_t *rec = g->head;
    while (rec && (rec->closed || rec->turn.prompt_id != t->prompt_id)) {
        rec = rec->next;
    }
    if (!rec) {
        rec = mem_calloc(1, sizeof *rec);
        rec->turn = *t;
        rec->turn.end_ns = 0;
        rec->outcome = -1;
        rec->next = g->head;
        g->head = rec;
        self->count++;
    }
    rec->holders++;
    *held = rec;
    /* A newer prompt closes the runner's open turns of older ones (the seed's "Newer
     * prompt": an edit of a running chat, say). */
    int64_t now = otlp_now_ns();
    for (turnset_ref_t *r = g->head, *next; r; r = next) {
        next = r->next;
        if (!r->closed && r->turn.prompt_id < t->prompt_id) {
            s_close_idle(self, r, now, &dead);
        }
    }
    pthread_mutex_unlock(&self->lock);
    s_bury(self, dead);
}

bool turnset_outcome(turnset_t *self, turnset_ref_t *ref, int o) {
    if (!ref) {
        return false;
    }
    ASSERT(o >= 0);
    pthread_mutex_lock(&self->lock);
    bool first = ref->outcome < 0;
    if (first) {
        ref->outcome = o;
        s_close(ref, otlp_now_ns());
    }
    pthread_mutex_unlock(&self->lock);
    return first;
}

void turnset_release(turnset_t *self, turnset_ref_t **ref_p) {
    if (!*ref_p) {
        return;
    }
    turnset_ref_t *dead = NULL;
    pthread_mutex_lock(&self->lock);
    s_unhold(self, *ref_p, &dead);
    pthread_mutex_unlock(&self->lock);
    *ref_p = NULL;
    s_bury(self, dead);
}

void turnset_runner_exit(turnset_t *self, const char *chat_id, const char *runner_id) {
    turnset_ref_t *dead = NULL;
    char key[S_KEY_LEN];
    s_key(chat_id, runner_id, key);
    pthread_mutex_lock(&self->lock);
    s_group_t *g = zhashx_lookup(self->groups, key);
    int64_t now = otlp_now_ns();
    /* s_unlink may free g with its last turn: the next turn is read first. */
    for (turnset_ref_t *r = g ? g->head : NULL, *next; r; r = next) {
        next = r->next;
        s_close_idle(self, r, now, &dead);
    }
    pthread_mutex_unlock(&self->lock);
    s_bury(self, dead);
}

size_t turnset_size(turnset_t *self) {
    pthread_mutex_lock(&self->lock);
    size_t n = self->count;
    pthread_mutex_unlock(&self->lock);
    return n;
}
