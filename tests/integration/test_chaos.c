/*
 * The CI-sized chaos run (issue 8 item 1): a private PostgreSQL, the broker, two gateways and
 * three workers under a seeded schedule of kill -9, SIGSTOP, broker, PostgreSQL and gateway
 * faults while concurrent clients drive a mixed workload; then every invariant of
 * tests/chaos/README.md holds and is printed with its counts. CHATFLEET_CHAOS_SEED reproduces a
 * run; CHATFLEET_CHAOS_SECONDS lengthens it (the longer command is in the README).
 *
 * tests/CMakeLists.txt builds only tests/integration/test_*.c, so the harness's two modules
 * are compiled into this translation unit rather than duplicated or moved into the support
 * library (they are one harness, not shared support).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "../chaos/chaos.c"
#include "../chaos/ledger.c"

#define TEST_CHAOS_SECONDS 45 /* the CI size: about two minutes in all on two loaded cores */
#define TEST_CHAOS_CHATS   6

static void test_chaos_run_keeps_every_invariant(void **u) {
    (void)u;
    if (getenv("CHATFLEET_CHAOS_REPRO")) {
        skip(); /* only the reproduction below */
    }
    chaos_config_t cfg = chaos_config_from_env(TEST_CHAOS_SECONDS, TEST_CHAOS_CHATS, "test_chaos");
    int failed = chaos_run(&cfg);
    if (failed) {
        fail_msg("%d invariants failed (seed %u; rerun with CHATFLEET_CHAOS_SEED=%u)", failed,
                 cfg.seed, cfg.seed);
    }
}

/* Reproduction of the stream gap the run counts (tests/chaos/README.md, invariant 5): a stream
 * resumed with Last-Event-ID is never told that rows at or before that id were deleted by an
 * edit. Fails until the gateway is fixed; run with CHATFLEET_CHAOS_REPRO=1. */
static int s_is_new_row(json_t *e, void *ctx) {
    int64_t after = *(int64_t *)ctx;
    return json_integer_value(json_object_get(
               json_object_get(json_object_get(e, "data"), "message"), "id")) > after;
}

static void test_resumed_stream_is_told_of_an_edit_before_its_resume_point(void **u) {
    (void)u;
    if (!getenv("CHATFLEET_CHAOS_REPRO")) {
        skip();
    }
    cluster_opts_t o = {.name = "test_chaos_repro", .gateways = 1, .workers = 1};
    cluster_t *c = cluster_new(&o);
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(c, 0));
    proc_http_t h;
    assert_int_equal(proc_http("POST", url, cluster_token(c),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"one\"}]}", &h),
                     0);
    assert_int_equal(h.status, 201);
    json_t *chat = json_loads(h.body, 0, NULL);
    proc_http_free(&h);
    char *id = mem_strdup(json_string_value(json_object_get(chat, "id")));
    json_decref(chat);
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", id);
    assert_true(cluster_wait(c, q, "waiting", 15000) >= 0);
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages", cluster_url(c, 0), id);
    assert_int_equal(proc_http("POST", url, cluster_token(c),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"two\"}]}", &h),
                     0);
    assert_int_equal(h.status, 200);
    proc_http_free(&h);
    assert_true(cluster_wait(c, q, "waiting", 15000) >= 0);
    char *first = cluster_sql(c, "SELECT min(id) FROM chat_messages WHERE chat_id = '%s'", id);
    char *last = cluster_sql(c, "SELECT max(id) FROM chat_messages WHERE chat_id = '%s'", id);
    int64_t last_id = strtoll(last, NULL, 10);
    /* A client that saw everything up to last_id resumes, then the first message is edited. */
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(c, 0), id);
    sse_t *sse = sse_open(url, cluster_token(c), last_id);
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages/%s", cluster_url(c, 0), id, first);
    assert_int_equal(proc_http("PATCH", url, cluster_token(c),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"edited\"}]}", &h),
                     0);
    assert_int_equal(h.status, 200);
    proc_http_free(&h);
    int at = sse_wait(sse, 0, "message", s_is_new_row, &last_id, 15000);
    assert_true(at >= 0);
    int reset = sse_wait(sse, 0, "history_reset", NULL, NULL, 3000);
    printf("repro: edit of message %s after resuming at %lld: new row at event %d, history_reset"
           " at %d (want >= 0)\n",
           first, (long long)last_id, at, reset);
    sse_close(&sse);
    free(first);
    free(last);
    free(q);
    free(id);
    assert_int_equal(cluster_destroy(&c), 0);
    assert_true(reset >= 0);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chaos_run_keeps_every_invariant),
        cmocka_unit_test(test_resumed_stream_is_told_of_an_edit_before_its_resume_point),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
