/*
 * guard: the broker's bound on connections that have not finished their handshake
 * (ARCHITECTURE.md §9 "Trust", broker/README.md "Hostile peers").
 *
 * libzmq accepts every TCP connection its listeners see, and gives the application no call
 * to close one accepted connection. The guard watches each bound socket through a socket
 * monitor (ZMQ_EVENT_ACCEPTED carries the new descriptor) and keeps a table of connections
 * still in their handshake, with their peer address. A new connection is closed at once with
 * shutdown(2) on its descriptor (libzmq then sees end of file, closes it and reports
 * DISCONNECTED) when its address already has max_per_addr connections in handshake, or when
 * it lands in the last GUARD_FD_SPARE descriptors of the process; when max_handshakes are in
 * handshake the oldest one of the address with the most is closed to make room, or the new
 * one when its own address has as many. ZMQ_HANDSHAKE_IVL (set by guard_apply) bounds how long
 * any of them can stay. Connections that leave the handshake refused (no CURVE, a protocol
 * error, a timeout) are logged with their address through the ratelog.
 *
 * libzmq's v1 monitor does not say which connection finished its handshake (the event's value
 * is 0), so each HANDSHAKE_SUCCEEDED credits the oldest connection in handshake on that
 * socket; a table entry also leaves after handshake_ms, when libzmq has closed or admitted
 * it. The counts can therefore be off by a few for a moment; only new connections, or the
 * oldest of the heaviest address, are ever closed, and a client of ours that is closed by
 * mistake reconnects.
 */
#ifndef CHATFLEET_GUARD_H
#define CHATFLEET_GUARD_H

#include <czmq.h>

#include "ratelog.h"
#include <stdint.h>

/* Defaults of the settings (README "Configuration"). */
#define GUARD_HANDSHAKE_MS      3000 /* ZMQ_HANDSHAKE_IVL on the three listeners */
#define GUARD_MAX_HANDSHAKES    256  /* connections in handshake, all addresses */
#define GUARD_MAX_PER_ADDR      32   /* connections in handshake from one address */
#define GUARD_FD_RESERVE        64   /* descriptors handshakes may never take */
#define GUARD_FD_SPARE          8    /* the last descriptors: the broker's own (opendir) */
#define GUARD_SLOTS             3    /* the sockets watched: XSUB, XPUB, ROUTER */
#define GUARD_ENV_HANDSHAKE_MS  "CHATFLEET_BROKER_HANDSHAKE_MS"
#define GUARD_ENV_MAX_HANDSHAKE "CHATFLEET_BROKER_MAX_HANDSHAKES"
#define GUARD_ENV_MAX_PER_ADDR  "CHATFLEET_BROKER_MAX_HANDSHAKES_PER_ADDR"
#define GUARD_ENV_FD_RESERVE    "CHATFLEET_BROKER_FD_RESERVE"

typedef struct {
    int handshake_ms;   /* 0: GUARD_HANDSHAKE_MS */
    int max_handshakes; /* 0: GUARD_MAX_HANDSHAKES */
    int max_per_addr;   /* 0: GUARD_MAX_PER_ADDR */
    int fd_reserve;     /* 0: GUARD_FD_RESERVE */
} guard_config_t;

typedef struct guard guard_t;

/* Raises the soft RLIMIT_NOFILE to the hard one. Returns 0 and the limits now in force, or
 * -1 when they cannot be read (nothing changed). */
int guard_raise_nofile(long *soft, long *hard);

/* A guard for this process's descriptors: max_handshakes is lowered to what the descriptor
 * limit leaves after the descriptors open now and fd_reserve (at least 1). Lines about
 * refused peers go through ratelog (borrowed). */
guard_t *guard_new(const guard_config_t *config, ratelog_t *ratelog);
void guard_destroy(guard_t **self_p);

/* Sets ZMQ_HANDSHAKE_IVL on an unbound socket. Returns 0 or -1. */
int guard_apply(guard_t *self, zsock_t *sock);

/* Starts watching sock (bound) in slot (0..GUARD_SLOTS-1), replacing what the slot watched.
 * Returns 0, or -1 when the monitor cannot be started (then the slot watches nothing). */
int guard_watch(guard_t *self, int slot, zsock_t *sock);

/* Stops watching slot (before its socket is closed, or monitored for something else). */
void guard_unwatch(guard_t *self, int slot);

/* The monitor socket of slot for zmq_poll (NULL when the slot watches nothing). */
void *guard_handle(guard_t *self, int slot);

/* Handles every event waiting on slot's monitor; now_ms is the monotonic clock. */
void guard_drain(guard_t *self, int slot, int64_t now_ms);

/* Shuts down every connection of this process whose local end is endpoint (tcp://HOST:PORT
 * or ipc://PATH, as ZMQ_LAST_ENDPOINT gives it): libzmq then closes each, and its peer
 * connects again and handshakes anew. Opens no descriptor, so it works with all of them in
 * use. Returns how many were cut, or -1 for another kind of endpoint. */
int guard_cut(guard_t *self, const char *endpoint);

/* Drops table entries older than handshake_ms (libzmq has closed or admitted them). */
void guard_expire(guard_t *self, int64_t now_ms);

typedef struct {
    int64_t handshaking;  /* in the table now */
    int64_t closed_cap;   /* closed at once: address or total cap */
    int64_t closed_spare; /* closed at once: landed in the spare descriptors */
    int64_t refused;      /* left the handshake refused (no ZAP involved) */
    int max_handshakes;   /* in force */
    int max_per_addr;
    int handshake_ms;
    long fd_limit;
} guard_stats_t;

void guard_stats(const guard_t *self, guard_stats_t *out);

#endif
