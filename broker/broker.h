/*
 * broker: the chatfleet broker as one CZMQ actor (ARCHITECTURE.md §9, proto/README.md).
 *
 * It binds three sockets and serves them from one loop: an XSUB that publishers connect to,
 * proxied to an XPUB that subscribers connect to (hints and live parts), and a ROUTER for
 * the relay, where workers register and heartbeat and requests addressed by worker id are
 * forwarded to that worker or answered "no_such_worker" at once. It counts messages in,
 * out and dropped, and logs the counters every stats_interval_ms and when asked. With CURVE
 * it also answers the ZAP requests (auth_zap_handle), and it bounds the connections in
 * handshake on all three sockets (guard.h); every refused peer is logged, at a bounded rate,
 * as broker_peer_refused with its address (and its key when it offered one).
 *
 * Pipe protocol (actor = broker_actor(broker)):
 *   broker_new(&config)                 starts the actor; config is read during the call only.
 *   signal on init                      0 when all three endpoints are bound, -1 otherwise,
 *                                       and then the actor exits at once; broker_new returns
 *                                       NULL then (proto/actor.h).
 *   zstr_send(actor, "LOG")             logs one broker_stats line; no reply.
 *   zstr_send(actor, "RELOAD")          re-reads the CURVE allow directory now, changed or
 *                                       not (SIGHUP); no reply.
 *   zstr_send(actor, "STATS")           replies "888888888": pub_in, pub_out, relay_in,
 *                                       relay_out, dropped, workers, uptime_ms, refused,
 *                                       forbidden.
 *   zstr_send(actor, "$TERM")           logs the final counters, closes the sockets without
 *                                       lingering, and exits (broker_destroy sends it).
 * Nothing is sent unprompted. Unknown commands are logged and ignored.
 */
#ifndef CHATFLEET_BROKER_H
#define CHATFLEET_BROKER_H

#include <czmq.h>

#include "auth.h"
#include "guard.h"
#include "log.h"
#include <stdint.h>

/* Defaults of the broker's own settings (README "Configuration"). */
#define BROKER_STATS_INTERVAL_MS 60000
#define BROKER_HWM_MSGS          10000 /* per XSUB/XPUB pipe; see README "HWM policy" */
#define BROKER_EXPIRE_TICK_MS    50    /* how often dead workers are swept */
#define BROKER_ALLOW_RELOAD_MS   1000  /* how often the CURVE allow directory is looked at */

typedef struct {
    const char *pub_endpoint;   /* publishers connect here (XSUB binds) */
    const char *sub_endpoint;   /* subscribers connect here (XPUB binds) */
    const char *relay_endpoint; /* relay clients and workers connect here (ROUTER binds) */
    int64_t stats_interval_ms;
    int hwm_msgs;
    size_t max_workers; /* registry bound; 0: REGISTRY_MAX_WORKERS */
    /* CURVE on every socket (auth_new), or NULL for a plain bus. Borrowed: it must outlive
     * the broker, and nothing else may use it while the broker runs. */
    auth_t *auth;
    guard_config_t guard; /* the bounds on connections in handshake (guard.h); zeros: defaults */
} broker_config_t;

typedef struct broker broker_t;

/* Binds the three endpoints and starts the actor on them. Returns NULL when one of them
 * cannot be bound (each failure logged as broker_bind_failed); nothing is left running
 * then, and the endpoints it did bind are closed (libzmq releases them a moment later). */
broker_t *broker_new(const broker_config_t *config);

/* Stops the actor ($TERM) and frees the broker. Safe on NULL; nulls *self_p. */
void broker_destroy(broker_t **self_p);

/* The actor, for the commands above and for polling: it sends nothing unprompted, so a
 * message it sends unasked means it has exited. Owned by self. */
zactor_t *broker_actor(broker_t *self);

#endif
