/*
 * hub: the gateway's one bus subscriber, shared by every open stream and watch
 * (ARCHITECTURE.md §7.1, §9). It subscribes to the update and part topics of the chats that
 * have streams (and to every update while a watch is open), and wakes the streams: an update
 * hint marks the streams of that chat, and the watches of its user (the hint carries the
 * owner), for a sync of that chat; a live part is handed to the chat's streams, once, shared
 * (hub_part_t: the streams of a chat encode it once between them) and kept in the chat's
 * episode log, from which a stream catches up without asking the worker; every
 * CHATFLEET_STREAM_POLL_MS every watch is marked for a full sync, and the chats with streams
 * are polled (hub_set_versions): one read of their snapshot versions, and a chat whose version
 * is newer than every hint the hub saw for it wakes its streams as a hint would; every
 * HUB_TICK_MS every stream gets a tick (keep-alives, delayed syncs). Hints are only hints: a
 * stream that misses one catches up on the next poll. The hub reads the bus in batches (what
 * it holds, up to HUB_BATCH_MAX messages) and a stream's parts of one batch are flushed
 * together: a stream that lags gets them in one write.
 *
 * One thread owns the subscriber; streams register and unregister from any thread. The hub
 * calls a stream's ops with its lock held, so they must only take the stream's own lock.
 */
#ifndef CHATFLEET_HUB_H
#define CHATFLEET_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define HUB_USER_PREFIX       "user:" /* the key of a watch: "user:<user_id>" */
#define HUB_TICK_MS           1000
#define HUB_BATCH_MAX         256  /* bus messages read in one batch before the streams flush */
#define HUB_POLL_BATCH        500  /* chats whose versions one poll read asks for */
#define HUB_EPISODE_PARTS_MAX 8192 /* parts an episode log keeps; beyond: the relay */
#define HUB_EPISODE_BYTES_MAX (1024 * 1024) /* bytes of part JSON an episode log keeps */

typedef struct hub hub_t;
typedef struct hub_entry hub_entry_t;

/* A live part as the hub received it, shared by reference between the streams it goes to and
 * the episode log. */
typedef struct hub_part hub_part_t;

/* The part (read-only). */
const wire_part_t *hub_part_wire(const hub_part_t *self);

/* Takes a reference; hub_part_unref gives one back (the last frees the part). */
hub_part_t *hub_part_ref(hub_part_t *self);
void hub_part_unref(hub_part_t **self_p);

/* The part's encoding by encode (one function for the part's lifetime, whoever asks first
 * makes it; encode returns a heap string), and its length in *len. */
typedef char *(hub_part_encode_fn)(const wire_part_t *part);
const char *hub_part_frame(hub_part_t *self, hub_part_encode_fn *encode, size_t *len);

/* What the hub calls on a registered stream, from its own thread. The hub reads what the bus
 * holds in a batch (at most HUB_BATCH_MAX messages) and calls part for each live part of the
 * batch, in order; a stream that answers true holds itself alive for one call of flush, which
 * comes after the batch, without the hub's lock (the stream may be removed meanwhile). */
typedef struct {
    void (*sync)(void *stream, const hint_update_t *hint); /* a chat's hint; NULL: sync it all */
    bool (*part)(void *stream, hub_part_t *part);          /* a live part (ref it to keep it) */
    void (*flush)(void *stream);                           /* the batch's parts are all in */
    void (*close)(void *stream);                           /* the gateway is stopping */
    void (*tick)(void *stream, int64_t now_ms);            /* every HUB_TICK_MS */
} hub_ops_t;

/* Starts the hub on the broker's subscriber endpoint, allowing per_user_max open streams and
 * watches to one user. NULL when the endpoint is invalid. */
hub_t *hub_new(const char *sub_endpoint, int64_t poll_ms, int64_t per_user_max,
               const hub_ops_t *ops);
void hub_destroy(hub_t **self_p);

/* Reads the current snapshot_version of each of n chats into out[i] (-1 when the chat is gone):
 * 0, or -1 when the read failed. */
typedef int(hub_versions_fn)(void *ctx, const char *const *chat_ids, size_t n, int64_t *out);

/* From now on the poll reads the chats' versions with fn (called on the hub's thread, at most
 * HUB_POLL_BATCH chats a call; it must not wait long) and wakes only the streams of a chat that
 * changed unseen, or is gone; a read that fails wakes nothing until the next poll. Without it,
 * every stream of the polled chats is synced. */
void hub_set_versions(hub_t *self, hub_versions_fn *fn, void *ctx);

/* Adds a stream of key (a chat id, or HUB_USER_PREFIX and a user id) opened by user_id.
 * NULL when that user has per_user_max open already, or after hub_close_all. */
hub_entry_t *hub_add(hub_t *self, const char *key, const char *user_id, void *stream);

/* What the streams of one key share (hub_shared), made on first use and kept until the key's
 * last stream is removed. */
typedef struct {
    void *(*make)(void);         /* a new object: its one reference is the hub's */
    void *(*ref)(void *shared);  /* takes a reference and returns shared */
    void (*unref)(void *shared); /* gives one back (the last frees it) */
} hub_share_ops_t;

/* The object the streams of entry's key share, made by ops on the first call for the key,
 * with a reference taken for the caller (give it back with ops->unref); the hub gives its own
 * back when the key's last stream is removed. NULL when the key's object was made by other
 * ops. Call while entry is registered (right after hub_add). */
void *hub_shared(hub_t *self, hub_entry_t *entry, const hub_share_ops_t *ops);

/* Removes an entry; after it returns the hub never calls its stream again. */
void hub_remove(hub_t *self, hub_entry_t **entry_p);

/* The parts of chat's episode (history_version, generation_attempt) after after_seq, from the
 * log, oldest first: 0 with *out (caller unrefs each and frees the array) and *n, when the log
 * holds every part from after_seq + 1 to the newest it received; -1 when it cannot say (the
 * episode is not the one logged, started before the log did, or has a gap): ask the worker. */
int hub_episode(hub_t *self, const char *chat_id, int64_t history_version,
                int64_t generation_attempt, int64_t after_seq, hub_part_t ***out, size_t *n);

/* Adds the parts of chat's episode (history_version, generation_attempt) that a stream
 * fetched from the worker (seq contiguous, oldest first) to the episode log when they start it
 * (no live part of that episode arrived yet) or reach back from its first part: the next
 * stream to catch up reads them here instead of asking the worker again. */
void hub_episode_fill(hub_t *self, const char *chat_id, int64_t history_version,
                      int64_t generation_attempt, const wire_item_t *items, size_t n);

/* Asks every registered stream to close, and refuses new ones from now on (before the HTTP
 * server stops, which it cannot do while a stream's connection is suspended). */
void hub_close_all(hub_t *self);

/* Open streams right now (for /metrics and logs). */
int hub_count(hub_t *self);

#endif
