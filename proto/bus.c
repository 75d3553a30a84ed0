/* bus: publisher and watermarking subscriber over the broker's XSUB/XPUB; see bus.h. */
#include "bus.h"
#include "curve.h"
#include "id.h"
#include "mem.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

struct bus_publisher {
    pthread_mutex_t lock; /* guards sock and counters: sinks run on committing threads */
    zsock_t *sock;
    void *handle;
    bus_pub_counters_t counters;
    int64_t last_drop_log_ms;
    int64_t drops_since_log;
};

typedef struct {
    int64_t update;    /* highest snapshot_version of an update hint delivered, or 0 */
    int64_t ownership; /* the same for ownership hints (a separate channel, same versions) */
} s_marks_t;

struct bus_subscriber {
    zsock_t *sock;
    void *handle;
    zhashx_t *marks; /* chat_id -> s_marks_t * (owned) */
    bus_sub_counters_t counters;
};

/* Returns 0, or -1 when the CURVE keys could not be set (logged). */
static int s_client_options(void *h, const curve_t *keys) {
    int ivl = PROTO_RECONNECT_IVL_MS;
    int zero = 0;
    int linger = PROTO_LINGER_MS;
    zmq_setsockopt(h, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    /* No exponential back-off: a restarted broker is found within one interval. */
    zmq_setsockopt(h, ZMQ_RECONNECT_IVL_MAX, &zero, sizeof zero);
    zmq_setsockopt(h, ZMQ_LINGER, &linger, sizeof linger);
    return keys ? curve_apply(keys, h) : 0;
}

bus_publisher_t *bus_publisher_new(const char *endpoint) {
    return bus_publisher_new_with(endpoint, curve_default());
}

bus_publisher_t *bus_publisher_new_with(const char *endpoint, const curve_t *keys) {
    zsock_t *sock = zsock_new(ZMQ_PUB);
    if (!sock) {
        return NULL;
    }
    void *h = zsock_resolve(sock);
    if (s_client_options(h, keys) != 0) {
        zsock_destroy(&sock);
        return NULL;
    }
    int hwm = BUS_PUB_SNDHWM;
    int one = 1;
    zmq_setsockopt(h, ZMQ_SNDHWM, &hwm, sizeof hwm);
    /* With NODROP a full pipe makes the send fail with EAGAIN instead of discarding the
     * message silently; the publisher then counts the drop itself. */
    zmq_setsockopt(h, ZMQ_XPUB_NODROP, &one, sizeof one);
    if (zsock_connect(sock, "%s", endpoint) < 0) {
        log_error("bus_connect_failed", "endpoint=%s role=publisher", endpoint);
        zsock_destroy(&sock);
        return NULL;
    }
    bus_publisher_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->sock = sock;
    self->handle = h;
    return self;
}

void bus_publisher_destroy(bus_publisher_t **self_p) {
    bus_publisher_t *self = *self_p;
    if (!self) {
        return;
    }
    if (self->counters.dropped > 0) {
        log_warn("bus_publisher_closed", "sent=%lld dropped=%lld", (long long)self->counters.sent,
                 (long long)self->counters.dropped);
    }
    zsock_destroy(&self->sock);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* Under the lock: a drop is counted always and logged at most once per interval. */
static void s_count_drop(bus_publisher_t *self, const char *topic) {
    self->counters.dropped++;
    self->drops_since_log++;
    int64_t now = id_now_ms();
    if (now - self->last_drop_log_ms >= BUS_DROP_LOG_INTERVAL_MS) {
        log_warn("bus_drop", "topic=%s dropped_since_last=%lld dropped_total=%lld", topic,
                 (long long)self->drops_since_log, (long long)self->counters.dropped);
        self->last_drop_log_ms = now;
        self->drops_since_log = 0;
    }
}

int bus_publisher_send(bus_publisher_t *self, const wire_msg_t *msg) {
    char topic[PROTO_TOPIC_MAX_BYTES];
    char *data = NULL;
    size_t size = 0;
    if (wire_topic(msg, topic, sizeof topic) != 0 || wire_encode(msg, &data, &size) != 0) {
        pthread_mutex_lock(&self->lock);
        self->counters.invalid++;
        pthread_mutex_unlock(&self->lock);
        log_error("bus_invalid_message", "type=%d", (int)msg->type);
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&self->lock);
    /* The first frame is only accepted when the whole message fits (libzmq checks the HWM
     * at the start of a multipart message), so a drop never leaves half a message. */
    if (zmq_send(self->handle, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        s_count_drop(self, topic);
        rc = -1;
    } else if (zmq_send(self->handle, data, size, ZMQ_DONTWAIT) < 0) {
        s_count_drop(self, topic);
        rc = -1;
    } else {
        self->counters.sent++;
    }
    pthread_mutex_unlock(&self->lock);
    free(data);
    return rc;
}

int bus_publisher_update(bus_publisher_t *self, const hint_update_t *hint) {
    wire_msg_t m = {.type = WIRE_UPDATE, .u.update = *hint};
    return bus_publisher_send(self, &m);
}

int bus_publisher_ownership(bus_publisher_t *self, const hint_ownership_t *hint) {
    wire_msg_t m = {.type = WIRE_OWNERSHIP, .u.ownership = *hint};
    return bus_publisher_send(self, &m);
}

int bus_publisher_part(bus_publisher_t *self, const wire_part_t *part) {
    /* A shallow copy: the JSON text stays the caller's and is not freed here. */
    wire_msg_t m = {.type = WIRE_PART, .u.part = *part};
    return bus_publisher_send(self, &m);
}

/* The sink callbacks cannot report failure; the drop is counted by the publisher. */
static void s_sink_update(void *ctx, const hint_update_t *hint) {
    (void)bus_publisher_update(ctx, hint);
}

static void s_sink_ownership(void *ctx, const hint_ownership_t *hint) {
    (void)bus_publisher_ownership(ctx, hint);
}

hint_sink_t bus_publisher_sink(bus_publisher_t *self) {
    hint_sink_t sink = {s_sink_update, s_sink_ownership, self};
    return sink;
}

void bus_publisher_counters(bus_publisher_t *self, bus_pub_counters_t *out) {
    pthread_mutex_lock(&self->lock);
    *out = self->counters;
    pthread_mutex_unlock(&self->lock);
}

/* ----------------------------------------------------------------------------------------- */

static void s_marks_free(void **item) {
    free(*item);
    *item = NULL;
}

bus_subscriber_t *bus_subscriber_new(const char *endpoint) {
    return bus_subscriber_new_with(endpoint, curve_default());
}

bus_subscriber_t *bus_subscriber_new_with(const char *endpoint, const curve_t *keys) {
    zsock_t *sock = zsock_new(ZMQ_SUB);
    if (!sock) {
        return NULL;
    }
    void *h = zsock_resolve(sock);
    if (s_client_options(h, keys) != 0) {
        zsock_destroy(&sock);
        return NULL;
    }
    int hwm = BUS_SUB_RCVHWM;
    int64_t max = PROTO_MSG_MAX_BYTES;
    zmq_setsockopt(h, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(h, ZMQ_MAXMSGSIZE, &max, sizeof max);
    if (zsock_connect(sock, "%s", endpoint) < 0) {
        log_error("bus_connect_failed", "endpoint=%s role=subscriber", endpoint);
        zsock_destroy(&sock);
        return NULL;
    }
    bus_subscriber_t *self = mem_calloc(1, sizeof *self);
    self->sock = sock;
    self->handle = h;
    self->marks = zhashx_new();
    ASSERT(self->marks);
    zhashx_set_destructor(self->marks, s_marks_free);
    return self;
}

void bus_subscriber_destroy(bus_subscriber_t **self_p) {
    bus_subscriber_t *self = *self_p;
    if (!self) {
        return;
    }
    zhashx_destroy(&self->marks);
    zsock_destroy(&self->sock);
    free(self);
    *self_p = NULL;
}

int bus_subscriber_subscribe(bus_subscriber_t *self, const char *topic) {
    return zmq_setsockopt(self->handle, ZMQ_SUBSCRIBE, topic, strlen(topic)) == 0 ? 0 : -1;
}

int bus_subscriber_unsubscribe(bus_subscriber_t *self, const char *topic) {
    return zmq_setsockopt(self->handle, ZMQ_UNSUBSCRIBE, topic, strlen(topic)) == 0 ? 0 : -1;
}

void bus_subscriber_forget(bus_subscriber_t *self, const char *chat_id) {
    zhashx_delete(self->marks, chat_id);
}

zsock_t *bus_subscriber_sock(bus_subscriber_t *self) {
    return self->sock;
}

void bus_subscriber_counters(bus_subscriber_t *self, bus_sub_counters_t *out) {
    *out = self->counters;
}

/* Applies the watermark (ARCHITECTURE.md §9: a hint at or below the highest
 * snapshot_version processed for the chat is discarded). True when msg is fresh. */
static bool s_fresh(bus_subscriber_t *self, const wire_msg_t *msg) {
    const char *chat_id = NULL;
    int64_t version = 0;
    if (msg->type == WIRE_UPDATE) {
        chat_id = msg->u.update.chat_id;
        version = msg->u.update.snapshot_version;
    } else if (msg->type == WIRE_OWNERSHIP) {
        chat_id = msg->u.ownership.chat_id;
        version = msg->u.ownership.snapshot_version;
    } else {
        return true;
    }
    s_marks_t *m = zhashx_lookup(self->marks, chat_id);
    if (!m) {
        if (zhashx_size(self->marks) >= BUS_WATERMARK_MAX_CHATS) {
            zhashx_purge(self->marks);
            self->counters.watermark_resets++;
            log_warn("bus_watermarks_reset", "chats=%d", BUS_WATERMARK_MAX_CHATS);
        }
        m = mem_calloc(1, sizeof *m);
        zhashx_insert(self->marks, chat_id, m);
    }
    int64_t *mark = msg->type == WIRE_UPDATE ? &m->update : &m->ownership;
    if (version <= *mark) {
        self->counters.stale++;
        return false;
    }
    /* Every bundle that advances snapshot_version emits an update hint, so a jump shows
     * hints lost (or still in flight, or sent before this subscriber listened). */
    if (msg->type == WIRE_UPDATE && *mark > 0 && version > *mark + 1) {
        self->counters.gaps += version - *mark - 1;
    }
    *mark = version;
    return true;
}

/* Reads one [topic][body] message that is waiting. Returns 1 with a fresh message in *msg,
 * 0 when the message was discarded (stale or malformed), -1 when nothing was waiting. */
static int s_read_one(bus_subscriber_t *self, wire_msg_t *msg) {
    zmq_msg_t topic;
    zmq_msg_init(&topic);
    if (zmq_msg_recv(&topic, self->handle, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&topic);
        return -1;
    }
    self->counters.received++;
    int more = zmq_msg_more(&topic);
    zmq_msg_t body;
    zmq_msg_init(&body);
    int frames = 1;
    bool body_ok = false;
    while (more) {
        /* Frames after the second are read and released: the message is malformed. */
        zmq_msg_t extra;
        zmq_msg_t *m = frames == 1 ? &body : &extra;
        if (m == &extra) {
            zmq_msg_init(&extra);
        }
        if (zmq_msg_recv(m, self->handle, 0) < 0) {
            if (m == &extra) {
                zmq_msg_close(&extra);
            }
            break;
        }
        more = zmq_msg_more(m);
        if (m == &body) {
            body_ok = true;
        } else {
            zmq_msg_close(&extra);
        }
        frames++;
    }
    int rc = 0;
    char why[128] = "";
    char expect[PROTO_TOPIC_MAX_BYTES];
    if (frames != 2 || !body_ok) {
        snprintf(why, sizeof why, "expected 2 frames, got %d", frames);
    } else if (wire_decode(zmq_msg_data(&body), zmq_msg_size(&body), msg, why, sizeof why) != 0) {
        /* why is set by the decoder */
    } else if (wire_topic(msg, expect, sizeof expect) != 0 ||
               strlen(expect) != zmq_msg_size(&topic) ||
               memcmp(expect, zmq_msg_data(&topic), zmq_msg_size(&topic)) != 0) {
        snprintf(why, sizeof why, "topic does not match the message");
        wire_msg_clear(msg);
    } else if (s_fresh(self, msg)) {
        rc = 1;
    } else {
        wire_msg_clear(msg);
    }
    if (rc == 0 && why[0]) {
        self->counters.malformed++;
        char q[160];
        log_warn("bus_malformed", "detail=%s", log_quote(why, q, sizeof q));
    }
    zmq_msg_close(&body);
    zmq_msg_close(&topic);
    return rc;
}

int bus_subscriber_recv(bus_subscriber_t *self, wire_msg_t *msg, int timeout_ms) {
    memset(msg, 0, sizeof *msg);
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : id_now_ms() + timeout_ms;
    for (;;) {
        int rc = s_read_one(self, msg);
        if (rc == 1) {
            self->counters.delivered++;
            return 1;
        }
        if (rc == 0) {
            continue; /* discarded; look at the next one */
        }
        int64_t now = id_now_ms();
        if (now >= deadline) {
            return 0;
        }
        zmq_pollitem_t item = {self->handle, 0, ZMQ_POLLIN, 0};
        long wait = deadline == INT64_MAX ? -1 : (long)(deadline - now);
        if (zmq_poll(&item, 1, wait) < 0) {
            return -1; /* EINTR (a signal) or a terminated context: the owner decides */
        }
    }
}
