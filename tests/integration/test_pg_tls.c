/*
 * PostgreSQL over TLS with certificate verification (ARCHITECTURE.md §1.1, "Transport
 * security"; deploy/OPERATIONS.md, "PostgreSQL over TLS"): a private PostgreSQL (deploy/
 * pgcluster tls) serving a certificate from a throwaway CA for localhost and refusing TCP
 * without TLS, and real processes whose URLs carry sslmode=verify-full and sslrootcert.
 * `chatfleet-gateway migrate` runs over it with the URL's parameters intact and its password
 * hidden in the log; a chat is answered by the gateway and a worker, both connected over TLS;
 * a connection without TLS is refused by the server; a wrong CA, and then a server
 * certificate for another host name, are refused by every process at start with libpq's
 * message, never a fallback.
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

#include "cluster.h"
#include "db.h"
#include "mem.h"
#include "proc.h"
#include "tlsca.h"

#define S_OUT "test_pg_tls.out"

static cluster_t *s_cluster;
static tlsca_t *s_ca;

/* The cluster's URL with its host part's user given a password and sslrootcert replaced by
 * ca (NULL: kept). Caller frees. */
static char *s_url(const char *password, const char *ca) {
    const char *url = cluster_db_url(s_cluster);
    const char *at = strchr(url, '@');
    ASSERT(at);
    char *out = mem_printf("%.*s%s%s%s", (int)(at - url), url, password ? ":" : "",
                           password ? password : "", at);
    if (ca) {
        char *root = strstr(out, "sslrootcert=");
        ASSERT(root);
        char *n = mem_printf("%.*ssslrootcert=%s", (int)(root - out), out, ca);
        free(out);
        out = n;
    }
    return out;
}

/* Runs `BINARY ARGS` (chatfleet-gateway or chatfleet-worker, up to two arguments) with
 * CHATFLEET_DATABASE_URL=url and the cluster's bus endpoints left as they are; returns its
 * exit status, or -1 when it was still running after timeout_ms, and its output in *out. */
static int s_process(const char *binary, const char *arg, const char *url, int timeout_ms,
                     char **out) {
    char bin[600];
    snprintf(bin, sizeof bin, "%s/%s", getenv("CHATFLEET_BUILD_DIR"), binary);
    char *argv[] = {bin, (char *)arg, NULL};
    char *db = mem_printf("CHATFLEET_DATABASE_URL=%s", url);
    char *listen = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", proc_free_port());
    char *env[] = {db, listen, "CHATFLEET_ACQUIRE_POLL_MS=500", NULL};
    int rc = proc_run(argv, env, S_OUT, timeout_ms);
    free(db);
    free(listen);
    *out = proc_file_text(S_OUT);
    return rc;
}

static void test_gateway_migrate_runs_over_verify_full_with_the_url_intact(void **u) {
    (void)u;
    char *url = s_url("s3cret", NULL);
    char *out = NULL;
    int rc = s_process("api-gateway/chatfleet-gateway", "migrate", url, 30000, &out);
    if (rc != 0) {
        fail_msg("migrate exited %d: %s", rc, out);
    }
    /* Every parameter reaches libpq, and the log shows the URL without the password. */
    char *want = mem_printf("sslmode=verify-full&sslrootcert=%s", tlsca_ca(s_ca));
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "database_url=postgresql://postgres:***@localhost:"));
    assert_null(strstr(out, "s3cret"));
    free(want);
    free(out);
    free(url);
    /* A password given as a URL parameter is hidden too. */
    char *with = mem_printf("%s&password=s3cret", cluster_db_url(s_cluster));
    rc = s_process("api-gateway/chatfleet-gateway", "migrate", with, 30000, &out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "&password=***"));
    assert_null(strstr(out, "s3cret"));
    free(out);
    free(with);
}

/* A chat created through the gateway is answered by the worker; both hold only TLS
 * connections, verified (the server refuses any other on TCP). */
static void test_a_chat_is_answered_with_every_connection_encrypted(void **u) {
    (void)u;
    char url[160];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"hello over tls\"}]}",
                               &r),
                     0);
    assert_int_equal(r.status, 201);
    json_t *v = json_loads(r.body, 0, NULL);
    char *chat = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    proc_http_free(&r);
    char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                         " 'assistant' AND content::text LIKE '%%hello over tls%%'",
                         chat);
    int64_t ms = cluster_wait(s_cluster, q, "1", 20000);
    printf("answered in %lld ms\n", (long long)ms);
    assert_true(ms >= 0);
    free(q);
    free(chat);
    char *tls = cluster_sql(s_cluster,
                            "SELECT string_agg(DISTINCT split_part(a.application_name, ' ', 1) ||"
                            " ':' || s.ssl || ':' || s.version, ',') FROM pg_stat_activity a JOIN"
                            " pg_stat_ssl s USING (pid) WHERE a.application_name LIKE"
                            " 'chatfleet-%%'");
    printf("connections (process:ssl:version): %s\n", tls ? tls : "(none)");
    assert_non_null(tls);
    assert_non_null(strstr(tls, "chatfleet-gateway:true:TLSv1."));
    assert_non_null(strstr(tls, "chatfleet-worker:true:TLSv1."));
    assert_null(strstr(tls, ":false:"));
    free(tls);
}

/* The server itself refuses TCP without TLS: a client configured to skip it gets nothing. */
static void test_a_connection_without_tls_is_refused_by_the_server(void **u) {
    (void)u;
    const char *url = cluster_db_url(s_cluster);
    const char *mode = strstr(url, "sslmode=verify-full");
    ASSERT(mode);
    char *fixed = mem_printf("%.*ssslmode=disable%s", (int)(mode - url), url,
                             mode + strlen("sslmode=verify-full"));
    PGconn *c = PQconnectdb(fixed);
    assert_int_not_equal(PQstatus(c), CONNECTION_OK);
    printf("libpq said: %s", PQerrorMessage(c));
    assert_non_null(strstr(PQerrorMessage(c), "no encryption"));
    PQfinish(c);
    free(fixed);
}

static void test_a_wrong_ca_is_refused_at_start(void **u) {
    (void)u;
    char *url = s_url(NULL, tlsca_wrong_ca(s_ca));
    char *out = NULL;
    int rc = s_process("api-gateway/chatfleet-gateway", "migrate", url, 30000, &out);
    printf("migrate with the wrong CA: exit %d\n", rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "certificate verify failed"));
    free(out);
    free(url);
}

/* The server presents a certificate from the trusted CA, but for another host name: the
 * gateway (migrate and serve) and the worker refuse it with libpq's message. */
static void test_a_certificate_for_another_host_is_refused(void **u) {
    (void)u;
    assert_int_equal(cluster_pg_tls(s_cluster, tlsca_other_cert(s_ca), tlsca_other_key(s_ca)), 0);
    const char *url = cluster_db_url(s_cluster);
    const char *want = "server certificate for \\\"otherhost.invalid\\\" does not match host name"
                       " \\\"localhost\\\"";
    char *out = NULL;
    int rc = s_process("api-gateway/chatfleet-gateway", "migrate", url, 30000, &out);
    printf("migrate against otherhost.invalid: exit %d\n", rc);
    if (rc != 1 || !strstr(out, want)) {
        fail_msg("migrate exited %d: %s", rc, out);
    }
    free(out);
    rc = s_process("api-gateway/chatfleet-gateway", "serve", url, 30000, &out);
    if (rc != 1 || !strstr(out, want)) {
        fail_msg("serve exited %d: %s", rc, out);
    }
    free(out);
    /* A worker outlives a database that is away (it backs off and retries, ARCHITECTURE.md
     * §5): it stays up, logs libpq's refusal on every try and never gets a connection. */
    rc = s_process("worker/chatfleet-worker", NULL, url, 3000, &out);
    if (rc != -1 || !strstr(out, want) || !strstr(out, "event=db_connect_backoff")) {
        fail_msg("the worker exited %d: %s", rc, out);
    }
    free(out);
    /* The right certificate again: the same URL works, so the refusal was the name's. */
    assert_int_equal(cluster_pg_tls(s_cluster, tlsca_cert(s_ca), tlsca_key(s_ca)), 0);
    rc = s_process("api-gateway/chatfleet-gateway", "migrate", url, 30000, &out);
    assert_int_equal(rc, 0);
    free(out);
}

static int s_setup(void **state) {
    (void)state;
    s_ca = tlsca_new();
    cluster_opts_t o = {.name = "test_pg_tls",
                        .gateways = 1,
                        .workers = 1,
                        .private_pg = 1,
                        .tls = s_ca,
                        .pg_tls = 1};
    s_cluster = cluster_new(&o);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    (void)cluster_destroy(&s_cluster);
    tlsca_destroy(&s_ca);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gateway_migrate_runs_over_verify_full_with_the_url_intact),
        cmocka_unit_test(test_a_chat_is_answered_with_every_connection_encrypted),
        cmocka_unit_test(test_a_connection_without_tls_is_refused_by_the_server),
        cmocka_unit_test(test_a_wrong_ca_is_refused_at_start),
        cmocka_unit_test(test_a_certificate_for_another_host_is_refused),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
