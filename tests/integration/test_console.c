/*
 * The operator console (console/) and the admin API (api-gateway/rest/admin.h) end to end: real
 * processes (the fixture's PostgreSQL, chatfleet-broker, chatfleet-gateway, two
 * chatfleet-worker with the sim model). The admin API is checked over HTTP (an operator made
 * with `chatfleet-gateway user-add --admin`, an ordinary user gets 403, the view lists a
 * held chat under its worker with a fresh lease, and the broker's counters). The console
 * runs in headless Chromium (Debian's chromium, driven by puppeteer-core installed from npm
 * into the build tree) by tests/console/console_cases.mjs: sign in, a chat streaming into the page
 * as the worker produces it, a file sent from the page listed on its message with a download
 * link, that attachment marked expired once a second upload evicts it (a cap of one), the
 * cluster view showing a killed worker's chat taken over by the
 * other worker within the lease, interrupt and archive, no console errors; screenshots of each view
 * in BUILD/console-artifacts/. Exit 77 (skipped) only when chromium is not installed or the npm
 * registry cannot be reached.
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
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster.h"
#include "mem.h"
#include "nodejs.h"
#include "proc.h"

#define S_NWORKERS 2

static cluster_t *s_cluster;
static char s_dir[600];      /* the npm prefix holding puppeteer-core and the cases script */
static char s_out[600];      /* screenshots */
static char *s_admin_token;  /* an operator's token (user-add --admin) */
static char s_chromium[256]; /* the browser */

/* 0 ready, 77 no chromium or no npm registry, -1 any other failure. */
static int s_install(const char *build, const char *source) {
    const char *given = getenv("CHROMIUM");
    snprintf(s_chromium, sizeof s_chromium, "%s", given ? given : "/usr/bin/chromium");
    if (access(s_chromium, X_OK) != 0) {
        fprintf(stderr, "%s is not installed (apt-get install chromium): skipped\n", s_chromium);
        return 77;
    }
    snprintf(s_dir, sizeof s_dir, "%s/console-test", build);
    snprintf(s_out, sizeof s_out, "%s/console-artifacts", build);
    int rc = nodejs_install(s_dir, "puppeteer-core");
    if (rc != 0) {
        return rc;
    }
    char *cmd = mem_printf("mkdir -p '%s' && cp '%s/tests/console/console_cases.mjs' '%s/'", s_out,
                           source, s_dir);
    rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

static proc_http_t s_get(const char *path, const char *token) {
    char *url = mem_printf("%s%s", cluster_url(s_cluster, 0), path);
    proc_http_t r = {0};
    assert_int_equal(proc_http("GET", url, token, NULL, &r), 0);
    free(url);
    return r;
}

static void test_user_add_admin_sets_the_flag_and_only_admins_read_the_cluster(void **u) {
    (void)u;
    char *plain = cluster_user_add(s_cluster, false, "plain_user");
    char *flag = cluster_sql(s_cluster, "SELECT is_admin FROM users WHERE name = 'plain_user'");
    assert_string_equal(flag, "f");
    free(flag);
    flag = cluster_sql(s_cluster, "SELECT is_admin FROM users WHERE name = 'operator'");
    assert_string_equal(flag, "t");
    free(flag);
    proc_http_t r = s_get("/api/v2/admin/cluster", plain);
    assert_int_equal(r.status, 403);
    proc_http_free(&r);
    r = s_get("/api/v2/admin/cluster", cluster_token(s_cluster));
    assert_int_equal(r.status, 403);
    proc_http_free(&r);
    r = s_get("/api/v2/admin/cluster", NULL);
    assert_int_equal(r.status, 401);
    proc_http_free(&r);
    r = s_get("/api/v2/admin/cluster", s_admin_token);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"lease_stale_ms\""));
    proc_http_free(&r);
    free(plain);
}

static void test_cluster_view_lists_a_held_chat_under_its_worker_with_a_fresh_lease(void **u) {
    (void)u;
    char *url = mem_printf("%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r = {0};
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"held"
                               " [sim:slow 200] [sim:words 100]\"}]}",
                               &r),
                     0);
    assert_int_equal(r.status, 201);
    char *id = strstr(r.body, "\"id\":\"");
    assert_non_null(id);
    char chat[37];
    snprintf(chat, sizeof chat, "%s", id + 6);
    proc_http_free(&r);
    free(url);
    char *held =
        mem_printf("SELECT (worker_id IS NOT NULL)::text FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(s_cluster, held, "true", 20000) >= 0);
    free(held);
    char *worker = cluster_sql(s_cluster, "SELECT worker_id FROM chats WHERE id = '%s'", chat);
    r = s_get("/api/v2/admin/cluster", s_admin_token);
    assert_int_equal(r.status, 200);
    json_t *view = json_loads(r.body, 0, NULL);
    assert_non_null(view);
    json_t *lease = NULL;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(view, "workers"), i, w) {
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(w, "leases"), k, l) {
            if (!strcmp(json_string_value(json_object_get(l, "chat_id")), chat)) {
                assert_string_equal(json_string_value(json_object_get(w, "worker_id")), worker);
                lease = l;
            }
        }
    }
    assert_non_null(lease);
    assert_true(json_is_true(json_object_get(lease, "fresh")));
    assert_true(json_integer_value(json_object_get(lease, "heartbeat_age_ms")) <= 3000);
    json_decref(view);
    free(worker);
    /* The broker's counters: both workers registered (a counter read may answer the previous
     * request, so the first reads may predate the registrations). */
    json_int_t registered = -1;
    for (int tries = 0; tries < 100 && registered != S_NWORKERS; tries++) {
        proc_http_free(&r);
        r = s_get("/api/v2/admin/cluster", s_admin_token);
        view = json_loads(r.body, 0, NULL);
        json_t *broker = json_object_get(view, "broker");
        assert_true(json_is_true(json_object_get(broker, "reachable")));
        registered = json_integer_value(json_object_get(broker, "workers"));
        json_decref(view);
        if (registered != S_NWORKERS) {
            nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
        }
    }
    assert_int_equal(registered, S_NWORKERS);
    proc_http_free(&r);
    url = mem_printf("%s/api/v2/chats/%s/interrupt", cluster_url(s_cluster, 0), chat);
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), NULL, &r), 0);
    proc_http_free(&r);
    free(url);
}

static void test_console_files_are_served_and_nothing_else(void **u) {
    (void)u;
    proc_http_t r = s_get("/console/index.html", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "<script type=\"module\" src=\"app.js\">"));
    proc_http_free(&r);
    r = s_get("/console/app.js", NULL);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    const char *refused[] = {"/console/",          "/console/..",         "/console/.hidden.js",
                             "/console/README.md", "/console/nothere.js", "/console/a%2F..%2Fb.js"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        r = s_get(refused[i], NULL);
        assert_int_equal(r.status, 404);
        proc_http_free(&r);
    }
}

/* Kills the worker whose log names worker_id id. */
static void s_kill_worker(const char *id) {
    char *want = mem_printf("worker_id=%s", id);
    for (int i = 0; i < S_NWORKERS; i++) {
        char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_WORKER, i));
        bool match = strstr(log, want) != NULL;
        free(log);
        if (match) {
            cluster_signal(s_cluster, CLUSTER_WORKER, i, SIGKILL);
            printf("  harness: worker %d (%s) killed\n", i, id);
            free(want);
            return;
        }
    }
    free(want);
    fail_msg("no worker has id %s", id);
}

/* A "KILL_WORKER ID" line kills that worker. */
static void s_on_line(void *ctx, const char *line) {
    (void)ctx;
    if (!strncmp(line, "KILL_WORKER ", 12)) {
        char id[64];
        snprintf(id, sizeof id, "%.*s", (int)strcspn(line + 12, "\n"), line + 12);
        s_kill_worker(id);
    }
}

static void test_console_in_chromium_signs_in_streams_and_shows_a_takeover(void **u) {
    (void)u;
    char *cmd = mem_printf("cd '%s' && CHROMIUM='%s' timeout 170 node console_cases.mjs '%s' '%s'"
                           " '%s'",
                           s_dir, s_chromium, cluster_url(s_cluster, 0), s_admin_token, s_out);
    bool ok = nodejs_run(cmd, "ok console ", s_on_line, NULL);
    free(cmd);
    if (!ok) {
        fail_msg("console_cases.mjs failed (screenshots in %s)", s_out);
    }
}

static int s_setup(void **state) {
    (void)state;
    /* One attachment per chat: the console's expired marking is seen by a second upload. */
    const char *env[] = {"CHATFLEET_ACQUIRE_POLL_MS=500", "CHATFLEET_STREAM_POLL_MS=500",
                         "CHATFLEET_CHAT_MAX_ATTACHMENTS=1", "CHATFLEET_LOG=info", NULL};
    cluster_opts_t o = {.name = "test_console", .gateways = 1, .workers = S_NWORKERS, .env = env};
    s_cluster = cluster_new(&o);
    s_admin_token = cluster_user_add(s_cluster, true, "operator");
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    (void)cluster_destroy(&s_cluster); /* a worker was killed on purpose */
    free(s_admin_token);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int rc = s_install(getenv("CHATFLEET_BUILD_DIR"), getenv("CHATFLEET_SOURCE_DIR"));
    if (rc != 0) {
        return rc == 77 ? 77 : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_add_admin_sets_the_flag_and_only_admins_read_the_cluster),
        cmocka_unit_test(test_cluster_view_lists_a_held_chat_under_its_worker_with_a_fresh_lease),
        cmocka_unit_test(test_console_files_are_served_and_nothing_else),
        cmocka_unit_test(test_console_in_chromium_signs_in_streams_and_shows_a_takeover),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
