/*
 * feed: one Server-Sent Events connection, independent of what it carries (ARCHITECTURE.md
 * §7.1). It owns the output buffer, the wake-ups (a sync is due, live parts arrived, the
 * gateway is stopping), keep-alive comments and the MHD content reader. A feed owns no
 * thread: its owner's work (the chat stream's or the watch's reads) runs as a job on the
 * gateway's stream pool, at most one job per feed at a time, and the connection stays
 * suspended in libmicrohttpd while the feed has nothing to send; an emit resumes it.
 *
 * A live part that is the next one its owner expects is taken on the hub's thread (feed_live),
 * without a job; the parts of one hub batch reach the connection together (hub_ops_t.flush).
 * A feed allowed to write directly (feed_direct: plain HTTP/1.1) writes its chunked body
 * itself to the socket while libmicrohttpd holds the connection suspended with nothing of its
 * own unsent: one send per batch, no resume. A direct write that fails, or finds the socket
 * full for FEED_STALL_MS, ends the connection; one that finds it full keeps the rest and tries
 * again at the next emit, flush or hub tick.
 */
#ifndef CHATFLEET_FEED_H
#define CHATFLEET_FEED_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "hub.h"
#include "id.h"
#include "wire.h"
#include "workpool.h"

#define FEED_KEEPALIVE_MS 15000 /* an SSE comment line when nothing else was sent */
#define FEED_PENDING_MAX  4096  /* live parts queued before falling back to a sync */
#define FEED_CHATS_MAX    64    /* changed chats remembered between two jobs; beyond: sync all */
#define FEED_STALL_MS     60000 /* a direct write's socket full this long: the connection ends */
#define FEED_SETTLE_MS                                                                             \
    300 /* a second sync at least this long after opening (on the next hub tick): the hub's        \
           new subscription needs a moment to reach the broker */

struct MHD_Response;
struct MHD_Connection;

typedef struct feed feed_t;

/* A chat that changed since the feed's last job, as its hints said. */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    int64_t hinted_ms;        /* when the newest hint arrived: a read started then sees it */
    int64_t snapshot_version; /* of the newest hint, whose status and archived these are */
    char status[16];
    bool archived;
    bool title_changed; /* some hint since the last job said the title was set */
} feed_change_t;

typedef struct {
    /* In a job: a chat changed (change), or everything is to be synced (change NULL), as
     * asked at asked_ms (a read started then or later sees it). */
    void (*sync)(void *owner, const feed_change_t *change, int64_t asked_ms);
    void (*part)(void *owner, hub_part_t *part); /* in a job; may be NULL */
    void (*destroy)(void *owner);                /* the connection is gone and no job runs */
    /* True when change can show nothing (sync would return without a write); may be NULL.
     * Called on the hub's thread, only while no job of the feed runs or waits, so it may read
     * what the jobs keep: a hint it calls quiet costs no job (ARCHITECTURE.md §1.1). */
    bool (*quiet)(void *owner, const feed_change_t *change);
} feed_ops_t;

/* The hub's fast path for a live part (feed_live): the part's event to send now when it is the
 * next one the owner expects (the owner counts it as delivered; the text stays the part's, len
 * bytes), else NULL and the part goes to a job (feed_ops_t.part). Called on the hub's thread,
 * only while no job of the feed runs or waits, so it may read and change what the jobs keep. */
typedef const char *(feed_live_fn)(void *owner, hub_part_t *part, size_t *len);

/* A feed on conn (NULL without a server) registered with hub under key for user_id, whose
 * jobs run on pool and whose first job, posted when MHD first reads the response, runs a full
 * sync. Returns the MHD response to queue
 * (status 200), or NULL when user_id has the most streams the hub allows (nothing is taken
 * then: the caller still owns owner). */
struct MHD_Response *feed_new(hub_t *hub, workpool_t *pool, struct MHD_Connection *conn,
                              const char *key, const char *user_id, const feed_ops_t *ops,
                              void *owner, feed_t **out);

/* Gives the feed the hub's fast path for live parts (see feed_live_fn). Call right after
 * feed_new. */
void feed_live(feed_t *self, feed_live_fn *live);

/* Lets the feed write its body straight to the connection's socket (see above) when the
 * request's version is HTTP/1.1 (libmicrohttpd chunks the body then) and the connection is not
 * TLS; otherwise changes nothing. Call right after feed_new, before the response is queued. */
void feed_direct(feed_t *self, const char *http_version);

/* The object the streams of the feed's key share (hub_shared), with a reference for the
 * caller, or NULL. Call right after feed_new. */
void *feed_shared(feed_t *self, const hub_share_ops_t *ops);

/* One event's text: "id:" (when id > 0), "event:", "data:" with event's JSON, to which
 * "type" is added; steals the reference to event. The caller frees the text. */
char *feed_frame(const char *type, json_t *event, int64_t id);

/* Appends feed_frame(type, event, id). Call from the feed's job: what a job appends is sent
 * when its round of work ends, in one write. */
void feed_emit(feed_t *self, const char *type, json_t *event, int64_t id);

/* Appends an event already made by feed_frame (len bytes). Call from the feed's job. */
void feed_emit_frame(feed_t *self, const char *frame, size_t len);

/* Asks for one more full sync at the first hub tick at least delay_ms from now (a retry).
 * Any thread. */
void feed_sync_later(feed_t *self, int64_t delay_ms);

/* Ends the feed after what is buffered has been sent. Any thread. */
void feed_close(feed_t *self);

/* The hub callbacks for every feed. */
extern const hub_ops_t feed_hub_ops;

#endif
