/* hub: one subscriber, many streams; see hub.h. */
#include "hub.h"
#include "bus.h"
#include "log.h"
#include "mem.h"
#include "tally.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HUB_RECV_TIMEOUT_MS 100 /* how often the thread looks at (un)subscription requests */
#define HUB_KEY_MAX         48  /* "user:" and a UUID, or a chat id, NUL included */

typedef struct bucket bucket_t;

struct hub_part {
    wire_part_t part; /* text owned */
    atomic_int refs;
    pthread_mutex_t lock; /* guards the making of frame */
    char *frame;
    size_t frame_len;
    atomic_bool framed; /* frame is made: read it without the lock */
};

struct hub_entry {
    char user[ID_UUID_LEN + 1];
    void *stream;
    bucket_t *bucket;
    hub_entry_t *prev;
    hub_entry_t *next;
};

/* The entries of one key, and for a chat the log of its current episode's parts: the parts
 * from seq ep_first on, contiguous, while ep_whole. */
struct bucket {
    char key[HUB_KEY_MAX];
    hub_entry_t *head;
    int64_t known; /* the newest snapshot_version a hint or a poll announced for the chat */
    int64_t ep_hv;
    int64_t ep_ga;
    int64_t ep_first;
    bool ep_whole;
    hub_part_t **ep;
    size_t ep_n;
    size_t ep_cap;
    size_t ep_bytes;
    void *shared; /* what the key's streams share (hub_shared), or NULL */
    const hub_share_ops_t *share_ops;
};

struct hub {
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below; held while calling a stream */
    zhashx_t *buckets;    /* key -> bucket_t (owned) */
    zhashx_t *users;      /* user id -> int64_t open entries (owned) */
    int count;
    int user_buckets; /* buckets of watches */
    bool stop;
    bool closing;     /* hub_close_all ran: no stream opens any more */
    bool resubscribe; /* the set of keys changed */
    char *endpoint;
    int64_t poll_ms;
    int64_t per_user_max;
    hub_ops_t ops;
    hub_versions_fn *versions;
    void *versions_ctx;
    void **flushq; /* the streams to flush after this batch (hub thread only) */
    size_t nflush;
    size_t flush_cap;
};

const wire_part_t *hub_part_wire(const hub_part_t *self) {
    return &self->part;
}

hub_part_t *hub_part_ref(hub_part_t *self) {
    atomic_fetch_add(&self->refs, 1);
    return self;
}

void hub_part_unref(hub_part_t **self_p) {
    hub_part_t *self = *self_p;
    *self_p = NULL;
    if (self && atomic_fetch_sub(&self->refs, 1) == 1) {
        free(self->part.part.text);
        free(self->frame);
        pthread_mutex_destroy(&self->lock);
        free(self);
    }
}

const char *hub_part_frame(hub_part_t *self, hub_part_encode_fn *encode, size_t *len) {
    if (atomic_load_explicit(&self->framed, memory_order_acquire)) {
        *len = self->frame_len; /* every stream of the chat after the first */
        return self->frame;
    }
    pthread_mutex_lock(&self->lock);
    if (!self->frame) {
        self->frame = encode(&self->part);
        self->frame_len = strlen(self->frame);
        atomic_store_explicit(&self->framed, true, memory_order_release);
    }
    *len = self->frame_len;
    pthread_mutex_unlock(&self->lock);
    return self->frame;
}

static hub_part_t *s_part_new(const wire_part_t *part) {
    hub_part_t *self = mem_calloc(1, sizeof *self);
    self->part = *part;
    self->part.part.text = mem_strndup(part->part.text, part->part.len);
    atomic_init(&self->refs, 1);
    pthread_mutex_init(&self->lock, NULL);
    return self;
}

static void s_episode_clear(bucket_t *b) {
    for (size_t i = 0; i < b->ep_n; i++) {
        hub_part_unref(&b->ep[i]);
    }
    free(b->ep);
    b->ep = NULL;
    b->ep_n = b->ep_cap = b->ep_bytes = 0;
    b->ep_whole = false;
}

static void s_bucket_free(void **item) {
    bucket_t *b = *item;
    if (b) {
        s_episode_clear(b);
        if (b->shared) {
            b->share_ops->unref(b->shared);
        }
        free(b);
        *item = NULL;
    }
}

/* Logs p in its chat's episode: a newer episode starts a new log; a gap or the caps end the
 * log's use for that episode (catch-up goes to the worker then). */
static void s_episode_add(bucket_t *b, hub_part_t *p) {
    const wire_part_t *w = &p->part;
    bool newer = w->history_version > b->ep_hv ||
                 (w->history_version == b->ep_hv && w->generation_attempt > b->ep_ga);
    if (newer) {
        s_episode_clear(b);
        b->ep_hv = w->history_version;
        b->ep_ga = w->generation_attempt;
        b->ep_first = w->seq;
        b->ep_whole = true;
    } else if (w->history_version != b->ep_hv || w->generation_attempt != b->ep_ga) {
        return; /* an older episode's straggler */
    }
    int64_t next = b->ep_first + (int64_t)b->ep_n;
    if (!b->ep_whole || w->seq < next) {
        return; /* a duplicate, or the log is given up */
    }
    if (w->seq > next || b->ep_n >= HUB_EPISODE_PARTS_MAX ||
        b->ep_bytes + w->part.len > HUB_EPISODE_BYTES_MAX) {
        b->ep_whole = false;
        return;
    }
    if (b->ep_n == b->ep_cap) {
        b->ep_cap = b->ep_cap ? b->ep_cap * 2 : 64;
        b->ep = mem_realloc(b->ep, b->ep_cap * sizeof *b->ep);
    }
    b->ep[b->ep_n++] = hub_part_ref(p);
    b->ep_bytes += w->part.len;
}

int hub_episode(hub_t *self, const char *chat_id, int64_t history_version,
                int64_t generation_attempt, int64_t after_seq, hub_part_t ***out, size_t *n) {
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&self->lock);
    bucket_t *b = zhashx_lookup(self->buckets, chat_id);
    bool ok = b && b->ep_whole && b->ep_hv == history_version && b->ep_ga == generation_attempt &&
              b->ep_first <= after_seq + 1;
    if (ok) {
        size_t from = (size_t)(after_seq + 1 - b->ep_first);
        if (from < b->ep_n) {
            *n = b->ep_n - from;
            *out = mem_alloc(*n * sizeof **out);
            for (size_t i = 0; i < *n; i++) {
                (*out)[i] = hub_part_ref(b->ep[from + i]);
            }
        }
    }
    pthread_mutex_unlock(&self->lock);
    return ok ? 0 : -1;
}

void hub_episode_fill(hub_t *self, const char *chat_id, int64_t history_version,
                      int64_t generation_attempt, const wire_item_t *items, size_t n) {
    for (size_t i = 1; i < n; i++) {
        if (items[i].seq != items[0].seq + (int64_t)i) {
            return; /* not contiguous: nothing to say */
        }
    }
    pthread_mutex_lock(&self->lock);
    bucket_t *b = zhashx_lookup(self->buckets, chat_id);
    bool same = b && b->ep_hv == history_version && b->ep_ga == generation_attempt;
    bool newer = b && (history_version > b->ep_hv ||
                       (history_version == b->ep_hv && generation_attempt > b->ep_ga));
    if (n == 0 || !b || (!same && !newer) || (same && !b->ep_whole)) {
        pthread_mutex_unlock(&self->lock);
        return;
    }
    if (newer) {
        s_episode_clear(b);
        b->ep_hv = history_version;
        b->ep_ga = generation_attempt;
        b->ep_first = items[0].seq + (int64_t)n; /* the log starts after the fetched parts */
        b->ep_whole = true;
    }
    /* The fetched parts that come before the log's first, reaching it without a gap. */
    int64_t last = items[n - 1].seq;
    size_t take = 0;
    while (take < n && items[take].seq < b->ep_first) {
        take++;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < take; i++) {
        bytes += items[i].part.len;
    }
    if (take == 0 || last + 1 < b->ep_first || items[0].seq > b->ep_first ||
        b->ep_n + take > HUB_EPISODE_PARTS_MAX || b->ep_bytes + bytes > HUB_EPISODE_BYTES_MAX) {
        pthread_mutex_unlock(&self->lock);
        return;
    }
    hub_part_t **ep = mem_alloc((b->ep_n + take) * sizeof *ep);
    for (size_t i = 0; i < take; i++) {
        wire_part_t w = {.history_version = history_version,
                         .generation_attempt = generation_attempt,
                         .seq = items[i].seq,
                         .part = items[i].part};
        snprintf(w.chat_id, sizeof w.chat_id, "%s", chat_id);
        snprintf(w.role, sizeof w.role, "%s", items[i].role);
        ep[i] = s_part_new(&w);
    }
    if (b->ep_n) {
        memcpy(ep + take, b->ep, b->ep_n * sizeof *ep);
    }
    free(b->ep);
    b->ep = ep;
    b->ep_n += take;
    b->ep_cap = b->ep_n;
    b->ep_bytes += bytes;
    b->ep_first = items[0].seq;
    pthread_mutex_unlock(&self->lock);
}

static bool s_is_user(const char *key) {
    return strncmp(key, HUB_USER_PREFIX, strlen(HUB_USER_PREFIX)) == 0;
}

/* The topics the current keys need, as a set. Lock held. */
static zhashx_t *s_wanted(hub_t *self) {
    zhashx_t *want = zhashx_new();
    char topic[PROTO_TOPIC_MAX_BYTES];
    if (self->user_buckets > 0) {
        zhashx_insert(want, PROTO_TOPIC_UPDATE, (void *)"");
    }
    for (bucket_t *b = zhashx_first(self->buckets); b; b = zhashx_next(self->buckets)) {
        if (s_is_user(b->key)) {
            continue;
        }
        snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, b->key);
        zhashx_insert(want, topic, (void *)b->key);
        snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_PART, b->key);
        zhashx_insert(want, topic, (void *)b->key);
    }
    return want;
}

/* Subscribes exactly the topics the current keys need; subscribed maps topic -> chat id
 * ("" for the all-updates topic). */
static void s_resubscribe(hub_t *self, bus_subscriber_t *sub, zhashx_t *subscribed) {
    pthread_mutex_lock(&self->lock);
    zhashx_t *want = s_wanted(self);
    self->resubscribe = false;
    /* The chat ids in want point into buckets: subscribed copies them (its duplicator) while
     * the lock is held. */
    for (const char *v = zhashx_first(want); v; v = zhashx_next(want)) {
        const char *topic = zhashx_cursor(want);
        if (!zhashx_lookup(subscribed, topic)) {
            bus_subscriber_subscribe(sub, topic);
            zhashx_insert(subscribed, topic, (void *)v);
        }
    }
    zlistx_t *gone = zlistx_new();
    for (const char *v = zhashx_first(subscribed); v; v = zhashx_next(subscribed)) {
        if (!zhashx_lookup(want, zhashx_cursor(subscribed))) {
            zlistx_add_end(gone, (void *)zhashx_cursor(subscribed));
        }
    }
    pthread_mutex_unlock(&self->lock);
    for (const char *t = zlistx_first(gone); t; t = zlistx_next(gone)) {
        bus_subscriber_unsubscribe(sub, t);
        const char *chat = zhashx_lookup(subscribed, t);
        if (chat && *chat) {
            bus_subscriber_forget(sub, chat);
        }
    }
    for (const char *t = zlistx_first(gone); t; t = zlistx_next(gone)) {
        zhashx_delete(subscribed, t);
    }
    zlistx_destroy(&gone);
    zhashx_destroy(&want);
}

static void s_sync_entries(hub_t *self, bucket_t *b, const hint_update_t *u) {
    for (hub_entry_t *e = b->head; e; e = e->next) {
        self->ops.sync(e->stream, u);
    }
}

static void s_bucket_sync(hub_t *self, const char *key, const hint_update_t *u) {
    bucket_t *b = zhashx_lookup(self->buckets, key);
    if (b) {
        s_sync_entries(self, b, u);
    }
}

/* Hands one bus message to the streams it concerns. Lock held. */
static void s_dispatch(hub_t *self, const wire_msg_t *m) {
    if (m->type == WIRE_PART) {
        bucket_t *b = zhashx_lookup(self->buckets, m->u.part.chat_id);
        if (b) {
            hub_part_t *p = s_part_new(&m->u.part);
            s_episode_add(b, p);
            for (hub_entry_t *e = b->head; e; e = e->next) {
                if (self->ops.part(e->stream, p)) {
                    if (self->nflush == self->flush_cap) {
                        self->flush_cap = self->flush_cap ? self->flush_cap * 2 : 1024;
                        self->flushq =
                            mem_realloc(self->flushq, self->flush_cap * sizeof *self->flushq);
                    }
                    self->flushq[self->nflush++] = e->stream;
                }
            }
            hub_part_unref(&p);
        }
    } else {
        const hint_update_t *u = &m->u.update;
        bucket_t *chat = zhashx_lookup(self->buckets, u->chat_id);
        if (chat && u->snapshot_version > chat->known) {
            chat->known = u->snapshot_version;
        }
        s_bucket_sync(self, u->chat_id, u);
        if (u->owner_id[0]) {
            char key[HUB_KEY_MAX];
            snprintf(key, sizeof key, "%s%s", HUB_USER_PREFIX, u->owner_id);
            s_bucket_sync(self, key, u);
        } else if (self->user_buckets > 0) {
            /* A hint without its owner: every watch looks (it reads only its own chats). */
            for (bucket_t *b = zhashx_first(self->buckets); b; b = zhashx_next(self->buckets)) {
                if (s_is_user(b->key)) {
                    s_sync_entries(self, b, u);
                }
            }
        }
    }
}

/* Dispatches the message in m and whatever else the bus holds now (HUB_BATCH_MAX messages in
 * all), then flushes the streams that asked: their parts of the batch go out together. The
 * flush runs without the lock (it writes to sockets), so streams open and close, and their
 * jobs read the episode log, meanwhile. */
static void s_dispatch_batch(hub_t *self, bus_subscriber_t *sub, wire_msg_t *m) {
    pthread_mutex_lock(&self->lock);
    int n = 0;
    do {
        if (m->type == WIRE_PART || m->type == WIRE_UPDATE) {
            s_dispatch(self, m);
        }
        wire_msg_clear(m);
    } while (++n < HUB_BATCH_MAX && bus_subscriber_recv(sub, m, 0) == 1);
    pthread_mutex_unlock(&self->lock);
    for (size_t i = 0; i < self->nflush; i++) {
        self->ops.flush(self->flushq[i]);
    }
    self->nflush = 0;
}

/* Calls tick on every entry. */
static void s_tick_all(hub_t *self, int64_t now) {
    pthread_mutex_lock(&self->lock);
    for (bucket_t *b = zhashx_first(self->buckets); b; b = zhashx_next(self->buckets)) {
        for (hub_entry_t *e = b->head; e; e = e->next) {
            self->ops.tick(e->stream, now);
        }
    }
    pthread_mutex_unlock(&self->lock);
}

/* Wakes the streams of the n chats whose versions were read. Lock held. */
static void s_poll_apply(hub_t *self, char (*keys)[HUB_KEY_MAX], size_t n, const int64_t *vers) {
    for (size_t i = 0; i < n; i++) {
        bucket_t *b = zhashx_lookup(self->buckets, keys[i]);
        if (!b) {
            continue; /* its streams closed meanwhile */
        }
        if (vers[i] < 0) {
            s_sync_entries(self, b, NULL); /* a gone chat closes its streams at their sync */
        } else if (vers[i] > b->known) {
            /* A change no hint announced (or the first poll of the chat): a hint of our own. */
            b->known = vers[i];
            hint_update_t u = {.snapshot_version = vers[i]};
            snprintf(u.chat_id, sizeof u.chat_id, "%.*s", (int)sizeof u.chat_id - 1, b->key);
            s_sync_entries(self, b, &u);
        }
    }
}

/* The poll: every watch syncs in full; the chats with streams are read in batches and only
 * those that changed unseen wake their streams (all of them without a version reader). */
static void s_poll(hub_t *self) {
    pthread_mutex_lock(&self->lock);
    size_t cap = zhashx_size(self->buckets), n = 0;
    char(*keys)[HUB_KEY_MAX] = cap ? mem_alloc(cap * sizeof *keys) : NULL;
    for (bucket_t *b = zhashx_first(self->buckets); b; b = zhashx_next(self->buckets)) {
        if (s_is_user(b->key) || !self->versions) {
            s_sync_entries(self, b, NULL);
        } else {
            snprintf(keys[n++], HUB_KEY_MAX, "%s", b->key);
        }
    }
    hub_versions_fn *fn = self->versions;
    void *ctx = self->versions_ctx;
    pthread_mutex_unlock(&self->lock);
    for (size_t at = 0; at < n; at += HUB_POLL_BATCH) {
        size_t m = n - at < HUB_POLL_BATCH ? n - at : HUB_POLL_BATCH;
        const char *ids[HUB_POLL_BATCH];
        int64_t vers[HUB_POLL_BATCH];
        for (size_t i = 0; i < m; i++) {
            ids[i] = keys[at + i];
        }
        /* Without the lock: it reads the database. A read that failed (or found no connection
         * free at once) wakes nothing: hints still flow, and the next poll looks again. */
        if (fn(ctx, ids, m, vers) == 0) {
            pthread_mutex_lock(&self->lock);
            s_poll_apply(self, keys + at, m, vers);
            pthread_mutex_unlock(&self->lock);
        }
    }
    free(keys);
}

void hub_set_versions(hub_t *self, hub_versions_fn *fn, void *ctx) {
    pthread_mutex_lock(&self->lock);
    self->versions = fn;
    self->versions_ctx = ctx;
    pthread_mutex_unlock(&self->lock);
}

static void *s_run(void *arg) {
    hub_t *self = arg;
    bus_subscriber_t *sub = bus_subscriber_new(self->endpoint);
    ASSERT(sub); /* the endpoint was checked by hub_new */
    zhashx_t *subscribed = zhashx_new();
    zhashx_set_duplicator(subscribed, (zhashx_duplicator_fn *)strdup);
    zhashx_set_destructor(subscribed, (zhashx_destructor_fn *)zstr_free);
    int64_t next_poll = id_now_ms() + self->poll_ms;
    int64_t next_tick = id_now_ms() + HUB_TICK_MS;
    for (;;) {
        pthread_mutex_lock(&self->lock);
        bool stop = self->stop;
        bool resub = self->resubscribe;
        pthread_mutex_unlock(&self->lock);
        if (stop) {
            break;
        }
        if (resub) {
            s_resubscribe(self, sub, subscribed);
        }
        wire_msg_t m;
        if (bus_subscriber_recv(sub, &m, HUB_RECV_TIMEOUT_MS) == 1) {
            s_dispatch_batch(self, sub, &m);
        }
        int64_t now = id_now_ms();
        if (now >= next_poll) {
            s_poll(self);
            next_poll = now + self->poll_ms;
        }
        if (now >= next_tick) {
            s_tick_all(self, now);
            next_tick = now + HUB_TICK_MS;
        }
    }
    zhashx_destroy(&subscribed);
    bus_subscriber_destroy(&sub);
    return NULL;
}

hub_t *hub_new(const char *sub_endpoint, int64_t poll_ms, int64_t per_user_max,
               const hub_ops_t *ops) {
    bus_subscriber_t *probe = bus_subscriber_new(sub_endpoint);
    if (!probe) {
        log_error("hub_endpoint_invalid", "endpoint=%s", sub_endpoint);
        return NULL;
    }
    bus_subscriber_destroy(&probe);
    hub_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->buckets = zhashx_new();
    zhashx_set_destructor(self->buckets, s_bucket_free);
    self->users = tally_new();
    self->endpoint = mem_strdup(sub_endpoint);
    self->poll_ms = poll_ms;
    self->per_user_max = per_user_max;
    self->ops = *ops;
    ASSERT(pthread_create(&self->thread, NULL, s_run, self) == 0);
    log_info("hub_started", "endpoint=%s poll_ms=%lld streams_per_user=%lld", sub_endpoint,
             (long long)poll_ms, (long long)per_user_max);
    return self;
}

void hub_destroy(hub_t **self_p) {
    hub_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    for (bucket_t *b = zhashx_first(self->buckets); b; b = zhashx_next(self->buckets)) {
        while (b->head) {
            hub_entry_t *e = b->head;
            b->head = e->next;
            free(e);
        }
    }
    zhashx_destroy(&self->buckets);
    zhashx_destroy(&self->users);
    free(self->flushq);
    pthread_mutex_destroy(&self->lock);
    free(self->endpoint);
    free(self);
    *self_p = NULL;
}

hub_entry_t *hub_add(hub_t *self, const char *key, const char *user_id, void *stream) {
    ASSERT(strlen(key) < HUB_KEY_MAX);
    pthread_mutex_lock(&self->lock);
    if (self->closing) {
        pthread_mutex_unlock(&self->lock);
        return NULL;
    }
    if (tally_add(self->users, user_id, 1) > self->per_user_max) {
        tally_add(self->users, user_id, -1);
        pthread_mutex_unlock(&self->lock);
        return NULL;
    }
    bucket_t *b = zhashx_lookup(self->buckets, key);
    if (!b) {
        b = mem_calloc(1, sizeof *b);
        snprintf(b->key, sizeof b->key, "%s", key);
        zhashx_insert(self->buckets, key, b);
        self->user_buckets += s_is_user(key);
        self->resubscribe = true;
    }
    hub_entry_t *e = mem_calloc(1, sizeof *e);
    snprintf(e->user, sizeof e->user, "%s", user_id);
    e->stream = stream;
    e->bucket = b;
    e->next = b->head;
    if (b->head) {
        b->head->prev = e;
    }
    b->head = e;
    self->count++;
    pthread_mutex_unlock(&self->lock);
    return e;
}

void *hub_shared(hub_t *self, hub_entry_t *entry, const hub_share_ops_t *ops) {
    pthread_mutex_lock(&self->lock);
    bucket_t *b = entry->bucket;
    if (!b->shared) {
        b->shared = ops->make();
        b->share_ops = ops;
    }
    void *shared = b->share_ops == ops ? ops->ref(b->shared) : NULL;
    pthread_mutex_unlock(&self->lock);
    return shared;
}

void hub_remove(hub_t *self, hub_entry_t **entry_p) {
    hub_entry_t *e = *entry_p;
    if (!e) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    bucket_t *b = e->bucket;
    if (e->prev) {
        e->prev->next = e->next;
    } else {
        b->head = e->next;
    }
    if (e->next) {
        e->next->prev = e->prev;
    }
    self->count--;
    tally_add(self->users, e->user, -1);
    if (!b->head) {
        self->user_buckets -= s_is_user(b->key);
        self->resubscribe = true;
        char key[HUB_KEY_MAX];
        snprintf(key, sizeof key, "%s", b->key);
        zhashx_delete(self->buckets, key); /* frees b */
    }
    pthread_mutex_unlock(&self->lock);
    free(e);
    *entry_p = NULL;
}

void hub_close_all(hub_t *self) {
    pthread_mutex_lock(&self->lock);
    self->closing = true;
    for (bucket_t *b = zhashx_first(self->buckets); b; b = zhashx_next(self->buckets)) {
        for (hub_entry_t *e = b->head; e; e = e->next) {
            self->ops.close(e->stream);
        }
    }
    pthread_mutex_unlock(&self->lock);
}

int hub_count(hub_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = self->count;
    pthread_mutex_unlock(&self->lock);
    return n;
}
