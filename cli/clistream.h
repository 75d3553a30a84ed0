/*
 * clistream: a chat's Server-Sent Events (GET /api/v2/chats/{id}/stream, or /chats/watch) that
 * survives drops. A dropped connection is redialed with capped exponential backoff
 * (CLISTREAM_BACKOFF_MIN_MS doubling to CLISTREAM_BACKOFF_MAX_MS, reset once an event arrives),
 * resuming after the newest message id seen (after_id). The server replays the current
 * episode's parts and changed messages on every dial; this module drops what the caller has
 * already been given, so each message revision and each part (history_version,
 * generation_attempt, seq) reaches the callback once (ARCHITECTURE.md §7.3, "Resume").
 */
#ifndef CHATFLEET_CLISTREAM_H
#define CHATFLEET_CLISTREAM_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "client.h"

#define CLISTREAM_BACKOFF_MIN_MS  100  /* first redial delay */
#define CLISTREAM_BACKOFF_MAX_MS  4000 /* redial delay cap */
#define CLISTREAM_FAILURES_MAX    15   /* consecutive failed dials before giving up (~45 s) */
#define CLISTREAM_EVENT_MAX_BYTES (8 * 1024 * 1024) /* one event's data; more drops the dial */
#define CLISTREAM_STALL_SECONDS   45L   /* no byte for this long (keep-alives are 15 s): redial */
#define CLISTREAM_SEEN_MAX        65536 /* message ids remembered for revision dedupe */

/* Called once per new event; data is the parsed JSON (borrowed). Return true to stop. */
typedef bool (*clistream_event_fn)(void *ctx, const char *type, json_t *data, int64_t id);

typedef enum {
    CLISTREAM_STOPPED = 0, /* the callback asked to stop */
    CLISTREAM_CANCELLED,   /* *cancel became non-zero */
    CLISTREAM_GAVE_UP,     /* CLISTREAM_FAILURES_MAX dials in a row failed */
    CLISTREAM_REJECTED,    /* the server refused the stream (a 4xx other than 408/425/429) */
} clistream_end_t;

typedef struct clistream clistream_t;

/* A stream of path (under the client's base URL) starting after after_id (0: from the
 * start). cancel (may be NULL) is polled; a signal handler may set it. */
clistream_t *clistream_new(client_t *client, const char *path, int64_t after_id,
                           volatile sig_atomic_t *cancel);
void clistream_destroy(clistream_t **self_p);

/* Reads until the callback stops, cancel is set or the redial budget is spent. */
clistream_end_t clistream_run(clistream_t *self, clistream_event_fn fn, void *ctx);

/* Dials so far (1 after the first connection) and the newest message id seen. */
int clistream_dials(const clistream_t *self);
int64_t clistream_after_id(const clistream_t *self);

#endif
