/*
 * partbuf: the worker's in-memory buffer of live message parts, per episode
 * (ARCHITECTURE.md §7.3, §9).
 *
 * An episode is (chat_id, history_version, generation_attempt): one model call. The
 * generation task creates it, adds every streamed part (each is also published live on the
 * bus, topic chat:part:<chat_id>), and closes it when the call ends; the interrupt task
 * closes it and reads what was buffered to commit the partial. Gateways that missed live
 * parts catch up through the relay, whose handler is partbuf_relay_handler. Each episode
 * holds at most PARTBUF_EPISODE_MAX_BYTES of part JSON; closed episodes are collected
 * PARTBUF_GC_AFTER_MS after they closed (partbuf_gc). Thread-safe: one mutex guards it all,
 * and nothing slow runs under it except a non-blocking bus send.
 */
#ifndef CHATFLEET_PARTBUF_H
#define CHATFLEET_PARTBUF_H

#include <stddef.h>
#include <stdint.h>

#include "bus.h"
#include "relay.h"

#define PARTBUF_EPISODE_MAX_BYTES (1024 * 1024) /* of part JSON text per episode */
#define PARTBUF_GC_AFTER_MS       15000         /* a closed episode lives at least this long */

typedef enum {
    PARTBUF_OK = 0,
    PARTBUF_NOT_FOUND, /* no such episode */
    PARTBUF_EXISTS,    /* create: the episode was already created (or closed) */
    PARTBUF_CLOSED,    /* add, start: the episode is closed */
    PARTBUF_FULL,      /* add: the part would take the episode past its cap */
    PARTBUF_INVALID,   /* add: the part is not one JSON object (PROTO_PART_MAX_BYTES) */
} partbuf_rc_t;

/* One buffered part; the text is owned by the array it came in. */
typedef struct {
    int64_t seq;
    char role[WIRE_ROLE_MAX];
    char *json;
    size_t len;
} partbuf_part_t;

typedef struct partbuf partbuf_t;

/* A buffer that publishes every added part on pub (NULL: publish nothing; pub must outlive
 * the buffer). Never NULL. */
partbuf_t *partbuf_new(bus_publisher_t *pub);
void partbuf_destroy(partbuf_t **self_p);

/* Creates an empty, open episode. PARTBUF_EXISTS when it exists already (open or closed). */
partbuf_rc_t partbuf_create(partbuf_t *self, const char *chat_id, int64_t history_version,
                            int64_t generation_attempt);

/* Closes the episode; creates it closed when it does not exist (so a close that races
 * ahead of the create wins). Idempotent. */
void partbuf_close(partbuf_t *self, const char *chat_id, int64_t history_version,
                   int64_t generation_attempt);

/* Appends a part (a JSON object text of len bytes) with the next seq, and publishes it.
 * Returns PARTBUF_OK, PARTBUF_NOT_FOUND, PARTBUF_CLOSED, PARTBUF_FULL or PARTBUF_INVALID;
 * callers may ignore the result (the buffer is best-effort). */
partbuf_rc_t partbuf_add(partbuf_t *self, const char *chat_id, int64_t history_version,
                         int64_t generation_attempt, const char *role, const char *json,
                         size_t len);

/* Stamps the instant (monotonic ms) the episode opened its provider stream.
 * PARTBUF_NOT_FOUND or PARTBUF_CLOSED otherwise. */
partbuf_rc_t partbuf_start_model(partbuf_t *self, const char *chat_id, int64_t history_version,
                                 int64_t generation_attempt);

/* The stamp of partbuf_start_model, or 0 when unknown or never stamped. */
int64_t partbuf_model_invoked_at(partbuf_t *self, const char *chat_id, int64_t history_version,
                                 int64_t generation_attempt);

/* A copy of the episode's parts in seq order: *parts (caller frees with partbuf_parts_free)
 * and *count. PARTBUF_NOT_FOUND (and no output) when the episode does not exist. */
partbuf_rc_t partbuf_parts(partbuf_t *self, const char *chat_id, int64_t history_version,
                           int64_t generation_attempt, partbuf_part_t **parts, size_t *count);
void partbuf_parts_free(partbuf_part_t **parts_p, size_t count);

/* Forgets closed episodes that closed at least PARTBUF_GC_AFTER_MS before now_ms
 * (monotonic). Returns how many went. */
size_t partbuf_gc(partbuf_t *self, int64_t now_ms);

/* Episodes held (open or closed). */
size_t partbuf_size(partbuf_t *self);

/* A relay_handler_fn over a partbuf_t (ctx): the parts after the requested seq, contiguous,
 * up to max_parts and about PROTO_REPLY_MAX_BYTES of JSON (then `more`), `closed` when the
 * episode is closed and nothing is left; WIRE_STATUS_NO_EPISODE when it is unknown. */
int partbuf_relay_handler(void *ctx, const wire_request_t *req, wire_reply_t *reply);

#endif
