/* relay: client and worker sides of the broker's relay ROUTER; see relay.h and README. */
#include "relay.h"
#include "actor.h"
#include "curve.h"
#include "id.h"
#include "mem.h"

#include <errno.h>
#include <string.h>

/* Every relay message on a DEALER is [route][body] (README "Relay frames"). */

static zsock_t *s_dealer(const char *endpoint, const curve_t *keys) {
    zsock_t *sock = zsock_new(ZMQ_DEALER);
    if (!sock) {
        return NULL;
    }
    void *h = zsock_resolve(sock);
    int ivl = PROTO_RECONNECT_IVL_MS;
    int zero = 0;
    int one = 1;
    int linger = PROTO_LINGER_MS;
    int64_t max = PROTO_MSG_MAX_BYTES;
    zmq_setsockopt(h, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(h, ZMQ_RECONNECT_IVL_MAX, &zero, sizeof zero);
    zmq_setsockopt(h, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(h, ZMQ_MAXMSGSIZE, &max, sizeof max);
    /* Queue only on a live connection: a request or heartbeat made while the broker is down
     * fails now instead of arriving, stale, after the restart. */
    zmq_setsockopt(h, ZMQ_IMMEDIATE, &one, sizeof one);
    if (keys && curve_apply(keys, h) != 0) {
        zsock_destroy(&sock);
        return NULL;
    }
    if (zsock_connect(sock, "%s", endpoint) < 0) {
        log_error("relay_connect_failed", "endpoint=%s", endpoint);
        zsock_destroy(&sock);
        return NULL;
    }
    return sock;
}

/* Sends [route][encoded msg] without blocking past deadline_ms (monotonic). Returns 0/-1. */
static int s_send(void *h, const void *route, size_t route_len, const wire_msg_t *msg,
                  int64_t deadline_ms) {
    char *data = NULL;
    size_t size = 0;
    if (wire_encode(msg, &data, &size) != 0) {
        return -1;
    }
    int rc = -1;
    for (;;) {
        if (zmq_send(h, route, route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
            rc = zmq_send(h, data, size, ZMQ_DONTWAIT) >= 0 ? 0 : -1;
            break;
        }
        int64_t now = id_now_ms();
        if (zmq_errno() != EAGAIN || now >= deadline_ms) {
            break;
        }
        /* Not connected yet (ZMQ_IMMEDIATE): wait until the socket can send, or the deadline. */
        zmq_pollitem_t item = {h, 0, ZMQ_POLLOUT, 0};
        if (zmq_poll(&item, 1, (long)(deadline_ms - now)) < 0) {
            break;
        }
    }
    free(data);
    return rc;
}

/* Receives one [route][body] message that is waiting. The route (at most
 * PROTO_ROUTE_MAX_BYTES) is copied to route/route_len when route is not NULL. Returns 1 with
 * a decoded *msg, 0 for a malformed message (logged, discarded), -1 when nothing waits. */
static int s_recv(void *h, uint8_t *route, size_t *route_len, wire_msg_t *msg) {
    zmq_msg_t f[2];
    int n = 0;
    int more = 1;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_t *m = n < 2 ? &f[n] : &tmp;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, h, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(m);
            if (n == 0) {
                return -1;
            }
            break;
        }
        more = zmq_msg_more(m);
        if (m == &tmp) {
            zmq_msg_close(m);
        }
        n++;
    }
    int rc = 0;
    char why[128] = "";
    if (n != 2 || zmq_msg_size(&f[0]) > PROTO_ROUTE_MAX_BYTES) {
        snprintf(why, sizeof why, "bad relay layout (%d frames)", n);
    } else if (wire_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), msg, why, sizeof why) == 0) {
        if (route) {
            *route_len = zmq_msg_size(&f[0]);
            memcpy(route, zmq_msg_data(&f[0]), *route_len);
        }
        rc = 1;
    }
    if (rc == 0) {
        char q[160];
        log_warn("relay_malformed", "detail=%s", log_quote(why, q, sizeof q));
    }
    for (int i = 0; i < n && i < 2; i++) {
        zmq_msg_close(&f[i]);
    }
    return rc;
}

/* Waits until a message is readable or deadline_ms. Returns 1 readable, 0 deadline, -1. */
static int s_wait_in(void *h, int64_t deadline_ms) {
    int64_t now = id_now_ms();
    if (now >= deadline_ms) {
        return 0;
    }
    zmq_pollitem_t item = {h, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&item, 1, (long)(deadline_ms - now));
    return rc < 0 ? -1 : rc > 0 ? 1 : 0;
}

/* ----------------------------------------------------------------------------------------- */

struct relay_client {
    zsock_t *sock;
    void *handle;
};

relay_client_t *relay_client_new(const char *endpoint) {
    return relay_client_new_with(endpoint, curve_default());
}

relay_client_t *relay_client_new_with(const char *endpoint, const curve_t *keys) {
    zsock_t *sock = s_dealer(endpoint, keys);
    if (!sock) {
        return NULL;
    }
    relay_client_t *self = mem_calloc(1, sizeof *self);
    self->sock = sock;
    self->handle = zsock_resolve(sock);
    return self;
}

void relay_client_destroy(relay_client_t **self_p) {
    relay_client_t *self = *self_p;
    if (!self) {
        return;
    }
    zsock_destroy(&self->sock);
    free(self);
    *self_p = NULL;
}

int relay_client_fetch(relay_client_t *self, const char *worker_id, const wire_select_t *episode,
                       int64_t max_parts, int timeout_ms, wire_msg_t *reply) {
    memset(reply, 0, sizeof *reply);
    int64_t deadline = id_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    wire_msg_t req = {.type = WIRE_RELAY_REQUEST};
    if (id_uuid_new(req.u.request.request_id) != 0 || !worker_id ||
        strlen(worker_id) != ID_UUID_LEN) {
        return -1;
    }
    memcpy(req.u.request.worker_id, worker_id, ID_UUID_LEN + 1);
    req.u.request.episode = *episode;
    req.u.request.max_parts = max_parts;
    if (s_send(self->handle, "", 0, &req, deadline) != 0) {
        log_info("relay_request_unsent", "worker_id=%s error=\"%s\"", worker_id,
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    for (;;) {
        wire_msg_t msg;
        int rc = s_recv(self->handle, NULL, NULL, &msg);
        if (rc == 1) {
            if (msg.type == WIRE_RELAY_REPLY &&
                strcmp(msg.u.reply.request_id, req.u.request.request_id) == 0 &&
                strcmp(msg.u.reply.worker_id, worker_id) == 0) {
                *reply = msg;
                return 0;
            }
            wire_msg_clear(&msg); /* a late answer to an abandoned request */
            continue;
        }
        if (rc == 0) {
            continue;
        }
        if (s_wait_in(self->handle, deadline) != 1) {
            log_info("relay_request_timeout", "worker_id=%s request_id=%s", worker_id,
                     req.u.request.request_id);
            return -1;
        }
    }
}

int relay_client_stats(relay_client_t *self, int timeout_ms, wire_stats_t *out) {
    int64_t deadline = id_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    wire_msg_t req = {.type = WIRE_STATS_REQUEST};
    if (s_send(self->handle, "", 0, &req, deadline) != 0) {
        return -1;
    }
    for (;;) {
        wire_msg_t msg;
        int rc = s_recv(self->handle, NULL, NULL, &msg);
        if (rc == 1) {
            bool mine = msg.type == WIRE_STATS;
            if (mine) {
                *out = msg.u.stats;
            }
            wire_msg_clear(&msg);
            if (mine) {
                return 0;
            }
            continue;
        }
        if (rc == 0) {
            continue;
        }
        if (s_wait_in(self->handle, deadline) != 1) {
            return -1;
        }
    }
}

/* ----------------------------------------------------------------------------------------- */

typedef struct {
    char endpoint[512];
    char worker_id[ID_UUID_LEN + 1];
    int64_t heartbeat_ms;
    relay_handler_fn *handler;
    void *ctx;
    const curve_t *keys; /* applied in the actor when it starts, before actor_new returns */
} s_args_t;

struct relay_worker {
    zactor_t *actor;
};

typedef struct {
    zsock_t *pipe;
    zsock_t *sock;
    void *handle;
    s_args_t args;
    int64_t registrations;
    int64_t served;
    int64_t next_beat_ms;
    bool terminated;
} s_worker_t;

static void s_beat(s_worker_t *self, wire_type_t type) {
    wire_msg_t m = {.type = type};
    memcpy(m.u.worker.worker_id, self->args.worker_id, sizeof m.u.worker.worker_id);
    m.u.worker.heartbeat_ms = self->args.heartbeat_ms;
    /* Never wait: a beat that cannot go now (broker down) is simply skipped. */
    (void)s_send(self->handle, "", 0, &m, 0);
    self->next_beat_ms = id_now_ms() + self->args.heartbeat_ms;
}

/* Resets out to an empty reply to req with the given status. */
static void s_reply_init(s_worker_t *self, wire_msg_t *out, const wire_request_t *req,
                         wire_status_t status) {
    wire_msg_clear(out);
    out->type = WIRE_RELAY_REPLY;
    wire_reply_t *r = &out->u.reply;
    memcpy(r->request_id, req->request_id, sizeof r->request_id);
    memcpy(r->worker_id, self->args.worker_id, sizeof r->worker_id);
    r->episode = req->episode;
    r->status = status;
}

static void s_serve(s_worker_t *self, const uint8_t *route, size_t route_len,
                    const wire_request_t *req) {
    wire_msg_t out = {0};
    s_reply_init(self, &out, req, WIRE_STATUS_OK);
    int rc = -1; /* a request for another worker id was misrouted: refuse it */
    if (strcmp(req->worker_id, self->args.worker_id) == 0) {
        rc = self->args.handler(self->args.ctx, req, &out.u.reply);
    }
    if (rc != 0 || (int64_t)out.u.reply.nparts > req->max_parts) {
        s_reply_init(self, &out, req, WIRE_STATUS_BAD_REQUEST);
    }
    if (s_send(self->handle, route, route_len, &out, 0) != 0) {
        /* Not encodable (parts not contiguous, say) or not sendable: answer bad_request. */
        log_warn("relay_reply_unsent", "request_id=%s", req->request_id);
        s_reply_init(self, &out, req, WIRE_STATUS_BAD_REQUEST);
        (void)s_send(self->handle, route, route_len, &out, 0);
    }
    self->served++;
    wire_msg_clear(&out);
}

static void s_worker_input(s_worker_t *self) {
    for (int i = 0; i < 64; i++) {
        uint8_t route[PROTO_ROUTE_MAX_BYTES];
        size_t route_len = 0;
        wire_msg_t msg;
        int rc = s_recv(self->handle, route, &route_len, &msg);
        if (rc < 0) {
            return;
        }
        if (rc == 0) {
            continue;
        }
        if (msg.type == WIRE_REGISTERED) {
            self->registrations++;
            log_info("relay_registered", "worker_id=%s", self->args.worker_id);
        } else if (msg.type == WIRE_RELAY_REQUEST && route_len > 0) {
            s_serve(self, route, route_len, &msg.u.request);
        } else {
            log_warn("relay_unexpected", "type=%s", wire_type_name(msg.type));
        }
        wire_msg_clear(&msg);
    }
}

static void s_worker_actor(zsock_t *pipe, void *start) {
    s_worker_t self = {.pipe = pipe, .args = *(s_args_t *)actor_args(start)};
    self.sock = s_dealer(self.args.endpoint, self.args.keys);
    if (!self.sock) {
        actor_ready(pipe, start, -1);
        return;
    }
    self.handle = zsock_resolve(self.sock);
    s_beat(&self, WIRE_REGISTER);
    actor_ready(pipe, start, 0);
    zmq_pollitem_t items[] = {
        {zsock_resolve(pipe), 0, ZMQ_POLLIN, 0},
        {self.handle, 0, ZMQ_POLLIN, 0},
    };
    while (!self.terminated) {
        int64_t now = id_now_ms();
        long timeout = self.next_beat_ms > now ? (long)(self.next_beat_ms - now) : 0;
        if (zmq_poll(items, 2, timeout) < 0 && zmq_errno() != EINTR) {
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            char *cmd = zstr_recv(pipe);
            if (!cmd || streq(cmd, "$TERM")) {
                self.terminated = true;
            } else if (streq(cmd, "STATUS")) {
                zsock_send(pipe, "88", (uint64_t)self.registrations, (uint64_t)self.served);
            }
            zstr_free(&cmd);
        }
        if (items[1].revents & ZMQ_POLLIN) {
            s_worker_input(&self);
        }
        if (id_now_ms() >= self.next_beat_ms) {
            /* Until the broker acknowledges, keep saying "register"; afterwards beat. The
             * broker treats both alike for an unknown worker. */
            s_beat(&self, self.registrations ? WIRE_HEARTBEAT : WIRE_REGISTER);
        }
    }
    zsock_destroy(&self.sock);
}

relay_worker_t *relay_worker_new(const char *endpoint, const char *worker_id, int64_t heartbeat_ms,
                                 relay_handler_fn *handler, void *ctx) {
    return relay_worker_new_with(endpoint, worker_id, heartbeat_ms, handler, ctx, curve_default());
}

relay_worker_t *relay_worker_new_with(const char *endpoint, const char *worker_id,
                                      int64_t heartbeat_ms, relay_handler_fn *handler, void *ctx,
                                      const curve_t *keys) {
    s_args_t args = {.heartbeat_ms = heartbeat_ms, .handler = handler, .ctx = ctx, .keys = keys};
    if (!endpoint || !handler || !id_uuid_valid(worker_id) ||
        heartbeat_ms < PROTO_HEARTBEAT_MIN_MS || heartbeat_ms > PROTO_HEARTBEAT_MAX_MS ||
        strlen(endpoint) >= sizeof args.endpoint) {
        return NULL;
    }
    snprintf(args.endpoint, sizeof args.endpoint, "%s", endpoint);
    memcpy(args.worker_id, worker_id, sizeof args.worker_id);
    /* actor_new returns after the actor has copied args, so they may live on our stack. */
    zactor_t *actor = actor_new(s_worker_actor, &args);
    if (!actor) {
        return NULL;
    }
    relay_worker_t *self = mem_calloc(1, sizeof *self);
    self->actor = actor;
    return self;
}

void relay_worker_destroy(relay_worker_t **self_p) {
    relay_worker_t *self = *self_p;
    if (!self) {
        return;
    }
    zactor_destroy(&self->actor);
    free(self);
    *self_p = NULL;
}

int relay_worker_status(relay_worker_t *self, int64_t *registrations, int64_t *served) {
    uint64_t r = 0;
    uint64_t s = 0;
    if (zstr_send(self->actor, "STATUS") != 0 || zsock_recv(self->actor, "88", &r, &s) != 0) {
        return -1;
    }
    *registrations = (int64_t)r;
    *served = (int64_t)s;
    return 0;
}
