/* episode: a stream's cursor on its chat's current episode; see episode.h. */
#include "episode.h"
#include "log.h"
#include "mem.h"
#include "relay.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct episode {
    gateway_t *gw;
    char chat_id[ID_UUID_LEN + 1];
    char worker_id[ID_UUID_LEN + 1]; /* the owner the last sync read ("" when none) */
    bool following;                  /* a sync named an episode */
    int64_t history_version;         /* the episode followed */
    int64_t generation_attempt;
    int64_t last_seq; /* the last part delivered (0: none yet) */
    episode_ops_t ops;
    void *owner;
};

episode_t *episode_new(gateway_t *gw, const char *chat_id, const episode_ops_t *ops, void *owner) {
    episode_t *self = mem_calloc(1, sizeof *self);
    self->gw = gw;
    snprintf(self->chat_id, sizeof self->chat_id, "%s", chat_id);
    self->ops = *ops;
    self->owner = owner;
    return self;
}

void episode_destroy(episode_t **self_p) {
    free(*self_p);
    *self_p = NULL;
}

bool episode_following(const episode_t *self) {
    return self->following;
}

static void s_reset(episode_t *self) {
    self->last_seq = 0;
    if (self->ops.reset) {
        self->ops.reset(self->owner);
    }
}

static void s_deliver_shared(episode_t *self, hub_part_t *hp) {
    const wire_part_t *w = hub_part_wire(hp);
    episode_part_t p = {.history_version = w->history_version,
                        .generation_attempt = w->generation_attempt,
                        .seq = w->seq,
                        .role = w->role,
                        .json = w->part.text,
                        .len = w->part.len,
                        .shared = hp};
    self->last_seq = w->seq;
    self->ops.part(self->owner, &p);
}

/* The parts after last_seq from the hub's episode log; false when the log cannot say. */
static bool s_from_log(episode_t *self) {
    hub_part_t **parts;
    size_t n;
    if (hub_episode(self->gw->hub, self->chat_id, self->history_version, self->generation_attempt,
                    self->last_seq, &parts, &n) != 0) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (hub_part_wire(parts[i])->seq == self->last_seq + 1) {
            s_deliver_shared(self, parts[i]);
        }
        hub_part_unref(&parts[i]);
    }
    free(parts);
    return true;
}

typedef enum {
    S_FETCH_ANSWERED, /* the worker gave what it has (or has no such episode, or is gone) */
    S_FETCH_TIMEOUT,  /* no answer in time: ask again later */
} s_fetch_t;

/* The parts after last_seq from the worker, page by page until it says there is no more;
 * each page also goes to the hub's log for the next stream of the chat. */
static s_fetch_t s_from_worker(episode_t *self, relay_client_t *relay) {
    for (;;) {
        wire_select_t sel = {.history_version = self->history_version,
                             .generation_attempt = self->generation_attempt,
                             .after_seq = self->last_seq};
        snprintf(sel.chat_id, sizeof sel.chat_id, "%s", self->chat_id);
        wire_msg_t reply;
        if (relay_client_fetch(relay, self->worker_id, &sel, EPISODE_RELAY_PAGE,
                               EPISODE_RELAY_TIMEOUT_MS, &reply) != 0) {
            log_warn("episode_relay_timeout",
                     "chat_id=%s worker_id=%s history_version=%lld generation_attempt=%lld"
                     " after_seq=%lld",
                     self->chat_id, self->worker_id, (long long)self->history_version,
                     (long long)self->generation_attempt, (long long)self->last_seq);
            return S_FETCH_TIMEOUT;
        }
        bool ok = reply.u.reply.status == WIRE_STATUS_OK;
        bool more = ok && reply.u.reply.more;
        if (ok) {
            hub_episode_fill(self->gw->hub, self->chat_id, self->history_version,
                             self->generation_attempt, reply.u.reply.parts, reply.u.reply.nparts);
        }
        for (size_t i = 0; ok && i < reply.u.reply.nparts; i++) {
            const wire_item_t *it = &reply.u.reply.parts[i];
            if (it->seq != self->last_seq + 1) {
                continue;
            }
            episode_part_t p = {.history_version = self->history_version,
                                .generation_attempt = self->generation_attempt,
                                .seq = it->seq,
                                .role = it->role,
                                .json = it->part.text,
                                .len = it->part.len};
            self->last_seq = it->seq;
            self->ops.part(self->owner, &p);
        }
        wire_msg_clear(&reply);
        if (!more) {
            return S_FETCH_ANSWERED;
        }
    }
}

/* The worker's parts after last_seq, under the gateway's relay lock; with log_first, none when
 * the log (which another stream may have filled meanwhile) holds them. */
static s_fetch_t s_ask_worker(episode_t *self, bool log_first) {
    gateway_t *gw = self->gw;
    s_fetch_t rc = S_FETCH_ANSWERED;
    pthread_mutex_lock(&gw->relay_lock);
    if (!(log_first && s_from_log(self))) {
        if (!gw->relay) {
            gw->relay = relay_client_new(gw->relay_endpoint);
        }
        rc = gw->relay ? s_from_worker(self, gw->relay) : S_FETCH_TIMEOUT;
    }
    pthread_mutex_unlock(&gw->relay_lock);
    return rc;
}

void episode_catch_up(episode_t *self) {
    if (self->following && !s_from_log(self) && self->worker_id[0]) {
        (void)s_ask_worker(self, true); /* a timeout: the next gap or sync asks again */
    }
}

bool episode_finish(episode_t *self) {
    if (!self->following || !self->worker_id[0]) {
        return true;
    }
    /* The log cannot say that the episode ended: parts may still be on the bus. The worker
     * can, and it keeps a closed episode a while (ARCHITECTURE.md §9, "Relay"). */
    (void)s_from_log(self);
    return s_ask_worker(self, false) == S_FETCH_ANSWERED;
}

void episode_sync(episode_t *self, int64_t history_version, int64_t generation_attempt,
                  const char *worker_id) {
    /* Starting at zero, the first sync announces its episode too, so a client starts every
     * preview clean (ARCHITECTURE.md §7.3). */
    bool changed = history_version != self->history_version ||
                   (generation_attempt != self->generation_attempt && generation_attempt != 0);
    self->history_version = history_version;
    self->generation_attempt = generation_attempt;
    snprintf(self->worker_id, sizeof self->worker_id, "%s", worker_id);
    self->following = true;
    if (changed) {
        s_reset(self);
    }
    if (generation_attempt > 0 && worker_id[0]) {
        episode_catch_up(self);
    }
}

bool episode_take(episode_t *self, const hub_part_t *hp) {
    const wire_part_t *part = hub_part_wire(hp);
    if (!self->following || part->history_version != self->history_version ||
        part->generation_attempt != self->generation_attempt || part->seq != self->last_seq + 1) {
        return false;
    }
    self->last_seq = part->seq;
    return true;
}

void episode_live(episode_t *self, hub_part_t *hp) {
    const wire_part_t *part = hub_part_wire(hp);
    if (self->following && part->history_version == self->history_version &&
        part->generation_attempt > self->generation_attempt) {
        /* A newer attempt of the history followed: its parts can arrive before the sync its
         * hint asks for, and attempts only grow, so the part is enough to start it. */
        self->generation_attempt = part->generation_attempt;
        s_reset(self);
    }
    if (!self->following || part->history_version != self->history_version ||
        part->generation_attempt != self->generation_attempt || part->seq <= self->last_seq) {
        return;
    }
    if (part->seq > self->last_seq + 1) {
        episode_catch_up(self); /* a gap: the episode log or the worker's buffer fills it */
        return;
    }
    s_deliver_shared(self, hp);
}
