/* broker: the XSUB->XPUB proxy and the relay ROUTER in one loop; see broker.h. */
#include "broker.h"
#include "actor.h"
#include "id.h"
#include "mem.h"
#include "ratelog.h"
#include "registry.h"
#include "wire.h"

#include <errno.h>
#include <string.h>

/* Messages handled per socket per loop turn before the others get a look, so that a flood
 * on one socket cannot starve the relay or the pipe. */
#define S_BATCH 256

typedef struct {
    zsock_t *pipe;
    zsock_t *xsub;
    zsock_t *xpub;
    zsock_t *router;
    void *xsub_h;
    void *xpub_h;
    void *router_h;
    registry_t *registry;
    auth_t *auth;       /* borrowed; NULL: plain bus */
    guard_t *guard;     /* connections in handshake on the three sockets */
    ratelog_t *ratelog; /* lines about network input, at a bounded rate */
    wire_stats_t stats;
    int64_t subscription_events;
    int64_t zap_refused; /* CURVE handshakes refused by key */
    int64_t started_ms;
    int64_t stats_interval_ms;
    int64_t next_stats_ms;
    int64_t next_expire_ms;
    int64_t next_allow_ms;  /* next look at the allow directory (CURVE) */
    char sub_endpoint[512]; /* the XPUB's, as configured */
    bool terminated;
} self_t;

struct broker {
    zactor_t *actor;
};

static zsock_t *s_bind(int type, const char *endpoint, int hwm, auth_t *auth, guard_t *guard) {
    zsock_t *s = zsock_new(type);
    if (!s) {
        return NULL;
    }
    if ((auth && auth_apply(auth, s) != 0) || guard_apply(guard, s) != 0) {
        zsock_destroy(&s);
        return NULL;
    }
    zsock_set_linger(s, 0);
    zsock_set_maxmsgsize(s, PROTO_MSG_MAX_BYTES);
    zsock_set_sndhwm(s, hwm);
    zsock_set_rcvhwm(s, hwm);
    if (type == ZMQ_ROUTER) {
        /* Unroutable replies fail with EHOSTUNREACH instead of vanishing, so the broker can
         * answer "no_such_worker" for a worker whose connection is gone. */
        zsock_set_router_mandatory(s, 1);
    }
    if (zsock_bind(s, "%s", endpoint) < 0) {
        log_error("broker_bind_failed", "endpoint=%s error=\"%s\"", endpoint,
                  zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
        return NULL;
    }
    return s;
}

static void s_log_stats(self_t *self, const char *event) {
    wire_stats_t *s = &self->stats;
    s->workers = (int64_t)registry_size(self->registry);
    s->uptime_ms = id_now_ms() - self->started_ms;
    guard_stats_t g;
    guard_stats(self->guard, &g);
    log_info(event,
             "pub_in=%lld pub_out=%lld relay_in=%lld relay_out=%lld dropped=%lld workers=%lld "
             "refused=%lld forbidden=%lld subscription_events=%lld log_suppressed=%lld "
             "handshaking=%lld conns_closed_cap=%lld conns_closed_spare=%lld "
             "handshakes_refused=%lld zap_refused=%lld uptime_ms=%lld",
             (long long)s->pub_in, (long long)s->pub_out, (long long)s->relay_in,
             (long long)s->relay_out, (long long)s->dropped, (long long)s->workers,
             (long long)s->refused, (long long)s->forbidden, (long long)self->subscription_events,
             (long long)ratelog_suppressed_total(self->ratelog), (long long)g.handshaking,
             (long long)g.closed_cap, (long long)g.closed_spare, (long long)g.refused,
             (long long)self->zap_refused, (long long)s->uptime_ms);
}

/* Logs one line about network input (warn level), at most at the ratelog's rate per kind;
 * kind must be a string literal. detail is preformatted key=value text. */
static void s_note(self_t *self, const char *kind, const char *detail) {
    int64_t suppressed = 0;
    if (ratelog_allow(self->ratelog, kind, id_now_ms(), &suppressed)) {
        log_warn(kind, "%s suppressed=%lld", detail, (long long)suppressed);
    }
}

/* The authenticated sender of a received frame, with CURVE: its public key (z85) and, when
 * that key is still in the allow directory, its role. Without CURVE both are "" (anyone). */
typedef struct {
    const char *key;
    const char *role; /* NULL: the key is no longer admitted */
} s_sender_t;

static s_sender_t s_sender(self_t *self, zmq_msg_t *frame) {
    s_sender_t who = {"", ""};
    if (!self->auth) {
        return who;
    }
    /* The ZAP handler answers the handshake with User-Id = the client's public key (z85); libzmq
     * attaches it to every message of that connection. */
    const char *key = zmq_msg_gets(frame, "User-Id");
    who.key = key ? key : "";
    who.role = auth_role(self->auth, who.key);
    return who;
}

/* Whether the sender has role; without CURVE everyone has every role. */
static bool s_is(const self_t *self, const s_sender_t *who, const char *role) {
    return !self->auth || (who->role && strcmp(who->role, role) == 0);
}

/* Counts and notes a message refused for its sender's key or role. */
static void s_forbid(self_t *self, const s_sender_t *who, const char *what) {
    self->stats.forbidden++;
    char d[200];
    snprintf(d, sizeof d, "what=%s key=%s role=%s", what, who->key,
             who->role ? (who->role[0] ? who->role : "(none)") : "(revoked)");
    s_note(self, "broker_forbidden", d);
}

/* Receives every frame of the current message into frames[] (at most max kept; the rest are
 * received and released). Returns the number of frames, or -1 when nothing was waiting. */
static int s_recv_frames(void *h, zmq_msg_t *frames, int max) {
    int n = 0;
    int more = 1;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_t *m = n < max ? &frames[n] : &tmp;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, h, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(m);
            if (n == 0) {
                return -1;
            }
            break; /* the rest of a message arrives atomically; only termination gets here */
        }
        more = zmq_msg_more(m);
        if (m == &tmp) {
            zmq_msg_close(m);
        }
        n++;
    }
    return n;
}

static void s_close_frames(zmq_msg_t *frames, int n, int max) {
    for (int i = 0; i < n && i < max; i++) {
        zmq_msg_close(&frames[i]);
    }
}

/* Publisher side: [topic][body] in, forwarded unchanged to the XPUB. The broker does not
 * decode bodies (subscribers do); it only checks the frame layout and the topic family. */
static void s_pump_publishers(self_t *self) {
    for (int b = 0; b < S_BATCH; b++) {
        zmq_msg_t f[2];
        int n = s_recv_frames(self->xsub_h, f, 2);
        if (n < 0) {
            return;
        }
        self->stats.pub_in++;
        size_t plen = strlen(PROTO_TOPIC_PREFIX);
        if (n != 2 || zmq_msg_size(&f[0]) < plen || zmq_msg_size(&f[0]) > PROTO_TOPIC_MAX_BYTES ||
            memcmp(zmq_msg_data(&f[0]), PROTO_TOPIC_PREFIX, plen) != 0) {
            self->stats.dropped++;
            char d[64];
            snprintf(d, sizeof d, "reason=bad_pub_layout frames=%d", n);
            s_note(self, "broker_drop", d);
            s_close_frames(f, n, 2);
            continue;
        }
        if (self->auth) {
            /* Gateways publish hints; only workers publish live parts (ARCHITECTURE.md §9
             * "Trust"). A key removed from the allow directory publishes nothing. */
            s_sender_t who = s_sender(self, &f[1]);
            size_t part_len = strlen(PROTO_TOPIC_PART);
            bool part = zmq_msg_size(&f[0]) >= part_len &&
                        memcmp(zmq_msg_data(&f[0]), PROTO_TOPIC_PART, part_len) == 0;
            if (!s_is(self, &who, "worker") && (part || !s_is(self, &who, "gateway"))) {
                s_forbid(self, &who, part ? "publish_part" : "publish_hint");
                s_close_frames(f, n, 2);
                continue;
            }
        }
        /* The XPUB is lossy per subscriber (README "HWM policy"): this send does not block
         * and does not fail on a full subscriber pipe. */
        if (zmq_msg_send(&f[0], self->xpub_h, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_msg_send(&f[1], self->xpub_h, ZMQ_DONTWAIT) < 0) {
            self->stats.dropped++;
            s_close_frames(f, 2, 2);
            continue;
        }
        self->stats.pub_out++;
    }
}

/* Subscriber side: subscription events, counted (the XSUB subscribes to everything, so they
 * need not travel upstream). */
static void s_pump_subscriptions(self_t *self) {
    for (int b = 0; b < S_BATCH; b++) {
        zmq_msg_t f[1];
        int n = s_recv_frames(self->xpub_h, f, 1);
        if (n < 0) {
            return;
        }
        self->subscription_events++;
        s_close_frames(f, n, 1);
    }
}

/* Sends [route][route2][body] on the ROUTER; route2 may be empty. Returns 0 or -1 (errno). */
static int s_router_send(self_t *self, const void *route, size_t route_len, const void *route2,
                         size_t route2_len, const void *body, size_t body_len) {
    if (zmq_send(self->router_h, route, route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        return -1;
    }
    /* With ROUTER_MANDATORY the first frame decides; the rest of the message cannot fail
     * for routing reasons once it is accepted. */
    if (zmq_send(self->router_h, route2, route2_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(self->router_h, body, body_len, ZMQ_DONTWAIT) < 0) {
        return -1;
    }
    self->stats.relay_out++;
    return 0;
}

/* Encodes msg and sends it to a client as [route][""][body]. */
static void s_reply(self_t *self, const void *route, size_t route_len, const wire_msg_t *msg) {
    char *data = NULL;
    size_t size = 0;
    if (wire_encode(msg, &data, &size) != 0) {
        log_error("broker_encode_failed", "type=%s", wire_type_name(msg->type));
        self->stats.dropped++;
        return;
    }
    if (s_router_send(self, route, route_len, "", 0, data, size) != 0) {
        self->stats.dropped++;
        log_debug("broker_drop", "reason=unroutable_reply error=\"%s\"", zmq_strerror(zmq_errno()));
    }
    free(data);
}

/* Answers the requester at route: no worker has that id (request_id, worker_id and episode
 * echo the request's). */
static void s_no_such_worker(self_t *self, const void *route, size_t route_len,
                             const char *request_id, const char *worker_id,
                             const wire_select_t *episode) {
    wire_msg_t reply = {.type = WIRE_RELAY_REPLY};
    wire_reply_t *r = &reply.u.reply;
    snprintf(r->request_id, sizeof r->request_id, "%s", request_id);
    snprintf(r->worker_id, sizeof r->worker_id, "%s", worker_id);
    r->status = WIRE_STATUS_NO_SUCH_WORKER;
    r->episode = *episode;
    s_reply(self, route, route_len, &reply);
}

/* One relay message in hand: [route][to][body] from the ROUTER, its sender and the body
 * decoded. */
typedef struct {
    const void *route; /* the sender's connection, where answers go */
    size_t route_len;
    zmq_msg_t *to;   /* a worker's reply: the requester's route it echoes; otherwise empty */
    zmq_msg_t *body; /* the encoded message, forwarded unchanged */
    s_sender_t who;
    wire_msg_t msg;
    int64_t now;
} s_relay_t;

/* Counts and notes a relay message dropped for reason (key=value text). */
static void s_relay_drop(self_t *self, const char *reason) {
    self->stats.dropped++;
    s_note(self, "broker_drop", reason);
}

/* A relay_reply from a key revoked after the request was forwarded (frames f, layout checked)
 * is refused, but its requester still gets an answer: no_such_worker, which is the broker's
 * own word (the worker id is no longer registered), not the sender's. Anything else from a
 * revoked key is only refused. */
static void s_answer_revoked(self_t *self, zmq_msg_t *f) {
    size_t to_len = zmq_msg_size(&f[1]);
    wire_msg_t m;
    char why[128];
    if (!self->auth || to_len == 0 ||
        wire_decode(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), &m, why, sizeof why) != 0) {
        return;
    }
    if (m.type == WIRE_RELAY_REPLY &&
        !registry_lookup(self->registry, m.u.reply.worker_id, id_now_ms())) {
        const wire_reply_t *r = &m.u.reply;
        s_no_such_worker(self, zmq_msg_data(&f[1]), to_len, r->request_id, r->worker_id,
                         &r->episode);
    }
    wire_msg_clear(&m);
}

/* Checks the layout, the sender and the body of a relay message of n frames and decodes it
 * into *r. Returns 0, or -1 when it was dropped or refused (counted and noted). */
static int s_relay_decode(self_t *self, zmq_msg_t *f, int n, s_relay_t *r) {
    char d[200];
    if (n != 3 || zmq_msg_size(&f[1]) > PROTO_ROUTE_MAX_BYTES) {
        snprintf(d, sizeof d, "reason=bad_relay_layout frames=%d", n);
        s_relay_drop(self, d);
        return -1;
    }
    /* The body carries the connection's metadata; the routing id frame the ROUTER makes up
     * does not always. */
    s_sender_t who = s_sender(self, &f[2]);
    if (!who.role) {
        s_forbid(self, &who, "relay");
        s_answer_revoked(self, f);
        return -1;
    }
    char why[128];
    if (wire_decode(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), &r->msg, why, sizeof why) != 0) {
        char q[160];
        snprintf(d, sizeof d, "reason=malformed detail=%s", log_quote(why, q, sizeof q));
        s_relay_drop(self, d);
        return -1;
    }
    r->route = zmq_msg_data(&f[0]);
    r->route_len = zmq_msg_size(&f[0]);
    r->to = &f[1];
    r->body = &f[2];
    r->who = who;
    r->now = id_now_ms();
    return 0;
}

/* Counts and notes a registration that registry_touch refused (result). Returns true when
 * it was refused. */
static bool s_relay_refused(self_t *self, const s_relay_t *r, int result) {
    const wire_worker_t *w = &r->msg.u.worker;
    char d[160];
    if (result == REGISTRY_FULL) {
        self->stats.refused++;
        snprintf(d, sizeof d, "reason=registry_full worker_id=%s workers=%zu", w->worker_id,
                 registry_size(self->registry));
        s_note(self, "broker_refused", d);
    } else if (result == REGISTRY_KEY_MISMATCH) {
        snprintf(d, sizeof d, "%s_of_another_key worker_id=%s", wire_type_name(r->msg.type),
                 w->worker_id);
        s_forbid(self, &r->who, d);
    } else if (result < 0) {
        s_relay_drop(self, "reason=bad_route");
    } else {
        return false;
    }
    return true;
}

/* Logs a worker registered anew (REGISTRY_NEW) or from a new route (REGISTRY_REROUTED). */
static void s_relay_registered(self_t *self, const s_relay_t *r, int result) {
    const wire_worker_t *w = &r->msg.u.worker;
    char d[200];
    snprintf(d, sizeof d, "worker_id=%s heartbeat_ms=%lld key=%s rerouted=%d", w->worker_id,
             (long long)w->heartbeat_ms, r->who.key[0] ? r->who.key : "(plain)",
             result == REGISTRY_REROUTED);
    int64_t suppressed = 0;
    if (ratelog_allow(self->ratelog, "worker_registered", r->now, &suppressed)) {
        log_info("worker_registered", "%s suppressed=%lld", d, (long long)suppressed);
    }
}

/* register and heartbeat: record the worker; acknowledge every register, and a heartbeat
 * from a worker the broker does not know (it restarted, or expired the worker), so that
 * workers need not notice a broker restart. */
static void s_relay_register(self_t *self, s_relay_t *r) {
    const wire_worker_t *w = &r->msg.u.worker;
    if (!s_is(self, &r->who, "worker")) {
        s_forbid(self, &r->who, wire_type_name(r->msg.type));
        return;
    }
    int result = registry_touch(self->registry, w->worker_id, r->route, r->route_len, r->who.key,
                                w->heartbeat_ms, r->now);
    if (s_relay_refused(self, r, result)) {
        return;
    }
    if (result != REGISTRY_KNOWN) {
        s_relay_registered(self, r, result);
    }
    if (result != REGISTRY_KNOWN || r->msg.type == WIRE_REGISTER) {
        wire_msg_t ack = {.type = WIRE_REGISTERED, .u.worker = *w};
        s_reply(self, r->route, r->route_len, &ack);
    }
}

/* relay_request: forwarded to the worker it names, or answered no_such_worker. */
static void s_relay_request(self_t *self, s_relay_t *r) {
    const wire_request_t *req = &r->msg.u.request;
    if (!s_is(self, &r->who, "gateway")) {
        s_forbid(self, &r->who, "relay_request");
        return;
    }
    const registry_entry_t *w = registry_lookup(self->registry, req->worker_id, r->now);
    if (!w) {
        s_no_such_worker(self, r->route, r->route_len, req->request_id, req->worker_id,
                         &req->episode);
        return;
    }
    /* Forward the body unchanged, with the requester's route for the worker to echo. */
    if (s_router_send(self, w->route, w->route_len, r->route, r->route_len, zmq_msg_data(r->body),
                      zmq_msg_size(r->body)) != 0) {
        log_info("worker_unreachable", "worker_id=%s error=\"%s\"", req->worker_id,
                 zmq_strerror(zmq_errno()));
        if (zmq_errno() == EHOSTUNREACH) {
            registry_forget(self->registry, req->worker_id);
        }
        s_no_such_worker(self, r->route, r->route_len, req->request_id, req->worker_id,
                         &req->episode);
    }
}

/* relay_reply: passed to the requester's route the worker echoed. */
static void s_relay_reply(self_t *self, s_relay_t *r) {
    const wire_reply_t *rep = &r->msg.u.reply;
    /* Only the key bound to the worker id the reply names may answer for it. */
    const registry_entry_t *w =
        self->auth ? registry_lookup(self->registry, rep->worker_id, r->now) : NULL;
    if (self->auth && (!s_is(self, &r->who, "worker") || !w || strcmp(w->key, r->who.key) != 0)) {
        char d[80];
        snprintf(d, sizeof d, "relay_reply_for worker_id=%s", rep->worker_id);
        s_forbid(self, &r->who, d);
        return;
    }
    size_t to_len = zmq_msg_size(r->to);
    if (to_len == 0 || s_router_send(self, zmq_msg_data(r->to), to_len, "", 0,
                                     zmq_msg_data(r->body), zmq_msg_size(r->body)) != 0) {
        /* The requester went away (or gave up): nobody is waiting for this reply. */
        self->stats.dropped++;
        log_debug("broker_drop", "reason=requester_gone request_id=%s", rep->request_id);
    }
}

/* stats_request: answered with the counters. */
static void s_relay_stats_request(self_t *self, s_relay_t *r) {
    wire_msg_t st = {.type = WIRE_STATS};
    self->stats.workers = (int64_t)registry_size(self->registry);
    self->stats.uptime_ms = r->now - self->started_ms;
    st.u.stats = self->stats;
    s_reply(self, r->route, r->route_len, &st);
    if (log_enabled(LOG_LEVEL_DEBUG)) {
        s_log_stats(self, "broker_stats_requested");
    }
}

/* Any other type is not for the broker: dropped. */
static void s_relay_unexpected(self_t *self, s_relay_t *r) {
    char d[64];
    snprintf(d, sizeof d, "reason=unexpected_type type=%s", wire_type_name(r->msg.type));
    s_relay_drop(self, d);
}

typedef void (*s_relay_fn)(self_t *self, s_relay_t *r);

/* What the relay does with each message type (README "Relay"), indexed by wire_type_t;
 * NULL: s_relay_unexpected. */
static const s_relay_fn s_relay_handlers[WIRE_TYPE_COUNT + 1] = {
    [WIRE_REGISTER] = s_relay_register,           [WIRE_HEARTBEAT] = s_relay_register,
    [WIRE_RELAY_REQUEST] = s_relay_request,       [WIRE_RELAY_REPLY] = s_relay_reply,
    [WIRE_STATS_REQUEST] = s_relay_stats_request,
};

static void s_handle_relay(self_t *self, zmq_msg_t *f, int n) {
    s_relay_t r;
    if (s_relay_decode(self, f, n, &r) != 0) {
        return;
    }
    /* wire_decode returns only types 1..WIRE_TYPE_COUNT. */
    s_relay_fn handler = s_relay_handlers[r.msg.type];
    (handler ? handler : s_relay_unexpected)(self, &r);
    wire_msg_clear(&r.msg);
}

static void s_pump_relay(self_t *self) {
    for (int b = 0; b < S_BATCH; b++) {
        zmq_msg_t f[3];
        int n = s_recv_frames(self->router_h, f, 3);
        if (n < 0) {
            return;
        }
        self->stats.relay_in++;
        s_handle_relay(self, f, n);
        s_close_frames(f, n, 3);
    }
}

static void s_reload_allow(self_t *self, bool force);

static void s_drain_guard(self_t *self) {
    int64_t now = id_now_ms();
    for (int i = 0; i < GUARD_SLOTS; i++) {
        guard_drain(self->guard, i, now);
    }
}

/* ZAP requests: answered from the allow map; a refusal is logged with address and key. The
 * monitors are drained first, so that the guard has seen a connection accepted before its
 * handshake can succeed. */
static void s_pump_zap(self_t *self) {
    for (int b = 0; b < S_BATCH; b++) {
        s_drain_guard(self);
        auth_zap_t z;
        if (auth_zap_handle(self->auth, &z) == 0) {
            return;
        }
        if (!z.admitted) {
            self->zap_refused++;
            char d[200];
            snprintf(d, sizeof d, "reason=%s address=%s key=%s", z.reason, z.address, z.key);
            int64_t suppressed = 0;
            int64_t repeats = 0;
            if (ratelog_allow_peer(self->ratelog, "broker_peer_refused_key", d, id_now_ms(),
                                   &suppressed, &repeats)) {
                log_warn("broker_peer_refused", "%s repeats=%lld suppressed=%lld", d,
                         (long long)repeats, (long long)suppressed);
            }
        }
    }
}

static void s_handle_pipe(self_t *self) {
    char *cmd = zstr_recv(self->pipe);
    if (!cmd) {
        self->terminated = true;
        return;
    }
    if (streq(cmd, "$TERM")) {
        self->terminated = true;
    } else if (streq(cmd, "LOG")) {
        s_log_stats(self, "broker_stats");
    } else if (streq(cmd, "RELOAD")) {
        if (self->auth) {
            s_reload_allow(self, true);
        }
    } else if (streq(cmd, "STATS")) {
        wire_stats_t *s = &self->stats;
        s->workers = (int64_t)registry_size(self->registry);
        s->uptime_ms = id_now_ms() - self->started_ms;
        zsock_send(self->pipe, "888888888", (uint64_t)s->pub_in, (uint64_t)s->pub_out,
                   (uint64_t)s->relay_in, (uint64_t)s->relay_out, (uint64_t)s->dropped,
                   (uint64_t)s->workers, (uint64_t)s->uptime_ms, (uint64_t)s->refused,
                   (uint64_t)s->forbidden);
    } else {
        char q[64];
        log_warn("broker_unknown_command", "command=%s", log_quote(cmd, q, sizeof q));
    }
    free(cmd);
}

/* Revocation (ARCHITECTURE.md §9 "Trust"): libzmq cannot drop one subscriber of an XPUB, so
 * when a key leaves the allow directory every connection the XPUB accepted is shut down
 * (guard_cut). Every subscriber reconnects within PROTO_RECONNECT_IVL_MS and handshakes again,
 * and the ZAP handler refuses the revoked key; the others resend their subscriptions and lose
 * only the hints in flight. No socket or descriptor is made, so this works under a connection
 * flood. Returns 0, or -1 when the endpoint is not tcp:// or ipc:// (the broker then stops, to
 * be restarted with the revocation in force). */
static int s_cut_subscribers(self_t *self) {
    char ep[512];
    size_t len = sizeof ep;
    if (zmq_getsockopt(self->xpub_h, ZMQ_LAST_ENDPOINT, ep, &len) != 0) {
        snprintf(ep, sizeof ep, "%s", self->sub_endpoint);
    }
    int cut = guard_cut(self->guard, ep);
    if (cut < 0) {
        log_error("broker_subscribers_not_cut", "endpoint=%s action=stop", ep);
        return -1;
    }
    log_info("broker_subscribers_reset", "reason=key_revoked endpoint=%s connections=%d", ep, cut);
    return 0;
}

static bool s_key_admitted(void *ctx, const char *key) {
    return auth_role(ctx, key) != NULL;
}

/* Rotation (ARCHITECTURE.md §9 "Trust"): the allow directory is re-read when it changed,
 * or always when forced (SIGHUP); the workers registered with a key that is gone are
 * forgotten at once. The ZAP handler answers new handshakes from the same map. */
static void s_reload_allow(self_t *self, bool force) {
    char why[1200];
    int rc = auth_reload(self->auth, force, why, sizeof why);
    if (rc < 0) {
        char d[1300];
        snprintf(d, sizeof d, "%s action=kept_last retry=next_tick", why);
        s_note(self, "curve_allow_unreadable", d);
    } else if (rc == AUTH_RELOAD_REVOKED) {
        registry_retain(self->registry, s_key_admitted, self->auth);
        if (s_cut_subscribers(self) != 0) {
            self->terminated = true;
        }
    }
}

static void s_actor(zsock_t *pipe, void *args) {
    const broker_config_t *cfg = actor_args(args); /* valid until actor_ready only */
    self_t self = {.pipe = pipe, .auth = cfg->auth};
    int hwm = cfg->hwm_msgs > 0 ? cfg->hwm_msgs : BROKER_HWM_MSGS;
    snprintf(self.sub_endpoint, sizeof self.sub_endpoint, "%s", cfg->sub_endpoint);
    self.ratelog = ratelog_new();
    self.guard = guard_new(&cfg->guard, self.ratelog);
    self.xsub = s_bind(ZMQ_XSUB, cfg->pub_endpoint, hwm, self.auth, self.guard);
    self.xpub = s_bind(ZMQ_XPUB, cfg->sub_endpoint, hwm, self.auth, self.guard);
    self.router = s_bind(ZMQ_ROUTER, cfg->relay_endpoint, hwm, self.auth, self.guard);
    if (!self.xsub || !self.xpub || !self.router) {
        zsock_destroy(&self.xsub);
        zsock_destroy(&self.xpub);
        zsock_destroy(&self.router);
        guard_destroy(&self.guard);
        ratelog_destroy(&self.ratelog);
        actor_ready(pipe, args, -1);
        return;
    }
    zsock_t *watched[GUARD_SLOTS] = {self.xsub, self.xpub, self.router};
    for (int i = 0; i < GUARD_SLOTS; i++) {
        (void)guard_watch(self.guard, i, watched[i]); /* logged; the socket works unguarded */
    }
    self.xsub_h = zsock_resolve(self.xsub);
    self.xpub_h = zsock_resolve(self.xpub);
    self.router_h = zsock_resolve(self.router);
    /* Subscribe the XSUB to everything: every publisher sends every message to the broker,
     * and the XPUB filters per subscriber. XSUB replays this to each (re)connecting
     * publisher, so nothing depends on the order in which clients come back after a
     * restart. */
    const char all = 1;
    if (zmq_send(self.xsub_h, &all, 1, 0) < 0) {
        log_error("broker_subscribe_failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
    }
    self.registry = registry_new(cfg->max_workers);
    self.started_ms = id_now_ms();
    self.stats_interval_ms =
        cfg->stats_interval_ms > 0 ? cfg->stats_interval_ms : BROKER_STATS_INTERVAL_MS;
    self.next_stats_ms = self.started_ms + self.stats_interval_ms;
    self.next_expire_ms = self.started_ms + BROKER_EXPIRE_TICK_MS;
    self.next_allow_ms = self.started_ms + BROKER_ALLOW_RELOAD_MS;
    guard_stats_t g;
    guard_stats(self.guard, &g);
    log_info("broker_ready",
             "pub=%s sub=%s relay=%s hwm=%d curve=%s handshake_ms=%d max_handshakes=%d "
             "max_handshakes_per_addr=%d fd_limit=%ld",
             cfg->pub_endpoint, cfg->sub_endpoint, cfg->relay_endpoint, hwm,
             self.auth ? "on" : "off", g.handshake_ms, g.max_handshakes, g.max_per_addr,
             g.fd_limit);
    actor_ready(pipe, args, 0);

    while (!self.terminated) {
        /* Rebuilt each turn: a guard slot may have no monitor (a failed watch is logged). */
        zmq_pollitem_t items[4 + GUARD_SLOTS + 1] = {
            {zsock_resolve(pipe), 0, ZMQ_POLLIN, 0},
            {self.xsub_h, 0, ZMQ_POLLIN, 0},
            {self.xpub_h, 0, ZMQ_POLLIN, 0},
            {self.router_h, 0, ZMQ_POLLIN, 0},
        };
        int nitems = 4;
        for (int i = 0; i < GUARD_SLOTS; i++) {
            void *h = guard_handle(self.guard, i);
            if (h) {
                items[nitems++] = (zmq_pollitem_t){h, 0, ZMQ_POLLIN, 0};
            }
        }
        int zap_item = -1;
        if (self.auth) {
            zap_item = nitems;
            items[nitems++] =
                (zmq_pollitem_t){zsock_resolve(auth_zap(self.auth)), 0, ZMQ_POLLIN, 0};
        }
        int64_t now = id_now_ms();
        int64_t next =
            self.next_expire_ms < self.next_stats_ms ? self.next_expire_ms : self.next_stats_ms;
        if (self.auth && self.next_allow_ms < next) {
            next = self.next_allow_ms;
        }
        long timeout = next > now ? (long)(next - now) : 0;
        int rc = zmq_poll(items, nitems, timeout);
        if (rc < 0) {
            if (zmq_errno() == EINTR) {
                continue; /* a signal for the main thread landed here; main handles it */
            }
            log_error("broker_poll_failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            s_handle_pipe(&self);
        }
        if (items[1].revents & ZMQ_POLLIN) {
            s_pump_publishers(&self);
        }
        if (items[2].revents & ZMQ_POLLIN) {
            s_pump_subscriptions(&self);
        }
        if (items[3].revents & ZMQ_POLLIN) {
            s_pump_relay(&self);
        }
        /* Monitors first, then ZAP (s_pump_zap drains them again before each request). */
        s_drain_guard(&self);
        if (zap_item >= 0 && (items[zap_item].revents & ZMQ_POLLIN)) {
            s_pump_zap(&self);
        }
        now = id_now_ms();
        if (now >= self.next_expire_ms) {
            registry_expire(self.registry, now);
            guard_expire(self.guard, now);
            self.next_expire_ms = now + BROKER_EXPIRE_TICK_MS;
        }
        if (self.auth && now >= self.next_allow_ms) {
            s_reload_allow(&self, false);
            self.next_allow_ms = now + BROKER_ALLOW_RELOAD_MS;
        }
        if (now >= self.next_stats_ms) {
            s_log_stats(&self, "broker_stats");
            self.next_stats_ms = now + self.stats_interval_ms;
        }
    }
    s_log_stats(&self, "broker_stopped");
    registry_destroy(&self.registry);
    guard_destroy(&self.guard);
    ratelog_destroy(&self.ratelog);
    zsock_destroy(&self.xsub);
    zsock_destroy(&self.xpub);
    zsock_destroy(&self.router);
}

broker_t *broker_new(const broker_config_t *config) {
    zactor_t *actor = actor_new(s_actor, (void *)config);
    if (!actor) {
        return NULL;
    }
    broker_t *self = mem_calloc(1, sizeof *self);
    self->actor = actor;
    return self;
}

void broker_destroy(broker_t **self_p) {
    broker_t *self = *self_p;
    if (!self) {
        return;
    }
    zactor_destroy(&self->actor);
    free(self);
    *self_p = NULL;
}

zactor_t *broker_actor(broker_t *self) {
    return self->actor;
}
