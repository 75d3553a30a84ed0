/* feed: an SSE connection without a thread; see feed.h. */
#include "feed.h"
#include "id.h"
#include "log.h"
#include "jsonout.h"
#include "mem.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEED_BLOCK_BYTES 4096 /* what MHD asks the reader for at most, per call */

struct feed {
    pthread_mutex_t lock; /* guards everything but owner and ops */
    int refs;             /* the response, and a queued or running job */
    bool closed;
    bool gone;      /* MHD freed the response: the connection is closing */
    bool suspended; /* the connection waits for bytes */
    bool started;   /* MHD read the response once: jobs may run */
    bool queued;    /* a job is posted */
    bool running;   /* a job runs */
    bool dirty_all;
    int64_t all_ms;       /* when dirty_all was last set */
    feed_change_t *chats; /* FEED_CHATS_MAX */
    int nchats;
    char *out;
    size_t out_len;
    size_t out_cap;
    hub_part_t **pending;
    size_t npending;
    size_t pending_cap;
    int64_t last_write_ms;
    int64_t settle_at_ms; /* one more full sync then (0: none): FEED_SETTLE_MS, feed_sync_later */
    struct MHD_Connection *conn;
    hub_t *hub;
    hub_entry_t *entry;
    workpool_t *pool;
    feed_ops_t ops;
    void *owner;
};

static void s_append(feed_t *self, const char *text, size_t n) {
    if (self->out_len + n + 1 > self->out_cap) {
        self->out_cap = (self->out_len + n + 1) * 2;
        self->out = mem_realloc(self->out, self->out_cap);
    }
    memcpy(self->out + self->out_len, text, n);
    self->out_len += n;
}

/* Resumes the connection if it waits for bytes. Lock held. */
static void s_kick(feed_t *self) {
    if (self->suspended && self->conn) {
        self->suspended = false;
        MHD_resume_connection(self->conn);
    }
}

char *feed_frame(const char *type, json_t *event, int64_t id) {
    json_object_set_new(event, "type", json_string(type));
    char *data = jsonout_dumps(event);
    json_decref(event);
    char idline[40] = "";
    if (id > 0) {
        snprintf(idline, sizeof idline, "id: %lld\n", (long long)id);
    }
    char *frame = mem_printf("%sevent: %s\ndata: %s\n\n", idline, type, data);
    free(data);
    return frame;
}

void feed_emit_frame(feed_t *self, const char *frame, size_t len) {
    pthread_mutex_lock(&self->lock);
    s_append(self, frame, len);
    s_kick(self);
    pthread_mutex_unlock(&self->lock);
}

void feed_emit(feed_t *self, const char *type, json_t *event, int64_t id) {
    char *frame = feed_frame(type, event, id);
    feed_emit_frame(self, frame, strlen(frame));
    free(frame);
}

void feed_sync_later(feed_t *self, int64_t delay_ms) {
    pthread_mutex_lock(&self->lock);
    int64_t at = id_now_ms() + delay_ms;
    if (!self->settle_at_ms || at < self->settle_at_ms) {
        self->settle_at_ms = at;
    }
    pthread_mutex_unlock(&self->lock);
}

void feed_close(feed_t *self) {
    pthread_mutex_lock(&self->lock);
    self->closed = true;
    s_kick(self);
    pthread_mutex_unlock(&self->lock);
}

static void s_destroy(feed_t *self) {
    self->ops.destroy(self->owner);
    for (size_t i = 0; i < self->npending; i++) {
        hub_part_unref(&self->pending[i]);
    }
    free(self->pending);
    free(self->chats);
    free(self->out);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

static void s_job(void *arg);

/* Posts a job unless one is posted or running (a running one looks again before it ends), or
 * the response was not read yet (its first read posts the first job: a response that is never
 * sent costs no read). Lock held. */
static void s_schedule(feed_t *self) {
    if (!self->started || self->queued || self->running || self->gone) {
        return;
    }
    self->queued = true;
    self->refs++;
    workpool_post(self->pool, s_job, self);
}

static bool s_has_work(const feed_t *self) {
    return !self->gone && !self->closed && (self->dirty_all || self->nchats || self->npending);
}

/* One round of the owner's work for what woke the feed; called and returns with the lock
 * held, which it drops meanwhile. */
static void s_work(feed_t *self) {
    bool all = self->dirty_all;
    int64_t all_ms = self->all_ms;
    int nchats = self->nchats;
    feed_change_t *chats = NULL;
    if (!all && nchats) {
        chats = mem_alloc((size_t)nchats * sizeof *chats);
        memcpy(chats, self->chats, (size_t)nchats * sizeof *chats);
    }
    hub_part_t **parts = self->pending;
    size_t n = self->npending;
    self->dirty_all = false;
    self->nchats = 0;
    self->pending = NULL;
    self->npending = self->pending_cap = 0;
    pthread_mutex_unlock(&self->lock);
    if (all) {
        self->ops.sync(self->owner, NULL, all_ms);
    }
    for (int i = 0; chats && i < nchats; i++) {
        self->ops.sync(self->owner, &chats[i], chats[i].hinted_ms);
    }
    free(chats);
    for (size_t i = 0; i < n; i++) {
        if (self->ops.part) {
            self->ops.part(self->owner, parts[i]);
        }
        hub_part_unref(&parts[i]);
    }
    free(parts);
    pthread_mutex_lock(&self->lock);
}

static void s_job(void *arg) {
    feed_t *self = arg;
    pthread_mutex_lock(&self->lock);
    self->queued = false;
    self->running = true;
    while (s_has_work(self)) {
        s_work(self);
    }
    self->running = false;
    bool last = --self->refs == 0;
    pthread_mutex_unlock(&self->lock);
    if (last) {
        s_destroy(self);
    }
}

static ssize_t s_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    feed_t *self = cls;
    pthread_mutex_lock(&self->lock);
    if (!self->started) {
        self->started = true;
        s_schedule(self);
    }
    if (self->out_len > 0) {
        size_t n = self->out_len < max ? self->out_len : max;
        memcpy(buf, self->out, n);
        memmove(self->out, self->out + n, self->out_len - n);
        self->out_len -= n;
        self->last_write_ms = id_now_ms();
        pthread_mutex_unlock(&self->lock);
        return (ssize_t)n;
    }
    if (self->closed || !self->conn) {
        pthread_mutex_unlock(&self->lock);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* Nothing to send: the connection leaves MHD's loop until an emit resumes it. */
    MHD_suspend_connection(self->conn);
    self->suspended = true;
    pthread_mutex_unlock(&self->lock);
    return 0;
}

/* MHD is done with the response: the connection is closing. */
static void s_free(void *cls) {
    feed_t *self = cls;
    hub_remove(self->hub, &self->entry); /* after this the hub never calls the feed again */
    pthread_mutex_lock(&self->lock);
    self->gone = true;
    self->conn = NULL;
    self->suspended = false;
    bool last = --self->refs == 0;
    pthread_mutex_unlock(&self->lock);
    if (last) {
        s_destroy(self);
    }
}

/* Folds hint u into c: the newest hint's status and archived, any hint's title change. */
static void s_fold(feed_change_t *c, const hint_update_t *u, int64_t now) {
    c->hinted_ms = now;
    if (u->snapshot_version >= c->snapshot_version) {
        c->snapshot_version = u->snapshot_version;
        snprintf(c->status, sizeof c->status, "%s", u->status);
        c->archived = u->archived;
    }
    c->title_changed |= u->title_changed;
}

static void s_hub_sync(void *stream, const hint_update_t *u) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    int64_t now = id_now_ms();
    feed_change_t *c = NULL;
    for (int i = 0; u && i < self->nchats && !c; i++) {
        c = !strcmp(self->chats[i].chat_id, u->chat_id) ? &self->chats[i] : NULL;
    }
    if (!u || (!c && self->nchats == FEED_CHATS_MAX)) {
        self->dirty_all = true;
        self->all_ms = now;
    } else if (!c && !self->dirty_all) {
        c = &self->chats[self->nchats++];
        *c = (feed_change_t){0};
        snprintf(c->chat_id, sizeof c->chat_id, "%s", u->chat_id);
    }
    if (c) {
        s_fold(c, u, now);
    }
    if (c && self->nchats == 1 && !self->dirty_all && !self->queued && !self->running &&
        self->started && self->ops.quiet && self->ops.quiet(self->owner, c)) {
        self->nchats = 0; /* the only change, and it shows nothing: no job */
    } else {
        s_schedule(self);
    }
    pthread_mutex_unlock(&self->lock);
}

static void s_hub_part(void *stream, hub_part_t *part) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    if (!self->ops.part) {
        /* not interested in parts */
    } else if (self->npending < FEED_PENDING_MAX) {
        if (self->npending == self->pending_cap) {
            self->pending_cap = self->pending_cap ? self->pending_cap * 2 : 16;
            self->pending = mem_realloc(self->pending, self->pending_cap * sizeof *self->pending);
        }
        self->pending[self->npending++] = hub_part_ref(part);
    } else {
        /* Too far behind: parts are previews, a sync catches up. */
        self->dirty_all = true;
        self->all_ms = id_now_ms();
    }
    s_schedule(self);
    pthread_mutex_unlock(&self->lock);
}

static void s_hub_close(void *stream) {
    feed_close(stream);
}

static void s_hub_tick(void *stream, int64_t now) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    if (self->settle_at_ms && now >= self->settle_at_ms) {
        /* The subscription may not have reached the broker when the first sync ran: a
         * commit in between sent its hint to nobody. One more sync closes that window. */
        self->settle_at_ms = 0;
        self->dirty_all = true;
        self->all_ms = id_now_ms();
        s_schedule(self);
    }
    if (!self->closed && self->out_len == 0 && now - self->last_write_ms >= FEED_KEEPALIVE_MS) {
        static const char keepalive[] = ": keepalive\n\n";
        s_append(self, keepalive, sizeof keepalive - 1);
        self->last_write_ms = now;
        s_kick(self);
    }
    pthread_mutex_unlock(&self->lock);
}

const hub_ops_t feed_hub_ops = {s_hub_sync, s_hub_part, s_hub_close, s_hub_tick};

struct MHD_Response *feed_new(hub_t *hub, workpool_t *pool, struct MHD_Connection *conn,
                              const char *key, const char *user_id, const feed_ops_t *ops,
                              void *owner, feed_t **out) {
    feed_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->chats = mem_calloc(FEED_CHATS_MAX, sizeof *self->chats);
    self->hub = hub;
    self->pool = pool;
    self->conn = conn;
    self->ops = *ops;
    self->owner = owner;
    self->refs = 1;         /* the response */
    self->dirty_all = true; /* the first job sends the snapshot */
    self->all_ms = id_now_ms();
    self->last_write_ms = id_now_ms();
    self->settle_at_ms = self->last_write_ms + FEED_SETTLE_MS;
    *out = self;
    self->entry = hub_add(hub, key, user_id, self);
    if (!self->entry) {
        free(self->chats);
        pthread_mutex_destroy(&self->lock);
        free(self);
        *out = NULL;
        return NULL;
    }
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, FEED_BLOCK_BYTES, s_read, self, s_free);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}
