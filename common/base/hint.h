/*
 * hint: the notifications a committed transition bundle emits (ARCHITECTURE.md §9), and the
 * sink they are handed to.
 *
 * Hints are best-effort and post-commit: receivers must tolerate drops, duplicates and
 * reordering, and keep a per-chat snapshot_version watermark. The state machine fills
 * these structs; common/bus (or a test, or the logging sink) publishes them.
 */
#ifndef CHATFLEET_HINT_H
#define CHATFLEET_HINT_H

#include <stdbool.h>
#include <stdint.h>

#include "id.h"

/* chat:update:{chat_id}: the committed post-transition values of the execution state. */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    int64_t snapshot_version;
    char worker_id[ID_UUID_LEN + 1]; /* "" when unowned */
    char runner_id[ID_UUID_LEN + 1]; /* "" when unowned */
    int64_t history_version;
    int64_t queue_version;
    int64_t retry_state_version;
    int64_t generation_attempt;
    char status[16]; /* waiting, running, interrupting, requires_action, error */
    bool archived;
    char owner_id[ID_UUID_LEN + 1]; /* the chat's user, so readers route without a lookup */
    bool title_changed; /* the bundle set the title (status and archived carry the rest of
                           what a watch shows) */
} hint_update_t;

/* chat:ownership: a runnable chat that no worker holds a fresh lease on. */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    int64_t snapshot_version;
} hint_ownership_t;

/* Where a committed bundle's hints go. Either callback may be NULL. The sink must not
 * block for long: it runs on the committing thread, after COMMIT. */
typedef struct {
    void (*update)(void *ctx, const hint_update_t *hint);
    void (*ownership)(void *ctx, const hint_ownership_t *hint);
    void *ctx;
} hint_sink_t;

/* A sink that writes each hint as a log line at debug level (used until a bus exists, and by
 * tools that have no broker). */
extern const hint_sink_t hint_sink_log;

#endif
