/*
 * episode: a stream's place in its chat's current episode (ARCHITECTURE.md §7.3): the episode
 * (history_version, generation_attempt) it follows and the last seq it delivered, so that
 * every part of that episode reaches the stream's owner once, in order and without a gap,
 * however late the stream started or however many live parts it missed: from live parts, the
 * hub's episode log, or the owning worker through the gateway's one relay client. The chat
 * stream (stream.c) and the A2A task stream (a2a_stream.c) both follow their chat with one.
 * Not thread-safe: call it from the owning feed's job only.
 */
#ifndef CHATFLEET_EPISODE_H
#define CHATFLEET_EPISODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway.h"
#include "hub.h"

#define EPISODE_RELAY_TIMEOUT_MS 1000 /* one relay fetch of a catch-up, at most */
#define EPISODE_RELAY_PAGE       256  /* parts asked of the worker per fetch */

typedef struct episode episode_t;

/* One part handed to the owner. */
typedef struct {
    int64_t history_version;
    int64_t generation_attempt;
    int64_t seq;
    const char *role;
    const char *json; /* the part's JSON text (len bytes, not NUL-terminated) */
    size_t len;
    hub_part_t *shared; /* the hub's part (live or from the log; frame it once for every
                           stream), or NULL when it came from the worker */
} episode_part_t;

typedef struct {
    /* A new episode starts: the parts from now on are its own, from seq 1 (may be NULL). */
    void (*reset)(void *owner);
    /* The next part of the episode followed: seq is the last delivered + 1. */
    void (*part)(void *owner, const episode_part_t *part);
} episode_ops_t;

/* Follows chat_id's episodes for owner (ops are called back from the episode's calls only).
 * It follows none until the first episode_sync. */
episode_t *episode_new(gateway_t *gw, const char *chat_id, const episode_ops_t *ops, void *owner);
void episode_destroy(episode_t **self_p);

/* A read of the chat says the current episode is (history_version, generation_attempt), owned
 * by worker_id ("" when unowned). A changed episode is announced (reset) and followed from its
 * start; then, when the chat is owned and an attempt runs, every part after the last one
 * delivered is delivered (episode_catch_up). */
void episode_sync(episode_t *self, int64_t history_version, int64_t generation_attempt,
                  const char *worker_id);

/* A live part of the chat from the hub: delivered when it is the next of the episode
 * followed; a newer attempt of the same history starts that episode (reset) first, since
 * attempts only grow (ARCHITECTURE.md §5.1); a gap is filled by episode_catch_up; anything
 * older or of another history is dropped (the next sync says what is current). */
void episode_live(episode_t *self, hub_part_t *part);

/* The hub's fast path: when part is the next one of the episode followed (the same episode,
 * seq the last delivered + 1), counts it as delivered and returns true, and the caller sends
 * the part's shared frame itself (ops.part is not called); false, changing nothing, for any
 * other part (episode_live judges it). */
bool episode_take(episode_t *self, const hub_part_t *part);

/* Delivers the parts of the episode followed after the last one delivered: from the hub's
 * episode log when it holds them, else from the worker the last sync named (pages of
 * EPISODE_RELAY_PAGE, each within EPISODE_RELAY_TIMEOUT_MS, under gw->relay_lock). What
 * neither has (the worker gone, its buffer collected) stays undelivered. */
void episode_catch_up(episode_t *self);

/* The end of the episode followed, once its turn has ended: delivers what the log holds,
 * then asks the worker the last sync named for the rest (the log cannot say that an episode
 * ended). True when nothing more can come (the worker answered, or has no such episode, or
 * is gone; or no episode was followed); false when the worker did not answer in time: call
 * again later. */
bool episode_finish(episode_t *self);

/* True once an episode_sync named an episode. */
bool episode_following(const episode_t *self);

#endif
