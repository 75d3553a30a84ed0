/* stream: the SSE stream loop; see stream.h. */
#include "stream.h"
#include "chatread.h"
#include "episode.h"
#include "feed.h"
#include "jsonstrict.h"
#include "db.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    feed_t *feed;
    gateway_t *gw;
    episode_t *episode;      /* the current episode's parts (ARCHITECTURE.md §7.3) */
    chatread_share_t *share; /* the reads this chat's streams share, or NULL: its own */
    char chat_id[ID_UUID_LEN + 1];
    char user_id[ID_UUID_LEN + 1];
    bool initialized;
    int64_t after_id;
    int64_t snapshot_version;
    int64_t queue_version;
    int64_t retry_state_version;
    int64_t error_history_version;
    int64_t action_history_version;
    char status[16];
    int64_t delivered_id; /* the newest message the stream emitted */
    int64_t marked_id;    /* the read marker it wrote last (0: none yet) */
    int64_t marked_ms;    /* when (id_now_ms; 0: never) */
} stream_t;

/* The read marker is written at the catch-up, then at most once per this while the stream
 * delivers (a mark that must wait asks for a sync when it may be written). */
#define STREAM_MARK_READ_MS 1000

/* Emits one event of this chat (steals event). */
static void s_emit(stream_t *s, const char *type, json_t *event, int64_t id) {
    json_object_set_new(event, "chat_id", json_string(s->chat_id));
    feed_emit(s->feed, type, event, id);
}

/* Emits a frame of the stream's read (none when the read made none). */
static void s_emit_read(stream_t *s, const chatread_frame_t *f) {
    if (f->frame) {
        feed_emit_frame(s->feed, f->frame, f->len);
    }
}

/* Emits the message rows of a read after the stream's resume point. */
static void s_emit_rows(stream_t *s, const chatread_frame_t *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (rows[i].deleted || rows[i].id <= s->after_id) {
            continue;
        }
        s->delivered_id = rows[i].id > s->delivered_id ? rows[i].id : s->delivered_id;
        s_emit_read(s, &rows[i]);
    }
}

/* Emits the rows the client lacks: after a deletion (an edit truncates a suffix, wherever the
 * client's resume point falls) history_reset and the whole visible history again. */
static void s_sync_messages(stream_t *s, const chatread_t *r) {
    bool reset = r->resume_gone;
    for (size_t i = 0; s->initialized && i < r->nrows; i++) {
        reset |= r->rows[i].deleted;
    }
    if (reset) {
        s_emit(s, "history_reset", json_object(), 0);
        s->after_id = 0;
    }
    if (reset && s->initialized) {
        s_emit_rows(s, r->all, r->nall);
    } else {
        s_emit_rows(s, r->rows, r->nrows);
    }
}

/* The message_part event of a part (the same for every stream of the chat). A part whose
 * JSON does not parse (it came from a worker, so it should) is sent as null. */
static json_t *s_part_event(const char *chat_id, const char *role, const char *text, size_t len,
                            int64_t hv, int64_t ga, int64_t seq) {
    json_t *part = NULL;
    (void)jsonstrict_parse(text, len, &jsonstrict_limits_stored, &part, NULL);
    json_t *ev = json_pack("{s:{s:s,s:o*,s:I,s:I,s:I}}", "message_part", "role", role, "part", part,
                           "history_version", (json_int_t)hv, "generation_attempt", (json_int_t)ga,
                           "seq", (json_int_t)seq);
    json_object_set_new(ev, "chat_id", json_string(chat_id));
    return ev;
}

static char *s_part_frame(const wire_part_t *p) {
    return feed_frame("message_part",
                      s_part_event(p->chat_id, p->role, p->part.text, p->part.len,
                                   p->history_version, p->generation_attempt, p->seq),
                      0);
}

/* A part of the current episode, in order (episode.h): a shared part's frame is encoded once
 * for every stream of the chat. */
static void s_on_episode_part(void *owner, const episode_part_t *p) {
    stream_t *s = owner;
    if (p->shared) {
        size_t len;
        const char *frame = hub_part_frame(p->shared, s_part_frame, &len);
        feed_emit_frame(s->feed, frame, len);
        return;
    }
    feed_emit(s->feed, "message_part",
              s_part_event(s->chat_id, p->role, p->json, p->len, p->history_version,
                           p->generation_attempt, p->seq),
              0);
}

/* The hub's fast path (feed_live_fn): the shared frame of the next part of the episode. */
static const char *s_on_live(void *owner, hub_part_t *part, size_t *len) {
    stream_t *s = owner;
    return episode_take(s->episode, part) ? hub_part_frame(part, s_part_frame, len) : NULL;
}

static void s_on_episode_reset(void *owner) {
    stream_t *s = owner;
    s_emit(s, "preview_reset", json_object(), 0);
}

static const episode_ops_t s_episode_ops = {s_on_episode_reset, s_on_episode_part};

/* The owner read what the stream delivered (a stream is the owner's only): their read marker
 * goes to its newest message, at the catch-up, then at most once per STREAM_MARK_READ_MS. The
 * marker is one row per chat and user, so a mark another stream of the chat made already is not
 * written again. A mark that must wait, or failed (chatstate_mark_read logs it), asks for a
 * sync later. */
static void s_mark_read(stream_t *s) {
    if (s->delivered_id <= s->marked_id) {
        return;
    }
    if (chatread_marked(s->share, s->user_id, s->delivered_id)) {
        s->marked_id = s->delivered_id;
        return;
    }
    int64_t now = id_now_ms();
    int64_t wait = s->marked_ms ? s->marked_ms + STREAM_MARK_READ_MS - now : 0;
    if (wait <= 0) {
        PGconn *conn = pool_get(s->gw->pool);
        int rc = chatstate_mark_read(conn, s->chat_id, s->user_id, s->delivered_id);
        pool_put(s->gw->pool, conn);
        if (rc == 0) {
            chatread_mark(s->share, s->user_id, s->delivered_id);
            s->marked_id = s->delivered_id;
            s->marked_ms = now;
            return;
        }
    }
    feed_sync_later(s->feed, wait > 0 ? wait : STREAM_MARK_READ_MS);
}

/* One sync: the chat's read (chatread: one for every stream of the chat woken alike), then the
 * events in the order of ARCHITECTURE.md §7.3. A read that failed (a lost connection, a server
 * restarting) changes nothing, and the stream syncs again at the hub's next tick: the hint that
 * asked for this sync is spent (the hub's poll wakes a stream only for a version no hint
 * announced), so without the retry its rows would wait for the chat's next change. */
static void s_sync(stream_t *s, int64_t asked_ms, int64_t want_version) {
    chatread_t *r = chatread_get(s->share, s->gw, s->chat_id, s->user_id,
                                 s->initialized ? s->snapshot_version : -1, s->after_id, asked_ms,
                                 want_version);
    if (!r->ok) {
        chatread_unref(&r);
        feed_sync_later(s->feed, HUB_TICK_MS);
        return;
    }
    if (r->gone) {
        chatread_unref(&r);
        feed_close(s->feed);
        return;
    }
    if (s->initialized && r->snapshot_version <= s->snapshot_version) {
        chatread_unref(&r);
        s_mark_read(s); /* a mark that waited */
        return;
    }
    s_sync_messages(s, r);
    if (!s->initialized || r->queue_version > s->queue_version) {
        s_emit_read(s, &r->queue_event);
    }
    if (strcmp(r->status, s->status) != 0) {
        s_emit_read(s, &r->status_event);
    }
    if (!strcmp(r->status, "error") && r->history_version > s->error_history_version &&
        r->error_event.frame) {
        s_emit_read(s, &r->error_event);
        s->error_history_version = r->history_version;
    }
    if (r->action_read && r->history_version > s->action_history_version) {
        s_emit_read(s, &r->action_event);
        s->action_history_version = r->history_version;
    }
    if (r->retry_state_version > s->retry_state_version) {
        s_emit_read(s, &r->retry_event);
    }
    s->snapshot_version = r->snapshot_version;
    s->queue_version = r->queue_version;
    s->retry_state_version = r->retry_state_version;
    snprintf(s->status, sizeof s->status, "%s", r->status);
    s->initialized = true;
    s_mark_read(s);
    /* Step (7) of the reference's sync (api-shapes.md §4.3): preview_reset for a new episode,
     * the bootstrap's included, then its parts so far (a relay catch-up). */
    episode_sync(s->episode, r->history_version, r->generation_attempt, r->worker_id);
    chatread_unref(&r);
}

/* True when every hint since the stream's last job names a version it has read already (the
 * poll's own hints, ARCHITECTURE.md §7.4). */
static bool s_on_quiet(void *owner, const feed_change_t *change) {
    const stream_t *s = owner;
    return s->initialized && change->snapshot_version > 0 &&
           change->snapshot_version <= s->snapshot_version;
}

/* A stream follows one chat and reads it whole, unless its change is quiet. */
static void s_on_sync(void *owner, const feed_change_t *change, int64_t asked_ms) {
    if (!change || !s_on_quiet(owner, change)) {
        s_sync(owner, asked_ms, change ? change->snapshot_version : 0);
    }
}

int stream_versions(void *app, const char *const *chat_ids, size_t n, int64_t *out) {
    gateway_t *gw = app;
    size_t cap = n * (ID_UUID_LEN + 1) + 3, off = 0;
    char *ids = mem_alloc(cap);
    ids[off++] = '{';
    for (size_t i = 0; i < n; i++) {
        off += (size_t)snprintf(ids + off, cap - off, "%s%s", i ? "," : "", chat_ids[i]);
        out[i] = -1;
    }
    snprintf(ids + off, cap - off, "}");
    const char *p[] = {ids};
    /* The hub's thread must not wait long for a connection the requests hold: a poll that finds
     * none free is skipped (hub.h). */
    PGconn *conn = pool_get_within(gw->pool, STREAM_VERSIONS_WAIT_MS);
    if (!conn) {
        free(ids);
        return -1;
    }
    db_err_t e;
    PGresult *res =
        db_query(conn, &e, NULL, 0,
                 "SELECT id::text, snapshot_version FROM chats WHERE id = ANY($1::uuid[])", 1, p);
    pool_put(gw->pool, conn);
    free(ids);
    for (int r = 0; res && r < PQntuples(res); r++) {
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(PQgetvalue(res, r, 0), chat_ids[i])) {
                out[i] = db_int64(res, r, 1);
            }
        }
    }
    int rc = res ? 0 : -1;
    PQclear(res);
    return rc;
}

static void s_on_part(void *owner, hub_part_t *part) {
    stream_t *s = owner;
    episode_live(s->episode, part);
}

static void s_on_destroy(void *owner) {
    stream_t *s = owner;
    log_info("stream_closed", "chat_id=%s user_id=%s snapshot_version=%lld", s->chat_id, s->user_id,
             (long long)s->snapshot_version);
    episode_destroy(&s->episode);
    chatread_share_unref(&s->share);
    free(s);
}

static const feed_ops_t s_ops = {s_on_sync, s_on_part, s_on_destroy, s_on_quiet};

void stream_handle(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    int64_t after = 0;
    int64_t last_event = 0;
    const char *lei = http_header(req, "Last-Event-ID");
    if (gateway_query_int(req, "after_id", 0, INT64_MAX, 0, &after, resp) != 0) {
        return;
    }
    if (lei && gateway_int_parse(lei, 0, INT64_MAX, &last_event) != 0) {
        http_invalid(resp, "Last-Event-ID", "must be an integer from 0 to 9223372036854775807");
        return;
    }
    PGconn *conn = pool_get(gw->pool);
    json_t *chat = gateway_chat_json(conn, req->params[0], req->user_id, resp);
    pool_put(gw->pool, conn);
    if (!chat) {
        return;
    }
    json_decref(chat);
    stream_t *s = mem_calloc(1, sizeof *s);
    s->gw = gw;
    snprintf(s->chat_id, sizeof s->chat_id, "%s", req->params[0]);
    snprintf(s->user_id, sizeof s->user_id, "%s", req->user_id);
    s->after_id = after > last_event ? after : last_event;
    s->episode = episode_new(gw, s->chat_id, &s_episode_ops, s);
    resp->raw =
        feed_new(gw->hub, gw->streams, req->conn, s->chat_id, s->user_id, &s_ops, s, &s->feed);
    if (!resp->raw) {
        log_info("stream_refused", "chat_id=%s user_id=%s reason=streams_per_user", s->chat_id,
                 s->user_id);
        episode_destroy(&s->episode);
        free(s);
        http_busy(resp, "too many open streams for this user");
        return;
    }
    s->share = feed_shared(s->feed, &chatread_share_ops);
    feed_live(s->feed, s_on_live);
    feed_direct(s->feed, req->version);
    log_info("stream_opened", "chat_id=%s user_id=%s after_id=%lld", s->chat_id, s->user_id,
             (long long)s->after_id);
    resp->status = 200;
}
