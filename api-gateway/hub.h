/*
 * hub: the gateway's one bus subscriber, shared by every open stream. It subscribes to the
 * update and part topics of the chats that have streams, and wakes those streams: an update
 * hint (or the poller, every CHATFLEET_STREAM_POLL_MS) marks them for a sync, a live part is
 * queued on them. Hints are only hints: a stream that misses one still catches up on the
 * next poll (ARCHITECTURE.md §9).
 *
 * One thread owns the subscriber; streams register and unregister from any thread.
 */
#ifndef CHATFLEET_HUB_H
#define CHATFLEET_HUB_H

#include <stdint.h>

#include "wire.h"

#define HUB_ALL "*" /* the key of a stream that wants every chat's update hints */

typedef struct hub hub_t;

/* What the hub calls on a registered stream, from its own thread. */
typedef struct {
    void (*sync)(void *stream);                          /* a sync is due */
    void (*part)(void *stream, const wire_part_t *part); /* a live part of the chat */
    void (*close)(void *stream);                         /* the gateway is stopping */
} hub_ops_t;

/* Starts the hub on the broker's subscriber endpoint. NULL when the endpoint is invalid. */
hub_t *hub_new(const char *sub_endpoint, int64_t poll_ms, const hub_ops_t *ops);
void hub_destroy(hub_t **self_p);

/* Adds or removes a stream of chat_id (or HUB_ALL). After hub_remove returns, the hub never
 * calls the stream again. */
void hub_add(hub_t *self, const char *chat_id, void *stream);
void hub_remove(hub_t *self, void *stream);

/* Asks every registered stream to close (before the HTTP server stops). */
void hub_close_all(hub_t *self);

/* Open streams right now (for /metrics and logs). */
int hub_count(hub_t *self);

#endif
