/* hub: one subscriber, many streams; see hub.h. */
#include "hub.h"
#include "bus.h"
#include "log.h"
#include "mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HUB_RECV_TIMEOUT_MS 100 /* how often the thread looks at (un)subscription requests */

typedef struct entry {
    char chat_id[ID_UUID_LEN + 1]; /* or HUB_ALL */
    void *stream;
    struct entry *next;
} entry_t;

struct hub {
    pthread_t thread;
    pthread_mutex_t lock; /* guards entries, count, stop; held while calling a stream */
    entry_t *entries;
    int count;
    bool stop;
    bool resubscribe; /* the set of chats changed */
    char *endpoint;
    int64_t poll_ms;
    hub_ops_t ops;
};

/* (Un)subscribes the topics of key: a chat's updates and parts, or every update for "*". */
static void s_topics(bus_subscriber_t *sub, const char *key, bool on) {
    char topic[PROTO_TOPIC_MAX_BYTES];
    int (*fn)(bus_subscriber_t *, const char *) =
        on ? bus_subscriber_subscribe : bus_subscriber_unsubscribe;
    if (!strcmp(key, HUB_ALL)) {
        fn(sub, PROTO_TOPIC_UPDATE);
        return;
    }
    snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, key);
    fn(sub, topic);
    snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_PART, key);
    fn(sub, topic);
    if (!on) {
        bus_subscriber_forget(sub, key);
    }
}

/* Subscribes the subscriber to exactly the chats that have streams. */
static void s_resubscribe(hub_t *self, bus_subscriber_t *sub, zlistx_t *subscribed) {
    zlistx_t *want = zlistx_new();
    zlistx_set_destructor(want, (zlistx_destructor_fn *)zstr_free);
    zlistx_set_comparator(want, (zlistx_comparator_fn *)strcmp);
    pthread_mutex_lock(&self->lock);
    for (entry_t *e = self->entries; e; e = e->next) {
        if (!zlistx_find(want, e->chat_id)) {
            zlistx_add_end(want, strdup(e->chat_id));
        }
    }
    self->resubscribe = false;
    pthread_mutex_unlock(&self->lock);
    for (char *c = zlistx_first(subscribed); c; c = zlistx_next(subscribed)) {
        if (!zlistx_find(want, c)) {
            s_topics(sub, c, false);
        }
    }
    for (char *c = zlistx_first(want); c; c = zlistx_next(want)) {
        if (!zlistx_find(subscribed, c)) {
            s_topics(sub, c, true);
        }
    }
    zlistx_purge(subscribed);
    for (char *c = zlistx_first(want); c; c = zlistx_next(want)) {
        zlistx_add_end(subscribed, strdup(c));
    }
    zlistx_destroy(&want);
}

static void s_dispatch(hub_t *self, const wire_msg_t *m) {
    const char *chat = m->type == WIRE_PART ? m->u.part.chat_id : m->u.update.chat_id;
    pthread_mutex_lock(&self->lock);
    for (entry_t *e = self->entries; e; e = e->next) {
        bool all = !strcmp(e->chat_id, HUB_ALL);
        if ((all && m->type == WIRE_PART) || (!all && strcmp(e->chat_id, chat) != 0)) {
            continue;
        }
        if (m->type == WIRE_PART) {
            self->ops.part(e->stream, &m->u.part);
        } else {
            self->ops.sync(e->stream);
        }
    }
    pthread_mutex_unlock(&self->lock);
}

static void s_poll_all(hub_t *self) {
    pthread_mutex_lock(&self->lock);
    for (entry_t *e = self->entries; e; e = e->next) {
        self->ops.sync(e->stream);
    }
    pthread_mutex_unlock(&self->lock);
}

static void *s_run(void *arg) {
    hub_t *self = arg;
    bus_subscriber_t *sub = bus_subscriber_new(self->endpoint);
    ASSERT(sub); /* the endpoint was checked by hub_new */
    zlistx_t *subscribed = zlistx_new();
    zlistx_set_destructor(subscribed, (zlistx_destructor_fn *)zstr_free);
    zlistx_set_comparator(subscribed, (zlistx_comparator_fn *)strcmp);
    int64_t next_poll = id_now_ms() + self->poll_ms;
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
        int rc = bus_subscriber_recv(sub, &m, HUB_RECV_TIMEOUT_MS);
        if (rc == 1) {
            if (m.type == WIRE_PART || m.type == WIRE_UPDATE) {
                s_dispatch(self, &m);
            }
            wire_msg_clear(&m);
        }
        if (id_now_ms() >= next_poll) {
            s_poll_all(self);
            next_poll = id_now_ms() + self->poll_ms;
        }
    }
    zlistx_destroy(&subscribed);
    bus_subscriber_destroy(&sub);
    return NULL;
}

hub_t *hub_new(const char *sub_endpoint, int64_t poll_ms, const hub_ops_t *ops) {
    bus_subscriber_t *probe = bus_subscriber_new(sub_endpoint);
    if (!probe) {
        log_error("hub_endpoint_invalid", "endpoint=%s", sub_endpoint);
        return NULL;
    }
    bus_subscriber_destroy(&probe);
    hub_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->endpoint = mem_strdup(sub_endpoint);
    self->poll_ms = poll_ms;
    self->ops = *ops;
    ASSERT(pthread_create(&self->thread, NULL, s_run, self) == 0);
    log_info("hub_started", "endpoint=%s poll_ms=%lld", sub_endpoint, (long long)poll_ms);
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
    while (self->entries) {
        entry_t *e = self->entries;
        self->entries = e->next;
        free(e);
    }
    pthread_mutex_destroy(&self->lock);
    free(self->endpoint);
    free(self);
    *self_p = NULL;
}

void hub_add(hub_t *self, const char *chat_id, void *stream) {
    entry_t *e = mem_calloc(1, sizeof *e);
    snprintf(e->chat_id, sizeof e->chat_id, "%s", chat_id);
    e->stream = stream;
    pthread_mutex_lock(&self->lock);
    e->next = self->entries;
    self->entries = e;
    self->count++;
    self->resubscribe = true;
    pthread_mutex_unlock(&self->lock);
}

void hub_remove(hub_t *self, void *stream) {
    pthread_mutex_lock(&self->lock);
    for (entry_t **p = &self->entries; *p; p = &(*p)->next) {
        if ((*p)->stream == stream) {
            entry_t *e = *p;
            *p = e->next;
            free(e);
            self->count--;
            self->resubscribe = true;
            break;
        }
    }
    pthread_mutex_unlock(&self->lock);
}

void hub_close_all(hub_t *self) {
    pthread_mutex_lock(&self->lock);
    for (entry_t *e = self->entries; e; e = e->next) {
        self->ops.close(e->stream);
    }
    pthread_mutex_unlock(&self->lock);
}

int hub_count(hub_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = self->count;
    pthread_mutex_unlock(&self->lock);
    return n;
}
