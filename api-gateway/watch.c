/* watch: lifecycle events for all of a user's chats; see watch.h. */
#include "watch.h"
#include "db.h"
#include "feed.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const char *const gateway_chat_json_sql;

typedef struct {
    feed_t *feed;
    gateway_t *gw;
    char user_id[ID_UUID_LEN + 1];
    json_t *known; /* chat id -> the chat JSON last seen */
    bool initialized;
    int64_t last_sync_ms;
} watch_t;

static void s_event(watch_t *w, const char *kind, json_t *chat, json_t *tool_calls) {
    json_t *e = json_pack("{s:s,s:O}", "kind", kind, "chat", chat);
    if (tool_calls) {
        json_object_set_new(e, "tool_calls", tool_calls);
    }
    feed_emit(w->feed, kind, e, 0);
}

static json_t *s_tool_calls(PGconn *conn, const char *chat_id) {
    const char *p[] = {chat_id};
    char *sql = mem_printf("SELECT jsonb_build_object('tool_call_id', call_id, 'tool_name', name,"
                           " 'args', args::text) FROM (%s) pending",
                           chatstate_pending_calls_sql);
    http_resp_t ignore = {0};
    json_t *calls = gateway_rows(conn, sql, 1, p, &ignore);
    free(ignore.body);
    free(sql);
    return calls;
}

static bool s_changed(json_t *was, json_t *now, const char *key) {
    return !json_equal(json_object_get(was, key), json_object_get(now, key));
}

static void s_diff(watch_t *w, PGconn *conn, json_t *chat) {
    const char *id = json_string_value(json_object_get(chat, "id"));
    json_t *was = json_object_get(w->known, id);
    const char *status = json_string_value(json_object_get(chat, "status"));
    if (!was) {
        if (w->initialized) {
            s_event(w, "created", chat, NULL);
        }
    } else {
        if (s_changed(was, chat, "status")) {
            s_event(w, "status_change", chat, NULL);
            if (!strcmp(status, "requires_action")) {
                s_event(w, "action_required", chat, s_tool_calls(conn, id));
            }
        }
        if (s_changed(was, chat, "title")) {
            s_event(w, "title_change", chat, NULL);
        }
        if (s_changed(was, chat, "archived")) {
            s_event(w, "archived", chat, NULL);
        }
    }
    json_object_set(w->known, id, chat);
}

static void s_sync(void *owner) {
    watch_t *w = owner;
    int64_t wait = w->last_sync_ms + WATCH_MIN_SYNC_MS - id_now_ms();
    if (wait > 0) {
        struct timespec ts = {wait / 1000, (wait % 1000) * 1000000};
        nanosleep(&ts, NULL); /* coalesce a burst of hints into one read */
    }
    w->last_sync_ms = id_now_ms();
    char *sql = mem_printf("SELECT %s FROM chats c WHERE c.owner_id = $1"
                           " ORDER BY c.updated_at DESC, c.id DESC LIMIT %d",
                           gateway_chat_json_sql, WATCH_CHATS_MAX);
    const char *p[] = {w->user_id};
    http_resp_t ignore = {0};
    PGconn *conn = pool_get(w->gw->pool);
    json_t *rows = gateway_rows(conn, sql, 1, p, &ignore);
    free(ignore.body);
    free(sql);
    size_t i;
    json_t *chat;
    json_array_foreach(rows, i, chat) {
        s_diff(w, conn, chat);
    }
    pool_put(w->gw->pool, conn);
    if (rows) { /* a failed read changes nothing; the next poll retries */
        w->initialized = true;
    }
    json_decref(rows);
}

static void s_destroy(void *owner) {
    watch_t *w = owner;
    log_info("watch_closed", "user_id=%s", w->user_id);
    json_decref(w->known);
    free(w);
}

static const feed_ops_t s_ops = {s_sync, NULL, s_destroy};

void watch_handle(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    watch_t *w = mem_calloc(1, sizeof *w);
    w->gw = gw;
    w->known = json_object();
    snprintf(w->user_id, sizeof w->user_id, "%s", req->user_id);
    log_info("watch_opened", "user_id=%s", w->user_id);
    resp->status = 200;
    resp->raw = feed_new(gw->hub, HUB_ALL, &s_ops, w, &w->feed);
}
