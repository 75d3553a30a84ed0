/*
 * stream: a chat's Server-Sent Events (GET /api/v2/chats/{id}/stream, or /chats/watch) that
 * survives drops. A dropped connection is redialed with capped exponential backoff
 * (STREAM_BACKOFF_MIN_MS doubling to STREAM_BACKOFF_MAX_MS, reset once an event arrives),
 * resuming after the newest message id seen (after_id). The server replays the current
 * episode's parts and changed messages on every dial; this module drops what the caller has
 * already been given, so each message revision and each part (history_version,
 * generation_attempt, seq) reaches the callback once (ARCHITECTURE.md §7.3, "Resume").
 */
#ifndef CHATFLEET_CLI_STREAM_H
#define CHATFLEET_CLI_STREAM_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "client.h"

#define STREAM_BACKOFF_MIN_MS  100  /* first redial delay */
#define STREAM_BACKOFF_MAX_MS  4000 /* redial delay cap */
#define STREAM_FAILURES_MAX    15   /* consecutive failed dials before giving up (~45 s) */
#define STREAM_EVENT_MAX_BYTES (8 * 1024 * 1024) /* one event's data; more drops the dial */
#define STREAM_STALL_SECONDS   45L   /* no byte for this long (keep-alives are 15 s): redial */
#define STREAM_SEEN_MAX        65536 /* message ids remembered for revision dedupe */

/* Called once per new event; data is the parsed JSON (borrowed). Return true to stop. */
typedef bool (*stream_event_fn)(void *ctx, const char *type, json_t *data, int64_t id);

typedef enum {
    STREAM_STOPPED = 0, /* the callback asked to stop */
    STREAM_CANCELLED,   /* *cancel became non-zero */
    STREAM_GAVE_UP,     /* STREAM_FAILURES_MAX dials in a row failed */
    STREAM_REJECTED,    /* the server refused the stream (a 4xx other than 408/425/429) */
} stream_end_t;

typedef struct stream stream_t;

/* A stream of path (under the client's base URL) starting after after_id (0: from the
 * start). cancel (may be NULL) is polled; a signal handler may set it. */
stream_t *stream_new(client_t *client, const char *path, int64_t after_id,
                     volatile sig_atomic_t *cancel);
void stream_destroy(stream_t **self_p);

/* Reads until the callback stops, cancel is set or the redial budget is spent. */
stream_end_t stream_run(stream_t *self, stream_event_fn fn, void *ctx);

/* Dials so far (1 after the first connection) and the newest message id seen. */
int stream_dials(const stream_t *self);
int64_t stream_after_id(const stream_t *self);

#endif
