/*
 * The gateway's admission at the request head, end to end on real processes (httpd.h): a
 * client trickling its head is cut at the head deadline while others are served; a client
 * address at its connection cap gets 503 with Retry-After, and is served again once it
 * closes some; an unauthenticated POST declaring a 1 MiB body gets 401 before any body byte
 * and hundreds of them cost the gateway no memory; a path cannot forge a log line; and 2,000
 * SSE streams on 20 running chats all see the live parts and the answer on a gateway of a few
 * threads. Three clusters, because the cases need limits that would disturb one another.
 */
#define _GNU_SOURCE /* strcasestr */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"
#include "clusterlog.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "ssefan.h"

#define HEAD_TIMEOUT_MS 1000 /* cluster A's head deadline */
#define PER_ADDRESS_MAX 16   /* cluster B's per-address cap */
#define STREAM_CHATS    20
/* Under AddressSanitizer every process runs several times slower and freed memory stays
 * resident (its quarantine): the sanitized run checks memory safety with fewer streams and
 * leaves the memory bound to the plain run. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifdef SANITIZED
#define STREAMS_PER_CHAT 20
#else
#define STREAMS_PER_CHAT 100
#endif
#define GATEWAY_THREADS 64      /* the most threads the gateway may have with 2,000 streams */
#define BODY_RSS_MAX_KB 8192    /* VmHWM growth allowed for 500 refused 1 MiB uploads */
#define RESPONSE_MAX    16384   /* a raw response read by the test (its head and a bit) */
#define DECLARED_BODY   1048576 /* the Content-Length of the unauthenticated POSTs */
#define SENT_BODY       262144  /* body bytes each of them offers (non-blocking) */
#define BODY_BATCH      100
#define BODY_BATCHES    5

#define S_AUTH_CACHE_MS "2000" /* group a's CHATFLEET_AUTH_CACHE_MS */
static cluster_t *s_cluster;

/* The port of a cluster_url ("http://127.0.0.1:PORT"). */
static int s_port(int gw) {
    const char *u = cluster_url(s_cluster, gw);
    return (int)strtol(strrchr(u, ':') + 1, NULL, 10);
}

/* A blocking TCP connection to the gateway (the test fails if it cannot connect). */
static int s_dial(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port(0))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fail_msg("connect: %s", strerror(errno));
    }
    return fd;
}

static void s_send_all(int fd, const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) {
            fail_msg("send: %s", strerror(errno));
        }
        s += w;
        n -= (size_t)w;
    }
}

/* Reads from fd until its response head is in (or the peer closes) within timeout_ms; buf
 * (RESPONSE_MAX) holds what was read. Returns the status, 0 when the socket was closed
 * without one, -1 at the deadline. */
static int s_read_status(int fd, char *buf, int timeout_ms) {
    size_t len = 0;
    buf[0] = '\0';
    int64_t deadline = id_now_ms() + timeout_ms;
    while (!strstr(buf, "\r\n\r\n")) {
        int64_t left = deadline - id_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            return -1;
        }
        ssize_t r = recv(fd, buf + len, RESPONSE_MAX - 1 - len, 0);
        if (r <= 0) {
            break;
        }
        len += (size_t)r;
        buf[len] = '\0';
        if (len == RESPONSE_MAX - 1) {
            break;
        }
    }
    return strncmp(buf, "HTTP/1.", 7) == 0 ? (int)strtol(buf + 9, NULL, 10) : 0;
}

/* The logfmt keys named "event" on line (values may be quoted with backslash escapes). */
static int s_event_keys(const char *line, char *first, size_t first_size) {
    int n = 0;
    const char *p = line;
    first[0] = '\0';
    while (*p) {
        while (*p == ' ') {
            p++;
        }
        const char *key = p;
        while (*p && *p != '=' && *p != ' ') {
            p++;
        }
        size_t kl = (size_t)(p - key);
        if (*p != '=') {
            continue;
        }
        p++;
        const char *val = p;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1]) {
                    p++;
                }
            }
            if (*p) {
                p++;
            }
        } else {
            while (*p && *p != ' ') {
                p++;
            }
        }
        if (kl == 5 && !strncmp(key, "event", 5)) {
            if (n++ == 0) {
                snprintf(first, first_size, "%.*s", (int)(p - val), val);
            }
        }
    }
    return n;
}

static int s_setup_a(void **u) {
    (void)u;
    ssefan_raise_nofile();
    s_cluster = cluster_new(&(cluster_opts_t){
        .name = "test_gateway_admission_a",
        .gateways = 1,
        .workers = 0,
        .env = (const char *[]){"CHATFLEET_HTTP_HEAD_TIMEOUT_MS=1000",
                                "CHATFLEET_AUTH_CACHE_MS=" S_AUTH_CACHE_MS, NULL}});
    return 0;
}

static int s_setup_b(void **u) {
    (void)u;
    s_cluster = cluster_new(
        &(cluster_opts_t){.name = "test_gateway_admission_b",
                          .gateways = 1,
                          .workers = 0,
                          .env = (const char *[]){"CHATFLEET_HTTP_MAX_PER_ADDRESS=16", NULL}});
    return 0;
}

static int s_setup_c(void **u) {
    (void)u;
    ssefan_raise_nofile(); /* the gateway inherits it: 2,000 streams are 2,000 descriptors */
    s_cluster = cluster_new(
        &(cluster_opts_t){.name = "test_gateway_admission_c",
                          .gateways = 1,
                          .workers = 1,
                          .env = (const char *[]){"CHATFLEET_HTTP_MAX_PER_ADDRESS=5000",
                                                  "CHATFLEET_STREAMS_PER_USER=5000", NULL}});
    return 0;
}

static int s_teardown(void **u) {
    (void)u;
    cluster_destroy(&s_cluster);
    return 0;
}

static void test_a_trickled_head_is_cut_at_the_deadline_while_others_are_served(void **u) {
    (void)u;
    const char *head = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
                       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    char url[128];
    snprintf(url, sizeof url, "%s/readyz", cluster_url(s_cluster, 0));
    int fd = s_dial();
    int64_t t0 = id_now_ms();
    int64_t closed_ms = -1;
    bool served = false;
    for (size_t i = 0; i < strlen(head) && closed_ms < 0; i++) {
        if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1) {
            closed_ms = id_now_ms() - t0;
            break;
        }
        /* The pace of the trickle is this wait for the server to close (200 ms). */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) > 0) {
            char b[64];
            if (recv(fd, b, sizeof b, 0) <= 0) {
                closed_ms = id_now_ms() - t0;
            }
        }
        if (i == 2) {
            proc_http_t r;
            assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
            assert_int_equal(r.status, 200);
            proc_http_free(&r);
            served = true;
        }
    }
    close(fd);
    assert_true(served);
    if (closed_ms < 0) {
        fail_msg("the slow head was never cut (trickled %zu bytes)", strlen(head));
    }
    printf("slow head cut after %lld ms (deadline %d ms)\n", (long long)closed_ms, HEAD_TIMEOUT_MS);
    assert_true(closed_ms >= HEAD_TIMEOUT_MS - 100);
    assert_true(closed_ms <= 2500);
    int64_t deadline = id_now_ms() + 3000;
    const char *log = cluster_log(s_cluster, CLUSTER_GATEWAY, 0);
    while (clusterlog_count(log, "event=http_cut", "reason=head_timeout") < 1 &&
           id_now_ms() < deadline) {
        poll(NULL, 0, 50);
    }
    assert_true(clusterlog_count(log, "event=http_cut", "reason=head_timeout") >= 1);
}

static void
test_an_unauthenticated_1mib_post_gets_401_before_its_body_and_costs_no_memory(void **u) {
    (void)u;
    char head[256];
    snprintf(head, sizeof head,
             "POST /api/v2/chats HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             "Content-Length: %d\r\n\r\n",
             DECLARED_BODY);
    char buf[RESPONSE_MAX];
    /* No body byte is ever sent: a server that waited for the body would time out here. */
    int fd = s_dial();
    s_send_all(fd, head);
    int64_t t0 = id_now_ms();
    assert_int_equal(s_read_status(fd, buf, 2000), 401);
    printf("401 after %lld ms with no body sent\n", (long long)(id_now_ms() - t0));
    close(fd);

    pid_t gw = cluster_pid(s_cluster, CLUSTER_GATEWAY, 0);
    char *body = mem_alloc(SENT_BODY);
    memset(body, 'x', SENT_BODY);
    long hwm0 = 0;
    long rss0 = 0;
    int fds[BODY_BATCH];
    for (int b = 0; b <= BODY_BATCHES; b++) {
        if (b == 1) { /* batch 0 warms the gateway's pools and allocator up */
            hwm0 = proc_status_value(gw, "VmHWM:");
            rss0 = proc_status_value(gw, "VmRSS:");
        }
        for (int i = 0; i < BODY_BATCH; i++) {
            fds[i] = s_dial();
            s_send_all(fds[i], head);
            size_t off = 0; /* as much body as the socket takes now, never waiting */
            ssize_t w;
            while (off < SENT_BODY && (w = send(fds[i], body + off, SENT_BODY - off,
                                                MSG_NOSIGNAL | MSG_DONTWAIT)) > 0) {
                off += (size_t)w;
            }
        }
        for (int i = 0; i < BODY_BATCH; i++) {
            int st = s_read_status(fds[i], buf, 10000);
            if (st != 401) {
                fail_msg("batch %d connection %d: want 401, got %d", b, i, st);
            }
        }
        for (int i = 0; i < BODY_BATCH; i++) {
            close(fds[i]);
        }
    }
    free(body);
    long hwm1 = proc_status_value(gw, "VmHWM:");
    long rss1 = proc_status_value(gw, "VmRSS:");
    printf("gateway VmHWM %ld -> %ld kB, VmRSS %ld -> %ld kB over %d refused uploads\n", hwm0, hwm1,
           rss0, rss1, BODY_BATCH * BODY_BATCHES);
    assert_true(hwm0 > 0 && rss0 > 0);
#ifdef SANITIZED
    printf("sanitized build: the memory bound is checked by the plain build\n");
#else
    assert_true(hwm1 - hwm0 < BODY_RSS_MAX_KB);
    assert_true(rss1 - rss0 < BODY_RSS_MAX_KB);
#endif
}

/* The status of GET /api/v2/chats with token. */
static long s_list_status(const char *token) {
    char url[300];
    snprintf(url, sizeof url, "%s/api/v2/chats?limit=1", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, token, NULL, &r), 0);
    long st = r.status;
    proc_http_free(&r);
    return st;
}

static void test_a_deleted_token_is_refused_within_the_auth_cache_lifetime(void **u) {
    (void)u;
    char token[64];
    snprintf(token, sizeof token, "cache-probe-%lld", (long long)id_now_ms());
    char *id = cluster_sql(s_cluster,
                           "INSERT INTO api_tokens (id, user_id, token_sha256) SELECT"
                           " gen_random_uuid(), user_id, sha256(convert_to('%s', 'UTF8'))"
                           " FROM api_tokens LIMIT 1 RETURNING id",
                           token);
    assert_non_null(id);
    /* Checked once against the database, then kept: the entry's age counts from a moment
     * between these two. */
    int64_t sent = id_now_ms();
    assert_int_equal(s_list_status(token), 200);
    int64_t answered = id_now_ms();
    char *gone = cluster_sql(s_cluster, "DELETE FROM api_tokens WHERE id = '%s' RETURNING id", id);
    assert_non_null(gone);
    free(gone);
    free(id);
    long cached = s_list_status(token);
    int64_t ttl = strtoll(S_AUTH_CACHE_MS, NULL, 10);
    assert_true(id_now_ms() - sent < ttl); /* else the check above proves nothing */
    assert_int_equal(cached, 200);
    /* Refused once the entry is older than the lifetime, and from then on. */
    while (id_now_ms() - answered < ttl + 50) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(s_list_status(token), 401);
    assert_int_equal(s_list_status(token), 401);
    /* A refused token is never kept: it stays refused, and the cluster's own still works. */
    assert_int_equal(s_list_status("never-issued"), 401);
    assert_int_equal(s_list_status(cluster_token(s_cluster)), 200);
}

static void test_a_path_cannot_forge_a_log_line(void **u) {
    (void)u;
    char marker[64];
    snprintf(marker, sizeof marker, "forge%lld", (long long)id_now_ms());
    const char *forms[] = {
        "/api/v2/chats/x%%0Aevent=fence_mismatch%%20marker=%s-lf",
        "/api/v2/chats/x%%0D%%0Aevent=fence_mismatch%%20marker=%s-crlf",
        "/api/v2/chats/x%%22%%20event=fence_mismatch%%20marker=%s-quote%%20x=%%22",
        "/api/v2/chats/x%%5C%%22%%0Aevent=fence_mismatch%%20marker=%s-backslash",
    };
    char buf[RESPONSE_MAX];
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, forms[i], marker);
        char *req = mem_printf("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
        int fd = s_dial();
        s_send_all(fd, req);
        int st = s_read_status(fd, buf, 5000);
        assert_true(st >= 400 && st < 500);
        close(fd);
        free(req);
    }
    const char *log = cluster_log(s_cluster, CLUSTER_GATEWAY, 0);
    int64_t deadline = id_now_ms() + 5000;
    while (clusterlog_count(log, marker, NULL) < 4 && id_now_ms() < deadline) {
        poll(NULL, 0, 50);
    }
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[8192];
    int with_marker = 0;
    while (fgets(line, sizeof line, f)) {
        char ev[128];
        int n = s_event_keys(line, ev, sizeof ev);
        if (n > 0 && !strcmp(ev, "fence_mismatch")) {
            fail_msg("a forged line: %s", line);
        }
        if (strstr(line, marker)) {
            with_marker++;
            if (n != 1 || strcmp(ev, "http_request") != 0) {
                fail_msg("the request's line has %d event keys, the first %s: %s", n, ev, line);
            }
        }
    }
    fclose(f);
    assert_int_equal(with_marker, 4); /* one line per request, none split */
}

/* One burst of one more connection than the cap, all open at once, each sending a request;
 * the number answered 503 (with Retry-After), every other one being served. */
static int s_cap_burst(void) {
    int fds[PER_ADDRESS_MAX + 1];
    for (int i = 0; i <= PER_ADDRESS_MAX; i++) {
        fds[i] = s_dial();
    }
    char buf[RESPONSE_MAX];
    int refused = 0;
    for (int i = 0; i <= PER_ADDRESS_MAX; i++) {
        s_send_all(fds[i], "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    }
    for (int i = 0; i <= PER_ADDRESS_MAX; i++) {
        int st = s_read_status(fds[i], buf, 5000);
        if (st == 503) {
            refused++;
            assert_non_null(strcasestr(buf, "\r\nRetry-After: 1\r\n"));
        } else if (st != 200) {
            fail_msg("connection %d of %d: want 200 or 503, got %d: %s", i + 1, PER_ADDRESS_MAX + 1,
                     st, buf);
        }
    }
    for (int i = 0; i <= PER_ADDRESS_MAX; i++) {
        close(fds[i]);
    }
    return refused;
}

static void test_an_address_at_its_cap_gets_503_with_retry_after_then_is_served(void **u) {
    (void)u;
    /* Which connection is refused depends on the order the I/O threads accept them in, so
     * exactly one must be answered 503. A connection this address closed just before (the
     * harness's readiness probe) counts until the gateway has read its close, so a burst that
     * meets one refuses two: the burst is made again, up to three times. A cap that is off by
     * one refuses two every time; no cap refuses none. */
    int refused = 0;
    for (int round = 0; round < 3; round++) {
        refused = s_cap_burst();
        if (refused <= 1) {
            break;
        }
        poll(NULL, 0, 300);
    }
    if (refused != 1) {
        fail_msg("want exactly one 503 among %d connections from one address (cap %d), got %d",
                 PER_ADDRESS_MAX + 1, PER_ADDRESS_MAX, refused);
    }
    char url[128];
    snprintf(url, sizeof url, "%s/readyz", cluster_url(s_cluster, 0));
    assert_int_equal(proc_wait_http(url, 5000), 0);
}

typedef struct {
    int *assistant; /* per stream: "message" events of the assistant */
} streams_t;

static void s_on_event(void *ctx, int conn, const char *event, const char *data, size_t len,
                       int64_t now_us) {
    (void)len;
    (void)now_us;
    streams_t *st = ctx;
    if (!strcmp(event, "message") && strstr(data, "\"role\":\"assistant\"")) {
        st->assistant[conn]++;
    }
}

static void test_2000_streams_on_20_running_chats_all_see_parts_and_answers(void **u) {
    (void)u;
    const char *prompt = "{\"content\":[{\"type\":\"text\",\"text\":"
                         "\"[sim:slow 100] [sim:words 80] tell me everything\"}]}";
    char url[256];
    char *chats[STREAM_CHATS];
    /* The worker waits until every stream is open, so that each stream is there for the
     * whole reply however slowly a loaded machine opens 2,000 of them. */
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGSTOP);
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    for (int c = 0; c < STREAM_CHATS; c++) {
        proc_http_t r;
        assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), prompt, &r), 0);
        assert_int_equal(r.status, 201);
        json_t *v = json_loads(r.body, 0, NULL);
        chats[c] = mem_strdup(json_string_value(json_object_get(v, "id")));
        json_decref(v);
        proc_http_free(&r);
    }
    int n = STREAM_CHATS * STREAMS_PER_CHAT;
    ssefan_t *fan = ssefan_new(cluster_url(s_cluster, 0), cluster_token(s_cluster));
    assert_non_null(fan);
    streams_t st = {.assistant = mem_calloc((size_t)n, sizeof(int))};
    ssefan_set_handler(fan, s_on_event, &st);
    for (int i = 0; i < n; i++) {
        char path[128];
        snprintf(path, sizeof path, "/api/v2/chats/%s/stream", chats[i % STREAM_CHATS]);
        ssefan_open(fan, path);
    }
    pid_t gw = cluster_pid(s_cluster, CLUSTER_GATEWAY, 0);
    long threads_max = 0;
    int done = 0;
    int64_t t0 = id_now_ms();
    int64_t deadline = t0 + 45000;
    int open = 0;
    while (open < n && id_now_ms() < deadline) {
        assert_true(ssefan_poll(fan, 100) >= 0);
        open = 0;
        for (int i = 0; i < n; i++) {
            open += ssefan_status(fan, i) == 200;
        }
    }
    printf("%d of %d streams open after %lld ms; the worker goes on\n", open, n,
           (long long)(id_now_ms() - t0));
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGCONT);
    while (done < n && id_now_ms() < deadline) {
        assert_true(ssefan_poll(fan, 100) >= 0);
        long th = proc_status_value(gw, "Threads:");
        threads_max = th > threads_max ? th : threads_max;
        done = 0;
        for (int i = 0; i < n; i++) {
            done += ssefan_first_part_us(fan, i) > 0 && st.assistant[i] > 0;
        }
    }
    int no_part = 0;
    int no_answer = 0;
    int not_200 = 0;
    for (int i = 0; i < n; i++) {
        no_part += ssefan_first_part_us(fan, i) == 0;
        no_answer += st.assistant[i] == 0;
        not_200 += ssefan_status(fan, i) != 200;
    }
    printf("%d streams: %d complete after %lld ms (no part %d, no answer %d, not 200 %d, "
           "failed %d, closed %d); gateway peak threads %ld\n",
           n, done, (long long)(id_now_ms() - t0), no_part, no_answer, not_200,
           ssefan_in_state(fan, SSEFAN_FAILED), ssefan_in_state(fan, SSEFAN_CLOSED), threads_max);
    assert_int_equal(kill(gw, 0), 0);
    snprintf(url, sizeof url, "%s/readyz", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    assert_int_equal(not_200, 0);
    assert_int_equal(no_part, 0);
    assert_int_equal(no_answer, 0);
    assert_true(threads_max > 0 && threads_max <= GATEWAY_THREADS);
    ssefan_destroy(&fan);
    free(st.assistant);
    for (int c = 0; c < STREAM_CHATS; c++) {
        free(chats[c]);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest a[] = {
        cmocka_unit_test(test_a_trickled_head_is_cut_at_the_deadline_while_others_are_served),
        cmocka_unit_test(
            test_an_unauthenticated_1mib_post_gets_401_before_its_body_and_costs_no_memory),
        cmocka_unit_test(test_a_path_cannot_forge_a_log_line),
        cmocka_unit_test(test_a_deleted_token_is_refused_within_the_auth_cache_lifetime),
    };
    const struct CMUnitTest b[] = {
        cmocka_unit_test(test_an_address_at_its_cap_gets_503_with_retry_after_then_is_served),
    };
    const struct CMUnitTest c[] = {
        cmocka_unit_test(test_2000_streams_on_20_running_chats_all_see_parts_and_answers),
    };
    int failed = cmocka_run_group_tests_name("head_deadline_auth_log", a, s_setup_a, s_teardown);
    failed += cmocka_run_group_tests_name("per_address_cap", b, s_setup_b, s_teardown);
    failed += cmocka_run_group_tests_name("streams", c, s_setup_c, s_teardown);
    return failed ? 1 : 0;
}
