/* partbuf: see partbuf.h. Episodes live in an array (for the collector's sweep) indexed by a
 * hash of (chat, history_version, attempt): a worker holds one open episode per running chat
 * plus those closed in the last 15 s, thousands at scale (ARCHITECTURE.md §6.5), and every
 * streamed part looks its episode up. */
#include "partbuf.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_KEY_LEN (ID_UUID_LEN + 48)

typedef struct {
    char key[S_KEY_LEN]; /* chat:hv:attempt, in the index */
    char chat_id[ID_UUID_LEN + 1];
    int64_t history_version;
    int64_t generation_attempt;
    bool closed;
    int64_t closed_at_ms;
    int64_t model_invoked_at_ms;
    size_t bytes;
    size_t count;
    size_t cap;
    partbuf_part_t *parts;
} s_episode_t;

struct partbuf {
    pthread_mutex_t lock;
    bus_publisher_t *pub;
    s_episode_t **episodes;
    size_t count;
    size_t cap;
    zhashx_t *index; /* key -> s_episode_t (not owned) */
};

static void s_key(char out[S_KEY_LEN], const char *chat_id, int64_t hv, int64_t attempt) {
    snprintf(out, S_KEY_LEN, "%s:%lld:%lld", chat_id, (long long)hv, (long long)attempt);
}

partbuf_t *partbuf_new(bus_publisher_t *pub) {
    partbuf_t *self = mem_calloc(1, sizeof *self);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    self->pub = pub;
    self->index = zhashx_new();
    ASSERT(self->index);
    return self;
}

static void s_episode_free(s_episode_t *ep) {
    for (size_t i = 0; i < ep->count; i++) {
        free(ep->parts[i].json);
    }
    free(ep->parts);
    free(ep);
}

void partbuf_destroy(partbuf_t **self_p) {
    partbuf_t *self = *self_p;
    if (!self) {
        return;
    }
    for (size_t i = 0; i < self->count; i++) {
        s_episode_free(self->episodes[i]);
    }
    free(self->episodes);
    zhashx_destroy(&self->index);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* Under the lock. */
static s_episode_t *s_find(partbuf_t *self, const char *chat_id, int64_t hv, int64_t attempt) {
    char key[S_KEY_LEN];
    s_key(key, chat_id, hv, attempt);
    return zhashx_lookup(self->index, key);
}

/* Under the lock. */
static s_episode_t *s_insert(partbuf_t *self, const char *chat_id, int64_t hv, int64_t attempt) {
    if (self->count == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 16;
        self->episodes = mem_realloc(self->episodes, self->cap * sizeof *self->episodes);
    }
    s_episode_t *ep = mem_calloc(1, sizeof *ep);
    snprintf(ep->chat_id, sizeof ep->chat_id, "%s", chat_id);
    ep->history_version = hv;
    ep->generation_attempt = attempt;
    s_key(ep->key, chat_id, hv, attempt);
    self->episodes[self->count++] = ep;
    zhashx_insert(self->index, ep->key, ep);
    return ep;
}

partbuf_rc_t partbuf_create(partbuf_t *self, const char *chat_id, int64_t history_version,
                            int64_t generation_attempt) {
    pthread_mutex_lock(&self->lock);
    partbuf_rc_t rc = PARTBUF_EXISTS;
    if (!s_find(self, chat_id, history_version, generation_attempt)) {
        s_insert(self, chat_id, history_version, generation_attempt);
        rc = PARTBUF_OK;
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

void partbuf_close(partbuf_t *self, const char *chat_id, int64_t history_version,
                   int64_t generation_attempt) {
    pthread_mutex_lock(&self->lock);
    s_episode_t *ep = s_find(self, chat_id, history_version, generation_attempt);
    if (!ep) {
        ep = s_insert(self, chat_id, history_version, generation_attempt);
    }
    if (!ep->closed) {
        ep->closed = true;
        ep->closed_at_ms = id_now_ms();
    }
    pthread_mutex_unlock(&self->lock);
}

partbuf_rc_t partbuf_add(partbuf_t *self, const char *chat_id, int64_t history_version,
                         int64_t generation_attempt, const char *role, const char *json,
                         size_t len) {
    wire_part_t part = {.history_version = history_version,
                        .generation_attempt = generation_attempt};
    /* Validates the part as one bounded JSON object before it is stored or sent. */
    if (wire_json_set(&part.part, json, len) != 0 || strlen(role) >= sizeof part.role) {
        free(part.part.text);
        return PARTBUF_INVALID;
    }
    snprintf(part.chat_id, sizeof part.chat_id, "%s", chat_id);
    snprintf(part.role, sizeof part.role, "%s", role);
    pthread_mutex_lock(&self->lock);
    partbuf_rc_t rc = PARTBUF_OK;
    s_episode_t *ep = s_find(self, chat_id, history_version, generation_attempt);
    if (!ep) {
        rc = PARTBUF_NOT_FOUND;
    } else if (ep->closed) {
        rc = PARTBUF_CLOSED;
    } else if (ep->bytes + len > PARTBUF_EPISODE_MAX_BYTES) {
        rc = PARTBUF_FULL;
    } else {
        if (ep->count == ep->cap) {
            ep->cap = ep->cap ? ep->cap * 2 : 4; /* most episodes hold a few parts at a time */
            ep->parts = mem_realloc(ep->parts, ep->cap * sizeof *ep->parts);
        }
        partbuf_part_t *p = &ep->parts[ep->count++];
        p->seq = (int64_t)ep->count;
        snprintf(p->role, sizeof p->role, "%s", role);
        p->json = mem_strndup(json, len);
        p->len = len;
        ep->bytes += len;
        part.seq = p->seq;
        /* Published under the lock so that live parts leave in seq order; the send never
         * blocks (the publisher drops over its high-water mark). */
        if (self->pub) {
            (void)bus_publisher_part(self->pub, &part);
        }
    }
    pthread_mutex_unlock(&self->lock);
    free(part.part.text);
    return rc;
}

partbuf_rc_t partbuf_start_model(partbuf_t *self, const char *chat_id, int64_t history_version,
                                 int64_t generation_attempt) {
    pthread_mutex_lock(&self->lock);
    partbuf_rc_t rc = PARTBUF_OK;
    s_episode_t *ep = s_find(self, chat_id, history_version, generation_attempt);
    if (!ep) {
        rc = PARTBUF_NOT_FOUND;
    } else if (ep->closed) {
        rc = PARTBUF_CLOSED;
    } else {
        ep->model_invoked_at_ms = id_now_ms();
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

int64_t partbuf_model_invoked_at(partbuf_t *self, const char *chat_id, int64_t history_version,
                                 int64_t generation_attempt) {
    pthread_mutex_lock(&self->lock);
    s_episode_t *ep = s_find(self, chat_id, history_version, generation_attempt);
    int64_t at = ep ? ep->model_invoked_at_ms : 0;
    pthread_mutex_unlock(&self->lock);
    return at;
}

partbuf_rc_t partbuf_parts(partbuf_t *self, const char *chat_id, int64_t history_version,
                           int64_t generation_attempt, partbuf_part_t **parts, size_t *count) {
    *parts = NULL;
    *count = 0;
    pthread_mutex_lock(&self->lock);
    s_episode_t *ep = s_find(self, chat_id, history_version, generation_attempt);
    if (!ep) {
        pthread_mutex_unlock(&self->lock);
        return PARTBUF_NOT_FOUND;
    }
    if (ep->count) {
        *parts = mem_calloc(ep->count, sizeof **parts);
        for (size_t i = 0; i < ep->count; i++) {
            (*parts)[i] = ep->parts[i];
            (*parts)[i].json = mem_strndup(ep->parts[i].json, ep->parts[i].len);
        }
        *count = ep->count;
    }
    pthread_mutex_unlock(&self->lock);
    return PARTBUF_OK;
}

void partbuf_parts_free(partbuf_part_t **parts_p, size_t count) {
    partbuf_part_t *parts = *parts_p;
    if (!parts) {
        return;
    }
    for (size_t i = 0; i < count; i++) {
        free(parts[i].json);
    }
    free(parts);
    *parts_p = NULL;
}

size_t partbuf_gc(partbuf_t *self, int64_t now_ms) {
    pthread_mutex_lock(&self->lock);
    size_t gone = 0;
    size_t keep = 0;
    for (size_t i = 0; i < self->count; i++) {
        s_episode_t *ep = self->episodes[i];
        if (ep->closed && now_ms - ep->closed_at_ms >= PARTBUF_GC_AFTER_MS) {
            zhashx_delete(self->index, ep->key);
            s_episode_free(ep);
            gone++;
        } else {
            self->episodes[keep++] = ep;
        }
    }
    self->count = keep;
    pthread_mutex_unlock(&self->lock);
    return gone;
}

size_t partbuf_size(partbuf_t *self) {
    pthread_mutex_lock(&self->lock);
    size_t n = self->count;
    pthread_mutex_unlock(&self->lock);
    return n;
}

int partbuf_relay_handler(void *ctx, const wire_request_t *req, wire_reply_t *reply) {
    partbuf_t *self = ctx;
    const wire_select_t *e = &req->episode;
    if (e->after_seq < 0 || req->max_parts < 1) {
        return -1;
    }
    pthread_mutex_lock(&self->lock);
    s_episode_t *ep = s_find(self, e->chat_id, e->history_version, e->generation_attempt);
    if (!ep) {
        pthread_mutex_unlock(&self->lock);
        reply->status = WIRE_STATUS_NO_EPISODE;
        return 0;
    }
    size_t bytes = 0;
    size_t i = (size_t)e->after_seq < ep->count ? (size_t)e->after_seq : ep->count;
    int64_t added = 0;
    int rc = 0;
    for (; i < ep->count && added < req->max_parts; i++) {
        const partbuf_part_t *p = &ep->parts[i];
        /* Stop near the reply budget, but always send at least one part so a client makes
         * progress even past a large one. */
        if (added > 0 && bytes + p->len > PROTO_REPLY_MAX_BYTES) {
            break;
        }
        if (wire_reply_add(reply, p->seq, p->role, p->json, p->len) != 0) {
            rc = -1;
            break;
        }
        bytes += p->len;
        added++;
    }
    reply->more = i < ep->count;
    reply->closed = ep->closed && !reply->more;
    pthread_mutex_unlock(&self->lock);
    return rc;
}
