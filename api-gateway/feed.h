/*
 * feed: one Server-Sent Events connection, independent of what it carries. It owns the
 * output buffer, the wake-ups (a sync is due, live parts arrived, the gateway is stopping),
 * keep-alive comments and the MHD content reader. A feed runs on its MHD connection thread:
 * the reader blocks until there is something to send, and calls back into its owner (the
 * chat stream or the watch) to do the work on that same thread.
 */
#ifndef CHATFLEET_FEED_H
#define CHATFLEET_FEED_H

#include <jansson.h>
#include <stdint.h>

#include "hub.h"
#include "wire.h"

#define FEED_KEEPALIVE_MS 15000 /* an SSE comment line when nothing else was sent */
#define FEED_PENDING_MAX  4096  /* live parts queued before falling back to a sync */
#define FEED_SETTLE_MS                                                                             \
    300 /* a second sync this long after opening: the hub's new                                    \
          subscription needs a moment to reach the broker */

struct MHD_Response;

typedef struct feed feed_t;

typedef struct {
    void (*sync)(void *owner);                          /* on the feed's thread */
    void (*part)(void *owner, const wire_part_t *part); /* on the feed's thread */
    void (*destroy)(void *owner);                       /* the connection is gone */
} feed_ops_t;

/* A feed registered with hub under key (a chat id, or "*" for every update hint), whose
 * first read runs a sync. Returns the MHD response to queue (status 200). */
struct MHD_Response *feed_new(hub_t *hub, const char *key, const feed_ops_t *ops, void *owner,
                              feed_t **out);

/* Appends one event: "id:" (when id > 0), "event:", "data:" with event's JSON; the
 * feed adds "type" and steals the reference. Call from the feed's thread. */
void feed_emit(feed_t *self, const char *type, json_t *event, int64_t id);

/* Ends the feed after what is buffered has been sent. */
void feed_close(feed_t *self);

/* The hub callbacks for every feed. */
extern const hub_ops_t feed_hub_ops;

#endif
