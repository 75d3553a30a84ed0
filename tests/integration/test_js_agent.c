/*
 * The JavaScript AI SDK agent (clients/js/) end to end: real processes (the fixture's
 * PostgreSQL, chatfleet-broker, chatfleet-gateway, two chatfleet-worker with the sim model)
 * and clients/js/test/agent_cases.mjs on the real ai@7 and zod, installed with npm into the
 * build directory at test time. Exit 77 (skipped) only when the npm registry cannot be
 * reached; any other install failure fails. Cases: model listing, generate() text, stream()
 * deltas in order with a finish carrying usage, a client tool round trip, a server-side tool
 * as a provider-executed call and result, structured output (zod and JSON Schema) and the
 * validation_exhausted receipt as a typed error, a failed turn as ChatfleetChatError, abort
 * interrupting the server-side run, the gateway killed mid-stream and restarted with the
 * stream resumed, no text repeated or missing, and a text file part and an image part uploaded
 * and sent as file parts (a URL refused before anything is sent).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "mem.h"
#include "nodejs.h"

static cluster_t *s_cluster;
static char s_js[600]; /* the npm prefix: node_modules and pkg/, a copy of clients/js */

/* 0 installed, 77 the registry is unreachable, -1 any other failure. */
static int s_install(const char *build, const char *source) {
    snprintf(s_js, sizeof s_js, "%s/js-agent", build);
    int rc = nodejs_install(s_js, "ai@7 zod");
    if (rc != 0) {
        return rc;
    }
    /* The package below node_modules' directory, so that its bare imports resolve there. */
    char *cmd = mem_printf("rm -rf '%s/pkg' && cp -r '%s/clients/js' '%s/pkg'", s_js, source, s_js);
    rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

/* A "KILL_GATEWAY" line kills the gateway with SIGKILL and starts it again on its port. */
static void s_on_line(void *ctx, const char *line) {
    (void)ctx;
    if (!strcmp(line, "KILL_GATEWAY\n")) {
        cluster_signal(s_cluster, CLUSTER_GATEWAY, 0, SIGKILL);
        cluster_start(s_cluster, CLUSTER_GATEWAY, 0);
        printf("  harness: gateway killed and restarted\n");
    }
}

/* Runs one case; fails unless it printed "ok CASE" and exited 0. */
static void s_case(const char *name) {
    char *cmd = mem_printf("cd '%s/pkg' && timeout 120 node test/agent_cases.mjs '%s' '%s' %s",
                           s_js, cluster_url(s_cluster, 0), cluster_token(s_cluster), name);
    char *want = mem_printf("ok %s ", name);
    bool ok = nodejs_run(cmd, want, s_on_line, NULL);
    free(want);
    free(cmd);
    if (!ok) {
        fail_msg("agent_cases.mjs %s failed", name);
    }
}

static void test_list_models_names_the_sim(void **u) {
    (void)u;
    s_case("models");
}

static void test_generate_returns_the_committed_text_and_reuses_the_chat(void **u) {
    (void)u;
    s_case("generate");
}

static void test_stream_yields_deltas_in_order_and_a_finish_with_usage(void **u) {
    (void)u;
    s_case("stream");
}

static void test_client_tool_runs_locally_and_its_result_reaches_the_server(void **u) {
    (void)u;
    s_case("tool");
}

static void test_a_server_side_tool_streams_as_a_provider_executed_call_and_result(void **u) {
    (void)u;
    s_case("server_tool");
}

static void test_structured_output_returns_the_validated_value(void **u) {
    (void)u;
    s_case("structured");
}

static void test_validation_exhausted_receipt_raises_its_typed_error(void **u) {
    (void)u;
    s_case("structured_failure");
}

static void test_a_failed_turn_raises_the_chat_error_with_its_kind_and_status(void **u) {
    (void)u;
    s_case("chat_error");
}

static void test_abort_interrupts_the_server_side_run(void **u) {
    (void)u;
    s_case("abort");
}

static void test_gateway_killed_mid_stream_resumes_without_repeated_or_missing_text(void **u) {
    (void)u;
    s_case("resume");
}

static void test_a_turn_that_waits_for_its_subagents_ends_once_with_their_results(void **u) {
    (void)u;
    s_case("subagents");
}

static void test_file_and_image_parts_reach_the_chat_as_uploaded_file_parts(void **u) {
    (void)u;
    s_case("files");
}

static int s_setup(void **state) {
    (void)state;
    const char *env[] = {"CHATFLEET_ACQUIRE_POLL_MS=200", "CHATFLEET_STREAM_POLL_MS=200",
                         "CHATFLEET_LOG=info", NULL};
    cluster_opts_t o = {.name = "test_js_agent", .gateways = 1, .workers = 2, .env = env};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    (void)cluster_destroy(&s_cluster); /* judges the client's cases, not the processes' stop */
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int rc = s_install(getenv("CHATFLEET_BUILD_DIR"), getenv("CHATFLEET_SOURCE_DIR"));
    if (rc != 0) {
        return rc == 77 ? 77 : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_models_names_the_sim),
        cmocka_unit_test(test_generate_returns_the_committed_text_and_reuses_the_chat),
        cmocka_unit_test(test_stream_yields_deltas_in_order_and_a_finish_with_usage),
        cmocka_unit_test(test_client_tool_runs_locally_and_its_result_reaches_the_server),
        cmocka_unit_test(test_a_server_side_tool_streams_as_a_provider_executed_call_and_result),
        cmocka_unit_test(test_structured_output_returns_the_validated_value),
        cmocka_unit_test(test_validation_exhausted_receipt_raises_its_typed_error),
        cmocka_unit_test(test_a_failed_turn_raises_the_chat_error_with_its_kind_and_status),
        cmocka_unit_test(test_abort_interrupts_the_server_side_run),
        cmocka_unit_test(test_gateway_killed_mid_stream_resumes_without_repeated_or_missing_text),
        cmocka_unit_test(test_a_turn_that_waits_for_its_subagents_ends_once_with_their_results),
        cmocka_unit_test(test_file_and_image_parts_reach_the_chat_as_uploaded_file_parts),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
