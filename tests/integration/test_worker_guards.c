/*
 * The database's single guards, each caught a second time with a real worker holding the
 * chat (the first time is at the chatstate level: test_chatstate_fence.c, test_chatstate_rules.c):
 *
 * - the lease check inside Acquire: the acquirer never selects a chat with a fresh lease, so
 *   end to end only a raw Acquire can reach the check. Here one is made on a chat a live
 *   worker is answering, and must be refused; the worker's turn then completes once.
 * - the attempt fence: a commit that carries an attempt other than the chat's newest. Here the
 *   test records a newer attempt with the worker's own fence while the worker streams (as a
 *   retry of the same runner would), and the worker's commit of the older attempt must be
 *   refused (fence_mismatch) while everything else in its fence still matches.
 *
 * tests/MUTATIONS.md lists the mutations these tests catch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chatstate.h"
#include "cluster.h"
#include "clusterlog.h"
#include "id.h"
#include "mem.h"
#include "proc.h"

#define WAIT_MS  20000
#define STALE_MS 30000

/* The same lease as the worker's. */
static const cs_settings_t s_settings = {.lease_stale_ms = STALE_MS,
                                         .requires_action_deadline_ms = 60000};
/* About 3 s of streaming: time for the test to act while the worker holds the turn. */
#define SLOW_TURN "[sim:slow 150] [sim:words 20] guard"

static cluster_t *s_cluster;

/* Creates a chat whose first turn is SLOW_TURN; returns its id (caller frees). */
static char *s_create(void) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"" SLOW_TURN "\"}]}",
                               &r),
                     0);
    assert_int_equal(r.status, 201);
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    char *id = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    return id;
}

/* Waits until the worker has recorded its first generation attempt of chat. */
static void s_wait_generating(const char *chat) {
    char *q = mem_printf("SELECT worker_id IS NOT NULL AND generation_attempt >= 1 FROM chats"
                         " WHERE id = '%s'",
                         chat);
    if (cluster_wait(s_cluster, q, "t", WAIT_MS) < 0) {
        fail_msg("chat %s: no worker started generating", chat);
    }
    free(q);
}

/* The number of assistant rows of chat. */
static long s_answers(const char *chat) {
    char *n = cluster_sql(
        s_cluster, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role = 'assistant'",
        chat);
    assert_non_null(n);
    long v = strtol(n, NULL, 10);
    free(n);
    return v;
}

static void test_a_raw_acquire_of_a_chat_a_live_worker_holds_is_refused(void **u) {
    (void)u;
    char *chat = s_create();
    s_wait_generating(chat);
    char *owner = cluster_sql(s_cluster, "SELECT worker_id FROM chats WHERE id = '%s'", chat);
    char worker[ID_UUID_LEN + 1];
    char runner[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(worker) == 0 && id_uuid_new(runner) == 0);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(cluster_db(s_cluster), &s_settings, chat, &err);
    assert_non_null(cs);
    int rc = chatstate_acquire(cs, worker, runner, &err);
    chatstate_destroy(&cs); /* rolls back whatever it did */
    if (rc == 0) {
        fail_msg("a second Acquire took chat %s from its live worker %s", chat, owner);
    }
    assert_int_equal(err.rc, CS_CONFLICT);
    /* The live worker was not disturbed: its turn ends with exactly one answer, and nothing
     * it wrote was fenced. */
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(s_cluster, q, "waiting", WAIT_MS) >= 0);
    free(q);
    assert_int_equal(s_answers(chat), 1);
    assert_int_equal(
        clusterlog_count(cluster_log(s_cluster, CLUSTER_WORKER, 0), "event=fence_mismatch", chat),
        0);
    free(owner);
    free(chat);
}

static void test_a_commit_of_an_older_attempt_is_fenced(void **u) {
    (void)u;
    char *chat = s_create();
    s_wait_generating(chat);
    char *row = cluster_sql(s_cluster,
                            "SELECT worker_id || ' ' || runner_id || ' ' || history_version"
                            " || ' ' || generation_attempt FROM chats WHERE id = '%s'",
                            chat);
    assert_non_null(row);
    cs_fence_t f = {.status = "running"};
    long long hv = 0;
    long long ga = 0;
    assert_int_equal(sscanf(row, "%36s %36s %lld %lld", f.worker_id, f.runner_id, &hv, &ga), 4);
    free(row);
    f.history_version = hv;
    f.generation_attempt = ga;
    /* A newer attempt, recorded with the worker's own fence while it streams. */
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(cluster_db(s_cluster), &s_settings, chat, &err);
    assert_non_null(cs);
    int64_t attempt = 0;
    assert_int_equal(chatstate_record_generation_attempt(cs, &f, &attempt, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    assert_int_equal(attempt, ga + 1);
    /* The worker's commit of attempt ga must be refused by the attempt fence alone: the
     * worker, the runner, the status and the history version all still match. */
    const char *log = cluster_log(s_cluster, CLUSTER_WORKER, 0);
    int64_t deadline = id_now_ms() + WAIT_MS;
    while (clusterlog_count(log, "event=fence_mismatch", chat) == 0 && id_now_ms() < deadline) {
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    if (clusterlog_count(log, "event=fence_mismatch", chat) == 0) {
        fail_msg("the worker's commit of attempt %lld was not fenced after attempt %lld", ga,
                 (long long)attempt);
    }
    /* Nothing of the fenced attempt was committed at that moment. */
    assert_int_equal(s_answers(chat), 0);
    free(chat);
}

static int s_setup(void **state) {
    (void)state;
    const char *env[] = {"CHATFLEET_LEASE_STALE_MS=30000", "CHATFLEET_HEARTBEAT_MS=9000",
                         "CHATFLEET_ACQUIRE_POLL_MS=200", "CHATFLEET_LOG=info", NULL};
    cluster_opts_t o = {.name = "test_worker_guards", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    (void)cluster_destroy(&s_cluster);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_raw_acquire_of_a_chat_a_live_worker_holds_is_refused),
        cmocka_unit_test(test_a_commit_of_an_older_attempt_is_fenced),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
