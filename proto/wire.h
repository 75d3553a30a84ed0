/*
 * wire: encoding and decoding of every chatfleet message (proto/README.md is the spec).
 *
 * A message is one msgpack map carrying "v" (PROTO_VERSION) and "type". The decoder is the
 * network boundary: it bounds sizes, depth and object counts before msgpack-c allocates,
 * ignores unknown fields, and rejects an unknown type, a wrong version, a missing or
 * mistyped field, a duplicate key, trailing bytes or any malformed frame with -1 and a
 * reason. It never aborts on input. Encoding validates the same rules, so what one side
 * encodes the other side accepts.
 */
#ifndef CHATFLEET_WIRE_H
#define CHATFLEET_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hint.h"
#include "id.h"
#include "protocol.h"

typedef enum {
    WIRE_OWNERSHIP = 1, /* hint_ownership_t, topic chat:ownership */
    WIRE_UPDATE,        /* hint_update_t, topic chat:update:<chat_id> */
    WIRE_PART,          /* wire_part_t, topic chat:part:<chat_id> */
    WIRE_SELECT,        /* wire_select_t: episode selection */
    WIRE_RELAY_REQUEST, /* wire_request_t */
    WIRE_RELAY_REPLY,   /* wire_reply_t */
    WIRE_REGISTER,      /* wire_worker_t: worker -> broker */
    WIRE_REGISTERED,    /* wire_worker_t: broker -> worker, the acknowledgement */
    WIRE_HEARTBEAT,     /* wire_worker_t: worker -> broker */
    WIRE_STATS_REQUEST, /* no fields */
    WIRE_STATS,         /* wire_stats_t */
} wire_type_t;

#define WIRE_TYPE_COUNT 11

/* A JSON text owned by the message (NUL-terminated; len excludes the NUL). */
typedef struct {
    char *text;
    size_t len;
} wire_json_t;

#define WIRE_ROLE_MAX 16 /* "system", "user", "assistant", "tool" */

/* A live message part of the episode (chat_id, history_version, generation_attempt). */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    int64_t history_version;
    int64_t generation_attempt;
    int64_t seq; /* 1, 2, ... within the episode */
    char role[WIRE_ROLE_MAX];
    wire_json_t part; /* a JSON object */
} wire_part_t;

/* Episode selection: the parts of (chat_id, history_version, generation_attempt) whose seq
 * is greater than after_seq. */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    int64_t history_version;
    int64_t generation_attempt;
    int64_t after_seq;
} wire_select_t;

typedef struct {
    char request_id[ID_UUID_LEN + 1];
    char worker_id[ID_UUID_LEN + 1]; /* the worker the broker routes the request to */
    wire_select_t episode;
    int64_t max_parts; /* 1..PROTO_REPLY_MAX_PARTS */
} wire_request_t;

typedef enum {
    WIRE_STATUS_OK = 0,         /* parts holds buffered parts (maybe none yet) */
    WIRE_STATUS_NO_SUCH_WORKER, /* answered by the broker: unknown, dead or unreachable */
    WIRE_STATUS_NO_EPISODE,     /* the worker has no such episode (not an error) */
    WIRE_STATUS_BAD_REQUEST,    /* the worker or broker could not serve the request */
} wire_status_t;

/* One part of a relay reply (the episode is the reply's). */
typedef struct {
    int64_t seq;
    char role[WIRE_ROLE_MAX];
    wire_json_t part;
} wire_item_t;

typedef struct {
    char request_id[ID_UUID_LEN + 1];
    char worker_id[ID_UUID_LEN + 1];
    wire_status_t status;
    wire_select_t episode; /* echoed from the request */
    bool closed;           /* the episode is closed: no part will follow the last one */
    bool more;             /* more parts are buffered: ask again after the last seq */
    size_t nparts;         /* 0..PROTO_REPLY_MAX_PARTS, seq contiguous from after_seq + 1 */
    wire_item_t *parts;    /* owned by the message */
} wire_reply_t;

/* Worker registration, its acknowledgement and heartbeats. */
typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    int64_t heartbeat_ms; /* PROTO_HEARTBEAT_MIN_MS..PROTO_HEARTBEAT_MAX_MS */
} wire_worker_t;

/* Broker counters (README "Counters"). */
typedef struct {
    int64_t pub_in;    /* messages received from publishers */
    int64_t pub_out;   /* messages forwarded to subscribers */
    int64_t relay_in;  /* relay messages received */
    int64_t relay_out; /* relay messages sent */
    int64_t dropped;   /* messages discarded: malformed, unroutable or over a high-water mark */
    int64_t workers;   /* live registered workers */
    int64_t uptime_ms;
    int64_t refused;   /* registrations refused: the registry was full (broker --max-workers) */
    int64_t forbidden; /* CURVE: traffic the sender's key or role may not send, or from a key
                          no longer in the allow directory (ARCHITECTURE.md §9 "Trust") */
} wire_stats_t;

typedef struct {
    wire_type_t type;
    union {
        hint_ownership_t ownership;
        hint_update_t update;
        wire_part_t part;
        wire_select_t select;
        wire_request_t request;
        wire_reply_t reply;
        wire_worker_t worker; /* REGISTER, REGISTERED, HEARTBEAT */
        wire_stats_t stats;
    } u;
} wire_msg_t;

/* Encodes msg into a new buffer (*data, *size), owned by the caller (free()). Returns 0, or
 * -1 without output when msg breaks a rule of the spec (a bad UUID, an unknown status...). */
int wire_encode(const wire_msg_t *msg, char **data, size_t *size);

/* Decodes one message from exactly size bytes into *msg, which then owns any JSON text and
 * parts (release with wire_msg_clear). Returns 0, or -1 with *msg cleared and, when errbuf
 * is not NULL, a short reason in it. */
int wire_decode(const void *data, size_t size, wire_msg_t *msg, char *errbuf, size_t errlen);

/* Frees what a decoded or built message owns and zeroes it. Safe on a zeroed message. */
void wire_msg_clear(wire_msg_t *msg);

/* The pub/sub topic of a hint or part into buf ("chat:update:<id>"). Returns 0, or -1 for a
 * message type that is not published or a too-small buf. */
int wire_topic(const wire_msg_t *msg, char *buf, size_t size);

/* The type's name on the wire ("update") or NULL; and the reverse (0 when unknown). */
const char *wire_type_name(wire_type_t type);
wire_type_t wire_type_from_name(const char *name, size_t len);

/* A status's name on the wire ("no_such_worker"). */
const char *wire_status_name(wire_status_t status);

/* Sets a copy of text (len bytes) as json. Returns 0, or -1 if text is not one JSON object
 * of at most PROTO_PART_MAX_BYTES. */
int wire_json_set(wire_json_t *json, const char *text, size_t len);

/* Appends a copy of a part to reply. Returns 0, or -1 when the reply is full
 * (PROTO_REPLY_MAX_PARTS) or the part is invalid. */
int wire_reply_add(wire_reply_t *reply, int64_t seq, const char *role, const char *json,
                   size_t len);

#endif
