/* wire: msgpack encoding and strict decoding of chatfleet messages; see wire.h and README. */
#include "wire.h"
#include "mem.h"

#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One table per message type describes its fields; encoding, decoding and validation all
 * walk the same table, so the three cannot drift apart. */
typedef enum {
    F_UUID,     /* char[ID_UUID_LEN + 1], a canonical UUID */
    F_UUID_NIL, /* the same, or nil on the wire and "" in the struct */
    F_INT,      /* int64_t within [min, max] */
    F_BOOL,     /* bool */
    F_CHAT_STATUS,
    F_ROLE,
    F_JSON,    /* wire_json_t holding one JSON object */
    F_EPISODE, /* wire_select_t, a nested map */
    F_ITEMS,   /* wire_reply_t parts and nparts, an array of maps */
    F_RSTATUS, /* wire_status_t */
} s_kind_t;

typedef struct {
    const char *name;
    s_kind_t kind;
    size_t offset;
    int64_t min;
    int64_t max;
} s_field_t;

#define S_ENCODE_FIRST_BYTES 512 /* wire_encode's first buffer; it grows as msgpack needs */
#define S_ANY                INT64_MAX
#define S_F(type, field, name, kind, lo, hi)                                                       \
    { name, kind, offsetof(type, field), lo, hi }

static const s_field_t s_ownership[] = {
    S_F(hint_ownership_t, chat_id, "chat_id", F_UUID, 0, 0),
    S_F(hint_ownership_t, snapshot_version, "snapshot_version", F_INT, 1, S_ANY),
};

static const s_field_t s_update[] = {
    S_F(hint_update_t, chat_id, "chat_id", F_UUID, 0, 0),
    S_F(hint_update_t, snapshot_version, "snapshot_version", F_INT, 1, S_ANY),
    S_F(hint_update_t, worker_id, "worker_id", F_UUID_NIL, 0, 0),
    S_F(hint_update_t, runner_id, "runner_id", F_UUID_NIL, 0, 0),
    S_F(hint_update_t, history_version, "history_version", F_INT, 0, S_ANY),
    S_F(hint_update_t, queue_version, "queue_version", F_INT, 0, S_ANY),
    S_F(hint_update_t, retry_state_version, "retry_state_version", F_INT, 0, S_ANY),
    S_F(hint_update_t, generation_attempt, "generation_attempt", F_INT, 0, S_ANY),
    S_F(hint_update_t, status, "status", F_CHAT_STATUS, 0, 0),
    S_F(hint_update_t, archived, "archived", F_BOOL, 0, 0),
    S_F(hint_update_t, owner_id, "owner_id", F_UUID_NIL, 0, 0),
    S_F(hint_update_t, title_changed, "title_changed", F_BOOL, 0, 0),
};

static const s_field_t s_part[] = {
    S_F(wire_part_t, chat_id, "chat_id", F_UUID, 0, 0),
    S_F(wire_part_t, history_version, "history_version", F_INT, 0, S_ANY),
    S_F(wire_part_t, generation_attempt, "generation_attempt", F_INT, 1, S_ANY),
    S_F(wire_part_t, seq, "seq", F_INT, 1, S_ANY),
    S_F(wire_part_t, role, "role", F_ROLE, 0, 0),
    S_F(wire_part_t, part, "part", F_JSON, 0, 0),
};

static const s_field_t s_select[] = {
    S_F(wire_select_t, chat_id, "chat_id", F_UUID, 0, 0),
    S_F(wire_select_t, history_version, "history_version", F_INT, 0, S_ANY),
    S_F(wire_select_t, generation_attempt, "generation_attempt", F_INT, 0, S_ANY),
    S_F(wire_select_t, after_seq, "after_seq", F_INT, 0, S_ANY),
};

static const s_field_t s_request[] = {
    S_F(wire_request_t, request_id, "request_id", F_UUID, 0, 0),
    S_F(wire_request_t, worker_id, "worker_id", F_UUID, 0, 0),
    S_F(wire_request_t, episode, "episode", F_EPISODE, 0, 0),
    S_F(wire_request_t, max_parts, "max_parts", F_INT, 1, PROTO_REPLY_MAX_PARTS),
};

static const s_field_t s_reply[] = {
    S_F(wire_reply_t, request_id, "request_id", F_UUID, 0, 0),
    S_F(wire_reply_t, worker_id, "worker_id", F_UUID, 0, 0),
    S_F(wire_reply_t, status, "status", F_RSTATUS, 0, 0),
    S_F(wire_reply_t, episode, "episode", F_EPISODE, 0, 0),
    S_F(wire_reply_t, closed, "closed", F_BOOL, 0, 0),
    S_F(wire_reply_t, more, "more", F_BOOL, 0, 0),
    S_F(wire_reply_t, parts, "parts", F_ITEMS, 0, 0),
};

static const s_field_t s_item[] = {
    S_F(wire_item_t, seq, "seq", F_INT, 1, S_ANY),
    S_F(wire_item_t, role, "role", F_ROLE, 0, 0),
    S_F(wire_item_t, part, "part", F_JSON, 0, 0),
};

static const s_field_t s_worker[] = {
    S_F(wire_worker_t, worker_id, "worker_id", F_UUID, 0, 0),
    S_F(wire_worker_t, heartbeat_ms, "heartbeat_ms", F_INT, PROTO_HEARTBEAT_MIN_MS,
        PROTO_HEARTBEAT_MAX_MS),
};

static const s_field_t s_stats[] = {
    S_F(wire_stats_t, pub_in, "pub_in", F_INT, 0, S_ANY),
    S_F(wire_stats_t, pub_out, "pub_out", F_INT, 0, S_ANY),
    S_F(wire_stats_t, relay_in, "relay_in", F_INT, 0, S_ANY),
    S_F(wire_stats_t, relay_out, "relay_out", F_INT, 0, S_ANY),
    S_F(wire_stats_t, dropped, "dropped", F_INT, 0, S_ANY),
    S_F(wire_stats_t, workers, "workers", F_INT, 0, S_ANY),
    S_F(wire_stats_t, uptime_ms, "uptime_ms", F_INT, 0, S_ANY),
    S_F(wire_stats_t, refused, "refused", F_INT, 0, S_ANY),
    S_F(wire_stats_t, forbidden, "forbidden", F_INT, 0, S_ANY),
};

#define S_N(t) (sizeof(t) / sizeof((t)[0]))

typedef struct {
    const char *name;
    const s_field_t *fields;
    size_t nfields;
} s_type_t;

/* Indexed by wire_type_t. */
static const s_type_t s_types[WIRE_TYPE_COUNT + 1] = {
    [WIRE_OWNERSHIP] = {"ownership", s_ownership, S_N(s_ownership)},
    [WIRE_UPDATE] = {"update", s_update, S_N(s_update)},
    [WIRE_PART] = {"part", s_part, S_N(s_part)},
    [WIRE_SELECT] = {"select", s_select, S_N(s_select)},
    [WIRE_RELAY_REQUEST] = {"relay_request", s_request, S_N(s_request)},
    [WIRE_RELAY_REPLY] = {"relay_reply", s_reply, S_N(s_reply)},
    [WIRE_REGISTER] = {"register", s_worker, S_N(s_worker)},
    [WIRE_REGISTERED] = {"registered", s_worker, S_N(s_worker)},
    [WIRE_HEARTBEAT] = {"heartbeat", s_worker, S_N(s_worker)},
    [WIRE_STATS_REQUEST] = {"stats_request", NULL, 0},
    [WIRE_STATS] = {"stats", s_stats, S_N(s_stats)},
};

static const char *const s_chat_statuses[] = {"waiting", "running", "interrupting",
                                              "requires_action", "error"};
static const char *const s_roles[] = {"system", "user", "assistant", "tool"};
static const char *const s_rstatuses[] = {
    [WIRE_STATUS_OK] = "ok",
    [WIRE_STATUS_NO_SUCH_WORKER] = "no_such_worker",
    [WIRE_STATUS_NO_EPISODE] = "no_episode",
    [WIRE_STATUS_BAD_REQUEST] = "bad_request",
};

const char *wire_type_name(wire_type_t type) {
    if (type < 1 || type > WIRE_TYPE_COUNT) {
        return NULL;
    }
    return s_types[type].name;
}

wire_type_t wire_type_from_name(const char *name, size_t len) {
    for (int t = 1; t <= WIRE_TYPE_COUNT; t++) {
        if (strlen(s_types[t].name) == len && memcmp(s_types[t].name, name, len) == 0) {
            return (wire_type_t)t;
        }
    }
    return 0;
}

const char *wire_status_name(wire_status_t status) {
    if ((size_t)status >= S_N(s_rstatuses)) {
        return "unknown";
    }
    return s_rstatuses[status];
}

/* Index of the len bytes s in set, or -1. */
static int s_enum_index(const char *const *set, size_t n, const char *s, size_t len) {
    for (size_t i = 0; i < n; i++) {
        if (strlen(set[i]) == len && memcmp(set[i], s, len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static void s_err(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_err(char *errbuf, size_t errlen, const char *fmt, ...) {
    if (!errbuf || errlen == 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

/* True when text (len bytes) is exactly one JSON object within the part bound. */
static bool s_json_ok(const char *text, size_t len) {
    if (!text || len == 0 || len > PROTO_PART_MAX_BYTES) {
        return false;
    }
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    bool ok = j && json_is_object(j);
    json_decref(j);
    return ok;
}

int wire_json_set(wire_json_t *json, const char *text, size_t len) {
    if (!s_json_ok(text, len)) {
        return -1;
    }
    free(json->text);
    json->text = mem_alloc(len + 1);
    memcpy(json->text, text, len);
    json->text[len] = '\0';
    json->len = len;
    return 0;
}

int wire_reply_add(wire_reply_t *reply, int64_t seq, const char *role, const char *json,
                   size_t len) {
    if (reply->nparts >= PROTO_REPLY_MAX_PARTS || seq < 1 || !role ||
        s_enum_index(s_roles, S_N(s_roles), role, strlen(role)) < 0) {
        return -1;
    }
    wire_item_t item = {.seq = seq};
    snprintf(item.role, sizeof item.role, "%s", role);
    if (wire_json_set(&item.part, json, len) != 0) {
        return -1;
    }
    reply->parts = mem_realloc(reply->parts, (reply->nparts + 1) * sizeof *reply->parts);
    reply->parts[reply->nparts++] = item;
    return 0;
}

void wire_msg_clear(wire_msg_t *msg) {
    if (!msg) {
        return;
    }
    if (msg->type == WIRE_PART) {
        free(msg->u.part.part.text);
    } else if (msg->type == WIRE_RELAY_REPLY) {
        for (size_t i = 0; i < msg->u.reply.nparts; i++) {
            free(msg->u.reply.parts[i].part.text);
        }
        free(msg->u.reply.parts);
    }
    memset(msg, 0, sizeof *msg);
}

int wire_topic(const wire_msg_t *msg, char *buf, size_t size) {
    int n = -1;
    if (msg->type == WIRE_OWNERSHIP) {
        n = snprintf(buf, size, "%s", PROTO_TOPIC_OWNERSHIP);
    } else if (msg->type == WIRE_UPDATE) {
        n = snprintf(buf, size, "%s%s", PROTO_TOPIC_UPDATE, msg->u.update.chat_id);
    } else if (msg->type == WIRE_PART) {
        n = snprintf(buf, size, "%s%s", PROTO_TOPIC_PART, msg->u.part.chat_id);
    }
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------
 * Validation of a struct against its table (used before encoding, and after decoding for
 * the rules that span fields).
 */

static int s_check_fields(const s_field_t *fields, size_t n, const void *base, char *errbuf,
                          size_t errlen);

static int s_check_reply_items(const wire_reply_t *r, char *errbuf, size_t errlen) {
    if (r->nparts > PROTO_REPLY_MAX_PARTS || (r->nparts > 0 && !r->parts)) {
        s_err(errbuf, errlen, "parts: too many");
        return -1;
    }
    if (r->status != WIRE_STATUS_OK && r->nparts > 0) {
        s_err(errbuf, errlen, "parts: must be empty when status is %s",
              wire_status_name(r->status));
        return -1;
    }
    for (size_t i = 0; i < r->nparts; i++) {
        if (s_check_fields(s_item, S_N(s_item), &r->parts[i], errbuf, errlen) != 0) {
            return -1;
        }
        /* Relay delivery is contiguous (ARCHITECTURE.md §9); a gap is malformed. */
        if (r->episode.after_seq > INT64_MAX - (int64_t)PROTO_REPLY_MAX_PARTS - 1 ||
            r->parts[i].seq != r->episode.after_seq + 1 + (int64_t)i) {
            s_err(errbuf, errlen, "parts[%zu].seq: not contiguous after after_seq", i);
            return -1;
        }
    }
    return 0;
}

static int s_check_fields(const s_field_t *fields, size_t n, const void *base, char *errbuf,
                          size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        const s_field_t *f = &fields[i];
        const char *p = (const char *)base + f->offset;
        switch (f->kind) {
            case F_UUID:
            case F_UUID_NIL:
                if ((f->kind == F_UUID || p[0] != '\0') && !id_uuid_valid(p)) {
                    s_err(errbuf, errlen, "%s: not a UUID", f->name);
                    return -1;
                }
                break;
            case F_INT: {
                int64_t v;
                memcpy(&v, p, sizeof v);
                if (v < f->min || v > f->max) {
                    s_err(errbuf, errlen, "%s: out of range", f->name);
                    return -1;
                }
                break;
            }
            case F_BOOL:
                break;
            case F_CHAT_STATUS:
            case F_ROLE: {
                bool st = f->kind == F_CHAT_STATUS;
                size_t len = strnlen(p, WIRE_ROLE_MAX);
                if (len == WIRE_ROLE_MAX ||
                    s_enum_index(st ? s_chat_statuses : s_roles,
                                 st ? S_N(s_chat_statuses) : S_N(s_roles), p, len) < 0) {
                    s_err(errbuf, errlen, "%s: unknown value", f->name);
                    return -1;
                }
                break;
            }
            case F_JSON: {
                const wire_json_t *j = (const wire_json_t *)p;
                if (!s_json_ok(j->text, j->len)) {
                    s_err(errbuf, errlen, "%s: not one JSON object within bounds", f->name);
                    return -1;
                }
                break;
            }
            case F_EPISODE:
                if (s_check_fields(s_select, S_N(s_select), p, errbuf, errlen) != 0) {
                    return -1;
                }
                break;
            case F_ITEMS:
                if (s_check_reply_items(base, errbuf, errlen) != 0) {
                    return -1;
                }
                break;
            case F_RSTATUS: {
                wire_status_t s;
                memcpy(&s, p, sizeof s);
                if ((size_t)s >= S_N(s_rstatuses)) {
                    s_err(errbuf, errlen, "%s: unknown value", f->name);
                    return -1;
                }
                break;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Encoding.
 */

static void s_pack_cstr(msgpack_packer *pk, const char *s) {
    size_t len = strlen(s);
    msgpack_pack_str(pk, len);
    msgpack_pack_str_body(pk, s, len);
}

static void s_pack_fields(msgpack_packer *pk, const s_field_t *fields, size_t n, const void *base,
                          size_t extra) {
    msgpack_pack_map(pk, n + extra);
    for (size_t i = 0; i < n; i++) {
        const s_field_t *f = &fields[i];
        const char *p = (const char *)base + f->offset;
        s_pack_cstr(pk, f->name);
        switch (f->kind) {
            case F_UUID:
            case F_CHAT_STATUS:
            case F_ROLE:
                s_pack_cstr(pk, p);
                break;
            case F_UUID_NIL:
                if (p[0]) {
                    s_pack_cstr(pk, p);
                } else {
                    msgpack_pack_nil(pk);
                }
                break;
            case F_INT: {
                int64_t v;
                memcpy(&v, p, sizeof v);
                msgpack_pack_int64(pk, v);
                break;
            }
            case F_BOOL: {
                bool b;
                memcpy(&b, p, sizeof b);
                b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
                break;
            }
            case F_JSON: {
                const wire_json_t *j = (const wire_json_t *)p;
                msgpack_pack_str(pk, j->len);
                msgpack_pack_str_body(pk, j->text, j->len);
                break;
            }
            case F_EPISODE:
                s_pack_fields(pk, s_select, S_N(s_select), p, 0);
                break;
            case F_ITEMS: {
                const wire_reply_t *r = base;
                msgpack_pack_array(pk, r->nparts);
                for (size_t k = 0; k < r->nparts; k++) {
                    s_pack_fields(pk, s_item, S_N(s_item), &r->parts[k], 0);
                }
                break;
            }
            case F_RSTATUS: {
                wire_status_t s;
                memcpy(&s, p, sizeof s);
                s_pack_cstr(pk, wire_status_name(s));
                break;
            }
        }
    }
}

int wire_encode(const wire_msg_t *msg, char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    const char *name = wire_type_name(msg->type);
    if (!name) {
        return -1;
    }
    const s_type_t *t = &s_types[msg->type];
    char why[128];
    if (s_check_fields(t->fields, t->nfields, &msg->u, why, sizeof why) != 0) {
        return -1;
    }
    /* Sized for a hint or a part: msgpack's own first allocation is 8 KiB, per message. */
    msgpack_sbuffer sbuf = {.data = mem_alloc(S_ENCODE_FIRST_BYTES), .alloc = S_ENCODE_FIRST_BYTES};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    /* "v" and "type" come first so that a reader can dispatch on a prefix if it wants to;
     * this decoder does not depend on the order. */
    s_pack_fields(&pk, t->fields, t->nfields, &msg->u, 2);
    /* The map header above already counts the two envelope entries; msgpack maps are not
     * ordered, so appending them after the fields is equally valid. */
    s_pack_cstr(&pk, "v");
    msgpack_pack_int64(&pk, PROTO_VERSION);
    s_pack_cstr(&pk, "type");
    s_pack_cstr(&pk, name);
    if (sbuf.size > PROTO_MSG_MAX_BYTES) {
        msgpack_sbuffer_destroy(&sbuf);
        return -1;
    }
    /* msgpack_sbuffer allocates with malloc, so the caller's free() releases it. */
    *size = sbuf.size;
    *data = msgpack_sbuffer_release(&sbuf);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Decoding. First a bounded scan of the raw bytes: msgpack-c allocates a container's
 * elements from its header count before reading them, so a 5-byte array32 header would
 * ask for 100 GB. The scan checks each count against the bytes that remain, the depth and
 * the total number of objects, and that exactly one object fills the buffer.
 */

typedef struct {
    const uint8_t *p;
    size_t len;
    size_t pos;
    size_t objects;
} s_scan_t;

static int s_need(s_scan_t *s, size_t n) {
    if (n > s->len - s->pos) {
        return -1;
    }
    return 0;
}

static uint64_t s_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* Reads an n-byte big-endian length at pos (advancing), into *out. */
static int s_len(s_scan_t *s, int n, uint64_t *out) {
    if (s_need(s, (size_t)n) != 0) {
        return -1;
    }
    *out = s_be(s->p + s->pos, n);
    s->pos += (size_t)n;
    return 0;
}

/* How the scan reads a value by its first byte (the msgpack spec's formats): lenb bytes of
 * big-endian length or count follow, or the fix format's low bits (mask) hold it; then, for
 * a scalar, fixed bytes (a number, an ext's type byte) and length bytes of payload; for an
 * array or a map, count elements or count key-value pairs. */
typedef enum { S_SCALAR, S_ARRAY, S_MAP, S_NEVER } s_shape_t;

typedef struct {
    s_shape_t shape;
    uint8_t lenb;
    uint8_t fixed;
    uint8_t mask;
} s_format_t;

/* Indexed by the high nibble of a first byte outside 0xc0..0xdf: fixmap, fixarray, fixstr;
 * the zero entries are the one-byte positive (0x0-0x7) and negative (0xe, 0xf) fixints. */
static const s_format_t s_fix_formats[16] = {
    [0x8] = {S_MAP, 0, 0, 0x0f},
    [0x9] = {S_ARRAY, 0, 0, 0x0f},
    [0xa] = {S_SCALAR, 0, 0, 0x1f},
    [0xb] = {S_SCALAR, 0, 0, 0x1f},
};

/* Indexed by the first byte - 0xc0. */
static const s_format_t s_formats[32] = {
    [0x00] = {S_SCALAR, 0, 0, 0},  [0x01] = {S_NEVER, 0, 0, 0},  /* nil, never used */
    [0x02] = {S_SCALAR, 0, 0, 0},  [0x03] = {S_SCALAR, 0, 0, 0}, /* false, true */
    [0x04] = {S_SCALAR, 1, 0, 0},  [0x05] = {S_SCALAR, 2, 0, 0}, /* bin 8, 16 */
    [0x06] = {S_SCALAR, 4, 0, 0},  [0x07] = {S_SCALAR, 1, 1, 0}, /* bin 32, ext 8 */
    [0x08] = {S_SCALAR, 2, 1, 0},  [0x09] = {S_SCALAR, 4, 1, 0}, /* ext 16, 32 */
    [0x0a] = {S_SCALAR, 0, 4, 0},  [0x0b] = {S_SCALAR, 0, 8, 0}, /* float 32, 64 */
    [0x0c] = {S_SCALAR, 0, 1, 0},  [0x0d] = {S_SCALAR, 0, 2, 0}, /* uint 8, 16 */
    [0x0e] = {S_SCALAR, 0, 4, 0},  [0x0f] = {S_SCALAR, 0, 8, 0}, /* uint 32, 64 */
    [0x10] = {S_SCALAR, 0, 1, 0},  [0x11] = {S_SCALAR, 0, 2, 0}, /* int 8, 16 */
    [0x12] = {S_SCALAR, 0, 4, 0},  [0x13] = {S_SCALAR, 0, 8, 0}, /* int 32, 64 */
    [0x14] = {S_SCALAR, 0, 2, 0},  [0x15] = {S_SCALAR, 0, 3, 0}, /* fixext 1, 2 */
    [0x16] = {S_SCALAR, 0, 5, 0},  [0x17] = {S_SCALAR, 0, 9, 0}, /* fixext 4, 8 */
    [0x18] = {S_SCALAR, 0, 17, 0}, [0x19] = {S_SCALAR, 1, 0, 0}, /* fixext 16, str 8 */
    [0x1a] = {S_SCALAR, 2, 0, 0},  [0x1b] = {S_SCALAR, 4, 0, 0}, /* str 16, 32 */
    [0x1c] = {S_ARRAY, 2, 0, 0},   [0x1d] = {S_ARRAY, 4, 0, 0},  /* array 16, 32 */
    [0x1e] = {S_MAP, 2, 0, 0},     [0x1f] = {S_MAP, 4, 0, 0},    /* map 16, 32 */
};

static int s_scan(s_scan_t *s, int depth) {
    if (depth > PROTO_MAX_DEPTH || ++s->objects > PROTO_MAX_OBJECTS || s_need(s, 1) != 0) {
        return -1;
    }
    uint8_t b = s->p[s->pos++];
    const s_format_t *f = b >= 0xc0 && b <= 0xdf ? &s_formats[b - 0xc0] : &s_fix_formats[b >> 4];
    uint64_t n = b & f->mask;
    if (f->shape == S_NEVER || (f->lenb && s_len(s, f->lenb, &n) != 0)) {
        return -1;
    }
    if (f->shape == S_SCALAR) {
        if (n + f->fixed > s->len - s->pos) {
            return -1;
        }
        s->pos += (size_t)(n + f->fixed);
        return 0;
    }
    uint64_t elems = f->shape == S_MAP ? n * 2 : n;
    /* Every element takes at least one byte, so a count beyond the remaining bytes is a lie. */
    if (elems > s->len - s->pos || (f->shape == S_MAP && n > PROTO_MAX_FIELDS)) {
        return -1;
    }
    for (uint64_t i = 0; i < elems; i++) {
        if (s_scan(s, depth + 1) != 0) {
            return -1;
        }
    }
    return 0;
}

typedef struct {
    char *errbuf;
    size_t errlen;
} s_ctx_t;

static bool s_key_is(const msgpack_object *k, const char *name) {
    size_t len = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == len &&
           memcmp(k->via.str.ptr, name, len) == 0;
}

static int s_get_int(const msgpack_object *o, int64_t *out) {
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX) {
            return -1;
        }
        *out = (int64_t)o->via.u64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    return -1;
}

/* Copies a msgpack string into a fixed buffer; -1 when it is not a string or does not fit. */
static int s_get_str(const msgpack_object *o, char *buf, size_t size) {
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= size ||
        memchr(o->via.str.ptr, '\0', o->via.str.size)) {
        return -1;
    }
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return 0;
}

static int s_decode_map(const msgpack_object *o, const s_field_t *fields, size_t n, void *base,
                        s_ctx_t *c);

static int s_decode_items(const msgpack_object *o, wire_reply_t *r, s_ctx_t *c) {
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PROTO_REPLY_MAX_PARTS) {
        s_err(c->errbuf, c->errlen, "parts: not an array of at most %d", PROTO_REPLY_MAX_PARTS);
        return -1;
    }
    if (o->via.array.size == 0) {
        return 0;
    }
    r->parts = mem_calloc(o->via.array.size, sizeof *r->parts);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        /* Count each item as it is filled so that wire_msg_clear frees exactly those. */
        r->nparts = i + 1;
        if (s_decode_map(&o->via.array.ptr[i], s_item, S_N(s_item), &r->parts[i], c) != 0) {
            return -1;
        }
    }
    return 0;
}

static int s_decode_value(const s_field_t *f, const msgpack_object *v, void *base, s_ctx_t *c) {
    char *p = (char *)base + f->offset;
    switch (f->kind) {
        case F_UUID:
        case F_UUID_NIL:
            if (f->kind == F_UUID_NIL && v->type == MSGPACK_OBJECT_NIL) {
                p[0] = '\0';
                return 0;
            }
            if (s_get_str(v, p, ID_UUID_LEN + 1) != 0 || !id_uuid_valid(p)) {
                return -1;
            }
            return 0;
        case F_INT: {
            int64_t x;
            if (s_get_int(v, &x) != 0 || x < f->min || x > f->max) {
                return -1;
            }
            memcpy(p, &x, sizeof x);
            return 0;
        }
        case F_BOOL: {
            if (v->type != MSGPACK_OBJECT_BOOLEAN) {
                return -1;
            }
            bool b = v->via.boolean;
            memcpy(p, &b, sizeof b);
            return 0;
        }
        case F_CHAT_STATUS:
        case F_ROLE: {
            bool st = f->kind == F_CHAT_STATUS;
            if (s_get_str(v, p, WIRE_ROLE_MAX) != 0 ||
                s_enum_index(st ? s_chat_statuses : s_roles,
                             st ? S_N(s_chat_statuses) : S_N(s_roles), p, strlen(p)) < 0) {
                return -1;
            }
            return 0;
        }
        case F_JSON: {
            if (v->type != MSGPACK_OBJECT_STR) {
                return -1;
            }
            return wire_json_set((wire_json_t *)p, v->via.str.ptr, v->via.str.size);
        }
        case F_EPISODE:
            return s_decode_map(v, s_select, S_N(s_select), p, c);
        case F_ITEMS:
            return s_decode_items(v, base, c);
        case F_RSTATUS: {
            if (v->type != MSGPACK_OBJECT_STR) {
                return -1;
            }
            int i = s_enum_index(s_rstatuses, S_N(s_rstatuses), v->via.str.ptr, v->via.str.size);
            if (i < 0) {
                return -1;
            }
            wire_status_t s = (wire_status_t)i;
            memcpy(p, &s, sizeof s);
            return 0;
        }
    }
    return -1;
}

/* Decodes a map into base by the table: every key a string, no key twice, every table field
 * present and valid; other keys are ignored (README "Compatibility"). */
static int s_decode_map(const msgpack_object *o, const s_field_t *fields, size_t n, void *base,
                        s_ctx_t *c) {
    if (o->type != MSGPACK_OBJECT_MAP) {
        s_err(c->errbuf, c->errlen, "not a map");
        return -1;
    }
    const msgpack_object_map *m = &o->via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR) {
            s_err(c->errbuf, c->errlen, "a key is not a string");
            return -1;
        }
        for (uint32_t j = 0; j < i; j++) {
            const msgpack_object *k2 = &m->ptr[j].key;
            if (k2->via.str.size == k->via.str.size &&
                memcmp(k2->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0) {
                s_err(c->errbuf, c->errlen, "duplicate key");
                return -1;
            }
        }
    }
    for (size_t f = 0; f < n; f++) {
        const msgpack_object *v = NULL;
        for (uint32_t i = 0; i < m->size && !v; i++) {
            if (s_key_is(&m->ptr[i].key, fields[f].name)) {
                v = &m->ptr[i].val;
            }
        }
        if (!v) {
            s_err(c->errbuf, c->errlen, "%s: missing", fields[f].name);
            return -1;
        }
        if (s_decode_value(&fields[f], v, base, c) != 0) {
            if (fields[f].kind != F_EPISODE && fields[f].kind != F_ITEMS) {
                s_err(c->errbuf, c->errlen, "%s: invalid", fields[f].name);
            }
            return -1;
        }
    }
    return 0;
}

int wire_decode(const void *data, size_t size, wire_msg_t *msg, char *errbuf, size_t errlen) {
    memset(msg, 0, sizeof *msg);
    if (!data || size == 0 || size > PROTO_MSG_MAX_BYTES) {
        s_err(errbuf, errlen, "frame size %zu out of bounds", size);
        return -1;
    }
    s_scan_t scan = {.p = data, .len = size};
    if (s_scan(&scan, 0) != 0 || scan.pos != size) {
        s_err(errbuf, errlen, "malformed msgpack (or over the size, depth or count bounds)");
        return -1;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = -1;
    s_ctx_t c = {errbuf, errlen};
    if (msgpack_unpack_next(&u, data, size, &off) != MSGPACK_UNPACK_SUCCESS || off != size) {
        s_err(errbuf, errlen, "malformed msgpack");
        goto done;
    }
    const msgpack_object *root = &u.data;
    if (root->type != MSGPACK_OBJECT_MAP) {
        s_err(errbuf, errlen, "message is not a map");
        goto done;
    }
    const msgpack_object *v = NULL;
    const msgpack_object *t = NULL;
    for (uint32_t i = 0; i < root->via.map.size; i++) {
        const msgpack_object_kv *kv = &root->via.map.ptr[i];
        if (s_key_is(&kv->key, "v")) {
            v = &kv->val;
        } else if (s_key_is(&kv->key, "type")) {
            t = &kv->val;
        }
    }
    int64_t version = 0;
    if (!v || s_get_int(v, &version) != 0 || version != PROTO_VERSION) {
        s_err(errbuf, errlen, "missing or unsupported version");
        goto done;
    }
    wire_type_t type = 0;
    if (t && t->type == MSGPACK_OBJECT_STR) {
        type = wire_type_from_name(t->via.str.ptr, t->via.str.size);
    }
    if (!type) {
        s_err(errbuf, errlen, "missing or unknown type");
        goto done;
    }
    msg->type = type;
    const s_type_t *st = &s_types[type];
    if (s_decode_map(root, st->fields, st->nfields, &msg->u, &c) != 0) {
        goto done;
    }
    if (type == WIRE_RELAY_REPLY && s_check_reply_items(&msg->u.reply, errbuf, errlen) != 0) {
        goto done;
    }
    rc = 0;
done:
    msgpack_unpacked_destroy(&u);
    if (rc != 0) {
        wire_msg_clear(msg);
    }
    return rc;
}
