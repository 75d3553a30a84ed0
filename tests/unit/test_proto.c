/* Unit tests of proto/wire: every message type round-trips, and malformed input is rejected
 * with an error (never a crash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "wire.h"

#define CHAT   "0f8fad5b-d9cb-469f-a165-70867728950e"
#define WORKER "7c9e6679-7425-40de-944b-e07fc1f90ae7"
#define RUNNER "16fd2706-8baf-433b-82eb-8c7fada847da"
#define REQ    "886313e1-3b8a-5372-9b90-0c9aee199e5d"

/* Encodes m, decodes the bytes, and returns the decoded copy (asserting both succeed). */
static wire_msg_t s_roundtrip(const wire_msg_t *m) {
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(m, &data, &size), 0);
    assert_non_null(data);
    wire_msg_t out;
    char why[128] = "";
    int rc = wire_decode(data, size, &out, why, sizeof why);
    if (rc != 0) {
        fail_msg("decode failed: %s", why);
    }
    free(data);
    assert_int_equal(out.type, m->type);
    return out;
}

/* Decodes bytes and asserts rejection with a reason. */
static void s_rejects(const void *data, size_t size) {
    wire_msg_t out;
    char why[128] = "";
    assert_int_equal(wire_decode(data, size, &out, why, sizeof why), -1);
    assert_true(why[0] != '\0');
    assert_int_equal(out.type, 0);
}

static wire_msg_t s_update_msg(void) {
    wire_msg_t m = {.type = WIRE_UPDATE};
    hint_update_t *u = &m.u.update;
    snprintf(u->chat_id, sizeof u->chat_id, "%s", CHAT);
    u->snapshot_version = 42;
    snprintf(u->worker_id, sizeof u->worker_id, "%s", WORKER);
    snprintf(u->runner_id, sizeof u->runner_id, "%s", RUNNER);
    u->history_version = 7;
    u->queue_version = 3;
    u->retry_state_version = 2;
    u->generation_attempt = 5;
    snprintf(u->status, sizeof u->status, "requires_action");
    u->archived = true;
    snprintf(u->owner_id, sizeof u->owner_id, "%s", WORKER);
    u->title_changed = true;
    return m;
}

static void test_update_hint_roundtrips(void **state) {
    (void)state;
    wire_msg_t m = s_update_msg();
    wire_msg_t out = s_roundtrip(&m);
    assert_memory_equal(&out.u.update, &m.u.update, sizeof m.u.update);
    /* An unowned chat: worker and runner travel as nil and come back empty. */
    m.u.update.worker_id[0] = '\0';
    m.u.update.runner_id[0] = '\0';
    m.u.update.archived = false;
    m.u.update.owner_id[0] = '\0';
    m.u.update.title_changed = false;
    out = s_roundtrip(&m);
    assert_string_equal(out.u.update.worker_id, "");
    assert_string_equal(out.u.update.runner_id, "");
    assert_string_equal(out.u.update.owner_id, "");
    assert_false(out.u.update.archived);
    assert_false(out.u.update.title_changed);
    char topic[PROTO_TOPIC_MAX_BYTES];
    assert_int_equal(wire_topic(&m, topic, sizeof topic), 0);
    assert_string_equal(topic, "chat:update:" CHAT);
}

static void test_ownership_hint_roundtrips(void **state) {
    (void)state;
    wire_msg_t m = {.type = WIRE_OWNERSHIP};
    snprintf(m.u.ownership.chat_id, sizeof m.u.ownership.chat_id, "%s", CHAT);
    m.u.ownership.snapshot_version = INT64_MAX;
    wire_msg_t out = s_roundtrip(&m);
    assert_string_equal(out.u.ownership.chat_id, CHAT);
    assert_true(out.u.ownership.snapshot_version == INT64_MAX);
    char topic[PROTO_TOPIC_MAX_BYTES];
    assert_int_equal(wire_topic(&m, topic, sizeof topic), 0);
    assert_string_equal(topic, PROTO_TOPIC_OWNERSHIP);
}

static void test_part_roundtrips(void **state) {
    (void)state;
    wire_msg_t m = {.type = WIRE_PART};
    wire_part_t *p = &m.u.part;
    snprintf(p->chat_id, sizeof p->chat_id, "%s", CHAT);
    p->history_version = 12;
    p->generation_attempt = 3;
    p->seq = 9;
    snprintf(p->role, sizeof p->role, "assistant");
    const char *json = "{\"type\":\"text\",\"text\":\"h\\u00e9llo\"}";
    assert_int_equal(wire_json_set(&p->part, json, strlen(json)), 0);
    wire_msg_t out = s_roundtrip(&m);
    assert_string_equal(out.u.part.chat_id, CHAT);
    assert_int_equal(out.u.part.history_version, 12);
    assert_int_equal(out.u.part.generation_attempt, 3);
    assert_int_equal(out.u.part.seq, 9);
    assert_string_equal(out.u.part.role, "assistant");
    assert_string_equal(out.u.part.part.text, json);
    assert_int_equal(out.u.part.part.len, strlen(json));
    char topic[PROTO_TOPIC_MAX_BYTES];
    assert_int_equal(wire_topic(&out, topic, sizeof topic), 0);
    assert_string_equal(topic, "chat:part:" CHAT);
    wire_msg_clear(&out);
    wire_msg_clear(&m);
}

static void test_select_roundtrips(void **state) {
    (void)state;
    wire_msg_t m = {.type = WIRE_SELECT};
    snprintf(m.u.select.chat_id, sizeof m.u.select.chat_id, "%s", CHAT);
    m.u.select.history_version = 12;
    m.u.select.generation_attempt = 3;
    m.u.select.after_seq = 0;
    wire_msg_t out = s_roundtrip(&m);
    assert_memory_equal(&out.u.select, &m.u.select, sizeof m.u.select);
}

static void test_relay_request_roundtrips(void **state) {
    (void)state;
    wire_msg_t m = {.type = WIRE_RELAY_REQUEST};
    wire_request_t *r = &m.u.request;
    snprintf(r->request_id, sizeof r->request_id, "%s", REQ);
    snprintf(r->worker_id, sizeof r->worker_id, "%s", WORKER);
    snprintf(r->episode.chat_id, sizeof r->episode.chat_id, "%s", CHAT);
    r->episode.history_version = 4;
    r->episode.generation_attempt = 1;
    r->episode.after_seq = 17;
    r->max_parts = PROTO_REPLY_MAX_PARTS;
    wire_msg_t out = s_roundtrip(&m);
    assert_memory_equal(&out.u.request, &m.u.request, sizeof m.u.request);
    char topic[PROTO_TOPIC_MAX_BYTES];
    assert_int_equal(wire_topic(&m, topic, sizeof topic), -1); /* relay is not published */
}

static void test_relay_reply_roundtrips_with_parts(void **state) {
    (void)state;
    wire_msg_t m = {.type = WIRE_RELAY_REPLY};
    wire_reply_t *r = &m.u.reply;
    snprintf(r->request_id, sizeof r->request_id, "%s", REQ);
    snprintf(r->worker_id, sizeof r->worker_id, "%s", WORKER);
    snprintf(r->episode.chat_id, sizeof r->episode.chat_id, "%s", CHAT);
    r->episode.history_version = 4;
    r->episode.generation_attempt = 1;
    r->episode.after_seq = 2;
    r->status = WIRE_STATUS_OK;
    r->closed = true;
    r->more = false;
    assert_int_equal(wire_reply_add(r, 3, "assistant", "{\"a\":1}", 7), 0);
    assert_int_equal(wire_reply_add(r, 4, "tool", "{\"b\":[2]}", 9), 0);
    assert_int_equal(wire_reply_add(r, 5, "robot", "{}", 2), -1); /* unknown role */
    assert_int_equal(wire_reply_add(r, 5, "user", "[1]", 3), -1); /* not an object */
    wire_msg_t out = s_roundtrip(&m);
    assert_string_equal(out.u.reply.request_id, REQ);
    assert_int_equal(out.u.reply.status, WIRE_STATUS_OK);
    assert_true(out.u.reply.closed);
    assert_false(out.u.reply.more);
    assert_int_equal(out.u.reply.nparts, 2);
    assert_int_equal(out.u.reply.parts[0].seq, 3);
    assert_string_equal(out.u.reply.parts[1].role, "tool");
    assert_string_equal(out.u.reply.parts[1].part.text, "{\"b\":[2]}");
    assert_int_equal(out.u.reply.episode.after_seq, 2);
    wire_msg_clear(&out);

    /* A gap in seq is refused on encode as it would be on decode. */
    r->parts[1].seq = 6;
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&m, &data, &size), -1);
    assert_null(data);
    wire_msg_clear(&m);

    /* The broker's "no such worker" answer: empty, and any status round-trips. */
    wire_msg_t n = {.type = WIRE_RELAY_REPLY};
    snprintf(n.u.reply.request_id, sizeof n.u.reply.request_id, "%s", REQ);
    snprintf(n.u.reply.worker_id, sizeof n.u.reply.worker_id, "%s", WORKER);
    snprintf(n.u.reply.episode.chat_id, sizeof n.u.reply.episode.chat_id, "%s", CHAT);
    for (int s = WIRE_STATUS_OK; s <= WIRE_STATUS_BAD_REQUEST; s++) {
        n.u.reply.status = (wire_status_t)s;
        out = s_roundtrip(&n);
        assert_int_equal(out.u.reply.status, s);
        assert_int_equal(out.u.reply.nparts, 0);
        wire_msg_clear(&out);
    }
}

static void test_worker_messages_roundtrip(void **state) {
    (void)state;
    wire_type_t types[] = {WIRE_REGISTER, WIRE_REGISTERED, WIRE_HEARTBEAT};
    for (size_t i = 0; i < 3; i++) {
        wire_msg_t m = {.type = types[i]};
        snprintf(m.u.worker.worker_id, sizeof m.u.worker.worker_id, "%s", WORKER);
        m.u.worker.heartbeat_ms = 250;
        wire_msg_t out = s_roundtrip(&m);
        assert_string_equal(out.u.worker.worker_id, WORKER);
        assert_int_equal(out.u.worker.heartbeat_ms, 250);
    }
    /* A heartbeat interval outside the bounds is refused. */
    wire_msg_t m = {.type = WIRE_HEARTBEAT};
    snprintf(m.u.worker.worker_id, sizeof m.u.worker.worker_id, "%s", WORKER);
    m.u.worker.heartbeat_ms = 1;
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&m, &data, &size), -1);
}

static void test_stats_messages_roundtrip(void **state) {
    (void)state;
    wire_msg_t q = {.type = WIRE_STATS_REQUEST};
    wire_msg_t out = s_roundtrip(&q);
    assert_int_equal(out.type, WIRE_STATS_REQUEST);
    wire_msg_t m = {.type = WIRE_STATS};
    m.u.stats = (wire_stats_t){1, 2, 3, 4, 5, 6, 7, 8, 9};
    out = s_roundtrip(&m);
    assert_memory_equal(&out.u.stats, &m.u.stats, sizeof m.u.stats);
}

static void test_every_type_has_a_name(void **state) {
    (void)state;
    for (int t = 1; t <= WIRE_TYPE_COUNT; t++) {
        const char *name = wire_type_name((wire_type_t)t);
        assert_non_null(name);
        assert_int_equal(wire_type_from_name(name, strlen(name)), t);
    }
    assert_null(wire_type_name(0));
    assert_int_equal(wire_type_from_name("nope", 4), 0);
}

/* Builders for hand-made frames. */
typedef struct {
    msgpack_sbuffer buf;
    msgpack_packer pk;
} s_pack_t;

static void s_pack_init(s_pack_t *p) {
    msgpack_sbuffer_init(&p->buf);
    msgpack_packer_init(&p->pk, &p->buf, msgpack_sbuffer_write);
}

static void s_str(s_pack_t *p, const char *s) {
    msgpack_pack_str(&p->pk, strlen(s));
    msgpack_pack_str_body(&p->pk, s, strlen(s));
}

/* An ownership hint map with the given version and type and an optional extra entry. */
static void s_ownership_frame(s_pack_t *p, int64_t v, const char *type, const char *extra_key) {
    s_pack_init(p);
    msgpack_pack_map(&p->pk, extra_key ? 5 : 4);
    s_str(p, "v");
    msgpack_pack_int64(&p->pk, v);
    s_str(p, "type");
    s_str(p, type);
    s_str(p, "chat_id");
    s_str(p, CHAT);
    s_str(p, "snapshot_version");
    msgpack_pack_int64(&p->pk, 3);
    if (extra_key) {
        s_str(p, extra_key);
        msgpack_pack_array(&p->pk, 2);
        msgpack_pack_double(&p->pk, 1.5);
        s_str(p, "future");
    }
}

static void test_unknown_fields_are_ignored(void **state) {
    (void)state;
    s_pack_t p;
    s_ownership_frame(&p, PROTO_VERSION, "ownership", "added_in_a_later_release");
    wire_msg_t out;
    assert_int_equal(wire_decode(p.buf.data, p.buf.size, &out, NULL, 0), 0);
    assert_int_equal(out.type, WIRE_OWNERSHIP);
    assert_int_equal(out.u.ownership.snapshot_version, 3);
    msgpack_sbuffer_destroy(&p.buf);
}

static void test_unknown_type_and_version_are_rejected(void **state) {
    (void)state;
    s_pack_t p;
    s_ownership_frame(&p, PROTO_VERSION, "teleport", NULL);
    s_rejects(p.buf.data, p.buf.size);
    msgpack_sbuffer_destroy(&p.buf);
    s_ownership_frame(&p, PROTO_VERSION + 1, "ownership", NULL);
    s_rejects(p.buf.data, p.buf.size);
    msgpack_sbuffer_destroy(&p.buf);
    /* A duplicated key is ambiguous, so it is malformed. */
    s_ownership_frame(&p, PROTO_VERSION, "ownership", "chat_id");
    s_rejects(p.buf.data, p.buf.size);
    msgpack_sbuffer_destroy(&p.buf);
}

static void test_missing_and_mistyped_fields_are_rejected(void **state) {
    (void)state;
    /* Missing snapshot_version. */
    s_pack_t p;
    s_pack_init(&p);
    msgpack_pack_map(&p.pk, 3);
    s_str(&p, "v");
    msgpack_pack_int64(&p.pk, 1);
    s_str(&p, "type");
    s_str(&p, "ownership");
    s_str(&p, "chat_id");
    s_str(&p, CHAT);
    s_rejects(p.buf.data, p.buf.size);
    msgpack_sbuffer_destroy(&p.buf);

    /* snapshot_version as a string, as a float, as a negative, above INT64_MAX. */
    for (int variant = 0; variant < 4; variant++) {
        s_pack_init(&p);
        msgpack_pack_map(&p.pk, 4);
        s_str(&p, "v");
        msgpack_pack_int64(&p.pk, 1);
        s_str(&p, "type");
        s_str(&p, "ownership");
        s_str(&p, "chat_id");
        s_str(&p, CHAT);
        s_str(&p, "snapshot_version");
        if (variant == 0) {
            s_str(&p, "3");
        } else if (variant == 1) {
            msgpack_pack_double(&p.pk, 3.0);
        } else if (variant == 2) {
            msgpack_pack_int64(&p.pk, -3);
        } else {
            msgpack_pack_uint64(&p.pk, UINT64_MAX);
        }
        s_rejects(p.buf.data, p.buf.size);
        msgpack_sbuffer_destroy(&p.buf);
    }

    /* A chat id that is not a UUID, and a non-string key. */
    s_pack_init(&p);
    msgpack_pack_map(&p.pk, 5);
    s_str(&p, "v");
    msgpack_pack_int64(&p.pk, 1);
    s_str(&p, "type");
    s_str(&p, "ownership");
    s_str(&p, "chat_id");
    s_str(&p, "../../etc/passwd");
    s_str(&p, "snapshot_version");
    msgpack_pack_int64(&p.pk, 3);
    msgpack_pack_int64(&p.pk, 7);
    msgpack_pack_nil(&p.pk);
    s_rejects(p.buf.data, p.buf.size);
    msgpack_sbuffer_destroy(&p.buf);
}

static void test_every_truncation_is_rejected(void **state) {
    (void)state;
    wire_msg_t m = s_update_msg();
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&m, &data, &size), 0);
    for (size_t n = 0; n < size; n++) {
        s_rejects(data, n);
    }
    /* And one extra byte after a complete message. */
    char *longer = mem_alloc(size + 1);
    memcpy(longer, data, size);
    longer[size] = (char)0xc0;
    s_rejects(longer, size + 1);
    free(longer);
    free(data);
}

static void test_hostile_frames_are_rejected(void **state) {
    (void)state;
    /* Containers whose counts promise more than the frame holds: msgpack-c would allocate
     * for the count up front. */
    const uint8_t array32[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    const uint8_t map32[] = {0xdf, 0x7f, 0xff, 0xff, 0xff, 0xa1, 'v'};
    const uint8_t str32[] = {0xdb, 0xff, 0xff, 0xff, 0xf0, 'x'};
    const uint8_t never[] = {0xc1};
    const uint8_t not_map[] = {0x93, 0x01, 0x02, 0x03};
    s_rejects(array32, sizeof array32);
    s_rejects(map32, sizeof map32);
    s_rejects(str32, sizeof str32);
    s_rejects(never, sizeof never);
    s_rejects(not_map, sizeof not_map);
    s_rejects(NULL, 0);
    /* Nesting deeper than the bound. */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof deep);
    deep[sizeof deep - 1] = 0x01;
    s_rejects(deep, sizeof deep);
}

/* An ownership hint with one more entry, "x", whose value is the raw bytes given. */
static void s_frame_with(s_pack_t *p, const uint8_t *value, size_t len) {
    s_pack_init(p);
    msgpack_pack_map(&p->pk, 5);
    s_str(p, "v");
    msgpack_pack_int64(&p->pk, PROTO_VERSION);
    s_str(p, "type");
    s_str(p, "ownership");
    s_str(p, "chat_id");
    s_str(p, CHAT);
    s_str(p, "snapshot_version");
    msgpack_pack_int64(&p->pk, 3);
    s_str(p, "x");
    msgpack_sbuffer_write(&p->buf, (const char *)value, len);
}

static int s_decode_with(const uint8_t *value, size_t len) {
    s_pack_t p;
    s_frame_with(&p, value, len);
    wire_msg_t out;
    char why[128] = "";
    int rc = wire_decode(p.buf.data, p.buf.size, &out, why, sizeof why);
    if (rc != 0) {
        assert_true(why[0] != '\0');
        assert_int_equal(out.type, 0);
    }
    wire_msg_clear(&out);
    msgpack_sbuffer_destroy(&p.buf);
    return rc;
}

/* A value of every msgpack format that is not a fix format (the msgpack spec's "formats"
 * table), smallest complete: lenb bytes of length or count follow the format byte. */
typedef struct {
    uint8_t bytes[20];
    size_t len;
    int lenb;
} s_format_value_t;

static const s_format_value_t s_format_values[] = {
    {{0xc0}, 1, 0}, /* nil */
    {{0xc2}, 1, 0}, /* false */
    {{0xc3}, 1, 0}, /* true */
    {{0xc4, 1, 'a'}, 3, 1},
    {{0xc5, 0, 1, 'a'}, 4, 2},
    {{0xc6, 0, 0, 0, 1, 'a'}, 6, 4},
    {{0xc7, 1, 5, 'a'}, 4, 1}, /* ext: length, type, data */
    {{0xc8, 0, 1, 5, 'a'}, 5, 2},
    {{0xc9, 0, 0, 0, 1, 5, 'a'}, 7, 4},
    {{0xca, 0x3f, 0x80, 0, 0}, 5, 0},
    {{0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 9, 0},
    {{0xcc, 1}, 2, 0},
    {{0xcd, 0, 1}, 3, 0},
    {{0xce, 0, 0, 0, 1}, 5, 0},
    {{0xcf, 0, 0, 0, 0, 0, 0, 0, 1}, 9, 0},
    {{0xd0, 0xff}, 2, 0},
    {{0xd1, 0xff, 0xff}, 3, 0},
    {{0xd2, 0xff, 0xff, 0xff, 0xff}, 5, 0},
    {{0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 9, 0},
    {{0xd4, 5, 'a'}, 3, 0}, /* fixext: type, data */
    {{0xd5, 5, 'a', 'a'}, 4, 0},
    {{0xd6, 5, 'a', 'a', 'a', 'a'}, 6, 0},
    {{0xd7, 5, 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}, 10, 0},
    {{0xd8, 5, 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'},
     18,
     0},
    {{0xd9, 1, 'a'}, 3, 1},
    {{0xda, 0, 1, 'a'}, 4, 2},
    {{0xdb, 0, 0, 0, 1, 'a'}, 6, 4},
    {{0xdc, 0, 1, 0xc0}, 4, 2},
    {{0xdd, 0, 0, 0, 1, 0xc0}, 6, 4},
    {{0xde, 0, 1, 0xc0, 0xc0}, 5, 2},
    {{0xdf, 0, 0, 0, 1, 0xc0, 0xc0}, 7, 4},
};

/* The smallest complete value of fix format b into out (containers of nils, strings of
 * 'a'); returns its length. */
static size_t s_fix_value(uint8_t b, uint8_t *out) {
    size_t n = b >= 0x80 && b <= 0x8f ? 2u * (b & 0x0f) : b >= 0x90 && b <= 0x9f ? b & 0x0f : 0;
    out[0] = b;
    memset(out + 1, 0xc0, n);
    if (b >= 0xa0 && b <= 0xbf) {
        n = b & 0x1f;
        memset(out + 1, 'a', n);
    }
    return 1 + n;
}

/* Each value is accepted whole (an unknown field is ignored), refused when cut anywhere or
 * followed by a stray byte, and refused when a length or count claims every byte. */
static void s_format_pinned(const uint8_t *value, size_t len, int lenb) {
    assert_int_equal(s_decode_with(value, len), 0);
    for (size_t cut = 1; cut < len; cut++) {
        assert_int_equal(s_decode_with(value, cut), -1);
    }
    uint8_t longer[40];
    memcpy(longer, value, len);
    longer[len] = 0xc0;
    assert_int_equal(s_decode_with(longer, len + 1), -1);
    if (lenb > 0) {
        memset(longer + 1, 0xff, (size_t)lenb);
        assert_int_equal(s_decode_with(longer, len), -1);
    }
}

static void test_every_msgpack_format_is_read_by_its_layout(void **state) {
    (void)state;
    uint8_t value[40];
    for (int b = 0; b <= 0xff; b++) {
        if (b < 0xc0 || b > 0xdf) {
            s_format_pinned(value, s_fix_value((uint8_t)b, value), 0);
        }
    }
    for (size_t i = 0; i < sizeof s_format_values / sizeof s_format_values[0]; i++) {
        const s_format_value_t *f = &s_format_values[i];
        s_format_pinned(f->bytes, f->len, f->lenb);
    }
    const uint8_t never = 0xc1;
    assert_int_equal(s_decode_with(&never, 1), -1);
}

/* A value of nested one-element arrays, depth levels deep around a nil, into out. */
static size_t s_nested(uint8_t *out, int depth) {
    memset(out, 0x91, (size_t)depth);
    out[depth] = 0xc0;
    return (size_t)depth + 1;
}

/* A map16 of n nil-to-nil entries, or an array16 of n nils, into out. */
static size_t s_container16(uint8_t *out, uint8_t format, size_t n) {
    size_t elems = format == 0xde ? 2 * n : n;
    out[0] = format;
    out[1] = (uint8_t)(n >> 8);
    out[2] = (uint8_t)n;
    memset(out + 3, 0xc0, elems);
    return 3 + elems;
}

static void test_scan_bounds_are_exact(void **state) {
    (void)state;
    uint8_t *v = mem_alloc(3 + PROTO_MAX_OBJECTS);
    /* "x"'s value is at depth 1: the nil inside 7 arrays is at PROTO_MAX_DEPTH. */
    assert_int_equal(s_decode_with(v, s_nested(v, PROTO_MAX_DEPTH - 1)), 0);
    assert_int_equal(s_decode_with(v, s_nested(v, PROTO_MAX_DEPTH)), -1);
    /* The frame holds 11 objects besides the array's elements. */
    size_t most = PROTO_MAX_OBJECTS - 11;
    assert_int_equal(s_decode_with(v, s_container16(v, 0xdc, most)), 0);
    assert_int_equal(s_decode_with(v, s_container16(v, 0xdc, most + 1)), -1);
    assert_int_equal(s_decode_with(v, s_container16(v, 0xde, PROTO_MAX_FIELDS)), 0);
    assert_int_equal(s_decode_with(v, s_container16(v, 0xde, PROTO_MAX_FIELDS + 1)), -1);
    free(v);
}

static void test_part_json_is_validated(void **state) {
    (void)state;
    wire_msg_t m = {.type = WIRE_PART};
    wire_part_t *p = &m.u.part;
    snprintf(p->chat_id, sizeof p->chat_id, "%s", CHAT);
    p->history_version = 1;
    p->generation_attempt = 1;
    p->seq = 1;
    snprintf(p->role, sizeof p->role, "assistant");
    assert_int_equal(wire_json_set(&p->part, "{\"a\":1,\"a\":2}", 13), -1); /* duplicate */
    assert_int_equal(wire_json_set(&p->part, "{\"a\":", 5), -1);
    assert_int_equal(wire_json_set(&p->part, "{} {}", 5), -1);
    /* Without JSON the message cannot be encoded. */
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&m, &data, &size), -1);
    /* A part whose JSON text was replaced on the wire by garbage is rejected. */
    assert_int_equal(wire_json_set(&p->part, "{\"t\":\"xxxx\"}", 12), 0);
    assert_int_equal(wire_encode(&m, &data, &size), 0);
    char *hit = NULL;
    for (size_t i = 0; i + 12 <= size && !hit; i++) {
        if (memcmp(data + i, "{\"t\":\"xxxx\"}", 12) == 0) {
            hit = data + i;
        }
    }
    assert_non_null(hit);
    hit[0] = '[';
    s_rejects(data, size);
    free(data);
    wire_msg_clear(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_update_hint_roundtrips),
        cmocka_unit_test(test_ownership_hint_roundtrips),
        cmocka_unit_test(test_part_roundtrips),
        cmocka_unit_test(test_select_roundtrips),
        cmocka_unit_test(test_relay_request_roundtrips),
        cmocka_unit_test(test_relay_reply_roundtrips_with_parts),
        cmocka_unit_test(test_worker_messages_roundtrip),
        cmocka_unit_test(test_stats_messages_roundtrip),
        cmocka_unit_test(test_every_type_has_a_name),
        cmocka_unit_test(test_unknown_fields_are_ignored),
        cmocka_unit_test(test_unknown_type_and_version_are_rejected),
        cmocka_unit_test(test_missing_and_mistyped_fields_are_rejected),
        cmocka_unit_test(test_every_truncation_is_rejected),
        cmocka_unit_test(test_hostile_frames_are_rejected),
        cmocka_unit_test(test_part_json_is_validated),
        cmocka_unit_test(test_every_msgpack_format_is_read_by_its_layout),
        cmocka_unit_test(test_scan_bounds_are_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
