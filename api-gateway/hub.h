/*
 * hub: the gateway's one bus subscriber, shared by every open stream and watch
 * (ARCHITECTURE.md §7.1, §9). It subscribes to the update and part topics of the chats that
 * have streams (and to every update while a watch is open), and wakes the streams: an update
 * hint marks the streams of that chat, and the watches of its user (the hint carries the
 * owner), for a sync of that chat; a live part is queued on the chat's streams; every
 * CHATFLEET_STREAM_POLL_MS every stream is marked for a full sync; every HUB_TICK_MS every
 * stream gets a tick (keep-alives, delayed syncs). Hints are only hints: a stream that misses
 * one catches up on the next poll.
 *
 * One thread owns the subscriber; streams register and unregister from any thread. The hub
 * calls a stream's ops with its lock held, so they must only take the stream's own lock.
 */
#ifndef CHATFLEET_HUB_H
#define CHATFLEET_HUB_H

#include <stdint.h>

#include "wire.h"

#define HUB_USER_PREFIX "user:" /* the key of a watch: "user:<user_id>" */
#define HUB_TICK_MS     1000

typedef struct hub hub_t;
typedef struct hub_entry hub_entry_t;

/* What the hub calls on a registered stream, from its own thread. */
typedef struct {
    void (*sync)(void *stream, const char *chat_id);     /* chat_id changed; NULL: sync it all */
    void (*part)(void *stream, const wire_part_t *part); /* a live part of the chat */
    void (*close)(void *stream);                         /* the gateway is stopping */
    void (*tick)(void *stream, int64_t now_ms);          /* every HUB_TICK_MS */
} hub_ops_t;

/* Starts the hub on the broker's subscriber endpoint, allowing per_user_max open streams and
 * watches to one user. NULL when the endpoint is invalid. */
hub_t *hub_new(const char *sub_endpoint, int64_t poll_ms, int64_t per_user_max,
               const hub_ops_t *ops);
void hub_destroy(hub_t **self_p);

/* Adds a stream of key (a chat id, or HUB_USER_PREFIX and a user id) opened by user_id.
 * NULL when that user has per_user_max open already, or after hub_close_all. */
hub_entry_t *hub_add(hub_t *self, const char *key, const char *user_id, void *stream);

/* Removes an entry; after it returns the hub never calls its stream again. */
void hub_remove(hub_t *self, hub_entry_t **entry_p);

/* Asks every registered stream to close, and refuses new ones from now on (before the HTTP
 * server stops, which it cannot do while a stream's connection is suspended). */
void hub_close_all(hub_t *self);

/* Open streams right now (for /metrics and logs). */
int hub_count(hub_t *self);

#endif
