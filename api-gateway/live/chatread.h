/*
 * chatread: a chat stream's sync read (ARCHITECTURE.md §7.3), made once for all the streams of
 * the chat that need the same one. A read is one REPEATABLE READ transaction: the chat's row,
 * the message rows a stream that applied snapshot `since` lacks, the queue when it changed,
 * the calls a client must answer, each event already encoded as its SSE frame (the frames are
 * the same for every stream of the chat, so each stream only copies them). The streams of a
 * chat share one chatread_share_t (the hub keeps it with the chat's streams, hub_shared): the
 * first stream to ask reads, those that ask while it reads wait for it, and those that come
 * after take its result while it is fresh enough for them, so the 10,000 streams of one chat
 * woken by one hint make one read between them, not 10,000.
 */
#ifndef CHATFLEET_CHATREAD_H
#define CHATFLEET_CHATREAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway.h"
#include "hub.h"

#define CHATREAD_SLOTS 4 /* reads a share keeps (distinct users, snapshots or resume points) */

/* One event's frame (feed_frame's text, len bytes). */
typedef struct {
    int64_t id;   /* the message's id (message rows), else 0 */
    bool deleted; /* a changed row that was deleted (no frame then) */
    char *frame;
    size_t len;
} chatread_frame_t;

/* One read's result: read-only once chatread_get returned it, shared by reference. */
typedef struct {
    bool ok;         /* false: the read failed and nothing in it counts */
    bool gone;       /* the chat is not there, or not the user's */
    int64_t read_ms; /* when the read started (id_now_ms) */
    int64_t since;   /* the snapshot its rows follow (-1: none, the stream starts) */
    int64_t snapshot_version;
    int64_t history_version;
    int64_t queue_version;
    int64_t retry_state_version;
    int64_t generation_attempt;
    char status[16];
    char worker_id[ID_UUID_LEN + 1]; /* "" when unowned */
    /* since < 0: the visible rows after the resume point, or all of them when resume_gone;
     * since >= 0: the rows whose revision is above since, deleted ones flagged (any id: the
     * reader filters by its resume point). Empty when snapshot_version <= since. */
    chatread_frame_t *rows;
    size_t nrows;
    bool resume_gone; /* since < 0: the resume point's message was deleted */
    /* since >= 0 and a changed row deleted: the whole visible history (history_reset). */
    chatread_frame_t *all;
    size_t nall;
    /* The other events, len 0 when the read has none. */
    chatread_frame_t queue_event;  /* queue_update, when since < 0 or queue_version > since */
    chatread_frame_t status_event; /* status */
    chatread_frame_t error_event;  /* error (last_error), when the chat is in error with one */
    chatread_frame_t action_event; /* action_required, when requires_action with client calls */
    chatread_frame_t retry_event;  /* retry, when retry_state is set */
    bool action_read;              /* the client calls were read (status requires_action) */
    atomic_int refs;               /* the module's */
} chatread_t;

/* A new reference to self. */
chatread_t *chatread_ref(chatread_t *self);
void chatread_unref(chatread_t **self_p);

/* What the streams of one chat share: the reads in flight and the last ones done, and the
 * newest message a stream of the chat marked read for its user. Reference-counted. */
typedef struct chatread_share chatread_share_t;

/* The ops a hub keeps a chat's share with (hub_shared). */
extern const hub_share_ops_t chatread_share_ops;

/* Gives back a reference taken by hub_shared. Safe on NULL. */
void chatread_share_unref(chatread_share_t **self_p);

/* The sync read of chat_id for a stream of user_id that applied snapshot since (-1: none yet,
 * and then after: its resume point, 0: none), fresh enough for what woke the stream: a read
 * that started after asked_ms, or (want_version > 0) one that saw at least want_version. A
 * read of share (one in flight is waited for) when one is, else a read on a connection of
 * gw's pool, kept in share for the others (share NULL: a read of the caller's own). Never
 * NULL: a failed read has ok false. Each read adds one to gw->stream_reads. The caller unrefs
 * what it gets. */
chatread_t *chatread_get(chatread_share_t *share, gateway_t *gw, const char *chat_id,
                         const char *user_id, int64_t since, int64_t after, int64_t asked_ms,
                         int64_t want_version);

/* True when some stream of the share's chat marked message id (or a newer one) read for
 * user_id already: the owner's read marker is one row, so another write would move nothing.
 * False with share NULL. */
bool chatread_marked(chatread_share_t *share, const char *user_id, int64_t id);

/* Notes that a stream of the chat marked message id read for user_id. Safe with share NULL. */
void chatread_mark(chatread_share_t *share, const char *user_id, int64_t id);

#endif
