/* The cluster harness itself: a cluster answers a turn, a killed worker's chat is taken over
 * by the other after its lease goes stale, and a restarted broker is used again.
 *
 * With --tls (ctest's test_cluster_harness_tls) the same run goes over TLS end to end
 * (ARCHITECTURE.md §1.1, "Transport security"): a private PostgreSQL serving a certificate
 * from a throwaway CA and refusing TCP without TLS, every process's URL with
 * sslmode=verify-full and sslrootcert, and the gateway on HTTPS; the run then also checks
 * that every gateway and worker connection to PostgreSQL is encrypted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "tlsca.h"

static int s_tls; /* --tls: PostgreSQL TLS with verify-full, and HTTPS */

static char *s_create(cluster_t *c, const char *text) {
    char url[160];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(c, 0));
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    proc_http_t r;
    assert_int_equal(proc_https("POST", url, cluster_token(c), body, cluster_ca(c), &r), 0);
    assert_int_equal(r.status, 201);
    json_t *v = json_loads(r.body, 0, NULL);
    char *id = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    proc_http_free(&r);
    free(body);
    return id;
}

static void test_cluster_runs_turns_across_kills_and_broker_restarts(void **u) {
    (void)u;
    tlsca_t *ca = s_tls ? tlsca_new() : NULL;
    cluster_opts_t o = {.name = s_tls ? "test_cluster_harness_tls" : "test_cluster_harness",
                        .gateways = 1,
                        .workers = 2,
                        .tls = ca,
                        .private_pg = s_tls,
                        .pg_tls = s_tls,
                        .https = s_tls};
    cluster_t *c = cluster_new(&o);
    char *chat = s_create(c, "hello");
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(c, q, "waiting", 15000) >= 0);
    free(q);
    free(chat);
    /* A stalled turn on whichever worker takes it; kill that worker. */
    chat = s_create(c, "[sim:stall]");
    q = mem_printf("SELECT worker_id IS NOT NULL FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(c, q, "t", 15000) >= 0);
    free(q);
    char *owner = cluster_sql(c, "SELECT worker_id FROM chats WHERE id = '%s'", chat);
    /* The owner logs chat_acquired just after its Acquire commits: read until it is there. */
    int victim = -1;
    int64_t deadline = id_now_ms() + 5000;
    while (victim < 0 && id_now_ms() < deadline) {
        for (int i = 0; i < 2 && victim < 0; i++) {
            FILE *f = fopen(cluster_log(c, CLUSTER_WORKER, i), "r");
            char line[4096];
            while (f && victim < 0 && fgets(line, sizeof line, f)) {
                if (strstr(line, "event=chat_acquired") && strstr(line, owner)) {
                    victim = i;
                }
            }
            if (f) {
                fclose(f);
            }
        }
        if (victim < 0) {
            struct timespec ts = {0, 10 * 1000 * 1000}; /* poll interval */
            nanosleep(&ts, NULL);
        }
    }
    assert_true(victim >= 0);
    cluster_signal(c, CLUSTER_WORKER, victim, SIGKILL);
    q = mem_printf("SELECT worker_id IS NOT NULL AND worker_id <> '%s' FROM chats WHERE id = '%s'",
                   owner, chat);
    int64_t ms = cluster_wait(c, q, "t", 15000);
    printf("takeover after kill -9: %lld ms\n", (long long)ms);
    assert_true(ms >= 0);
    free(q);
    cluster_start(c, CLUSTER_WORKER, victim);
    /* The broker restarts; the cluster still answers. */
    cluster_signal(c, CLUSTER_BROKER, 0, SIGKILL);
    cluster_start(c, CLUSTER_BROKER, 0);
    free(chat);
    chat = s_create(c, "after the broker restart");
    q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(c, q, "waiting", 15000) >= 0);
    free(q);
    if (s_tls) {
        /* Every process's connections are TLS (the server refuses others; this shows they
         * are there and encrypted), under the verify-full URL. */
        char *v = cluster_sql(c, "SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) FROM"
                                 " pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE"
                                 " a.application_name LIKE 'chatfleet-%%'");
        printf("chatfleet connections over TLS: %s\n", v);
        assert_non_null(v);
        int on = 0;
        int all = 0;
        assert_int_equal(sscanf(v, "%d/%d", &on, &all), 2);
        assert_true(all > 0);
        assert_int_equal(on, all);
        free(v);
        v = cluster_sql(c, "SELECT count(DISTINCT split_part(application_name, ' ', 1)) FROM"
                           " pg_stat_activity WHERE application_name LIKE 'chatfleet-%%'");
        assert_string_equal(v, "2"); /* gateway and worker */
        free(v);
        assert_non_null(strstr(cluster_db_url(c), "sslmode=verify-full&sslrootcert="));
    }
    free(chat);
    free(owner);
    assert_int_equal(cluster_destroy(&c), 0);
    tlsca_destroy(&ca);
}

int main(int argc, char **argv) {
    s_tls = argc > 1 && !strcmp(argv[1], "--tls");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_runs_turns_across_kills_and_broker_restarts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
