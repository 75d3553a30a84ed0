/*
 * The worker's part buffer: episodes are created once, closed idempotently (a close that
 * races ahead of the create wins), capped at 1 MiB, collected 15 s after close, and served
 * to relay requests contiguously with closed/more set right.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "id.h"
#include "mem.h"
#include "partbuf.h"

#define CHAT "2b1f6a8e-54c4-4c57-9b43-5f1f3c9d2a10"

static void test_create_once_add_and_read_in_order(void **u) {
    (void)u;
    partbuf_t *pb = partbuf_new(NULL);
    assert_int_equal(partbuf_add(pb, CHAT, 3, 1, "assistant", "{}", 2), PARTBUF_NOT_FOUND);
    assert_int_equal(partbuf_create(pb, CHAT, 3, 1), PARTBUF_OK);
    assert_int_equal(partbuf_create(pb, CHAT, 3, 1), PARTBUF_EXISTS);
    const char *a = "{\"type\":\"text\",\"text\":\"Hel\"}";
    const char *b = "{\"type\":\"text\",\"text\":\"lo\"}";
    assert_int_equal(partbuf_add(pb, CHAT, 3, 1, "assistant", a, strlen(a)), PARTBUF_OK);
    assert_int_equal(partbuf_add(pb, CHAT, 3, 1, "assistant", b, strlen(b)), PARTBUF_OK);
    assert_int_equal(partbuf_add(pb, CHAT, 3, 1, "assistant", "not json", 8), PARTBUF_INVALID);
    partbuf_part_t *parts;
    size_t n;
    assert_int_equal(partbuf_parts(pb, CHAT, 3, 1, &parts, &n), PARTBUF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(parts[0].seq, 1);
    assert_int_equal(parts[1].seq, 2);
    assert_string_equal(parts[1].json, b);
    partbuf_parts_free(&parts, n);
    assert_null(parts);
    /* Other episodes of the same chat are separate. */
    assert_int_equal(partbuf_parts(pb, CHAT, 3, 2, &parts, &n), PARTBUF_NOT_FOUND);
    partbuf_destroy(&pb);
    assert_null(pb);
}

static void test_close_is_idempotent_and_wins_a_race_with_create(void **u) {
    (void)u;
    partbuf_t *pb = partbuf_new(NULL);
    partbuf_close(pb, CHAT, 1, 1);
    assert_int_equal(partbuf_create(pb, CHAT, 1, 1), PARTBUF_EXISTS);
    assert_int_equal(partbuf_add(pb, CHAT, 1, 1, "assistant", "{}", 2), PARTBUF_CLOSED);
    assert_int_equal(partbuf_start_model(pb, CHAT, 1, 1), PARTBUF_CLOSED);
    partbuf_close(pb, CHAT, 1, 1);
    assert_int_equal(partbuf_size(pb), 1);
    assert_int_equal(partbuf_create(pb, CHAT, 1, 2), PARTBUF_OK);
    assert_int_equal(partbuf_model_invoked_at(pb, CHAT, 1, 2), 0);
    assert_int_equal(partbuf_start_model(pb, CHAT, 1, 2), PARTBUF_OK);
    assert_true(partbuf_model_invoked_at(pb, CHAT, 1, 2) > 0);
    partbuf_destroy(&pb);
}

static void test_episode_is_capped_at_one_mebibyte(void **u) {
    (void)u;
    partbuf_t *pb = partbuf_new(NULL);
    assert_int_equal(partbuf_create(pb, CHAT, 1, 1), PARTBUF_OK);
    size_t len = 64 * 1024;
    char *big = mem_alloc(len + 1);
    memset(big, 'x', len);
    memcpy(big, "{\"t\":\"", 6);
    memcpy(big + len - 2, "\"}", 2);
    big[len] = '\0';
    int ok = 0;
    while (partbuf_add(pb, CHAT, 1, 1, "assistant", big, len) == PARTBUF_OK) {
        ok++;
    }
    assert_int_equal(ok, PARTBUF_EPISODE_MAX_BYTES / len);
    assert_int_equal(partbuf_add(pb, CHAT, 1, 1, "assistant", big, len), PARTBUF_FULL);
    free(big);
    partbuf_destroy(&pb);
}

static void test_closed_episodes_are_collected_after_fifteen_seconds(void **u) {
    (void)u;
    partbuf_t *pb = partbuf_new(NULL);
    assert_int_equal(partbuf_create(pb, CHAT, 1, 1), PARTBUF_OK);
    assert_int_equal(partbuf_create(pb, CHAT, 1, 2), PARTBUF_OK);
    partbuf_close(pb, CHAT, 1, 1);
    int64_t now = id_now_ms();
    assert_int_equal(partbuf_gc(pb, now + PARTBUF_GC_AFTER_MS - 1000), 0);
    assert_int_equal(partbuf_gc(pb, now + PARTBUF_GC_AFTER_MS + 1000), 1);
    /* The open episode stays however old it is. */
    assert_int_equal(partbuf_gc(pb, now + 10 * PARTBUF_GC_AFTER_MS), 0);
    assert_int_equal(partbuf_size(pb), 1);
    partbuf_destroy(&pb);
}

static void test_relay_handler_serves_contiguous_parts_with_closed_and_more(void **u) {
    (void)u;
    partbuf_t *pb = partbuf_new(NULL);
    wire_request_t req = {.max_parts = 2};
    snprintf(req.episode.chat_id, sizeof req.episode.chat_id, "%s", CHAT);
    req.episode.history_version = 5;
    req.episode.generation_attempt = 1;
    wire_reply_t reply = {0};
    assert_int_equal(partbuf_relay_handler(pb, &req, &reply), 0);
    assert_int_equal(reply.status, WIRE_STATUS_NO_EPISODE);
    assert_int_equal(partbuf_create(pb, CHAT, 5, 1), PARTBUF_OK);
    for (int i = 0; i < 3; i++) {
        char part[64];
        int len = snprintf(part, sizeof part, "{\"type\":\"text\",\"text\":\"%d\"}", i);
        assert_int_equal(partbuf_add(pb, CHAT, 5, 1, "assistant", part, (size_t)len), PARTBUF_OK);
    }
    memset(&reply, 0, sizeof reply);
    assert_int_equal(partbuf_relay_handler(pb, &req, &reply), 0);
    assert_int_equal(reply.nparts, 2);
    assert_int_equal(reply.parts[0].seq, 1);
    assert_true(reply.more);
    assert_false(reply.closed);
    wire_msg_t m = {.type = WIRE_RELAY_REPLY, .u.reply = reply};
    wire_msg_clear(&m);
    req.episode.after_seq = 2;
    partbuf_close(pb, CHAT, 5, 1);
    memset(&reply, 0, sizeof reply);
    assert_int_equal(partbuf_relay_handler(pb, &req, &reply), 0);
    assert_int_equal(reply.nparts, 1);
    assert_int_equal(reply.parts[0].seq, 3);
    assert_false(reply.more);
    assert_true(reply.closed);
    m = (wire_msg_t){.type = WIRE_RELAY_REPLY, .u.reply = reply};
    wire_msg_clear(&m);
    partbuf_destroy(&pb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_once_add_and_read_in_order),
        cmocka_unit_test(test_close_is_idempotent_and_wins_a_race_with_create),
        cmocka_unit_test(test_episode_is_capped_at_one_mebibyte),
        cmocka_unit_test(test_closed_episodes_are_collected_after_fifteen_seconds),
        cmocka_unit_test(test_relay_handler_serves_contiguous_parts_with_closed_and_more),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
