/*
 * A2A end to end with the official JavaScript client: real processes (the fixture's
 * PostgreSQL, chatfleet-broker, two chatfleet-gateway, two chatfleet-worker with the sim model)
 * and two scripts on @a2a-js/sdk from npm, installed into the build directory at test time:
 * tests/a2a/a2a_client.mjs on 1.3.x (the v1.0 protocol) and tests/a2a/a2a_client_v03.mjs on
 * 0.3.x (the v0.3 method names and shapes). No npm, no network or no node fails the test
 * loudly: it never passes without the clients having run. Cases: agent card discovery, a text
 * task, a structured task whose raw json-utf8 artifact keeps 2^53 + 1 exactly, an invalid
 * schemaJson that fails the task (never falling back), application/json required, streaming,
 * cancel (text and structured) read back CANCELED on the other gateway by GetTask and
 * ListTasks, ListTasks pages, JSON-RPC notifications and batches, push notifications (configs
 * made by their methods and inline in SendMessage, delivered to a webhook the script runs on
 * loopback, which the cluster allow-lists), and SubscribeToTask on the other gateway after the
 * first is killed mid-task (the script prints "kill gateway 0"; this program kills it with
 * SIGKILL and restarts it after the case).
 *
 * With --tls (ctest's test_a2a_tls) the gateway serves HTTPS with a certificate from a
 * throwaway CA (tlsca.h) and node trusts that CA through NODE_EXTRA_CA_CERTS; the card's
 * advertised URL is then https (the listen address; ARCHITECTURE.md §1.1), which the client
 * follows for every call. With --v03 (ctest's test_a2a_v03) the 0.3.x client runs its cases.
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
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "mem.h"
#include "tlsca.h"

#define S_NWORKERS         2
#define S_PUSH_CONFIGS_MAX "5" /* CHATFLEET_PUSH_CONFIGS_MAX: push_inline_limit fills it */

static cluster_t *s_cluster;
static tlsca_t *s_ca; /* --tls */
static bool s_v03;    /* --v03: the 0.3.x client */
static char s_build[512];
static char s_source[512];
static char s_js[600]; /* the npm prefix holding @a2a-js/sdk and the script */
static const char *s_script;

/* npm install of the client's version into the build directory; the script and
 * a2a_common.mjs are copied beside node_modules so that their bare imports resolve there. Any
 * failure fails the whole group. */
static int s_install_client(void) {
    const char *version = s_v03 ? "0.3" : "1.3";
    s_script = s_v03 ? "a2a_client_v03.mjs" : "a2a_client.mjs";
    snprintf(s_js, sizeof s_js, "%s/a2a-js-%s", s_build, version);
    char *cmd = mem_printf("mkdir -p '%s' && npm install --no-audit --no-fund --prefix '%s'"
                           " @a2a-js/sdk@%s > '%s/npm.log' 2>&1 && cp '%s/tests/a2a/%s'"
                           " '%s/tests/a2a/a2a_common.mjs' '%s/'",
                           s_js, s_js, version, s_js, s_source, s_script, s_source, s_js);
    int rc = system(cmd);
    free(cmd);
    if (rc != 0) {
        fprintf(stderr,
                "npm install of @a2a-js/sdk@%s failed (see %s/npm.log); this test needs"
                " npm and the registry\n",
                version, s_js);
        return -1;
    }
    return 0;
}

/* Runs one case of the script trusting ca (NULL: node's own store only), with the second
 * gateway as A2A_OTHER; kills gateway 0 when the script asks and restarts it after the case.
 * Returns whether it printed "ok CASE" and exited 0. */
static bool s_run_case(const char *name, const char *ca) {
    char *cmd = mem_printf("cd '%s' && NODE_EXTRA_CA_CERTS='%s' A2A_OTHER='%s' timeout 80 node"
                           " %s '%s' '%s' %s 2>&1",
                           s_js, ca ? ca : "", cluster_url(s_cluster, 1), s_script,
                           cluster_url(s_cluster, 0), cluster_token(s_cluster), name);
    FILE *p = popen(cmd, "r");
    free(cmd);
    assert_non_null(p);
    char line[4096];
    char want[64];
    snprintf(want, sizeof want, "ok %s ", name);
    bool ok = false;
    bool killed = false;
    while (fgets(line, sizeof line, p)) {
        printf("  node: %s", line);
        ok |= strncmp(line, want, strlen(want)) == 0;
        if (!killed && !strcmp(line, "kill gateway 0\n")) {
            cluster_signal(s_cluster, CLUSTER_GATEWAY, 0, SIGKILL);
            killed = true;
        }
    }
    int status = pclose(p);
    if (killed) {
        cluster_start(s_cluster, CLUSTER_GATEWAY, 0);
    }
    return ok && status == 0;
}

/* Runs one case; fails unless it passed. */
static void s_case(const char *name) {
    if (!s_run_case(name, s_ca ? tlsca_ca(s_ca) : NULL)) {
        fail_msg("%s %s failed", s_script, name);
    }
}

/* Over TLS (run only with --tls), a client that does not trust the test CA gets nothing: it
 * never falls back. */
static void test_without_the_ca_the_client_is_refused(void **u) {
    (void)u;
    assert_false(s_run_case("card", NULL));
}

static void test_agent_card_declares_the_structured_output_extension(void **u) {
    (void)u;
    s_case("card");
}

static void test_text_task_completes_with_the_answer(void **u) {
    (void)u;
    s_case("text");
}

static void test_file_parts_are_stored_linked_and_reach_the_model(void **u) {
    (void)u;
    s_case("files");
}

static void test_structured_task_returns_one_raw_artifact_with_a_large_integer_intact(void **u) {
    (void)u;
    s_case("structured");
}

static void test_invalid_schema_json_fails_the_task_never_falling_back_to_schema(void **u) {
    (void)u;
    s_case("invalid_schema_json");
}

static void test_structured_request_must_accept_application_json(void **u) {
    (void)u;
    s_case("output_modes");
}

static void test_canceled_tasks_read_canceled_on_another_gateway(void **u) {
    (void)u;
    s_case("cancel_durable");
}

static void test_list_tasks_pages_newest_first_each_task_once(void **u) {
    (void)u;
    s_case("list_pages");
}

static void test_notifications_are_never_answered_and_batches_answer_each_call(void **u) {
    (void)u;
    s_case("jsonrpc");
}

static void test_push_receiver_gets_each_state_once_across_a_gateway_kill(void **u) {
    (void)u;
    s_case("push");
}

static void test_push_configs_in_the_v03_shapes(void **u) {
    (void)u;
    s_case("push_configs");
}

/* Security issue 34, item 4: a push config inline in SendMessage / message/send (v1
 * taskPushNotificationConfig or the older pushNotificationConfig; v0.3 pushNotificationConfig)
 * and in the streaming variants is stored for the task it creates, shown by the config methods,
 * and its webhook gets WORKING then COMPLETED, each once. */
static void test_inline_push_config_is_stored_and_delivers_each_state_once(void **u) {
    (void)u;
    s_case("push_inline");
}

/* A bad inline config (a URL that is not http(s) or that the policy refuses, CR LF in a token,
 * an id, a credential or a scheme) is -32602 naming the exact field, and nothing is stored: the
 * script checks ListTasks, and the database has no row of any of those messages and no refused
 * task's outcome. */
static void test_invalid_inline_push_config_is_invalid_params_and_stores_nothing(void **u) {
    (void)u;
    char *outcomes = cluster_sql(s_cluster, "SELECT count(*) FROM a2a_task_outcomes");
    assert_non_null(outcomes);
    s_case("push_inline_invalid");
    char *after = cluster_sql(s_cluster, "SELECT count(*) FROM a2a_task_outcomes");
    char *stored = cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages WHERE"
                                          " content::text LIKE '%%never stored%%'");
    char *queued = cluster_sql(s_cluster, "SELECT count(*) FROM chat_queued_messages WHERE"
                                          " content::text LIKE '%%never stored%%'");
    assert_non_null(after);
    assert_string_equal(after, outcomes);
    assert_non_null(stored);
    assert_string_equal(stored, "0");
    assert_non_null(queued);
    assert_string_equal(queued, "0");
    free(outcomes);
    free(after);
    free(stored);
    free(queued);
}

/* An inline config that passed its checks but cannot be stored (the user's config limit) is an
 * error answer naming it, never silence, and the task it was for is canceled. */
static void test_inline_push_config_over_the_limit_is_an_error_and_cancels_its_task(void **u) {
    (void)u;
    s_case("push_inline_limit");
}

static void test_subscribe_after_a_gateway_kill_ends_with_the_complete_artifact(void **u) {
    (void)u;
    s_case("resubscribe_after_kill");
}

static void test_streaming_message_sends_task_deltas_artifact_and_final_status(void **u) {
    (void)u;
    s_case("stream");
}

/* Issue 19: a fast model publishes most of its parts before the stream's subscription reaches
 * the broker; the stream still gets every text delta once, in order (their text is the answer). */
static void test_stream_gets_every_delta_published_before_it_registered(void **u) {
    (void)u;
    s_case("stream_early_parts");
}

/* Issue 19: SubscribeToTask joining mid-episode, on the same gateway and on the other, gets
 * what was already streamed of the episode, then the rest, each delta once, in order. */
static void test_subscribe_mid_episode_gets_every_delta_once_in_order(void **u) {
    (void)u;
    s_case("subscribe_mid_episode");
}

/* A queued task's stream carries its own turn's deltas only, not those of the turn running
 * in its context when it opened. */
static void test_subscribe_to_a_queued_task_gets_only_its_own_deltas(void **u) {
    (void)u;
    s_case("subscribe_queued");
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
    /* The processes' default lease and heartbeat (30 s, 9 s), not the harness's short ones;
     * a quick acquire and stream poll. */
    const char *env[] = {"CHATFLEET_LEASE_STALE_MS=30000",
                         "CHATFLEET_HEARTBEAT_MS=9000",
                         "CHATFLEET_ACQUIRE_POLL_MS=200",
                         "CHATFLEET_STREAM_POLL_MS=200",
                         "CHATFLEET_LOG=info",
                         "CHATFLEET_PUSH_CONFIGS_MAX=" S_PUSH_CONFIGS_MAX,
                         NULL};
    cluster_opts_t o = {.name = s_ca    ? "test_a2a_tls"
                                : s_v03 ? "test_a2a_v03"
                                        : "test_a2a",
                        .gateways = 2,
                        .workers = S_NWORKERS,
                        .env = env,
                        .tls = s_ca,
                        .https = s_ca != NULL};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    /* Judges the client's cases, not how the cluster's processes stop. */
    (void)cluster_destroy(&s_cluster);
    tlsca_destroy(&s_ca);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && !strcmp(argv[1], "--tls")) {
        s_ca = tlsca_new();
    }
    s_v03 = argc > 1 && !strcmp(argv[1], "--v03");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_card_declares_the_structured_output_extension),
        cmocka_unit_test(test_text_task_completes_with_the_answer),
        cmocka_unit_test(test_file_parts_are_stored_linked_and_reach_the_model),
        cmocka_unit_test(test_structured_task_returns_one_raw_artifact_with_a_large_integer_intact),
        cmocka_unit_test(test_invalid_schema_json_fails_the_task_never_falling_back_to_schema),
        cmocka_unit_test(test_structured_request_must_accept_application_json),
        cmocka_unit_test(test_streaming_message_sends_task_deltas_artifact_and_final_status),
        cmocka_unit_test(test_stream_gets_every_delta_published_before_it_registered),
        cmocka_unit_test(test_subscribe_mid_episode_gets_every_delta_once_in_order),
        cmocka_unit_test(test_subscribe_to_a_queued_task_gets_only_its_own_deltas),
        cmocka_unit_test(test_cancel_task_interrupts_the_turn),
        cmocka_unit_test(test_cancel_structured_task_reports_the_cancellation_receipt),
        cmocka_unit_test(test_canceled_tasks_read_canceled_on_another_gateway),
        cmocka_unit_test(test_list_tasks_pages_newest_first_each_task_once),
        cmocka_unit_test(test_notifications_are_never_answered_and_batches_answer_each_call),
        cmocka_unit_test(test_push_receiver_gets_each_state_once_across_a_gateway_kill),
        cmocka_unit_test(test_inline_push_config_is_stored_and_delivers_each_state_once),
        cmocka_unit_test(test_invalid_inline_push_config_is_invalid_params_and_stores_nothing),
        cmocka_unit_test(test_inline_push_config_over_the_limit_is_an_error_and_cancels_its_task),
        cmocka_unit_test(test_subscribe_after_a_gateway_kill_ends_with_the_complete_artifact),
        cmocka_unit_test(test_without_the_ca_the_client_is_refused),
    };
    /* The v0.3 client's cases: the same behaviour through the v0.3 names and shapes. */
    const struct CMUnitTest v03[] = {
        cmocka_unit_test(test_agent_card_declares_the_structured_output_extension),
        cmocka_unit_test(test_text_task_completes_with_the_answer),
        cmocka_unit_test(test_file_parts_are_stored_linked_and_reach_the_model),
        cmocka_unit_test(test_invalid_schema_json_fails_the_task_never_falling_back_to_schema),
        cmocka_unit_test(test_streaming_message_sends_task_deltas_artifact_and_final_status),
        cmocka_unit_test(test_stream_gets_every_delta_published_before_it_registered),
        cmocka_unit_test(test_subscribe_mid_episode_gets_every_delta_once_in_order),
        cmocka_unit_test(test_subscribe_to_a_queued_task_gets_only_its_own_deltas),
        cmocka_unit_test(test_canceled_tasks_read_canceled_on_another_gateway),
        cmocka_unit_test(test_push_configs_in_the_v03_shapes),
        cmocka_unit_test(test_inline_push_config_is_stored_and_delivers_each_state_once),
        cmocka_unit_test(test_invalid_inline_push_config_is_invalid_params_and_stores_nothing),
        cmocka_unit_test(test_inline_push_config_over_the_limit_is_an_error_and_cancels_its_task),
        cmocka_unit_test(test_subscribe_after_a_gateway_kill_ends_with_the_complete_artifact),
    };
    if (s_v03) {
        return _cmocka_run_group_tests("test_a2a_v03", v03, sizeof v03 / sizeof v03[0], s_setup,
                                       s_teardown);
    }
    /* The last case needs TLS: the plain run leaves it out. */
    size_t n = sizeof tests / sizeof tests[0] - (s_ca ? 0 : 1);
    return _cmocka_run_group_tests(s_ca ? "test_a2a_tls" : "test_a2a", tests, n, s_setup,
                                   s_teardown);
}
