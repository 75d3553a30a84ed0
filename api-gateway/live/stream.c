/* stream: the SSE stream loop; see stream.h. */
#include "stream.h"
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
    episode_t *episode; /* the current episode's parts (ARCHITECTURE.md §7.3) */
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

static void s_emit_rows(stream_t *s, json_t *rows) {
    size_t i;
    json_t *m;
    json_array_foreach(rows, i, m) {
        json_int_t id = json_integer_value(json_object_get(m, "id"));
        s->delivered_id = id > s->delivered_id ? id : s->delivered_id;
        json_object_del(m, "deleted");
        s_emit(s, "message", json_pack("{s:O}", "message", m), id);
    }
}

/* Runs a JSON-rows query on conn; NULL on error (logged). */
static json_t *s_rows(PGconn *conn, const char *sql, int n, const char *const *p) {
    http_resp_t ignore = {0};
    json_t *rows = gateway_rows(conn, sql, n, p, &ignore);
    free(ignore.body);
    return rows;
}

/* Sends the whole visible history again after a history_reset: the client's copy, from the
 * resume point or not, is no longer the chat's. False when the read failed: the client has
 * dropped its copy, so the stream is uninitialized again and its next sync sends it all. */
static bool s_reset(stream_t *s, PGconn *conn, const char *all) {
    s_emit(s, "history_reset", json_object(), 0);
    s->after_id = 0;
    const char *p[] = {s->chat_id, "0"};
    json_t *rows = s_rows(conn, all, 2, p);
    if (!rows) {
        s->initialized = false;
        return false;
    }
    s_emit_rows(s, rows);
    json_decref(rows);
    return true;
}

/* True when the resume point (the last message the client had) is gone: an edit truncates a
 * suffix, so the client's copy is stale exactly when its last message was deleted. */
static bool s_resume_point_gone(stream_t *s, PGconn *conn) {
    if (s->after_id <= 0) {
        return false;
    }
    char after[DB_PARAM_INT64_LEN];
    const char *p[] = {s->chat_id, db_param_int64(after, s->after_id)};
    json_t *rows = s_rows(conn,
                          "SELECT to_jsonb(deleted) FROM chat_messages WHERE chat_id = $1"
                          " AND id = $2::bigint",
                          2, p);
    bool gone = rows && (json_array_size(rows) == 0 || json_is_true(json_array_get(rows, 0)));
    json_decref(rows);
    return gone;
}

/* Emits the rows the client lacks; false when a read failed (nothing then counts as read). */
static bool s_sync_messages(stream_t *s, PGconn *conn) {
    char after[DB_PARAM_INT64_LEN];
    char since[DB_PARAM_INT64_LEN];
    const char *p[] = {s->chat_id, db_param_int64(after, s->after_id),
                       db_param_int64(since, s->snapshot_version)};
    const char *all = "SELECT " GATEWAY_MESSAGE_JSON " FROM chat_messages m WHERE m.chat_id = $1"
                      " AND m.visibility <> 'model' AND NOT m.deleted AND m.id > $2::bigint"
                      " ORDER BY m.id";
    if (!s->initialized) {
        if (s_resume_point_gone(s, conn)) {
            return s_reset(s, conn, all);
        }
        json_t *rows = s_rows(conn, all, 2, p);
        s_emit_rows(s, rows);
        json_decref(rows);
        return rows != NULL;
    }
    /* Rows changed since the last applied snapshot: the revision watermark, so a receipt
     * that leaves history_version alone is still delivered. A deletion counts wherever it
     * falls, at or before the resume point too. */
    json_t *rows = s_rows(conn,
                          "SELECT (" GATEWAY_MESSAGE_OPEN " || ', \"deleted\": ' ||"
                          " m.deleted::text || '}')::json FROM chat_messages m WHERE m.chat_id = $1"
                          " AND m.visibility <> 'model' AND m.revision > $3::bigint"
                          " AND (m.id > $2::bigint OR m.deleted) ORDER BY m.id",
                          3, p);
    if (!rows) {
        return false;
    }
    bool reset = false;
    size_t i;
    json_t *m;
    json_array_foreach(rows, i, m) {
        reset |= json_is_true(json_object_get(m, "deleted"));
    }
    if (reset) {
        json_decref(rows);
        return s_reset(s, conn, all);
    }
    s_emit_rows(s, rows);
    json_decref(rows);
    return true;
}

/* Emits the calls the client must answer; false when the read failed. */
static bool s_sync_action(stream_t *s, PGconn *conn) {
    const char *p[] = {s->chat_id};
    char *sql = mem_printf("SELECT jsonb_build_object('tool_call_id', call_id, 'tool_name', name,"
                           " 'args', args::text) FROM (%s) pending",
                           chatstate_client_calls_sql);
    json_t *calls = s_rows(conn, sql, 1, p);
    free(sql);
    if (!calls) {
        return false;
    }
    if (json_array_size(calls) == 0) { /* none: an agent wait, no client's business */
        json_decref(calls);
    } else {
        s_emit(s, "action_required", json_pack("{s:{s:o}}", "action_required", "tool_calls", calls),
               0);
    }
    return true;
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
 * goes to its newest message, at the catch-up, then at most once per STREAM_MARK_READ_MS. A
 * mark that must wait, or failed (chatstate_mark_read logs it), asks for a sync later. */
static void s_mark_read(stream_t *s, PGconn *conn) {
    if (s->delivered_id <= s->marked_id) {
        return;
    }
    int64_t now = id_now_ms();
    int64_t wait = s->marked_ms ? s->marked_ms + STREAM_MARK_READ_MS - now : 0;
    if (wait <= 0 && chatstate_mark_read(conn, s->chat_id, s->user_id, s->delivered_id) == 0) {
        s->marked_id = s->delivered_id;
        s->marked_ms = now;
        return;
    }
    feed_sync_later(s->feed, wait > 0 ? wait : STREAM_MARK_READ_MS);
}

/* A read of a sync failed (a lost connection, a server restarting): the transaction is rolled
 * back, the stream's versions stay as they were, and it syncs again at the hub's next tick.
 * The hint that asked for this sync is spent (the hub's poll wakes a stream only for a version
 * no hint announced), so without the retry its rows would wait for the chat's next change. */
static void s_sync_failed(stream_t *s, PGconn *conn, PGresult *res) {
    PQclear(res);
    PQclear(PQexec(conn, "ROLLBACK"));
    pool_put(s->gw->pool, conn);
    feed_sync_later(s->feed, HUB_TICK_MS);
}

/* One sync: one read transaction, then the events in the order of ARCHITECTURE.md §7.3. */
static void s_sync(stream_t *s) {
    atomic_fetch_add(&s->gw->stream_reads, 1);
    PGconn *conn = pool_get(s->gw->pool);
    const char *p[] = {s->chat_id, s->user_id};
    PGresult *res = NULL;
    if (db_exec(conn, NULL, 0, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL) ==
        DB_OK) {
        db_err_t e;
        res = db_query(conn, &e, NULL, 0,
                       "SELECT snapshot_version, history_version, queue_version,"
                       " retry_state_version, generation_attempt, status,"
                       " coalesce(worker_id::text, ''), last_error::text, retry_state::text"
                       " FROM chats WHERE id = $1 AND owner_id = $2",
                       2, p);
    }
    if (!res) {
        s_sync_failed(s, conn, res);
        return;
    }
    if (PQntuples(res) != 1) { /* the chat is gone */
        feed_close(s->feed);
        PQclear(res);
        PQclear(PQexec(conn, "ROLLBACK"));
        pool_put(s->gw->pool, conn);
        return;
    }
    int64_t snap = db_int64(res, 0, 0);
    int64_t hv = db_int64(res, 0, 1);
    int64_t qv = db_int64(res, 0, 2);
    int64_t rv = db_int64(res, 0, 3);
    int64_t ga = db_int64(res, 0, 4);
    if (s->initialized && snap <= s->snapshot_version) {
        PQclear(res);
        PQclear(PQexec(conn, "COMMIT"));
        s_mark_read(s, conn); /* a mark that waited */
        pool_put(s->gw->pool, conn);
        return;
    }
    const char *status = PQgetvalue(res, 0, 5);
    if (!s_sync_messages(s, conn)) {
        s_sync_failed(s, conn, res);
        return;
    }
    if (!s->initialized || qv > s->queue_version) {
        json_t *q = s_rows(conn,
                           "SELECT " GATEWAY_QUEUED_JSON " FROM chat_queued_messages q"
                           " WHERE q.chat_id = $1 ORDER BY q.position, q.id",
                           1, p);
        if (!q) { /* rows it sent already may come again (by id and revision) */
            s_sync_failed(s, conn, res);
            return;
        }
        s_emit(s, "queue_update", json_pack("{s:o}", "queued_messages", q), 0);
    }
    if (strcmp(status, s->status) != 0) {
        s_emit(s, "status", json_pack("{s:{s:s}}", "status", "status", status), 0);
    }
    if (!strcmp(status, "error") && hv > s->error_history_version && db_text(res, 0, 7)) {
        s_emit(s, "error", json_pack("{s:o}", "error", json_loads(db_text(res, 0, 7), 0, NULL)), 0);
        s->error_history_version = hv;
    }
    if (!strcmp(status, "requires_action") && hv > s->action_history_version) {
        if (!s_sync_action(s, conn)) {
            s_sync_failed(s, conn, res);
            return;
        }
        s->action_history_version = hv;
    }
    if (rv > s->retry_state_version && db_text(res, 0, 8)) {
        s_emit(s, "retry", json_pack("{s:o}", "retry", json_loads(db_text(res, 0, 8), 0, NULL)), 0);
    }
    PQclear(PQexec(conn, "COMMIT"));
    s->snapshot_version = snap;
    s->queue_version = qv;
    s->retry_state_version = rv;
    snprintf(s->status, sizeof s->status, "%s", status);
    s->initialized = true;
    char worker_id[ID_UUID_LEN + 1];
    snprintf(worker_id, sizeof worker_id, "%s", PQgetvalue(res, 0, 6));
    PQclear(res);
    s_mark_read(s, conn);
    pool_put(s->gw->pool, conn);
    /* Step (7) of the reference's sync (api-shapes.md §4.3): preview_reset for a new episode,
     * the bootstrap's included, then its parts so far (a relay catch-up). */
    episode_sync(s->episode, hv, ga, worker_id);
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
    (void)asked_ms;
    if (!change || !s_on_quiet(owner, change)) {
        s_sync(owner);
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
    feed_live(s->feed, s_on_live);
    feed_direct(s->feed, req->version);
    log_info("stream_opened", "chat_id=%s user_id=%s after_id=%lld", s->chat_id, s->user_id,
             (long long)s->after_id);
    resp->status = 200;
}
