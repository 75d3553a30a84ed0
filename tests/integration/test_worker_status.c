/* The worker's /healthz and /metrics: a worker with CHATFLEET_WORKER_HTTP_LISTEN set answers
 * both, and its counters move with the work it does (an acquisition, a finished turn). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "testdb.h"

static long long s_metric(const char *text, const char *name) {
    const char *at = text ? strstr(text, name) : NULL;
    if (!at) {
        return -1;
    }
    const char *sp = strchr(at, ' ');
    return sp ? strtoll(sp + 1, NULL, 10) : -1;
}

static void test_worker_serves_health_and_metrics_that_follow_its_work(void **u) {
    (void)u;
    testdb_t *db = testdb_new();
    PGconn *conn = testdb_connect(db);
    int port = proc_free_port();
    char bin[512];
    snprintf(bin, sizeof bin, "%s/worker/chatfleet-worker", getenv("CHATFLEET_BUILD_DIR"));
    char *env[] = {mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(db)),
                   mem_printf("CHATFLEET_WORKER_HTTP_LISTEN=127.0.0.1:%d", port),
                   mem_printf("CHATFLEET_BROKER_PUB=tcp://127.0.0.1:%d", proc_free_port()),
                   mem_printf("CHATFLEET_BROKER_SUB=tcp://127.0.0.1:%d", proc_free_port()),
                   mem_printf("CHATFLEET_BROKER_RELAY=tcp://127.0.0.1:%d", proc_free_port()),
                   mem_strdup("CHATFLEET_ACQUIRE_POLL_MS=200"),
                   mem_strdup("CHATFLEET_SIM_CHUNK_MS=0"),
                   NULL};
    char *argv[] = {bin, NULL};
    pid_t pid = proc_spawn(argv, env, "test_worker_status.log");
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", port);
    assert_int_equal(proc_wait_http(url, 10000), 0);
    /* A chat for it to take: no broker runs, so the acquire poll finds it. */
    char owner[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(owner) == 0);
    char *sql = mem_printf("INSERT INTO users (id, name) VALUES ('%s', 'status')", owner);
    assert_int_equal(testdb_try(conn, sql, NULL, 0), 0);
    free(sql);
    char model[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(model) == 0);
    sql = mem_printf("INSERT INTO model_configs (id, name, provider, model, is_default)"
                     " VALUES ('%s', 'sim', 'sim', 'sim', true)",
                     model);
    assert_int_equal(testdb_try(conn, sql, NULL, 0), 0);
    free(sql);
    cs_message_t m = {.role = "user", .content = "[{\"type\":\"text\",\"text\":\"hi\"}]"};
    cs_create_t c = {
        .owner_id = owner, .model_config_id = model, .messages = &m, .message_count = 1};
    char chat[ID_UUID_LEN + 1];
    cs_error_t err;
    assert_int_equal(chatstate_create(conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    int64_t deadline = id_now_ms() + 15000;
    long long turns = 0;
    proc_http_t r = {0};
    while (turns < 1 && id_now_ms() < deadline) {
        proc_http_free(&r);
        assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        turns = s_metric(r.body, "chatfleet_worker_turns_total{");
        struct timespec ts = {0, 100 * 1000 * 1000}; /* the text refreshes once a second */
        nanosleep(&ts, NULL);
    }
    printf("%s", r.body);
    assert_true(turns >= 1);
    assert_true(s_metric(r.body, "chatfleet_worker_acquisitions_total{") >= 1);
    /* A plain turn commits twice: RecordGenerationAttempt, then CommitStep with FinishTurn and
     * Abandon in one bundle (the acquisition is the acquirer's, not a task commit). */
    assert_true(s_metric(r.body, "chatfleet_worker_commits_total{") >= 2);
    /* The model call histogram counts the call; no error by any status. */
    assert_true(strstr(r.body, "le=\"+Inf\"} ") != NULL);
    assert_true(s_metric(r.body, "chatfleet_worker_model_call_seconds_count{") >= 1);
    /* The task pool has opened a connection, within the cap, and nothing waits now. */
    assert_true(s_metric(r.body, "chatfleet_worker_task_connections{worker=") >= 1);
    assert_true(s_metric(r.body, "chatfleet_worker_task_connection_waiters{") == 0);
    assert_true(s_metric(r.body, "chatfleet_worker_loop_transfers{") >= 0);
    assert_int_equal(s_metric(r.body, "chatfleet_worker_model_errors_by_status_total{"), 0);
    proc_http_free(&r);
    assert_int_equal(proc_stop(pid, 10000), 0); /* SIGTERM: a clean, graceful exit */
    for (int i = 0; env[i]; i++) {
        free(env[i]);
    }
    PQfinish(conn);
    testdb_destroy(&db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_serves_health_and_metrics_that_follow_its_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
