/*
 * bus: the pub/sub side of the broker, for processes (ARCHITECTURE.md §9, proto/README.md "Bus").
 *
 * A publisher sends hints (after COMMIT, through the hint_sink_t of bus_publisher_sink) and
 * live parts; it never blocks: when the pipe to the broker is full the message is dropped
 * and counted. A subscriber receives the topics it subscribed to and discards stale and
 * duplicate hints with a per-chat snapshot_version watermark. Both reconnect by themselves
 * (libzmq retries every PROTO_RECONNECT_IVL_MS) and the subscriber's subscriptions are
 * replayed on reconnection, so a broker restart needs nothing from their owners.
 */
#ifndef CHATFLEET_BUS_H
#define CHATFLEET_BUS_H

#include <stdint.h>

#include "curve.h"
#include "hint.h"
#include "wire.h"
#include <czmq.h>

#include "log.h"

/* High-water marks (messages) of the publisher's and subscriber's pipes; see README "HWM
 * policy". */
#define BUS_PUB_SNDHWM 10000
#define BUS_SUB_RCVHWM 10000
/* Chats whose watermarks a subscriber keeps; past this the table is reset (counted), which
 * can only let duplicates through, never hide a fresh hint. */
#define BUS_WATERMARK_MAX_CHATS  65536
#define BUS_DROP_LOG_INTERVAL_MS 1000 /* at most one drop warning per interval */

typedef struct bus_publisher bus_publisher_t;
typedef struct bus_subscriber bus_subscriber_t;

typedef struct {
    int64_t sent;    /* handed to libzmq */
    int64_t dropped; /* over the high-water mark: the broker was slow or unreachable */
    int64_t invalid; /* refused by the encoder (a programming error upstream) */
} bus_pub_counters_t;

typedef struct {
    int64_t received;         /* messages read from the socket */
    int64_t delivered;        /* returned by bus_subscriber_recv */
    int64_t stale;            /* hints at or below the chat's watermark (duplicate or old) */
    int64_t malformed;        /* undecodable, or topic and body disagree */
    int64_t gaps;             /* update hints skipped: snapshot_version jumped by more than 1 */
    int64_t watermark_resets; /* the watermark table reached BUS_WATERMARK_MAX_CHATS */
} bus_sub_counters_t;

/* A publisher connected to endpoint (the broker's pub endpoint, CHATFLEET_BROKER_PUB).
 * Returns NULL on an invalid endpoint. Thread-safe: sends are serialised by a mutex, so one
 * publisher may serve every committing thread of a process. */
bus_publisher_t *bus_publisher_new(const char *endpoint);
/* The same with explicit CURVE keys (NULL: plain); bus_publisher_new uses curve_default().
 * keys are applied at once and need not outlive the call. */
bus_publisher_t *bus_publisher_new_with(const char *endpoint, const curve_t *keys);
void bus_publisher_destroy(bus_publisher_t **self_p);

/* Publishes a hint or part on its topic. Returns 0 when libzmq took it, -1 when it was
 * dropped (high-water mark) or could not be encoded; both are counted. */
int bus_publisher_send(bus_publisher_t *self, const wire_msg_t *msg);
int bus_publisher_update(bus_publisher_t *self, const hint_update_t *hint);
int bus_publisher_ownership(bus_publisher_t *self, const hint_ownership_t *hint);
int bus_publisher_part(bus_publisher_t *self, const wire_part_t *part);

/* A hint_sink_t that publishes to self (for chatstate). self must outlive the sink. */
hint_sink_t bus_publisher_sink(bus_publisher_t *self);

void bus_publisher_counters(bus_publisher_t *self, bus_pub_counters_t *out);

/* A subscriber connected to endpoint (CHATFLEET_BROKER_SUB), with no subscriptions. Returns
 * NULL on an invalid endpoint. Not thread-safe: one owner (an actor) uses it. */
bus_subscriber_t *bus_subscriber_new(const char *endpoint);
bus_subscriber_t *bus_subscriber_new_with(const char *endpoint, const curve_t *keys);
void bus_subscriber_destroy(bus_subscriber_t **self_p);

/* Subscribes to, or unsubscribes from, a topic prefix (PROTO_TOPIC_* or a full topic).
 * Returns 0 or -1. */
int bus_subscriber_subscribe(bus_subscriber_t *self, const char *topic);
int bus_subscriber_unsubscribe(bus_subscriber_t *self, const char *topic);

/* Waits up to timeout_ms (0: do not wait, -1: forever) for the next fresh message and
 * decodes it into *msg (the caller wire_msg_clear()s it). Hints at or below their chat's
 * watermark are discarded here; parts are passed through (the receiver checks episode and
 * seq). Returns 1 with a message, 0 when none arrived in time, -1 when interrupted. */
int bus_subscriber_recv(bus_subscriber_t *self, wire_msg_t *msg, int timeout_ms);

/* Forgets the watermarks of chat_id (call when no longer interested in the chat). */
void bus_subscriber_forget(bus_subscriber_t *self, const char *chat_id);

/* The socket, for a zpoller or zloop; read it only through bus_subscriber_recv. */
zsock_t *bus_subscriber_sock(bus_subscriber_t *self);

void bus_subscriber_counters(bus_subscriber_t *self, bus_sub_counters_t *out);

#endif
