/* feed: an SSE connection without a thread; see feed.h. */
#include "feed.h"
#include "id.h"
#include "log.h"
#include "jsonout.h"
#include "mem.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define FEED_BLOCK_BYTES 4096 /* what MHD asks the reader for at most, per call */

struct feed {
    pthread_mutex_t lock; /* guards everything but owner and ops */
    int refs;             /* the response, a queued or running job, a hub flush to come */
    bool closed;
    bool gone;      /* MHD freed the response: the connection is closing */
    bool suspended; /* the connection waits for bytes */
    bool started;   /* MHD read the response once: jobs may run */
    bool queued;    /* a job is posted */
    bool running;   /* a job runs */
    bool direct;    /* suspended, and the body goes straight to fd (feed_direct) */
    bool broken;    /* a direct write failed or stalled: MHD ends the connection */
    bool unsent;    /* the hub's fast path appended parts: its flush sends them */
    int fd;         /* the socket for direct writes, or -1 */
    bool dirty_all;
    int64_t all_ms;       /* when dirty_all was last set */
    feed_change_t *chats; /* FEED_CHATS_MAX */
    int nchats;
    char *out; /* bytes to send: from out_off to out_len (chunk-framed while direct) */
    size_t out_off;
    size_t out_len;
    size_t out_cap;
    int64_t stalled_ms; /* when a direct write last found the socket full (0: not since) */
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
    feed_live_fn *live; /* the hub's fast path for parts, or NULL */
    void *owner;
};

static void s_append_raw(feed_t *self, const char *text, size_t n) {
    if (self->out_off > 0 && self->out_off == self->out_len) {
        self->out_off = self->out_len = 0;
    }
    if (self->out_len + n + 1 > self->out_cap) {
        if (self->out_off > 0) { /* drop what was sent before growing */
            memmove(self->out, self->out + self->out_off, self->out_len - self->out_off);
            self->out_len -= self->out_off;
            self->out_off = 0;
        }
        if (self->out_len + n + 1 > self->out_cap) {
            self->out_cap = (self->out_len + n + 1) * 2;
            self->out = mem_realloc(self->out, self->out_cap);
        }
    }
    memcpy(self->out + self->out_len, text, n);
    self->out_len += n;
}

/* Appends one piece of the body: as it is for MHD's reader (which chunks it), or as a chunk of
 * its own while the feed writes directly. Lock held. */
static void s_append(feed_t *self, const char *text, size_t n) {
    if (!self->direct) {
        s_append_raw(self, text, n);
        return;
    }
    char head[24];
    size_t k = sizeof head;
    head[--k] = '\n';
    head[--k] = '\r';
    size_t v = n;
    do {
        head[--k] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    s_append_raw(self, head + k, sizeof head - k);
    s_append_raw(self, text, n);
    s_append_raw(self, "\r\n", 2);
}

/* Gives the connection back to MHD (lock held, direct): what is unsent cannot follow (it may
 * end inside a chunk), so with anything unsent the connection ends in error. */
static void s_undirect(feed_t *self) {
    if (self->out_off < self->out_len) {
        self->broken = true;
        self->out_off = self->out_len = 0;
    }
    self->direct = false;
    self->suspended = false;
    MHD_resume_connection(self->conn);
}

/* Ends the connection of a direct feed in error (lock held, direct): MHD closes it. */
static void s_cut(feed_t *self) {
    s_undirect(self);
    self->broken = true;
}

/* Sends what is queued, directly (lock held, direct): until it is all sent, or the socket is
 * full (the rest waits for the next try), or the write fails (the connection ends). */
static void s_send(feed_t *self) {
    int64_t now = id_now_ms();
    while (self->out_off < self->out_len) {
        ssize_t w = send(self->fd, self->out + self->out_off, self->out_len - self->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            self->out_off += (size_t)w;
            self->stalled_ms = 0;
            self->last_write_ms = now;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            self->stalled_ms = self->stalled_ms ? self->stalled_ms : now;
            return;
        } else {
            log_info("feed_cut", "reason=write_failed errno=%d", errno);
            s_cut(self);
            return;
        }
    }
    self->out_off = self->out_len = 0;
}

/* Sends what is queued: directly, or by resuming the connection if it waits for bytes. Lock
 * held. */
static void s_kick(feed_t *self) {
    if (self->direct) {
        s_send(self);
    } else if (self->suspended && self->conn) {
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
    if (!self->running) {
        s_kick(self); /* a job sends what it emitted when its round ends: one send */
    }
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
    if (self->direct) { /* MHD ends the body (or the connection, when some is unsent) */
        s_undirect(self);
    }
    pthread_mutex_unlock(&self->lock);
}

void *feed_shared(feed_t *self, const hub_share_ops_t *ops) {
    return hub_shared(self->hub, self->entry, ops);
}

void feed_live(feed_t *self, feed_live_fn *live) {
    pthread_mutex_lock(&self->lock);
    self->live = live;
    pthread_mutex_unlock(&self->lock);
}

void feed_direct(feed_t *self, const char *http_version) {
    if (!self->conn || !http_version || strcmp(http_version, MHD_HTTP_VERSION_1_1) != 0) {
        return;
    }
    const union MHD_ConnectionInfo *tls =
        MHD_get_connection_info(self->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(self->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if ((tls && tls->tls_session) || !fd || fd->connect_fd < 0) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->fd = fd->connect_fd;
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
        s_kick(self);
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
    if (self->broken) {
        pthread_mutex_unlock(&self->lock);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (self->out_off < self->out_len) {
        size_t n = self->out_len - self->out_off < max ? self->out_len - self->out_off : max;
        memcpy(buf, self->out + self->out_off, n);
        self->out_off += n;
        if (self->out_off == self->out_len) {
            self->out_off = self->out_len = 0;
        }
        self->last_write_ms = id_now_ms();
        pthread_mutex_unlock(&self->lock);
        return (ssize_t)n;
    }
    if (self->closed || !self->conn) {
        pthread_mutex_unlock(&self->lock);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* Nothing to send: the connection leaves MHD's loop until an emit resumes it. MHD calls
     * this reader only once it has sent everything it had, so from here on a feed allowed to
     * write directly owns the socket's output until it resumes the connection. */
    MHD_suspend_connection(self->conn);
    self->suspended = true;
    self->direct = self->fd >= 0;
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
    self->direct = false;
    self->fd = -1;
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

/* The hub's fast path (lock held): the part's event appended now when the owner takes it
 * with no job of the feed running or waiting (so the owner's state is the hub thread's). */
static bool s_take_live(feed_t *self, hub_part_t *part) {
    if (!self->live || !self->started || self->queued || self->running || self->gone ||
        self->closed || self->dirty_all || self->nchats || self->npending) {
        return false;
    }
    size_t len;
    const char *event = self->live(self->owner, part, &len);
    if (!event) {
        return false;
    }
    s_append(self, event, len);
    return true;
}

/* A live part: taken now (the hub's flush sends it: the first taken of a batch holds the feed
 * until then), or queued for a job. */
static bool s_hub_part(void *stream, hub_part_t *part) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    if (!self->ops.part) {
        pthread_mutex_unlock(&self->lock);
        return false;
    }
    if (s_take_live(self, part)) {
        bool first = !self->unsent;
        if (first) {
            self->unsent = true;
            self->refs++; /* until s_hub_flush */
        }
        pthread_mutex_unlock(&self->lock);
        return first;
    }
    if (self->npending < FEED_PENDING_MAX) {
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
    return false;
}

static void s_hub_flush(void *stream) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    self->unsent = false;
    s_kick(self);
    bool last = --self->refs == 0;
    pthread_mutex_unlock(&self->lock);
    if (last) {
        s_destroy(self);
    }
}

static void s_hub_close(void *stream) {
    feed_close(stream);
}

/* True when the client of a direct feed closed its end (lock held). */
static bool s_peer_closed(feed_t *self) {
    char c;
    ssize_t r = recv(self->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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
    if (self->direct && self->out_off < self->out_len) {
        s_send(self); /* what a full socket held back */
        if (self->direct && self->stalled_ms && now - self->stalled_ms >= FEED_STALL_MS) {
            log_info("feed_cut", "reason=stalled ms=%lld", (long long)(now - self->stalled_ms));
            s_cut(self);
        }
    }
    if (!self->closed && self->out_off == self->out_len &&
        now - self->last_write_ms >= FEED_KEEPALIVE_MS) {
        if (self->direct && s_peer_closed(self)) {
            s_cut(self); /* the client left: MHD closes the connection */
        } else {
            static const char keepalive[] = ": keepalive\n\n";
            s_append(self, keepalive, sizeof keepalive - 1);
            self->last_write_ms = now;
            s_kick(self);
        }
    }
    pthread_mutex_unlock(&self->lock);
}

const hub_ops_t feed_hub_ops = {s_hub_sync, s_hub_part, s_hub_flush, s_hub_close, s_hub_tick};

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
    self->fd = -1;
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
