/*
 * The worker's event loop (worker/providers/evloop.h) against a real HTTP server, the mock
 * model (tests/support/mockmodel): many transfers at once are spread over several libcurl
 * multi handles and every one ends once; a transfer removed before its end gives its place
 * back; calls one after another keep reusing one connection.
 */
#include "evloop.h"
#include "id.h"
#include "mem.h"
#include "proc.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define S_WAVE     300   /* more than two multi handles' fill */
#define S_REPLY_MS 500   /* each reply's duration: the whole wave is in flight at once */
#define S_SERIAL   10    /* calls one after another */
#define S_WAIT_MS  30000 /* the longest a loop is run for one expectation */

static pid_t s_pid;
static char s_log[128];
static char s_url[96];
static char s_stats_url[96];

static int s_setup(void **state) {
    (void)state;
    char bin[1024];
    proc_build_path(NULL, "tests/chatfleet-mockmodel", bin, sizeof bin);
    snprintf(s_log, sizeof s_log, "/tmp/cf-evloop-%d.log", (int)getpid());
    unlink(s_log);
    char *argv[] = {bin, "--listen", "127.0.0.1:0", "--chunks", "2", NULL};
    s_pid = proc_spawn(argv, NULL, s_log);
    int port = 0;
    for (int64_t end = id_now_ms() + S_WAIT_MS; id_now_ms() < end && !port; usleep(10000)) {
        char *text = proc_file_text(s_log);
        const char *at = strstr(text, "listening port=");
        port = at ? (int)strtol(at + 15, NULL, 10) : 0;
        free(text);
    }
    if (!port) {
        fprintf(stderr, "chatfleet-mockmodel did not print its port (log %s)\n", s_log);
        return -1;
    }
    snprintf(s_url, sizeof s_url, "http://127.0.0.1:%d/v1/chat/completions", port);
    snprintf(s_stats_url, sizeof s_stats_url, "http://127.0.0.1:%d/stats", port);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int rc = proc_stop(s_pid, 5000);
    unlink(s_log);
    return rc == 0 ? 0 : -1;
}

/* The mock's counter name from GET /stats. */
static long long s_stat(const char *name) {
    proc_http_t r = {0};
    assert_int_equal(proc_http("GET", s_stats_url, NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    long long v = json_integer_value(json_object_get(j, name));
    json_decref(j);
    proc_http_free(&r);
    return v;
}

/* One chat completion request in flight. */
typedef struct {
    CURL *easy;
    struct curl_slist *hdrs;
    int ended; /* times its done callback ran */
    CURLcode result;
    long status;
    long connects; /* new connections it made (0: it reused one) */
} s_call_t;

static size_t s_discard(char *p, size_t size, size_t n, void *arg) {
    (void)p;
    (void)arg;
    return size * n;
}

static void s_done(void *arg, CURLcode result) {
    s_call_t *c = arg;
    c->ended++;
    c->result = result;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
    curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &c->connects);
}

/* A call of reply_ms; keep: its connection may stay open for the next call. */
static void s_start(evloop_t *loop, s_call_t *c, int reply_ms, bool keep) {
    char dur[48];
    snprintf(dur, sizeof dur, "x-mock-duration-ms: %d", reply_ms);
    c->hdrs = curl_slist_append(NULL, "content-type: application/json");
    c->hdrs = curl_slist_append(c->hdrs, dur);
    c->easy = curl_easy_init();
    assert_non_null(c->easy);
    curl_easy_setopt(c->easy, CURLOPT_URL, s_url);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS,
                     "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, s_discard);
    curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->easy, CURLOPT_FORBID_REUSE, keep ? 0L : 1L);
    evloop_curl_add(loop, c->easy, s_done, c);
}

static void s_free(s_call_t *c) {
    curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->hdrs);
}

/* Runs the loop until every call of calls[0..n) has ended (or the wait runs out). */
static void s_run_until_ended(evloop_t *loop, s_call_t *calls, int n) {
    for (int64_t end = id_now_ms() + S_WAIT_MS; id_now_ms() < end;) {
        int ended = 0;
        for (int i = 0; i < n; i++) {
            ended += calls[i].ended > 0;
        }
        if (ended == n) {
            return;
        }
        evloop_run_once(loop, 50);
    }
    fail_msg("calls still running after %d ms", S_WAIT_MS);
}

static void test_a_wave_is_spread_over_multi_handles_and_every_call_ends_once(void **state) {
    (void)state;
    evloop_t *loop = evloop_new();
    s_call_t *calls = mem_calloc(S_WAVE, sizeof *calls);
    for (int i = 0; i < S_WAVE; i++) {
        s_start(loop, &calls[i], S_REPLY_MS, true);
    }
    evloop_stats_t st;
    evloop_stats(loop, &st);
    assert_int_equal(st.transfers, S_WAVE);
    assert_int_equal(st.multis, (S_WAVE + EVLOOP_MULTI_FILL - 1) / EVLOOP_MULTI_FILL);
    s_run_until_ended(loop, calls, S_WAVE);
    for (int i = 0; i < S_WAVE; i++) {
        assert_int_equal(calls[i].ended, 1);
        assert_int_equal(calls[i].result, CURLE_OK);
        assert_int_equal(calls[i].status, 200);
        s_free(&calls[i]);
    }
    evloop_stats(loop, &st);
    assert_int_equal(st.transfers, 0);
    free(calls);
    evloop_destroy(&loop);
    assert_null(loop);
}

static void test_a_removed_call_gives_its_place_back(void **state) {
    (void)state;
    evloop_t *loop = evloop_new();
    enum { S_N = EVLOOP_MULTI_FILL + 1 };
    s_call_t *calls = mem_calloc(S_N, sizeof *calls);
    for (int i = 0; i < S_N - 1; i++) {
        s_start(loop, &calls[i], S_REPLY_MS, true);
    }
    /* One handle is full; removing a call before its end frees a place in it, so the next
     * call needs no second handle. */
    evloop_curl_remove(loop, calls[0].easy);
    s_start(loop, &calls[S_N - 1], S_REPLY_MS, true);
    evloop_stats_t st;
    evloop_stats(loop, &st);
    assert_int_equal(st.multis, 1);
    assert_int_equal(st.transfers, S_N - 1);
    s_run_until_ended(loop, calls + 1, S_N - 1);
    assert_int_equal(calls[0].ended, 0);
    for (int i = 0; i < S_N; i++) {
        s_free(&calls[i]);
    }
    free(calls);
    evloop_destroy(&loop);
}

static void test_calls_one_after_another_reuse_one_connection(void **state) {
    (void)state;
    evloop_t *loop = evloop_new();
    /* More handles than one, as after a wave (whose connections close): a lone call still
     * goes where the last one left its connection idle. */
    s_call_t *wave = mem_calloc(S_WAVE, sizeof *wave);
    for (int i = 0; i < S_WAVE; i++) {
        s_start(loop, &wave[i], 1, false);
    }
    s_run_until_ended(loop, wave, S_WAVE);
    long long accepted = s_stat("accepted");
    s_call_t calls[S_SERIAL] = {0};
    for (int i = 0; i < S_SERIAL; i++) {
        s_start(loop, &calls[i], 1, true);
        s_run_until_ended(loop, &calls[i], 1);
        assert_int_equal(calls[i].result, CURLE_OK);
        assert_int_equal(calls[i].status, 200);
    }
    int fresh = 0;
    for (int i = 0; i < S_SERIAL; i++) {
        fresh += calls[i].connects > 0;
        s_free(&calls[i]);
    }
    assert_true(fresh <= 1);
    /* The stats request's own connection is the one more. */
    assert_true(s_stat("accepted") - accepted <= 1 + fresh);
    for (int i = 0; i < S_WAVE; i++) {
        s_free(&wave[i]);
    }
    free(wave);
    evloop_destroy(&loop);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_wave_is_spread_over_multi_handles_and_every_call_ends_once),
        cmocka_unit_test(test_a_removed_call_gives_its_place_back),
        cmocka_unit_test(test_calls_one_after_another_reuse_one_connection),
    };
    int rc = cmocka_run_group_tests_name("evloop", tests, s_setup, s_teardown);
    curl_global_cleanup();
    return rc;
}
