/*
 * protocol: every constant of the chatfleet wire protocol (proto/README.md is the spec).
 *
 * Topics, the protocol version, size bounds that a decoder enforces on input from the
 * network, and the timing constants of the relay and the bus. Nothing here allocates.
 */
#ifndef CHATFLEET_PROTOCOL_H
#define CHATFLEET_PROTOCOL_H

/* The major version carried in every message ("v"). Additive changes (a new optional field)
 * keep it; any change a version-1 decoder would misread bumps it. A decoder rejects every
 * other value. */
#define PROTO_VERSION 1

/* Pub/sub topics (first frame). Subscriptions are byte prefixes, so "chat:update:" selects
 * every chat's update hints and "chat:update:<chat_id>" one chat's. */
#define PROTO_TOPIC_OWNERSHIP "chat:ownership"
#define PROTO_TOPIC_UPDATE    "chat:update:"
#define PROTO_TOPIC_PART      "chat:part:"
#define PROTO_TOPIC_PREFIX    "chat:"
#define PROTO_TOPIC_MAX_BYTES 64 /* longest topic ("chat:update:" + UUID) with room */

/* Decoder bounds (README "Limits"). A frame larger than PROTO_MSG_MAX_BYTES is rejected,
 * and the broker sets it as ZMQ_MAXMSGSIZE so a peer that sends one is disconnected. */
#define PROTO_MSG_MAX_BYTES   (4 * 1024 * 1024)
#define PROTO_PART_MAX_BYTES  (1024 * 1024) /* one part's JSON text (= episode cap) */
#define PROTO_MAX_DEPTH       8             /* nesting of maps and arrays */
#define PROTO_MAX_OBJECTS     16384         /* msgpack objects in one message */
#define PROTO_MAX_FIELDS      64            /* entries in one map */
#define PROTO_REPLY_MAX_PARTS 1024          /* parts in one relay reply; ask again for more */
#define PROTO_REPLY_MAX_BYTES (1024 * 1024) /* JSON bytes a worker puts in one reply */
#define PROTO_ROUTE_MAX_BYTES 255           /* ZeroMQ routing ids are at most 255 bytes */

/* Relay timing. A worker heartbeats every heartbeat_ms it announced when registering; the
 * broker forgets it after PROTO_WORKER_LIVENESS missed beats. */
#define PROTO_HEARTBEAT_MIN_MS     10
#define PROTO_HEARTBEAT_MAX_MS     60000
#define PROTO_HEARTBEAT_DEFAULT_MS 1000
#define PROTO_WORKER_LIVENESS      3
#define PROTO_RELAY_TIMEOUT_MS     2000 /* default deadline of a relay client request */

/* Reconnection of every client socket (libzmq retries at this fixed interval, so a restarted
 * broker is found again within about this time). */
#define PROTO_RECONNECT_IVL_MS 100
/* How long a closed client socket (publisher, subscriber, relay) keeps trying to deliver what
 * it queued, e.g. the hints of a graceful stop. Not zero: libzmq 4.3.4 aborts the process
 * when a socket closed with linger 0 loses its connection part-way through a multipart
 * message (src/session_base.cpp:260), which test_broker hit when its broker was killed. */
#define PROTO_LINGER_MS 200

#endif
