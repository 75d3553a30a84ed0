/*
 * HTTPS on the gateway end to end (ARCHITECTURE.md §1.1, "Transport security"): a cluster of
 * real processes (the fixture's PostgreSQL, chatfleet-broker, a chatfleet-gateway serving
 * HTTPS with a certificate from a throwaway CA, two chatfleet-worker with the sim model) and
 * the chatfleet CLI. `ask --schema` over https with the CA file prints the validated value; a
 * wrong CA (flag or environment) or none exits 3 with a clear message before any request is
 * made; plain HTTP to the TLS port gets no HTTP answer; a TLS handshake that never completes
 * is cut at the head deadline; the agent card advertises the configured public URL whatever
 * the Host header says; TLS 1.1 is refused while 1.2 and 1.3 are accepted; partial,
 * unreadable or wrong TLS settings stop the gateway at start with the setting named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "tlsca.h"

#define S_NWORKERS      2
#define S_TURN_MS       20000
#define S_HEAD_MS       1500 /* the gateways' head deadline here */
#define S_PUBLIC_URL    "https://chat.example.test:8443"
#define S_SCHEMA_RECORD "{\"id\":9007199254740993,\"ratio\":0.1}"

static cluster_t *s_cluster;
static tlsca_t *s_ca;

static void s_nap(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000}; /* poll interval */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The port of a cluster URL ("https://127.0.0.1:PORT"); the test fails on anything else. */
static int s_port(const char *url) {
    const char *colon = strrchr(url, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || *end != '\0' || port <= 0 || port > 65535) {
        fail_msg("no port in %s", url);
    }
    return (int)port;
}

/* Runs argv with env added; its exit status (fails past timeout_ms). */
static int s_run(char *const argv[], char *const env[], const char *out_path, int timeout_ms) {
    int rc = proc_run(argv, env, out_path, timeout_ms);
    if (rc < 0) {
        fail_msg("%s did not exit within %d ms (output in %s)", argv[0], timeout_ms, out_path);
    }
    return rc;
}

/* Runs `chatfleet ARGS...` against the cluster's gateway; returns the exit status and its
 * output (stdout and stderr together, *out; caller frees). */
static int s_cli(char **out, const char *const *env, ...) {
    char bin[600];
    proc_build_path(NULL, "cli/chatfleet", bin, sizeof bin);
    char *argv[32] = {bin};
    int n = 1;
    va_list ap;
    va_start(ap, env);
    for (char *a; n < 31 && (a = va_arg(ap, char *));) {
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    char *e[8];
    int k = 0;
    e[k++] = mem_printf("CHATFLEET_TOKEN=%s", cluster_token(s_cluster));
    e[k++] = mem_strdup("CHATFLEET_CA_FILE="); /* unset unless env says otherwise */
    for (int i = 0; env && env[i] && k < 7; i++) {
        e[k++] = mem_strdup(env[i]);
    }
    e[k] = NULL;
    int rc = s_run(argv, e, "test_gateway_tls.cli.out", S_TURN_MS);
    for (int i = 0; i < k; i++) {
        free(e[i]);
    }
    *out = proc_file_text("test_gateway_tls.cli.out");
    return rc;
}

static char *s_count_chats(void) {
    char *n = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    assert_non_null(n);
    return n;
}

/* --- Tests. --- */

static void test_https_answers_with_the_ca_and_the_url_is_https(void **u) {
    (void)u;
    assert_memory_equal(cluster_url(s_cluster, 0), "https://", 8);
    char *url = mem_printf("%s/readyz", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_https("GET", url, NULL, NULL, tlsca_ca(s_ca), &r), 0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    /* A body of most of the 1 MiB cap (50 text parts of 16,000 bytes) crosses many TLS
     * records: read whole (201); one over the cap (70 parts) still gets its 413 over TLS. */
    char *chats = mem_printf("%s/api/v2/chats", cluster_url(s_cluster, 0));
    char *part = mem_calloc(1, 16001);
    memset(part, 'x', 16000);
    for (int big = 0; big < 2; big++) {
        char *body = mem_strdup("{\"content\":[");
        for (int i = 0; i < (big ? 70 : 50); i++) {
            char *n =
                mem_printf("%s%s{\"type\":\"text\",\"text\":\"%s\"}", body, i ? "," : "", part);
            free(body);
            body = n;
        }
        char *n = mem_printf("%s]}", body);
        free(body);
        body = n;
        assert_int_equal(
            proc_https("POST", chats, cluster_token(s_cluster), body, tlsca_ca(s_ca), &r), 0);
        printf("  a %zu-byte body over https: HTTP %ld\n", strlen(body), r.status);
        assert_int_equal(r.status, big ? 413 : 201);
        proc_http_free(&r);
        free(body);
    }
    free(part);
    free(chats);
    /* The same server, trusted through a CA that did not sign its certificate: refused. */
    assert_int_equal(proc_https("GET", url, NULL, NULL, tlsca_wrong_ca(s_ca), &r), -1);
    assert_int_equal(r.status, 0);
    proc_http_free(&r);
    free(url);
}

static void test_ask_schema_over_https_prints_the_validated_value(void **u) {
    (void)u;
    char *out = NULL;
    int rc = s_cli(&out, NULL, "--url", cluster_url(s_cluster, 0), "--cacert", tlsca_ca(s_ca),
                   "ask", "--schema",
                   "{\"type\":\"object\",\"properties\":{\"id\":{\"const\":9007199254740993},"
                   "\"ratio\":{\"const\":0.1}},\"required\":[\"id\",\"ratio\"]}",
                   "give me the record", NULL);
    if (rc != 0) {
        fail_msg("ask --schema over https exited %d: %s", rc, out);
    }
    assert_string_equal(out, S_SCHEMA_RECORD "\n");
    free(out);
    /* The CA from the environment instead of the flag. */
    const char *env[] = {NULL, NULL};
    char *ca = mem_printf("CHATFLEET_CA_FILE=%s", tlsca_ca(s_ca));
    env[0] = ca;
    rc = s_cli(&out, env, "--url", cluster_url(s_cluster, 0), "ask", "--schema",
               "{\"type\":\"object\",\"properties\":{\"id\":{\"const\":9007199254740993},"
               "\"ratio\":{\"const\":0.1}},\"required\":[\"id\",\"ratio\"]}",
               "give me the record", NULL);
    if (rc != 0) {
        fail_msg("ask --schema with CHATFLEET_CA_FILE exited %d: %s", rc, out);
    }
    assert_string_equal(out, S_SCHEMA_RECORD "\n");
    free(out);
    free(ca);
}

/* A CA that did not sign the gateway's certificate: exit 3, a message naming the CA file and
 * the reason, and no request reached the gateway (no chat was made). */
static void test_wrong_ca_exits_3_with_a_clear_message_and_sends_nothing(void **u) {
    (void)u;
    char *before = s_count_chats();
    char *out = NULL;
    int rc = s_cli(&out, NULL, "--url", cluster_url(s_cluster, 0), "--cacert", tlsca_wrong_ca(s_ca),
                   "ask", "--schema", "{\"type\":\"object\"}", "hello", NULL);
    printf("  chatfleet said: %s", out);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "certificate is not trusted"));
    assert_non_null(strstr(out, tlsca_wrong_ca(s_ca)));
    free(out);
    /* The wrong CA from the environment, and a chat subcommand. */
    char *ca = mem_printf("CHATFLEET_CA_FILE=%s", tlsca_wrong_ca(s_ca));
    const char *env[] = {ca, NULL};
    rc = s_cli(&out, env, "--url", cluster_url(s_cluster, 0), "chat", "create", "hello", NULL);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "certificate is not trusted"));
    free(out);
    free(ca);
    /* A stream (watch dials the SSE endpoint directly) ends at once: no redials. */
    int64_t t0 = id_now_ms();
    rc = s_cli(&out, NULL, "--url", cluster_url(s_cluster, 0), "--cacert", tlsca_wrong_ca(s_ca),
               "watch", NULL);
    int64_t ms = id_now_ms() - t0;
    printf("  watch ended after %lld ms: %s", (long long)ms, out);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "certificate is not trusted"));
    assert_true(ms < 2000);
    free(out);
    /* No CA file at all: the system store does not know the test CA either. */
    rc = s_cli(&out, NULL, "--url", cluster_url(s_cluster, 0), "chat", "list", NULL);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "the system store"));
    free(out);
    char *after = s_count_chats();
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* Plain HTTP to the TLS port gets no HTTP answer, from libcurl or from the CLI. */
static void test_plain_http_to_the_tls_port_gets_no_answer(void **u) {
    (void)u;
    const char *https = cluster_url(s_cluster, 0);
    char *plain = mem_printf("http://%s/readyz", https + strlen("https://"));
    proc_http_t r;
    assert_int_equal(proc_http("GET", plain, NULL, NULL, &r), -1);
    assert_int_equal(r.status, 0);
    proc_http_free(&r);
    char *base = mem_printf("http://%s", https + strlen("https://"));
    char *out = NULL;
    int rc = s_cli(&out, NULL, "--url", base, "--cacert", tlsca_ca(s_ca), "chat", "list", NULL);
    printf("  chatfleet said: %s", out);
    assert_int_equal(rc, 3);
    free(out);
    free(base);
    free(plain);
}

/* A client that opens TCP and starts a ClientHello it never finishes is cut at the head
 * deadline, like a slow request head on plain HTTP. */
static void test_unfinished_tls_handshake_is_cut_at_the_head_deadline(void **u) {
    (void)u;
    int port = s_port(cluster_url(s_cluster, 0));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    /* A handshake record header announcing 512 bytes, then nothing. */
    const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
    assert_int_equal(write(fd, hello, sizeof hello), (ssize_t)sizeof hello);
    struct timeval tv = {S_HEAD_MS / 1000 + 10, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    int64_t t0 = id_now_ms();
    char buf[256];
    ssize_t n;
    /* Until the server closes (or the receive timeout), and never past its bound. */
    while ((n = read(fd, buf, sizeof buf)) > 0 && id_now_ms() - t0 < S_HEAD_MS + 3000) {
    }
    int64_t ms = id_now_ms() - t0;
    close(fd);
    printf("  the unfinished handshake was cut after %lld ms (deadline %d)\n", (long long)ms,
           S_HEAD_MS);
    assert_true(n == 0 || n == -1);
    assert_true(ms >= S_HEAD_MS - 300 && ms < S_HEAD_MS + 3000);
    /* The cut is logged just after the socket is shut down: poll for the line. */
    int64_t deadline = id_now_ms() + 3000;
    char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_GATEWAY, 0));
    while (!strstr(log, "reason=head_timeout") && id_now_ms() < deadline) {
        free(log);
        s_nap(20);
        log = proc_file_text(cluster_log(s_cluster, CLUSTER_GATEWAY, 0));
    }
    assert_non_null(strstr(log, "reason=head_timeout"));
    free(log);
}

/* The card names CHATFLEET_PUBLIC_URL, never the Host the request carries. */
static size_t s_sink(char *d, size_t size, size_t n, void *ud) {
    char **buf = ud;
    char *m = mem_printf("%s%.*s", *buf, (int)(size * n), d);
    free(*buf);
    *buf = m;
    return size * n;
}

static void test_agent_card_advertises_the_configured_url_despite_a_forged_host(void **u) {
    (void)u;
    char *url = mem_printf("%s/.well-known/agent-card.json", cluster_url(s_cluster, 0));
    char *body = mem_strdup("");
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Host: evil.example:666");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CAINFO, tlsca_ca(s_ca));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    assert_int_equal(status, 200);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    json_t *card = json_loads(body, 0, NULL);
    assert_non_null(card);
    const char *advertised = json_string_value(
        json_object_get(json_array_get(json_object_get(card, "supportedInterfaces"), 0), "url"));
    assert_non_null(advertised);
    assert_string_equal(advertised, S_PUBLIC_URL "/a2a");
    assert_null(strstr(body, "evil.example"));
    json_decref(card);
    free(body);
    free(url);
}

/* Starts `chatfleet-gateway serve` on a fresh port with the cluster's settings plus extra;
 * returns its exit status (it must exit by itself) and its output in *out. */
static int s_gateway(char **out, const char *const *extra) {
    char bin[600];
    proc_build_path(NULL, "api-gateway/chatfleet-gateway", bin, sizeof bin);
    char *argv[] = {bin, "serve", NULL};
    char *env[16];
    int n = 0;
    env[n++] = mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(s_cluster));
    env[n++] = mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", proc_free_port());
    env[n++] = mem_strdup("CHATFLEET_HTTP_TLS_CERT=");
    env[n++] = mem_strdup("CHATFLEET_HTTP_TLS_KEY=");
    for (int i = 0; extra[i] && n < 15; i++) {
        env[n++] = mem_strdup(extra[i]);
    }
    env[n] = NULL;
    int rc = s_run(argv, env, "test_gateway_tls.gateway.out", 15000);
    for (int i = 0; i < n; i++) {
        free(env[i]);
    }
    *out = proc_file_text("test_gateway_tls.gateway.out");
    return rc;
}

static void test_partial_unreadable_or_wrong_tls_settings_stop_the_gateway(void **u) {
    (void)u;
    char *cert = mem_printf("CHATFLEET_HTTP_TLS_CERT=%s", tlsca_cert(s_ca));
    char *key = mem_printf("CHATFLEET_HTTP_TLS_KEY=%s", tlsca_key(s_ca));
    char *missing = mem_strdup("CHATFLEET_HTTP_TLS_KEY=/nonexistent/server.key");
    char *key_as_cert = mem_printf("CHATFLEET_HTTP_TLS_CERT=%s", tlsca_key(s_ca));
    char *other_key = mem_printf("CHATFLEET_HTTP_TLS_KEY=%s", tlsca_other_key(s_ca));
    char *out = NULL;
    /* A certificate without a key. */
    const char *a[] = {cert, NULL};
    assert_int_equal(s_gateway(&out, a), 2);
    assert_non_null(
        strstr(out, "CHATFLEET_HTTP_TLS_CERT is set but CHATFLEET_HTTP_TLS_KEY is not"));
    free(out);
    /* A key file that cannot be read. */
    const char *b[] = {cert, missing, NULL};
    assert_int_equal(s_gateway(&out, b), 2);
    assert_non_null(strstr(out, "CHATFLEET_HTTP_TLS_KEY=/nonexistent/server.key: cannot read"));
    free(out);
    /* A certificate setting that names a key. */
    const char *c[] = {key_as_cert, key, NULL};
    assert_int_equal(s_gateway(&out, c), 2);
    assert_non_null(strstr(out, "CHATFLEET_HTTP_TLS_CERT="));
    assert_non_null(strstr(out, "no PEM block of the expected kind"));
    free(out);
    /* A key that does not belong to the certificate: GnuTLS refuses the pair. */
    const char *d[] = {cert, other_key, NULL};
    assert_int_equal(s_gateway(&out, d), 1);
    assert_non_null(strstr(out, "http_start_failed"));
    assert_non_null(strstr(out, "tls=on"));
    free(out);
    /* A priority string GnuTLS cannot parse. */
    const char *e[] = {cert, key, "CHATFLEET_HTTP_TLS_PRIORITIES=NOT-A-PRIORITY", NULL};
    assert_int_equal(s_gateway(&out, e), 1);
    assert_non_null(strstr(out, "http_start_failed"));
    free(out);
    free(cert);
    free(key);
    free(missing);
    free(key_as_cert);
    free(other_key);
}

/* `openssl s_client` to the port with args (a version, ciphers), trusting the test CA: 0 when
 * the handshake succeeded. */
static int s_sclient(int port, const char *args) {
    char *cmd = mem_printf("echo | timeout 10 openssl s_client -connect 127.0.0.1:%d %s"
                           " -CAfile '%s' > test_gateway_tls.sc.out 2>&1",
                           port, args, tlsca_ca(s_ca));
    int rc = system(cmd);
    free(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Only version (tls1_1, tls1_2, tls1_3) offered, at the lowest security level so that the
 * client's own side allows TLS 1.1. */
static int s_handshake(int port, const char *version) {
    char *args = mem_printf("-%s -cipher 'DEFAULT:@SECLEVEL=0'", version);
    int rc = s_sclient(port, args);
    free(args);
    return rc;
}

/* TLS 1.2 offering only the suite named (OpenSSL's name). */
static int s_suite(int port, const char *suite) {
    char *args = mem_printf("-tls1_2 -cipher '%s:@SECLEVEL=0'", suite);
    int rc = s_sclient(port, args);
    free(args);
    return rc;
}

/* TLS 1.2 with the default priorities: forward secrecy (ECDHE) and AEAD only. A gateway with
 * an RSA key that could encipher, so that a static-RSA suite would be possible, refuses them
 * and the CBC and finite-field DHE suites, and takes ECDHE with GCM or ChaCha20-Poly1305; the
 * ECDSA gateway takes ECDHE-ECDSA with GCM and refuses its CBC suite. */
static void test_tls_1_2_offers_ecdhe_with_aead_only(void **u) {
    (void)u;
    char bin[600];
    proc_build_path(NULL, "api-gateway/chatfleet-gateway", bin, sizeof bin);
    char *argv[] = {bin, "serve", NULL};
    int port = proc_free_port();
    char *env[] = {mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(s_cluster)),
                   mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", port),
                   mem_printf("CHATFLEET_HTTP_TLS_CERT=%s", tlsca_rsa_cert(s_ca)),
                   mem_printf("CHATFLEET_HTTP_TLS_KEY=%s", tlsca_rsa_key(s_ca)), NULL};
    pid_t pid = proc_spawn(argv, env, "test_gateway_tls.rsa.log");
    char *ready = mem_printf("https://127.0.0.1:%d/healthz", port);
    int up = proc_wait_https(ready, tlsca_ca(s_ca), 15000);
    static const char *const refused[] = {
        "AES128-SHA",           "AES256-GCM-SHA384",       "AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-GCM-SHA256"};
    static const char *const taken[] = {"ECDHE-RSA-AES128-GCM-SHA256",
                                        "ECDHE-RSA-AES256-GCM-SHA384",
                                        "ECDHE-RSA-CHACHA20-POLY1305"};
    int refused_rc[sizeof refused / sizeof refused[0]], taken_rc[sizeof taken / sizeof taken[0]];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        refused_rc[i] = up == 0 ? s_suite(port, refused[i]) : 0;
    }
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        taken_rc[i] = up == 0 ? s_suite(port, taken[i]) : -1;
    }
    proc_stop(pid, 10000);
    for (int i = 0; env[i]; i++) {
        free(env[i]);
    }
    free(ready);
    assert_int_equal(up, 0);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (refused_rc[i] == 0) {
            fail_msg("TLS 1.2 suite %s was accepted", refused[i]);
        }
    }
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        if (taken_rc[i] != 0) {
            fail_msg("TLS 1.2 suite %s was refused", taken[i]);
        }
    }
    int ec = s_port(cluster_url(s_cluster, 0));
    assert_int_equal(s_suite(ec, "ECDHE-ECDSA-AES128-GCM-SHA256"), 0);
    assert_int_not_equal(s_suite(ec, "ECDHE-ECDSA-AES128-SHA"), 0);
}

/* TLS 1.2 and 1.3 are accepted and TLS 1.1 is refused; the same client gets TLS 1.1 from a
 * gateway whose priorities allow it, so the refusal is the server's. */
static void test_only_tls_1_2_and_1_3_are_accepted(void **u) {
    (void)u;
    int port = s_port(cluster_url(s_cluster, 0));
    assert_int_equal(s_handshake(port, "tls1_3"), 0);
    assert_int_equal(s_handshake(port, "tls1_2"), 0);
    assert_int_not_equal(s_handshake(port, "tls1_1"), 0);
    char bin[600];
    proc_build_path(NULL, "api-gateway/chatfleet-gateway", bin, sizeof bin);
    char *argv[] = {bin, "serve", NULL};
    int old_port = proc_free_port();
    char *env[] = {mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(s_cluster)),
                   mem_printf("CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", old_port),
                   mem_printf("CHATFLEET_HTTP_TLS_CERT=%s", tlsca_cert(s_ca)),
                   mem_printf("CHATFLEET_HTTP_TLS_KEY=%s", tlsca_key(s_ca)),
                   mem_strdup("CHATFLEET_HTTP_TLS_PRIORITIES=NORMAL:+VERS-TLS1.1"),
                   NULL};
    pid_t pid = proc_spawn(argv, env, "test_gateway_tls.tls11.log");
    char *ready = mem_printf("https://127.0.0.1:%d/healthz", old_port);
    int up = proc_wait_https(ready, tlsca_ca(s_ca), 15000);
    int old = up == 0 ? s_handshake(old_port, "tls1_1") : -1;
    proc_stop(pid, 10000);
    for (int i = 0; env[i]; i++) {
        free(env[i]);
    }
    free(ready);
    assert_int_equal(up, 0);
    assert_int_equal(old, 0);
}

/* The effective config names the files and never prints key material. */
static void test_config_line_names_the_files_and_no_key(void **u) {
    (void)u;
    char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_GATEWAY, 0));
    char *want = mem_printf("http_tls_key=%s", tlsca_key(s_ca));
    assert_non_null(strstr(log, want));
    assert_non_null(strstr(log, "http_tls_priorities=NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"));
    assert_non_null(strstr(log, "public_url=" S_PUBLIC_URL));
    assert_non_null(strstr(log, "scheme=https"));
    assert_null(strstr(log, "PRIVATE KEY"));
    free(want);
    free(log);
}

static int s_setup(void **state) {
    (void)state;
    s_ca = tlsca_new();
    char head[64];
    snprintf(head, sizeof head, "CHATFLEET_HTTP_HEAD_TIMEOUT_MS=%d", S_HEAD_MS);
    const char *env[] = {"CHATFLEET_ACQUIRE_POLL_MS=200", "CHATFLEET_STREAM_POLL_MS=200",
                         "CHATFLEET_PUBLIC_URL=" S_PUBLIC_URL "/", head, NULL};
    cluster_opts_t o = {.name = "test_gateway_tls",
                        .gateways = 1,
                        .workers = S_NWORKERS,
                        .env = env,
                        .tls = s_ca,
                        .https = 1};
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
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_https_answers_with_the_ca_and_the_url_is_https),
        cmocka_unit_test(test_ask_schema_over_https_prints_the_validated_value),
        cmocka_unit_test(test_wrong_ca_exits_3_with_a_clear_message_and_sends_nothing),
        cmocka_unit_test(test_plain_http_to_the_tls_port_gets_no_answer),
        cmocka_unit_test(test_unfinished_tls_handshake_is_cut_at_the_head_deadline),
        cmocka_unit_test(test_agent_card_advertises_the_configured_url_despite_a_forged_host),
        cmocka_unit_test(test_partial_unreadable_or_wrong_tls_settings_stop_the_gateway),
        cmocka_unit_test(test_only_tls_1_2_and_1_3_are_accepted),
        cmocka_unit_test(test_tls_1_2_offers_ecdhe_with_aead_only),
        cmocka_unit_test(test_config_line_names_the_files_and_no_key),
    };
    int rc = cmocka_run_group_tests(tests, s_setup, s_teardown);
    curl_global_cleanup();
    return rc;
}
