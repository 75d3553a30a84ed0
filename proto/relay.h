/*
 * relay: catch-up requests for the buffered parts of an episode, through the broker's
 * ROUTER, addressed by worker id (ARCHITECTURE.md §9).
 *
 * A relay client (a gateway stream) asks one worker for the parts of (chat_id,
 * history_version, generation_attempt) after a seq and gets a relay_reply: the parts, or
 * "no_such_worker" from the broker when the worker is unknown, dead or unreachable. A relay
 * worker registers under its worker id, heartbeats, and answers requests through a handler
 * (normally backed by the part buffer). Both reconnect by themselves; a worker re-registers
 * with a restarted broker on its next heartbeat.
 */
#ifndef CHATFLEET_RELAY_H
#define CHATFLEET_RELAY_H

#include <stdbool.h>
#include <stdint.h>

#include "curve.h"
#include "wire.h"
#include <czmq.h>

#include "log.h"

typedef struct relay_client relay_client_t;

/* A client connected to endpoint (CHATFLEET_BROKER_RELAY). NULL on an invalid endpoint. Not
 * thread-safe: one owner uses it. */
relay_client_t *relay_client_new(const char *endpoint);
/* The same with explicit CURVE keys (NULL: plain); relay_client_new uses curve_default().
 * keys are applied at once and need not outlive the call. */
relay_client_t *relay_client_new_with(const char *endpoint, const curve_t *keys);
void relay_client_destroy(relay_client_t **self_p);

/* Asks worker_id for the parts of episode with seq > episode->after_seq, at most max_parts
 * (1..PROTO_REPLY_MAX_PARTS), waiting up to timeout_ms. Returns 0 with the reply in *reply
 * (type WIRE_RELAY_REPLY; check u.reply.status; the caller wire_msg_clear()s it), or -1 when
 * no reply came in time (broker down, worker died mid-request) or the request was invalid.
 * Replies to earlier, abandoned requests are recognised by request_id and discarded. */
int relay_client_fetch(relay_client_t *self, const char *worker_id, const wire_select_t *episode,
                       int64_t max_parts, int timeout_ms, wire_msg_t *reply);

/* Asks the broker for its counters. Returns 0 or -1 (no answer within timeout_ms). */
int relay_client_stats(relay_client_t *self, int timeout_ms, wire_stats_t *out);

/* Fills reply for req: reply arrives with request_id, worker_id and episode set, status
 * WIRE_STATUS_OK and no parts. The handler adds parts with wire_reply_add (contiguous from
 * req->episode.after_seq + 1, at most req->max_parts), sets closed and more, or sets status
 * WIRE_STATUS_NO_EPISODE. Returning -1 answers WIRE_STATUS_BAD_REQUEST. It runs on the relay
 * worker's thread, so what it reads must be safe to read from there. */
typedef int(relay_handler_fn)(void *ctx, const wire_request_t *req, wire_reply_t *reply);

typedef struct relay_worker relay_worker_t;

/* Starts the worker side: an actor that connects to endpoint, registers worker_id with
 * heartbeat_ms (PROTO_HEARTBEAT_MIN_MS..MAX), beats every heartbeat_ms, and answers each
 * forwarded request with handler(ctx, ...). NULL on invalid arguments or when the socket
 * cannot be made for endpoint (the actor has exited then; see actor.h).
 *
 * Actor pipe protocol (wrapped by the functions below):
 *   start-up                 args: relay_worker_args_t (copied); signals 0 once connected,
 *                            -1 (and exits) when the socket cannot be made
 *   "STATUS"                 replies "88": acknowledged registrations, requests served
 *   "$TERM"                  closes the socket and exits (relay_worker_destroy sends it)
 */
relay_worker_t *relay_worker_new(const char *endpoint, const char *worker_id, int64_t heartbeat_ms,
                                 relay_handler_fn *handler, void *ctx);
/* The same with explicit CURVE keys (NULL: plain), applied before this returns. */
relay_worker_t *relay_worker_new_with(const char *endpoint, const char *worker_id,
                                      int64_t heartbeat_ms, relay_handler_fn *handler, void *ctx,
                                      const curve_t *keys);
void relay_worker_destroy(relay_worker_t **self_p);

/* How many times the broker acknowledged a registration of this worker (it does so at start
 * and again after a broker restart), and how many requests were answered. */
int relay_worker_status(relay_worker_t *self, int64_t *registrations, int64_t *served);

#endif
