/*
 * A2A end to end with the official JavaScript client: real processes (the fixture's
 * PostgreSQL, chatfleet-broker, chatfleet-gateway, two chatfleet-worker with the sim model)
 * and tests/a2a/a2a_client.mjs on @a2a-js/sdk, installed with npm into the build directory
 * at test time. No npm, no network or no node fails the test loudly: it never passes
 * without the client having run. Cases: agent card discovery, a text task, a structured
 * task whose raw json-utf8 artifact keeps 2^53 + 1 exactly, an invalid schemaJson that never
 * falls back, streaming, and cancel (text and structured).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "id.h"
#include "mem.h"
#include "proc.h"
#include "relay.h"
#include "testdb.h"

#define S_NWORKERS 2

static testdb_t *s_db;
static char s_build[512];
static char s_source[512];
static char s_base[64];
static char s_pub[64], s_sub[64], s_relay[64];
static pid_t s_broker;
static pid_t s_gw;
static pid_t s_workers[S_NWORKERS];
static char *s_token;
static char s_js[600]; /* the npm prefix holding @a2a-js/sdk and the script */

static void s_start_worker(int i) {
    char bin[600];
    snprintf(bin, sizeof bin, "%s/worker/chatfleet-worker", s_build);
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *pub = mem_printf("CHATFLEET_BROKER_PUB=%s", s_pub);
    char *sub = mem_printf("CHATFLEET_BROKER_SUB=%s", s_sub);
    char *relay = mem_printf("CHATFLEET_BROKER_RELAY=%s", s_relay);
    char *env[] = {url,
                   pub,
                   sub,
                   relay,
                   "CHATFLEET_ACQUIRE_POLL_MS=200",
                   "CHATFLEET_WORKER_SYNC_MS=200",
                   "CHATFLEET_SIM_CHUNK_MS=0",
                   "CHATFLEET_LOG=info",
                   NULL};
    char *argv[] = {bin, NULL};
    char log[64];
    snprintf(log, sizeof log, "test_a2a.w%d.log", i);
    s_workers[i] = proc_spawn(argv, env, log);
    free(url);
    free(pub);
    free(sub);
    free(relay);
}

static void s_start_cluster(void) {
    snprintf(s_pub, sizeof s_pub, "tcp://127.0.0.1:%d", proc_free_port());
    snprintf(s_sub, sizeof s_sub, "tcp://127.0.0.1:%d", proc_free_port());
    snprintf(s_relay, sizeof s_relay, "tcp://127.0.0.1:%d", proc_free_port());
    char bin[600];
    snprintf(bin, sizeof bin, "%s/broker/chatfleet-broker", s_build);
    char *bargv[] = {bin, "--pub", s_pub, "--sub", s_sub, "--relay", s_relay, NULL};
    s_broker = proc_spawn(bargv, NULL, "test_a2a.broker.log");
    relay_client_t *rc = relay_client_new(s_relay);
    wire_stats_t st;
    int64_t deadline = id_now_ms() + 10000;
    while (relay_client_stats(rc, 100, &st) != 0) {
        ASSERT(id_now_ms() < deadline);
    }
    relay_client_destroy(&rc);
    char gw[600];
    snprintf(gw, sizeof gw, "%s/api-gateway/chatfleet-gateway", s_build);
    char *url = mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(s_db));
    char *uenv[] = {url, NULL};
    char *uargv[] = {gw, "user-add", "a2a", NULL};
    s_token = proc_output(uargv, uenv);
    ASSERT(s_token);
    s_token[strcspn(s_token, "\n")] = '\0';
    int port = proc_free_port();
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", port);
    char *listen = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port);
    char *pub = mem_printf("CHATFLEET_BROKER_PUB=%s", s_pub);
    char *sub = mem_printf("CHATFLEET_BROKER_SUB=%s", s_sub);
    char *relay = mem_printf("CHATFLEET_BROKER_RELAY=%s", s_relay);
    char *env[] = {url, listen, pub, sub, relay, "CHATFLEET_STREAM_POLL_MS=200", NULL};
    char *argv[] = {gw, "serve", NULL};
    s_gw = proc_spawn(argv, env, "test_a2a.gateway.log");
    free(listen);
    free(pub);
    free(sub);
    free(relay);
    free(url);
    char health[96];
    snprintf(health, sizeof health, "%s/healthz", s_base);
    ASSERT(proc_wait_http(health, 10000) == 0);
    for (int i = 0; i < S_NWORKERS; i++) {
        s_start_worker(i);
    }
}

/* npm install into the build directory; the script is copied beside node_modules so that
 * its bare import resolves there. Any failure fails the whole group. */
static int s_install_client(void) {
    snprintf(s_js, sizeof s_js, "%s/a2a-js", s_build);
    char *cmd = mem_printf("mkdir -p '%s' && npm install --no-audit --no-fund --prefix '%s'"
                           " @a2a-js/sdk > '%s/npm.log' 2>&1 && cp '%s/tests/a2a/a2a_client.mjs'"
                           " '%s/'",
                           s_js, s_js, s_js, s_source, s_js);
    int rc = system(cmd);
    free(cmd);
    if (rc != 0) {
        fprintf(stderr,
                "npm install of @a2a-js/sdk failed (see %s/npm.log); this test needs"
                " npm and the registry\n",
                s_js);
        return -1;
    }
    return 0;
}

/* Runs one case of the script; fails unless it printed "ok CASE". */
static void s_case(const char *name) {
    char *cmd = mem_printf("cd '%s' && timeout 80 node a2a_client.mjs '%s' '%s' %s 2>&1", s_js,
                           s_base, s_token, name);
    FILE *p = popen(cmd, "r");
    free(cmd);
    assert_non_null(p);
    char line[4096];
    char want[64];
    snprintf(want, sizeof want, "ok %s ", name);
    bool ok = false;
    while (fgets(line, sizeof line, p)) {
        printf("  node: %s", line);
        ok |= strncmp(line, want, strlen(want)) == 0;
    }
    int status = pclose(p);
    if (!ok || status != 0) {
        fail_msg("a2a_client.mjs %s failed (status %d)", name, status);
    }
}

static void test_agent_card_declares_the_structured_output_extension(void **u) {
    (void)u;
    s_case("card");
}

static void test_text_task_completes_with_the_answer(void **u) {
    (void)u;
    s_case("text");
}

static void test_structured_task_returns_one_raw_artifact_with_a_large_integer_intact(void **u) {
    (void)u;
    s_case("structured");
}

static void test_invalid_schema_json_never_falls_back_to_schema(void **u) {
    (void)u;
    s_case("invalid_schema_json");
}

static void test_streaming_message_sends_task_deltas_artifact_and_final_status(void **u) {
    (void)u;
    s_case("stream");
}

static void test_cancel_task_interrupts_the_turn(void **u) {
    (void)u;
    s_case("cancel");
}

static void test_cancel_structured_task_reports_the_cancellation_receipt(void **u) {
    (void)u;
    s_case("structured_cancel");
}

static int s_setup(void **state) {
    (void)state;
    snprintf(s_build, sizeof s_build, "%s", getenv("CHATFLEET_BUILD_DIR"));
    snprintf(s_source, sizeof s_source, "%s", getenv("CHATFLEET_SOURCE_DIR"));
    if (s_install_client() != 0) {
        return -1;
    }
    s_db = testdb_new();
    s_start_cluster();
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    for (int i = 0; i < S_NWORKERS; i++) {
        proc_stop(s_workers[i], 10000);
    }
    proc_stop(s_gw, 5000);
    proc_stop(s_broker, 5000);
    free(s_token);
    testdb_destroy(&s_db);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_card_declares_the_structured_output_extension),
        cmocka_unit_test(test_text_task_completes_with_the_answer),
        cmocka_unit_test(test_structured_task_returns_one_raw_artifact_with_a_large_integer_intact),
        cmocka_unit_test(test_invalid_schema_json_never_falls_back_to_schema),
        cmocka_unit_test(test_streaming_message_sends_task_deltas_artifact_and_final_status),
        cmocka_unit_test(test_cancel_task_interrupts_the_turn),
        cmocka_unit_test(test_cancel_structured_task_reports_the_cancellation_receipt),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
