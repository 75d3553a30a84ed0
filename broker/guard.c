/* guard: connections in handshake, bounded per address and in all; see guard.h. */
#include "guard.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/un.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define S_ADDR_MAX    64         /* an IPv6 address in text, with room */
#define S_FD_SCAN_MAX (1L << 20) /* guard_cut without monitors: descriptors looked at */

/* The ratelog buckets of the lines (compared by pointer). */
static const char S_BUCKET_CAP[] = "broker_peer_refused_cap";
static const char S_BUCKET_HANDSHAKE[] = "broker_peer_refused_handshake";

typedef struct {
    int fd;
    int slot;
    char addr[S_ADDR_MAX]; /* the peer's IP address, the per-address key */
    int port;
    int64_t accepted_ms;
} s_conn_t;

typedef struct {
    zsock_t *monitor; /* PAIR connected to the socket's monitor endpoint */
    void *sock_h;     /* the watched socket */
    int last_fail;    /* the last ZMQ_EVENT_HANDSHAKE_FAILED_* seen, 0 after use */
    uint32_t last_fail_value;
} s_slot_t;

struct guard {
    guard_config_t cfg; /* in force: max_handshakes lowered to the descriptor budget */
    ratelog_t *ratelog; /* borrowed */
    long fd_limit;
    int max_fd;      /* the highest descriptor an accepted connection had */
    s_conn_t *conns; /* max_handshakes entries; n used, oldest first */
    int n;
    s_slot_t slots[GUARD_SLOTS];
    guard_stats_t stats;
};

static int s_or(int v, int dflt) {
    return v > 0 ? v : dflt;
}

int guard_raise_nofile(long *soft, long *hard) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return -1;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
            rl = up;
        }
    }
    *soft = rl.rlim_cur == RLIM_INFINITY ? -1 : (long)rl.rlim_cur;
    *hard = rl.rlim_max == RLIM_INFINITY ? -1 : (long)rl.rlim_max;
    return 0;
}

/* Descriptors open in this process now (from /proc/self/fd; 64 when it cannot be read). */
static long s_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        return 64;
    }
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

guard_t *guard_new(const guard_config_t *config, ratelog_t *ratelog) {
    guard_t *self = mem_calloc(1, sizeof *self);
    self->ratelog = ratelog;
    self->cfg.handshake_ms = s_or(config->handshake_ms, GUARD_HANDSHAKE_MS);
    self->cfg.max_handshakes = s_or(config->max_handshakes, GUARD_MAX_HANDSHAKES);
    self->cfg.max_per_addr = s_or(config->max_per_addr, GUARD_MAX_PER_ADDR);
    self->cfg.fd_reserve = s_or(config->fd_reserve, GUARD_FD_RESERVE);
    struct rlimit rl;
    self->fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? (long)rl.rlim_cur
                         : 1L << 20;
    /* The monitors about to be made take a few descriptors too (one eventfd each for the
     * PAIR and its inproc peer). */
    long budget = self->fd_limit - s_open_fds() - 2 * GUARD_SLOTS - self->cfg.fd_reserve;
    if (budget < self->cfg.max_handshakes) {
        log_warn("broker_handshakes_lowered",
                 "max_handshakes=%d fd_limit=%ld fd_reserve=%d effective=%ld",
                 self->cfg.max_handshakes, self->fd_limit, self->cfg.fd_reserve,
                 budget < 1 ? 1L : budget);
        self->cfg.max_handshakes = budget < 1 ? 1 : (int)budget;
    }
    self->conns = mem_calloc((size_t)self->cfg.max_handshakes, sizeof *self->conns);
    return self;
}

void guard_destroy(guard_t **self_p) {
    guard_t *self = *self_p;
    if (!self) {
        return;
    }
    for (int i = 0; i < GUARD_SLOTS; i++) {
        guard_unwatch(self, i);
    }
    free(self->conns);
    free(self);
    *self_p = NULL;
}

int guard_apply(guard_t *self, zsock_t *sock) {
    int ms = self->cfg.handshake_ms;
    return zmq_setsockopt(zsock_resolve(sock), ZMQ_HANDSHAKE_IVL, &ms, sizeof ms);
}

static void s_remove(guard_t *self, int i) {
    memmove(&self->conns[i], &self->conns[i + 1], (size_t)(self->n - i - 1) * sizeof(s_conn_t));
    self->n--;
}

int guard_watch(guard_t *self, int slot, zsock_t *sock) {
    static int s_seq;
    guard_unwatch(self, slot);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://broker-guard-%d", ++s_seq);
    void *h = zsock_resolve(sock);
    int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_DISCONNECTED;
    /* ACCEPT_FAILED is left out on purpose: libzmq 4.3 retries a failed accept at once, so at
     * the descriptor limit it would queue one event per spin and, with the monitor's pipe
     * full, hold up the I/O thread. The spare descriptors keep the limit out of reach. */
    if (zmq_socket_monitor(h, ep, events) != 0) {
        log_error("broker_guard_failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
        return -1;
    }
    self->slots[slot].monitor = zsock_new_pair(ep); /* CZMQ connects a PAIR by default */
    if (!self->slots[slot].monitor) {
        zmq_socket_monitor(h, NULL, 0);
        return -1;
    }
    self->slots[slot].sock_h = h;
    return 0;
}

void guard_unwatch(guard_t *self, int slot) {
    s_slot_t *s = &self->slots[slot];
    if (!s->monitor) {
        return;
    }
    zmq_socket_monitor(s->sock_h, NULL, 0);
    zsock_destroy(&s->monitor);
    s->sock_h = NULL;
    s->last_fail = 0;
    for (int i = self->n - 1; i >= 0; i--) {
        if (self->conns[i].slot == slot) {
            s_remove(self, i);
        }
    }
}

void *guard_handle(guard_t *self, int slot) {
    return self->slots[slot].monitor ? zsock_resolve(self->slots[slot].monitor) : NULL;
}

/* Logs a refused peer: one line per reason and address per RATELOG_PEER_MS, within the
 * ratelog's bucket for bucket (a literal: closed at a cap, or failed in the handshake; the
 * ZAP refusals by key have a bucket of their own, so a flood cannot hide a revoked key). */
static void s_note(guard_t *self, const char *bucket, const char *reason, const char *addr,
                   int port, int fd) {
    int64_t suppressed = 0;
    int64_t repeats = 0;
    char peer[128];
    snprintf(peer, sizeof peer, "%s %s", reason, addr);
    if (ratelog_allow_peer(self->ratelog, bucket, peer, id_now_ms(), &suppressed, &repeats)) {
        log_warn("broker_peer_refused",
                 "reason=%s address=%s key=- port=%d fd=%d handshaking=%d repeats=%lld "
                 "suppressed=%lld",
                 reason, addr, port, fd, self->n, (long long)repeats, (long long)suppressed);
    }
}

/* The peer's IP address and port of a connected descriptor. Returns 0 or -1. */
static int s_peer(int fd, char *addr, size_t len, int *port) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) {
        return -1;
    }
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, addr, (socklen_t)len);
        *port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, (socklen_t)len);
        *port = ntohs(a->sin6_port);
    } else {
        snprintf(addr, len, "local"); /* ipc://: one address for all */
        *port = 0;
    }
    return 0;
}

static int s_count_addr(const guard_t *self, const char *addr) {
    int n = 0;
    for (int i = 0; i < self->n; i++) {
        n += strcmp(self->conns[i].addr, addr) == 0;
    }
    return n;
}

/* The index of the oldest entry of the address with the most entries, and that count. */
static int s_heaviest(const guard_t *self, int *count) {
    int best = -1;
    *count = 0;
    for (int i = 0; i < self->n; i++) {
        int c = s_count_addr(self, self->conns[i].addr);
        if (c > *count) {
            *count = c;
            best = i;
        }
    }
    return best;
}

static void s_accepted(guard_t *self, int slot, int fd, int64_t now_ms) {
    self->max_fd = fd > self->max_fd ? fd : self->max_fd;
    char addr[S_ADDR_MAX];
    int port = 0;
    if (s_peer(fd, addr, sizeof addr, &port) != 0) {
        return; /* already closed by libzmq: nothing to track */
    }
    if (fd >= self->fd_limit - GUARD_FD_SPARE) {
        shutdown(fd, SHUT_RDWR);
        self->stats.closed_spare++;
        s_note(self, S_BUCKET_CAP, "fd_spare", addr, port, fd);
        return;
    }
    int mine = s_count_addr(self, addr);
    if (mine >= self->cfg.max_per_addr) {
        shutdown(fd, SHUT_RDWR);
        self->stats.closed_cap++;
        s_note(self, S_BUCKET_CAP, "per_address_cap", addr, port, fd);
        return;
    }
    if (self->n >= self->cfg.max_handshakes) {
        int heavy = 0;
        int victim = s_heaviest(self, &heavy);
        if (victim < 0 || heavy <= mine + 1) {
            shutdown(fd, SHUT_RDWR);
            self->stats.closed_cap++;
            s_note(self, S_BUCKET_CAP, "handshake_cap", addr, port, fd);
            return;
        }
        /* Make room from the address holding the most: a flood from a few addresses cannot
         * keep the others out. */
        s_conn_t *v = &self->conns[victim];
        shutdown(v->fd, SHUT_RDWR);
        self->stats.closed_cap++;
        s_note(self, S_BUCKET_CAP, "handshake_cap_evicted", v->addr, v->port, v->fd);
        s_remove(self, victim);
    }
    s_conn_t *c = &self->conns[self->n++];
    c->fd = fd;
    c->slot = slot;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->port = port;
    c->accepted_ms = now_ms;
}

static int s_find(const guard_t *self, int slot, int fd) {
    for (int i = 0; i < self->n; i++) {
        if (self->conns[i].fd == fd && self->conns[i].slot == slot) {
            return i;
        }
    }
    return -1;
}

/* A connection of slot closed: when it was still in handshake, it was refused. */
static void s_disconnected(guard_t *self, int slot, int fd) {
    int i = s_find(self, slot, fd);
    s_slot_t *s = &self->slots[slot];
    if (i < 0) {
        s->last_fail = 0;
        return;
    }
    const char *reason = "closed_in_handshake";
    if (s->last_fail == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        reason = s->last_fail_value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                     ? "mechanism_mismatch"
                     : "protocol_error";
    } else if (s->last_fail == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        reason = "handshake_incomplete";
    }
    /* A refusal by key was logged with the key by the ZAP handler (auth). */
    if (s->last_fail != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        self->stats.refused++;
        s_note(self, S_BUCKET_HANDSHAKE, reason, self->conns[i].addr, self->conns[i].port, fd);
    }
    s->last_fail = 0;
    s_remove(self, i);
}

/* A handshake on slot succeeded; the v1 event does not say which: credit the oldest. */
static void s_succeeded(guard_t *self, int slot) {
    for (int i = 0; i < self->n; i++) {
        if (self->conns[i].slot == slot) {
            s_remove(self, i);
            return;
        }
    }
}

void guard_drain(guard_t *self, int slot, int64_t now_ms) {
    s_slot_t *s = &self->slots[slot];
    if (!s->monitor) {
        return;
    }
    void *h = zsock_resolve(s->monitor);
    for (int b = 0; b < 1024; b++) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, h, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) == 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (char *)zmq_msg_data(&ev) + 2, 4);
        }
        bool more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) { /* the endpoint frame: not needed */
            zmq_msg_t f;
            zmq_msg_init(&f);
            if (zmq_msg_recv(&f, h, 0) < 0) {
                zmq_msg_close(&f);
                break;
            }
            more = zmq_msg_more(&f);
            zmq_msg_close(&f);
        }
        switch (event) {
            case ZMQ_EVENT_ACCEPTED:
                s_accepted(self, slot, (int)value, now_ms);
                break;
            case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
                s_succeeded(self, slot);
                break;
            case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
            case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
                s->last_fail = event;
                s->last_fail_value = value;
                break;
            case ZMQ_EVENT_DISCONNECTED:
                s_disconnected(self, slot, (int)value);
                break;
            default:
                break;
        }
    }
}

/* Whether fd is a connected socket whose local end is the tcp port, or the ipc path (abstract
 * when it starts with '@'). */
static bool s_local_end_is(int fd, int port, const char *path) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        return false; /* not a socket, or closed */
    }
    bool match = false;
    if (port > 0 && ss.ss_family == AF_INET) {
        match = ntohs(((struct sockaddr_in *)&ss)->sin_port) == port;
    } else if (port > 0 && ss.ss_family == AF_INET6) {
        match = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == port;
    } else if (path && ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        size_t n = sl > offsetof(struct sockaddr_un, sun_path)
                       ? sl - offsetof(struct sockaddr_un, sun_path)
                       : 0;
        size_t want = strlen(path);
        match = path[0] == '@' ? n == want && un->sun_path[0] == '\0' &&
                                     memcmp(un->sun_path + 1, path + 1, want - 1) == 0
                               : n >= want && memcmp(un->sun_path, path, want) == 0 &&
                                     (n == want || un->sun_path[want] == '\0');
    }
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    return match && getpeername(fd, (struct sockaddr *)&peer, &pl) == 0; /* not a listener */
}

int guard_cut(guard_t *self, const char *endpoint) {
    int port = 0;
    const char *path = NULL;
    if (strncmp(endpoint, "tcp://", 6) == 0) {
        const char *colon = strrchr(endpoint, ':');
        char *end = NULL;
        errno = 0;
        long p = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || errno != 0 || end == colon + 1 || *end != '\0' || p <= 0 || p > 65535) {
            return -1;
        }
        port = (int)p;
    } else if (strncmp(endpoint, "ipc://", 6) == 0 && endpoint[6]) {
        path = endpoint + 6;
    } else {
        return -1;
    }
    /* Every connection libzmq accepted was reported with its descriptor while the three
     * monitors run; without them, every descriptor the limit allows is looked at. */
    bool watched = true;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        watched = watched && self->slots[i].monitor;
    }
    long end = watched ? self->max_fd + 1L
                       : (self->fd_limit < S_FD_SCAN_MAX ? self->fd_limit : S_FD_SCAN_MAX);
    int cut = 0;
    for (int fd = 0; fd < end; fd++) {
        if (s_local_end_is(fd, port, path) && shutdown(fd, SHUT_RDWR) == 0) {
            cut++;
        }
    }
    return cut;
}

void guard_expire(guard_t *self, int64_t now_ms) {
    int keep = 0;
    for (int i = 0; i < self->n; i++) {
        if (now_ms - self->conns[i].accepted_ms <= self->cfg.handshake_ms) {
            self->conns[keep++] = self->conns[i];
        }
    }
    self->n = keep;
}

void guard_stats(const guard_t *self, guard_stats_t *out) {
    *out = self->stats;
    out->handshaking = self->n;
    out->max_handshakes = self->cfg.max_handshakes;
    out->max_per_addr = self->cfg.max_per_addr;
    out->handshake_ms = self->cfg.handshake_ms;
    out->fd_limit = self->fd_limit;
}
