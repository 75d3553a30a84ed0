/* watch: lifecycle events for all of a user's chats; see watch.h. */
#include "watch.h"
#include "db.h"
#include "feed.h"
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char *const gateway_chat_json_sql;

/* The events a watch writes with a chat's JSON and nothing else, whose text is therefore the
 * same for every watch that reports them from one cached row. */
static const char *const s_kinds[] = {"created", "status_change", "title_change", "archived"};
#define S_KINDS 4

typedef struct {
    int64_t read_ms;       /* when the read that produced row started */
    json_t *row;           /* or NULL before the first read */
    int64_t reading_ms;    /* > 0: a read that started then is in flight */
    char *frames[S_KINDS]; /* row's events, encoded by the first watch to write each */
} cached_t;

static void s_frames_clear(cached_t *c) {
    for (int k = 0; k < S_KINDS; k++) {
        free(c->frames[k]);
        c->frames[k] = NULL;
    }
}

struct watch_cache {
    pthread_mutex_t lock;
    pthread_cond_t done; /* a read in flight ended */
    zhashx_t *rows;      /* "user_id/chat_id", or "user_id/" and a star (the full read) */
};

static void s_cached_free(void **item) {
    cached_t *c = *item;
    if (c) {
        s_frames_clear(c);
        json_decref(c->row);
        free(c);
        *item = NULL;
    }
}

watch_cache_t *watch_cache_new(void) {
    watch_cache_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->done, NULL);
    self->rows = zhashx_new();
    zhashx_set_destructor(self->rows, s_cached_free);
    return self;
}

void watch_cache_destroy(watch_cache_t **self_p) {
    watch_cache_t *self = *self_p;
    if (!self) {
        return;
    }
    zhashx_destroy(&self->rows);
    pthread_cond_destroy(&self->done);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The value of key read at or after since_ms (a new reference), waiting for such a read
 * already in flight. NULL when there is none: the caller reads now, as of *started_ms, and
 * must s_cache_put the outcome (NULL when the read failed), which wakes those waiting. */
static json_t *s_cache_get(watch_cache_t *self, const char *key, int64_t since_ms,
                           int64_t *started_ms) {
    *started_ms = id_now_ms();
    if (!self) {
        return NULL;
    }
    json_t *row = NULL;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        cached_t *c = zhashx_lookup(self->rows, key);
        if (c && c->row && c->read_ms >= since_ms) {
            row = json_incref(c->row);
            break;
        }
        if (c && c->reading_ms > 0 && c->reading_ms >= since_ms) {
            pthread_cond_wait(&self->done, &self->lock);
            continue;
        }
        if (!c) {
            if (zhashx_size(self->rows) >= WATCH_CACHE_ROWS) {
                zhashx_purge(self->rows); /* readers in flight put their rows back */
            }
            c = mem_calloc(1, sizeof *c);
            zhashx_insert(self->rows, key, c);
        }
        *started_ms = c->reading_ms = id_now_ms();
        break;
    }
    pthread_mutex_unlock(&self->lock);
    return row;
}

static void s_cache_put(watch_cache_t *self, const char *key, int64_t read_ms, json_t *row) {
    if (!self) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    cached_t *c = zhashx_lookup(self->rows, key);
    if (!c) {
        c = mem_calloc(1, sizeof *c);
        zhashx_insert(self->rows, key, c);
    }
    if (row && (!c->row || c->read_ms < read_ms)) {
        s_frames_clear(c);
        json_decref(c->row);
        c->row = json_incref(row);
        c->read_ms = read_ms;
    }
    if (c->reading_ms == read_ms) {
        c->reading_ms = 0;
    }
    pthread_cond_broadcast(&self->done);
    pthread_mutex_unlock(&self->lock);
}

/* What a watch compares for one chat. */
typedef struct {
    char status[16];
    char *title;
    bool archived;
} seen_t;

typedef struct {
    feed_t *feed;
    gateway_t *gw;
    char user_id[ID_UUID_LEN + 1];
    zhashx_t *seen; /* chat id -> seen_t */
    bool initialized;
} watch_t;

static void s_seen_free(void **item) {
    seen_t *s = *item;
    if (s) {
        free(s->title);
        free(s);
        *item = NULL;
    }
}

static char *s_frame(const char *kind, json_t *chat, json_t *tool_calls) {
    json_t *e = json_pack("{s:s,s:O}", "kind", kind, "chat", chat);
    if (tool_calls) {
        json_object_set_new(e, "tool_calls", tool_calls);
    }
    return feed_frame(kind, e, 0);
}

/* Writes one event of chat. An event of the cached row itself (the same JSON object every
 * watch of the user woken by one hint got) is encoded once, by the first watch to write it. */
static void s_event(watch_t *w, const char *kind, json_t *chat, json_t *tool_calls) {
    watch_cache_t *cache = w->gw->watch_cache;
    int k = 0;
    while (k < S_KINDS && strcmp(s_kinds[k], kind) != 0) {
        k++;
    }
    char *frame = NULL;
    const char *id = json_string_value(json_object_get(chat, "id"));
    if (cache && id && k < S_KINDS && !tool_calls) {
        char key[2 * ID_UUID_LEN + 2];
        snprintf(key, sizeof key, "%s/%s", w->user_id, id);
        pthread_mutex_lock(&cache->lock);
        cached_t *c = zhashx_lookup(cache->rows, key);
        if (c && c->row == chat) {
            if (!c->frames[k]) {
                c->frames[k] = s_frame(kind, chat, NULL);
            }
            frame = mem_strdup(c->frames[k]);
        }
        pthread_mutex_unlock(&cache->lock);
    }
    if (!frame) {
        frame = s_frame(kind, chat, tool_calls);
    }
    feed_emit_frame(w->feed, frame, strlen(frame));
    free(frame);
}

static json_t *s_tool_calls(PGconn *conn, const char *chat_id) {
    const char *p[] = {chat_id};
    char *sql = mem_printf("SELECT jsonb_build_object('tool_call_id', call_id, 'tool_name', name,"
                           " 'args', args::text) FROM (%s) pending",
                           chatstate_client_calls_sql);
    http_resp_t ignore = {0};
    json_t *calls = gateway_rows(conn, sql, 1, p, &ignore);
    free(ignore.body);
    free(sql);
    return calls;
}

/* Reports what differs in chat from what the watch saw, and remembers it. *conn is a pooled
 * connection, taken here (the caller puts it back) when an action_required needs one. */
static void s_diff(watch_t *w, PGconn **conn, json_t *chat) {
    const char *id = json_string_value(json_object_get(chat, "id"));
    const char *status = json_string_value(json_object_get(chat, "status"));
    const char *title = json_string_value(json_object_get(chat, "title"));
    bool archived = json_is_true(json_object_get(chat, "archived"));
    if (!id || !status) {
        return;
    }
    seen_t *was = zhashx_lookup(w->seen, id);
    if (!was) {
        if (w->initialized) {
            s_event(w, "created", chat, NULL);
        }
        was = mem_calloc(1, sizeof *was);
        zhashx_insert(w->seen, id, was);
    } else {
        if (strcmp(was->status, status) != 0) {
            s_event(w, "status_change", chat, NULL);
            if (!strcmp(status, "requires_action")) {
                if (!*conn) {
                    *conn = pool_get(w->gw->pool);
                }
                json_t *calls = s_tool_calls(*conn, id);
                if (json_array_size(calls) > 0) { /* none: an agent wait, no client's business */
                    s_event(w, "action_required", chat, calls);
                } else {
                    json_decref(calls);
                }
            }
        }
        if (strcmp(was->title ? was->title : "", title ? title : "") != 0) {
            s_event(w, "title_change", chat, NULL);
        }
        if (was->archived != archived) {
            s_event(w, "archived", chat, NULL);
        }
    }
    snprintf(was->status, sizeof was->status, "%s", status);
    free(was->title);
    was->title = title ? mem_strdup(title) : NULL;
    was->archived = archived;
}

/* One chat's row for a hint that arrived at hinted_ms: another watch's read if it started
 * then or later, else a read of our own (shared from now on). NULL when the chat is not the
 * user's or the read failed. */
static json_t *s_chat_row(watch_t *w, const char *chat_id, int64_t hinted_ms) {
    char key[2 * ID_UUID_LEN + 2];
    snprintf(key, sizeof key, "%s/%s", w->user_id, chat_id);
    int64_t started;
    json_t *row = s_cache_get(w->gw->watch_cache, key, hinted_ms, &started);
    if (row) {
        return row;
    }
    char *sql = mem_printf("SELECT %s FROM chats c WHERE c.owner_id = $1 AND c.id = $2",
                           gateway_chat_json_sql);
    const char *p[] = {w->user_id, chat_id};
    http_resp_t ignore = {0};
    PGconn *conn = pool_get(w->gw->pool);
    json_t *rows = gateway_rows(conn, sql, 2, p, &ignore);
    pool_put(w->gw->pool, conn);
    free(ignore.body);
    free(sql);
    row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    s_cache_put(w->gw->watch_cache, key, started, row);
    return row;
}

/* True when the hints of change can have moved nothing this watch shows of a chat it has
 * seen: the same status and archived flag, and no title set. */
static bool s_nothing_shown(void *owner, const feed_change_t *change) {
    const watch_t *w = owner;
    const seen_t *was = zhashx_lookup(w->seen, change->chat_id);
    return was && change->snapshot_version > 0 && !change->title_changed &&
           !strcmp(was->status, change->status) && was->archived == change->archived;
}

/* A full read (change NULL: the user's most recently updated chats) or one chat's, skipped
 * when its hints changed nothing the watch shows. */
static void s_sync(void *owner, const feed_change_t *change, int64_t hinted_ms) {
    watch_t *w = owner;
    if (change) {
        if (s_nothing_shown(w, change)) {
            return;
        }
        json_t *row = s_chat_row(w, change->chat_id, hinted_ms);
        if (row) {
            PGconn *conn = NULL; /* taken only if an action_required needs its calls */
            s_diff(w, &conn, row);
            if (conn) {
                pool_put(w->gw->pool, conn);
            }
        }
        json_decref(row);
        return;
    }
    /* The full read is shared like a chat's: a user's watches polled together read once. */
    char key[ID_UUID_LEN + 3];
    snprintf(key, sizeof key, "%s/*", w->user_id);
    int64_t started;
    json_t *rows = s_cache_get(w->gw->watch_cache, key, hinted_ms, &started);
    PGconn *conn = NULL;
    if (!rows) {
        char *sql = mem_printf("SELECT %s FROM chats c WHERE c.owner_id = $1"
                               " ORDER BY c.updated_at DESC, c.id DESC LIMIT %d",
                               gateway_chat_json_sql, WATCH_CHATS_MAX);
        const char *p[] = {w->user_id};
        http_resp_t ignore = {0};
        conn = pool_get(w->gw->pool);
        rows = gateway_rows(conn, sql, 1, p, &ignore);
        free(ignore.body);
        free(sql);
        s_cache_put(w->gw->watch_cache, key, started, rows);
    }
    size_t i;
    json_t *chat;
    json_array_foreach(rows, i, chat) {
        s_diff(w, &conn, chat);
    }
    if (conn) {
        pool_put(w->gw->pool, conn);
    }
    if (rows) { /* a failed read changes nothing; the next poll retries */
        w->initialized = true;
    }
    json_decref(rows);
}

static void s_destroy(void *owner) {
    watch_t *w = owner;
    log_info("watch_closed", "user_id=%s", w->user_id);
    zhashx_destroy(&w->seen);
    free(w);
}

static const feed_ops_t s_ops = {s_sync, NULL, s_destroy, s_nothing_shown};

void watch_handle(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    watch_t *w = mem_calloc(1, sizeof *w);
    w->gw = gw;
    w->seen = zhashx_new();
    zhashx_set_destructor(w->seen, s_seen_free);
    snprintf(w->user_id, sizeof w->user_id, "%s", req->user_id);
    char key[64];
    snprintf(key, sizeof key, "%s%s", HUB_USER_PREFIX, w->user_id);
    resp->raw = feed_new(gw->hub, gw->streams, req->conn, key, w->user_id, &s_ops, w, &w->feed);
    if (!resp->raw) {
        log_info("watch_refused", "user_id=%s reason=streams_per_user", w->user_id);
        zhashx_destroy(&w->seen);
        free(w);
        http_busy(resp, "too many open streams for this user");
        return;
    }
    feed_direct(w->feed, req->version);
    log_info("watch_opened", "user_id=%s", w->user_id);
    resp->status = 200;
}
