/* chatread: one sync read for all the streams of a chat; see chatread.h. */
#include "chatread.h"
#include "db.h"
#include "feed.h"
#include "mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A read is worth keeping this long after it started: a stream woken later was woken by
 * something newer, which an older read cannot answer (it only costs memory then). */
#define CHATREAD_KEEP_MS 5000

/* One kind of read (a user, the snapshot its streams applied, a starting stream's resume
 * point): the newest done, and the one in flight. */
typedef struct {
    char user_id[ID_UUID_LEN + 1];
    int64_t since;
    int64_t after;
    chatread_t *read;   /* the newest done, or NULL */
    int64_t reading_ms; /* > 0: a read that started then is in flight */
} slot_t;

struct chatread_share {
    atomic_int refs;
    pthread_mutex_t lock;
    pthread_cond_t done; /* a read in flight ended */
    slot_t slots[CHATREAD_SLOTS];
    char marked_user[ID_UUID_LEN + 1];
    int64_t marked_id; /* the newest message a stream marked read for marked_user */
};

static void s_frame_free(chatread_frame_t *f) {
    free(f->frame);
    *f = (chatread_frame_t){0};
}

static void s_frames_free(chatread_frame_t *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        s_frame_free(&v[i]);
    }
    free(v);
}

chatread_t *chatread_ref(chatread_t *self) {
    atomic_fetch_add(&self->refs, 1);
    return self;
}

void chatread_unref(chatread_t **self_p) {
    chatread_t *self = *self_p;
    *self_p = NULL;
    if (!self || atomic_fetch_sub(&self->refs, 1) != 1) {
        return;
    }
    s_frames_free(self->rows, self->nrows);
    s_frames_free(self->all, self->nall);
    s_frame_free(&self->queue_event);
    s_frame_free(&self->status_event);
    s_frame_free(&self->error_event);
    s_frame_free(&self->action_event);
    s_frame_free(&self->retry_event);
    free(self);
}

/* The frame of event type of chat_id (steals event; a NULL event, JSON that did not parse,
 * makes no frame). */
static chatread_frame_t s_frame(const char *chat_id, const char *type, json_t *event, int64_t id) {
    chatread_frame_t f = {.id = id};
    if (!event) {
        return f;
    }
    json_object_set_new(event, "chat_id", json_string(chat_id));
    f.frame = feed_frame(type, event, id);
    f.len = strlen(f.frame);
    return f;
}

/* Runs a JSON-rows query on conn; NULL on error (logged). */
static json_t *s_rows(PGconn *conn, const char *sql, int n, const char *const *p) {
    http_resp_t ignore = {0};
    json_t *rows = gateway_rows(conn, sql, n, p, &ignore);
    free(ignore.body);
    return rows;
}

/* The message frames of rows (a JSON array, stolen; NULL: the read failed, false). */
static bool s_message_frames(const char *chat_id, json_t *rows, chatread_frame_t **out, size_t *n) {
    if (!rows) {
        return false;
    }
    *n = json_array_size(rows);
    *out = *n ? mem_calloc(*n, sizeof **out) : NULL;
    size_t i;
    json_t *m;
    json_array_foreach(rows, i, m) {
        int64_t id = json_integer_value(json_object_get(m, "id"));
        if (json_is_true(json_object_get(m, "deleted"))) {
            (*out)[i] = (chatread_frame_t){.id = id, .deleted = true};
            continue;
        }
        json_object_del(m, "deleted");
        (*out)[i] = s_frame(chat_id, "message", json_pack("{s:O}", "message", m), id);
    }
    json_decref(rows);
    return true;
}

#define S_ALL_SQL                                                                                  \
    "SELECT " GATEWAY_MESSAGE_JSON " FROM chat_messages m WHERE m.chat_id = $1"                    \
    " AND m.visibility <> 'model' AND NOT m.deleted AND m.id > $2::bigint ORDER BY m.id"

/* The messages of r (its since and after), on conn in the read's transaction; false when a
 * read failed. */
static bool s_read_messages(chatread_t *r, PGconn *conn, const char *chat_id, int64_t after) {
    char a[DB_PARAM_INT64_LEN];
    char since[DB_PARAM_INT64_LEN];
    if (r->since < 0) {
        if (after > 0) {
            const char *p[] = {chat_id, db_param_int64(a, after)};
            json_t *rows = s_rows(conn,
                                  "SELECT to_jsonb(deleted) FROM chat_messages WHERE chat_id = $1"
                                  " AND id = $2::bigint",
                                  2, p);
            if (!rows) {
                return false;
            }
            r->resume_gone = json_array_size(rows) == 0 || json_is_true(json_array_get(rows, 0));
            json_decref(rows);
        }
        const char *p[] = {chat_id, db_param_int64(a, r->resume_gone ? 0 : after)};
        return s_message_frames(chat_id, s_rows(conn, S_ALL_SQL, 2, p), &r->rows, &r->nrows);
    }
    if (r->snapshot_version <= r->since) {
        return true;
    }
    /* Rows changed since the snapshot: the revision watermark, so a receipt that leaves
     * history_version alone is still delivered. A deletion counts wherever it falls. */
    const char *p[] = {chat_id, db_param_int64(since, r->since)};
    if (!s_message_frames(chat_id,
                          s_rows(conn,
                                 "SELECT (" GATEWAY_MESSAGE_OPEN " || ', \"deleted\": ' ||"
                                 " m.deleted::text || '}')::json FROM chat_messages m"
                                 " WHERE m.chat_id = $1 AND m.visibility <> 'model'"
                                 " AND m.revision > $2::bigint ORDER BY m.id",
                                 2, p),
                          &r->rows, &r->nrows)) {
        return false;
    }
    bool reset = false;
    for (size_t i = 0; i < r->nrows; i++) {
        reset |= r->rows[i].deleted;
    }
    if (!reset) {
        return true;
    }
    const char *pa[] = {chat_id, "0"};
    return s_message_frames(chat_id, s_rows(conn, S_ALL_SQL, 2, pa), &r->all, &r->nall);
}

/* The rest of r after its chat row (res): the messages, the queue when it changed, the calls
 * a client must answer; false when a read failed. */
static bool s_read_rest(chatread_t *r, PGconn *conn, PGresult *res, const char *chat_id,
                        int64_t after) {
    if (!s_read_messages(r, conn, chat_id, after)) {
        return false;
    }
    const char *p[] = {chat_id};
    if (r->since < 0 || r->queue_version > r->since) {
        json_t *q = s_rows(conn,
                           "SELECT " GATEWAY_QUEUED_JSON " FROM chat_queued_messages q"
                           " WHERE q.chat_id = $1 ORDER BY q.position, q.id",
                           1, p);
        if (!q) {
            return false;
        }
        r->queue_event =
            s_frame(chat_id, "queue_update", json_pack("{s:o}", "queued_messages", q), 0);
    }
    if (!strcmp(r->status, "requires_action")) {
        char *sql =
            mem_printf("SELECT jsonb_build_object('tool_call_id', call_id, 'tool_name', name,"
                       " 'args', args::text) FROM (%s) pending",
                       chatstate_client_calls_sql);
        json_t *calls = s_rows(conn, sql, 1, p);
        free(sql);
        if (!calls) {
            return false;
        }
        r->action_read = true;
        if (json_array_size(calls) == 0) { /* none: an agent wait, no client's business */
            json_decref(calls);
        } else {
            r->action_event =
                s_frame(chat_id, "action_required",
                        json_pack("{s:{s:o}}", "action_required", "tool_calls", calls), 0);
        }
    }
    r->status_event =
        s_frame(chat_id, "status", json_pack("{s:{s:s}}", "status", "status", r->status), 0);
    if (!strcmp(r->status, "error") && db_text(res, 0, 7)) {
        json_t *e = json_loads(db_text(res, 0, 7), 0, NULL);
        r->error_event = s_frame(chat_id, "error", e ? json_pack("{s:o}", "error", e) : NULL, 0);
    }
    if (db_text(res, 0, 8)) {
        json_t *e = json_loads(db_text(res, 0, 8), 0, NULL);
        r->retry_event = s_frame(chat_id, "retry", e ? json_pack("{s:o}", "retry", e) : NULL, 0);
    }
    return true;
}

/* One read, on a connection of gw's pool, as of now (read_ms). */
static chatread_t *s_read(gateway_t *gw, const char *chat_id, const char *user_id, int64_t since,
                          int64_t after, int64_t read_ms) {
    atomic_fetch_add(&gw->stream_reads, 1);
    chatread_t *r = mem_calloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    r->read_ms = read_ms;
    r->since = since;
    PGconn *conn = pool_get(gw->pool);
    const char *p[] = {chat_id, user_id};
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
    if (res && PQntuples(res) != 1) {
        r->ok = r->gone = true;
    } else if (res) {
        r->snapshot_version = db_int64(res, 0, 0);
        r->history_version = db_int64(res, 0, 1);
        r->queue_version = db_int64(res, 0, 2);
        r->retry_state_version = db_int64(res, 0, 3);
        r->generation_attempt = db_int64(res, 0, 4);
        snprintf(r->status, sizeof r->status, "%s", PQgetvalue(res, 0, 5));
        snprintf(r->worker_id, sizeof r->worker_id, "%s", PQgetvalue(res, 0, 6));
        r->ok = (since >= 0 && r->snapshot_version <= since) ||
                s_read_rest(r, conn, res, chat_id, after);
    }
    PQclear(res);
    /* A failed read is rolled back; what it made is not used (ok false). */
    PQclear(PQexec(conn, r->ok ? "COMMIT" : "ROLLBACK"));
    pool_put(gw->pool, conn);
    return r;
}

static void *s_share_make(void) {
    chatread_share_t *self = mem_calloc(1, sizeof *self);
    atomic_init(&self->refs, 1);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->done, NULL);
    return self;
}

static void *s_share_ref(void *shared) {
    chatread_share_t *self = shared;
    atomic_fetch_add(&self->refs, 1);
    return self;
}

void chatread_share_unref(chatread_share_t **self_p) {
    chatread_share_t *self = *self_p;
    *self_p = NULL;
    if (!self || atomic_fetch_sub(&self->refs, 1) != 1) {
        return;
    }
    for (int i = 0; i < CHATREAD_SLOTS; i++) {
        chatread_unref(&self->slots[i].read);
    }
    pthread_cond_destroy(&self->done);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

static void s_share_unref(void *shared) {
    chatread_share_t *self = shared;
    chatread_share_unref(&self);
}

const hub_share_ops_t chatread_share_ops = {s_share_make, s_share_ref, s_share_unref};

/* True when r answers a stream woken at asked_ms (by a hint of want_version, when > 0). */
static bool s_fresh(const chatread_t *r, int64_t asked_ms, int64_t want_version) {
    return r->read_ms > asked_ms ||
           (r->ok && want_version > 0 && r->snapshot_version >= want_version);
}

/* The slot of (user_id, since, after), else a slot given to it (an empty one, or the one
 * whose read is oldest), or NULL when every other slot has a read in flight. Lock held. */
static slot_t *s_slot(chatread_share_t *self, const char *user_id, int64_t since, int64_t after,
                      int64_t now) {
    slot_t *pick = NULL;
    for (int i = 0; i < CHATREAD_SLOTS; i++) {
        slot_t *s = &self->slots[i];
        if (s->read && !s->reading_ms && now - s->read->read_ms > CHATREAD_KEEP_MS) {
            chatread_unref(&s->read);
        }
        if ((s->read || s->reading_ms) && s->since == since && s->after == after &&
            !strcmp(s->user_id, user_id)) {
            return s;
        }
        if (s->reading_ms || (pick && !pick->read)) {
            continue;
        }
        if (!pick || !s->read || s->read->read_ms < pick->read->read_ms) {
            pick = s;
        }
    }
    if (pick) {
        chatread_unref(&pick->read);
        snprintf(pick->user_id, sizeof pick->user_id, "%s", user_id);
        pick->since = since;
        pick->after = after;
    }
    return pick;
}

chatread_t *chatread_get(chatread_share_t *share, gateway_t *gw, const char *chat_id,
                         const char *user_id, int64_t since, int64_t after, int64_t asked_ms,
                         int64_t want_version) {
    if (since >= 0) {
        after = 0; /* the reader filters changed rows by its resume point itself */
    }
    if (!share) {
        return s_read(gw, chat_id, user_id, since, after, id_now_ms());
    }
    pthread_mutex_lock(&share->lock);
    slot_t *slot;
    for (;;) {
        slot = s_slot(share, user_id, since, after, id_now_ms());
        if (slot && slot->read && s_fresh(slot->read, asked_ms, want_version)) {
            chatread_t *r = chatread_ref(slot->read);
            pthread_mutex_unlock(&share->lock);
            return r;
        }
        /* A read in flight: wait for it, then look again (it answers when it started after
         * asked_ms, and may when a version is wanted; if not, one read after it will). */
        if (slot && slot->reading_ms) {
            pthread_cond_wait(&share->done, &share->lock);
            continue;
        }
        break;
    }
    int64_t now = id_now_ms();
    if (slot) {
        slot->reading_ms = now;
    }
    pthread_mutex_unlock(&share->lock);
    chatread_t *r = s_read(gw, chat_id, user_id, since, after, now);
    if (!slot) {
        return r; /* every slot busy: a read of its own */
    }
    pthread_mutex_lock(&share->lock);
    slot->reading_ms = 0; /* the slot stayed this read's: a slot in flight is never given */
    chatread_unref(&slot->read);
    slot->read = chatread_ref(r);
    pthread_cond_broadcast(&share->done);
    pthread_mutex_unlock(&share->lock);
    return r;
}

bool chatread_marked(chatread_share_t *share, const char *user_id, int64_t id) {
    if (!share) {
        return false;
    }
    pthread_mutex_lock(&share->lock);
    bool marked = share->marked_id >= id && !strcmp(share->marked_user, user_id);
    pthread_mutex_unlock(&share->lock);
    return marked;
}

void chatread_mark(chatread_share_t *share, const char *user_id, int64_t id) {
    if (!share) {
        return;
    }
    pthread_mutex_lock(&share->lock);
    if (strcmp(share->marked_user, user_id) != 0 || id > share->marked_id) {
        snprintf(share->marked_user, sizeof share->marked_user, "%s", user_id);
        share->marked_id = id;
    }
    pthread_mutex_unlock(&share->lock);
}
