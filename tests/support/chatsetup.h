/*
 * chatsetup: builds a chat in any execution state (the 13 of ARCHITECTURE.md §4.1 plus kinds of
 * Invalid) for tests, through the state machine itself acting as HTTP side and worker, and
 * digests a chat's rows so a test can prove a rejected move changed nothing. Used by the
 * state-machine walk and the HTTP walk.
 */
#ifndef CHATFLEET_CHATSETUP_H
#define CHATFLEET_CHATSETUP_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "chatstate.h"

#define CHATSETUP_WORKER   "11111111-1111-4111-8111-111111111111"
#define CHATSETUP_RUNNER   "22222222-2222-4222-8222-222222222222"
#define CHATSETUP_USER_MSG "[{\"type\":\"text\",\"text\":\"hello\"}]"

/* The settings the tests' own bundles pass unless a test needs others: CHATFLEET_LEASE_STALE_MS
 * and CHATFLEET_REQUIRES_ACTION_DEADLINE_MS at their defaults (30 s, 5 min). chatsetup_build
 * uses them too. */
extern const cs_settings_t chatsetup_settings;

typedef struct {
    const char *name; /* state name as in ARCHITECTURE.md §4.1: "N", "E1", "XW", "Invalid" */
    int queued;       /* queue length to set up */
    int invalid_kind; /* 0: a valid state; 1: waiting with a queue; 2: archived while
                         running; 3: archived while requiring action, with a queue */
} chatsetup_t;

/* Every setup the walks use: each state, queue lengths 1 and 2 where a queue is allowed,
 * and the three kinds of Invalid. */
extern const chatsetup_t chatsetup_all[];
extern const int chatsetup_count;

/* Builds a chat of owner in the state s, owned by (CHATSETUP_WORKER, CHATSETUP_RUNNER) with
 * a fresh lease unless unowned; writes its id to chat (a random unused id for "N"). Its
 * history is a user message and an assistant reply (plus a pending dynamic call "dyn_1" in
 * the A states). Fails the test on any error. */
void chatsetup_build(PGconn *conn, const char *owner, const chatsetup_t *s, bool unowned,
                     char chat[ID_UUID_LEN + 1]);

/* The current fence of the chat for (CHATSETUP_WORKER, CHATSETUP_RUNNER). The status string
 * stays valid until the next call. */
void chatsetup_fence(PGconn *conn, const char *chat, cs_fence_t *f);

/* An md5 of every row of the chat (chat, messages, queue, heartbeats); caller frees. */
char *chatsetup_digest(PGconn *conn, const char *chat);

#endif
