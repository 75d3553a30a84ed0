/* feed: a blocking SSE connection on its own MHD thread; see feed.h. */
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
#include <time.h>

struct feed {
    pthread_mutex_t lock; /* guards everything but owner and ops */
    pthread_cond_t wake;
    bool dirty;
    bool closed;
    char *out;
    size_t out_len;
    size_t out_cap;
    wire_part_t *pending;
    size_t npending;
    size_t pending_cap;
    int64_t last_write_ms;
    int64_t settle_at_ms; /* one more sync then (0: done), see FEED_SETTLE_MS */
    hub_t *hub;
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

void feed_emit(feed_t *self, const char *type, json_t *event, int64_t id) {
    json_object_set_new(event, "type", json_string(type));
    char *data = jsonout_dumps(event);
    json_decref(event);
    char idline[40] = "";
    if (id > 0) {
        snprintf(idline, sizeof idline, "id: %lld\n", (long long)id);
    }
    char *frame = mem_printf("%sevent: %s\ndata: %s\n\n", idline, type, data);
    free(data);
    pthread_mutex_lock(&self->lock);
    s_append(self, frame, strlen(frame));
    pthread_mutex_unlock(&self->lock);
    free(frame);
}

void feed_close(feed_t *self) {
    pthread_mutex_lock(&self->lock);
    self->closed = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}

/* Runs the owner's work for what woke the feed; called and returns with the lock held. */
static void s_work(feed_t *self) {
    bool dirty = self->dirty;
    wire_part_t *parts = self->pending;
    size_t n = self->npending;
    self->dirty = false;
    self->pending = NULL;
    self->npending = self->pending_cap = 0;
    pthread_mutex_unlock(&self->lock);
    if (dirty) {
        self->ops.sync(self->owner);
    }
    for (size_t i = 0; i < n; i++) {
        if (self->ops.part) {
            self->ops.part(self->owner, &parts[i]);
        }
        free(parts[i].part.text);
    }
    free(parts);
    pthread_mutex_lock(&self->lock);
}

static void s_wait(feed_t *self) {
    int64_t now = id_now_ms();
    if (self->settle_at_ms && now >= self->settle_at_ms) {
        /* The subscription may not have reached the broker when the first sync ran: a
         * commit in between sent its hint to nobody. One more sync closes that window. */
        self->settle_at_ms = 0;
        self->dirty = true;
        return;
    }
    int64_t wait_ms = self->last_write_ms + FEED_KEEPALIVE_MS - now;
    if (self->settle_at_ms && self->settle_at_ms - now < wait_ms) {
        wait_ms = self->settle_at_ms - now;
    }
    if (wait_ms <= 0 && !self->settle_at_ms) {
        static const char keepalive[] = ": keepalive\n\n";
        s_append(self, keepalive, sizeof keepalive - 1);
        return;
    }
    struct timespec ts = id_timespec_at(now + wait_ms);
    pthread_cond_timedwait(&self->wake, &self->lock, &ts);
}

static ssize_t s_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    feed_t *self = cls;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        if (self->out_len > 0) {
            size_t n = self->out_len < max ? self->out_len : max;
            memcpy(buf, self->out, n);
            memmove(self->out, self->out + n, self->out_len - n);
            self->out_len -= n;
            self->last_write_ms = id_now_ms();
            pthread_mutex_unlock(&self->lock);
            return (ssize_t)n;
        }
        if (self->closed) {
            pthread_mutex_unlock(&self->lock);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (self->dirty || self->npending) {
            s_work(self);
        } else {
            s_wait(self);
        }
    }
}

static void s_free(void *cls) {
    feed_t *self = cls;
    hub_remove(self->hub, self); /* after this the hub never calls the feed again */
    self->ops.destroy(self->owner);
    for (size_t i = 0; i < self->npending; i++) {
        free(self->pending[i].part.text);
    }
    free(self->pending);
    free(self->out);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

static void s_hub_sync(void *stream) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    self->dirty = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}

static void s_hub_part(void *stream, const wire_part_t *part) {
    feed_t *self = stream;
    pthread_mutex_lock(&self->lock);
    if (!self->ops.part) {
        /* not interested in parts */
    } else if (self->npending < FEED_PENDING_MAX) {
        if (self->npending == self->pending_cap) {
            self->pending_cap = self->pending_cap ? self->pending_cap * 2 : 16;
            self->pending = mem_realloc(self->pending, self->pending_cap * sizeof *self->pending);
        }
        wire_part_t *copy = &self->pending[self->npending++];
        *copy = *part;
        copy->part.text = mem_strndup(part->part.text, part->part.len);
    } else {
        self->dirty = true; /* too far behind: parts are previews, a sync catches up */
    }
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}

static void s_hub_close(void *stream) {
    feed_close(stream);
}

const hub_ops_t feed_hub_ops = {s_hub_sync, s_hub_part, s_hub_close};

struct MHD_Response *feed_new(hub_t *hub, const char *key, const feed_ops_t *ops, void *owner,
                              feed_t **out) {
    feed_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    id_cond_init(&self->wake);
    self->hub = hub;
    self->ops = *ops;
    self->owner = owner;
    self->dirty = true; /* the first read sends the snapshot */
    self->last_write_ms = id_now_ms();
    self->settle_at_ms = self->last_write_ms + FEED_SETTLE_MS;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, s_read, self, s_free);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    hub_add(hub, key, self);
    *out = self;
    return r;
}
