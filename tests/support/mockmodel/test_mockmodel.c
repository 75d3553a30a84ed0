/*
 * test_mockmodel: chatfleet-mockmodel as a process (its path is argv[1]), driven over real
 * sockets: concurrent streams through libcurl's multi interface carry every chunk, the stop,
 * the usage and [DONE], and take at least their duration; directives and headers set the
 * duration and chunk count; pipelined, partial and 100-continue requests are answered; a
 * stalled request gets no byte; bad input gets an OpenAI-shaped error; /stats counts it all.
 */
#include "mem.h"
#include "proc.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define DEFAULT_DURATION_MS 600
#define DEFAULT_CHUNKS      5
#define WAIT_MS             10000 /* the longest any condition is polled for */

static const char *s_bin;
static pid_t s_pid;
static int s_port;
static char s_base[64];
static char s_log[128];

static int64_t s_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_pause_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int s_setup(void **state) {
    (void)state;
    snprintf(s_log, sizeof s_log, "/tmp/cf-mockmodel-%d.log", (int)getpid());
    unlink(s_log);
    char dur[16];
    char chunks[16];
    snprintf(dur, sizeof dur, "%d", DEFAULT_DURATION_MS);
    snprintf(chunks, sizeof chunks, "%d", DEFAULT_CHUNKS);
    char *argv[] = {(char *)s_bin, "--listen", "127.0.0.1:0", "--duration-ms",
                    dur,           "--chunks", chunks,        NULL};
    s_pid = proc_spawn(argv, NULL, s_log);
    /* The port comes from the "listening port=N" line (port 0 asks the kernel for one). */
    for (int64_t deadline = s_ms() + WAIT_MS; s_ms() < deadline && !s_port; s_pause_ms(10)) {
        FILE *f = fopen(s_log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            if (!strncmp(line, "listening port=", 15)) {
                s_port = (int)strtol(line + 15, NULL, 10);
            }
        }
        if (f) {
            fclose(f);
        }
    }
    if (!s_port) {
        fprintf(stderr, "chatfleet-mockmodel did not print its port (log %s)\n", s_log);
        return -1;
    }
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%d", s_port);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int rc = proc_stop(s_pid, 5000);
    if (rc != 0) {
        fprintf(stderr, "chatfleet-mockmodel exited with %d (log %s)\n", rc, s_log);
        return -1;
    }
    unlink(s_log);
    return 0;
}

/* GET /stats as a JSON object (the caller decrefs). */
static json_t *s_stats(void) {
    char url[128];
    snprintf(url, sizeof url, "%s/stats", s_base);
    proc_http_t r = {0};
    assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    assert_non_null(j);
    return j;
}

static long long s_stat(const char *name) {
    json_t *j = s_stats();
    json_t *v = json_object_get(j, name);
    assert_true(json_is_integer(v));
    long long n = (long long)json_integer_value(v);
    json_decref(j);
    return n;
}

/* Polls /stats until the counter equals want, for up to WAIT_MS. */
static void s_wait_stat(const char *name, long long want) {
    int64_t deadline = s_ms() + WAIT_MS;
    long long got = s_stat(name);
    while (got != want && s_ms() < deadline) {
        s_pause_ms(10);
        got = s_stat(name);
    }
    assert_int_equal(got, want);
}

static char *s_chat_body(const char *text, bool stream) {
    json_t *b = json_pack("{s:s, s:b, s:{s:b}, s:[{s:s, s:s}, {s:s, s:s}]}", "model", "mock-model",
                          "stream", stream, "stream_options", "include_usage", 1, "messages",
                          "role", "system", "content", "be brief", "role", "user", "content", text);
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

/* --- One HTTP transfer through libcurl. --- */

typedef struct {
    CURL *h;
    struct curl_slist *headers;
    char *req_body;
    char *body;
    size_t len;
    int64_t t0;
    int64_t t_end;
    bool done;
    CURLcode rc;
    long status;
} s_xfer_t;

static size_t s_on_data(char *p, size_t size, size_t n, void *ud) {
    s_xfer_t *x = ud;
    x->body = mem_realloc(x->body, x->len + size * n + 1);
    memcpy(x->body + x->len, p, size * n);
    x->len += size * n;
    x->body[x->len] = '\0';
    return size * n;
}

/* A POST of the chat body for text to /v1/chat/completions, with extra headers (NULL-ended). */
static void s_xfer_init(s_xfer_t *x, const char *text, bool stream, const char *const *headers) {
    memset(x, 0, sizeof *x);
    x->h = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/v1/chat/completions", s_base);
    x->req_body = s_chat_body(text, stream);
    x->headers = curl_slist_append(NULL, "Content-Type: application/json");
    for (int i = 0; headers && headers[i]; i++) {
        x->headers = curl_slist_append(x->headers, headers[i]);
    }
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, x->req_body);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, s_on_data);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, (long)WAIT_MS);
    x->t0 = s_ms();
}

static void s_xfer_free(s_xfer_t *x) {
    curl_easy_cleanup(x->h);
    curl_slist_free_all(x->headers);
    free(x->req_body);
    free(x->body);
}

/* Drives the multi handle until every transfer is done, or (when first_bytes) until every
 * transfer has received something. */
static void s_drive(CURLM *multi, s_xfer_t *xs, int n, bool first_bytes) {
    int64_t deadline = s_ms() + WAIT_MS;
    for (;;) {
        int running = 0;
        assert_int_equal(curl_multi_perform(multi, &running), CURLM_OK);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg == CURLMSG_DONE) {
                s_xfer_t *x = NULL;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
                x->done = true;
                x->rc = msg->data.result;
                x->t_end = s_ms();
                curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
            }
        }
        bool all = true;
        for (int i = 0; i < n; i++) {
            all = all && (first_bytes ? xs[i].len > 0 : xs[i].done);
        }
        if (all) {
            return;
        }
        assert_true(s_ms() < deadline);
        assert_int_equal(curl_multi_poll(multi, NULL, 0, 50, NULL), CURLM_OK);
    }
}

/* --- What a client of the OpenAI stream sees (as worker/providers/openai.c reads it). --- */

typedef struct {
    int roles;
    int deltas;
    char text[1024];
    bool stop;
    long long completion_tokens; /* -1: no usage chunk */
    bool done_last;              /* [DONE] came, and it was the last event */
    int after_done;
} s_sse_t;

static void s_sse_read(const char *body, s_sse_t *out) {
    memset(out, 0, sizeof *out);
    out->completion_tokens = -1;
    bool done = false;
    for (const char *p = body; p && *p;) {
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        assert_memory_equal(p, "data: ", 6);
        const char *data = p + 6;
        size_t dlen = (size_t)(end - data);
        if (done) {
            out->after_done++;
        } else if (dlen == 6 && !memcmp(data, "[DONE]", 6)) {
            done = true;
        } else {
            json_t *chunk = json_loadb(data, dlen, 0, NULL);
            assert_true(json_is_object(chunk));
            json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
            json_t *delta = json_object_get(choice, "delta");
            const char *text = json_string_value(json_object_get(delta, "content"));
            if (json_object_get(delta, "role")) {
                out->roles++;
            }
            if (text && text[0]) {
                out->deltas++;
                strncat(out->text, text, sizeof out->text - strlen(out->text) - 1);
            }
            const char *fin = json_string_value(json_object_get(choice, "finish_reason"));
            if (fin && !strcmp(fin, "stop")) {
                out->stop = true;
            }
            json_t *usage = json_object_get(chunk, "usage");
            if (json_is_object(usage)) {
                out->completion_tokens =
                    (long long)json_integer_value(json_object_get(usage, "completion_tokens"));
                assert_true(json_integer_value(json_object_get(usage, "prompt_tokens")) > 0);
            }
            json_decref(chunk);
        }
        p = end + 2;
    }
    out->done_last = done && out->after_done == 0;
}

static void s_expect_text(const char *text, int chunks) {
    char want[1024] = "";
    for (int k = 1; k <= chunks; k++) {
        char w[32];
        snprintf(w, sizeof w, "%stok%d", k > 1 ? " " : "", k);
        strncat(want, w, sizeof want - strlen(want) - 1);
    }
    assert_string_equal(text, want);
}

/* A whole stream as the client must see it: chunks deltas, stop, usage, [DONE] last. */
static void s_expect_stream(const s_xfer_t *x, int chunks) {
    assert_int_equal(x->rc, CURLE_OK);
    assert_int_equal(x->status, 200);
    s_sse_t sse;
    s_sse_read(x->body, &sse);
    assert_int_equal(sse.roles, 1);
    assert_int_equal(sse.deltas, chunks);
    s_expect_text(sse.text, chunks);
    assert_true(sse.stop);
    assert_int_equal(sse.completion_tokens, chunks);
    assert_true(sse.done_last);
}

/* --- Tests. --- */

static void test_concurrent_streams_carry_every_chunk_and_take_their_duration(void **state) {
    (void)state;
    enum { N = 8 };
    long long completed0 = s_stat("replies_completed");
    CURLM *multi = curl_multi_init();
    s_xfer_t xs[N];
    int want_ms[N];
    int want_chunks[N];
    for (int i = 0; i < N; i++) {
        char text[128];
        /* Half set their own duration and chunk count; the rest take the defaults. */
        want_ms[i] = i % 2 ? 400 + 100 * i : DEFAULT_DURATION_MS;
        want_chunks[i] = i % 2 ? 3 + i : DEFAULT_CHUNKS;
        if (i % 2) {
            snprintf(text, sizeof text, "hello [mock:duration %d] [mock:chunks %d]", want_ms[i],
                     want_chunks[i]);
        } else {
            snprintf(text, sizeof text, "hello %d", i);
        }
        s_xfer_init(&xs[i], text, true, NULL);
        curl_multi_add_handle(multi, xs[i].h);
    }
    /* Every stream has begun (its role chunk came at once) and none can have ended. */
    s_drive(multi, xs, N, true);
    json_t *st = s_stats();
    assert_int_equal(json_integer_value(json_object_get(st, "replies_active")), N);
    assert_true(json_integer_value(json_object_get(st, "open")) >= N + 1);
    assert_true(json_integer_value(json_object_get(st, "peak_replies")) >= N);
    json_decref(st);
    s_drive(multi, xs, N, false);
    for (int i = 0; i < N; i++) {
        s_expect_stream(&xs[i], want_chunks[i]);
        /* Pacing: the last delta leaves at start + duration, never earlier. */
        assert_true(xs[i].t_end - xs[i].t0 >= want_ms[i]);
        curl_multi_remove_handle(multi, xs[i].h);
        s_xfer_free(&xs[i]);
    }
    curl_multi_cleanup(multi);
    st = s_stats();
    assert_int_equal(json_integer_value(json_object_get(st, "replies_active")), 0);
    assert_int_equal(json_integer_value(json_object_get(st, "replies_completed")), completed0 + N);
    json_decref(st);
}

static void s_one(const char *text, bool stream, const char *const *headers, s_xfer_t *x) {
    CURLM *multi = curl_multi_init();
    s_xfer_init(x, text, stream, headers);
    curl_multi_add_handle(multi, x->h);
    s_drive(multi, x, 1, false);
    curl_multi_remove_handle(multi, x->h);
    curl_multi_cleanup(multi);
}

static void test_a_header_overrides_the_directive(void **state) {
    (void)state;
    const char *headers[] = {"x-mock-duration-ms: 0", "x-mock-chunks: 3", NULL};
    s_xfer_t x;
    s_one("hi [mock:duration 8000] [mock:chunks 9]", true, headers, &x);
    s_expect_stream(&x, 3);
    assert_true(x.t_end - x.t0 < 8000);
    s_xfer_free(&x);
}

static void test_a_plain_request_gets_one_completion_after_its_duration(void **state) {
    (void)state;
    s_xfer_t x;
    s_one("hi [mock:duration 300] [mock:chunks 4]", false, NULL, &x);
    assert_int_equal(x.rc, CURLE_OK);
    assert_int_equal(x.status, 200);
    assert_true(x.t_end - x.t0 >= 300);
    json_t *doc = json_loads(x.body, 0, NULL);
    json_t *msg = json_object_get(json_array_get(json_object_get(doc, "choices"), 0), "message");
    s_expect_text(json_string_value(json_object_get(msg, "content")), 4);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(doc, "usage"), "completion_tokens")), 4);
    json_decref(doc);
    s_xfer_free(&x);
}

/* --- Raw sockets, for what libcurl will not do: pipelining, torn writes. --- */

static int s_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = WAIT_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void s_write_all(int fd, const char *p, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* Reads until want appears (want NULL: until EOF); returns everything read (caller frees). */
static char *s_read_until(int fd, const char *want) {
    size_t cap = 65536;
    size_t len = 0;
    char *buf = mem_alloc(cap + 1);
    buf[0] = '\0';
    while (!want || !strstr(buf, want)) {
        assert_true(len < cap);
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        assert_true(n >= 0); /* a timeout (-1) fails the test */
        if (n == 0) {
            assert_null(want);
            break;
        }
        len += (size_t)n;
        buf[len] = '\0';
    }
    return buf;
}

static char *s_post_head(const char *body, const char *extra) {
    return mem_printf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n%s\r\n",
                      strlen(body), extra);
}

static void test_pipelined_requests_are_answered_in_order(void **state) {
    (void)state;
    char *body = s_chat_body("pipelined", true);
    char *post = s_post_head(body, "x-mock-duration-ms: 50\r\nx-mock-chunks: 2\r\n");
    char *all = mem_printf("GET /stats HTTP/1.1\r\nHost: x\r\n\r\n%s%sGET /healthz HTTP/1.1\r\n"
                           "Host: x\r\nConnection: close\r\n\r\n",
                           post, body);
    int fd = s_connect();
    s_write_all(fd, all, strlen(all));
    char *got = s_read_until(fd, NULL); /* the server closes after the third */
    close(fd);
    const char *stats = strstr(got, "\"peak_open\"");
    const char *done = strstr(got, "data: [DONE]");
    const char *ok = strstr(got, "\r\n\r\nok\n");
    assert_non_null(stats);
    assert_non_null(done);
    assert_non_null(ok);
    assert_true(stats < done && done < ok);
    assert_non_null(strstr(got, "Transfer-Encoding: chunked"));
    assert_non_null(strstr(got, "\r\n0\r\n\r\n")); /* the chunked body's end */
    free(got);
    free(all);
    free(post);
    free(body);
}

static void test_torn_head_and_body_with_expect_continue(void **state) {
    (void)state;
    char *body = s_chat_body("torn [mock:duration 20] [mock:chunks 2]", true);
    char *head = s_post_head(body, "Expect: 100-continue\r\nConnection: close\r\n");
    int fd = s_connect();
    /* Three bytes at a time, so the server reads the head in many pieces. */
    for (size_t i = 0; i < strlen(head); i += 3) {
        size_t n = strlen(head) - i < 3 ? strlen(head) - i : 3;
        s_write_all(fd, head + i, n);
        s_pause_ms(1);
    }
    free(s_read_until(fd, "HTTP/1.1 100 Continue\r\n\r\n"));
    size_t half = strlen(body) / 2;
    s_write_all(fd, body, half);
    s_pause_ms(20);
    s_write_all(fd, body + half, strlen(body) - half);
    char *got = s_read_until(fd, NULL);
    close(fd);
    assert_non_null(strstr(got, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(got, "\"content\":\" tok2\""));
    assert_non_null(strstr(got, "data: [DONE]"));
    free(got);
    free(head);
    free(body);
}

static void test_a_stalled_request_gets_no_byte_until_the_client_leaves(void **state) {
    (void)state;
    long long stalled0 = s_stat("stalled");
    CURLM *multi = curl_multi_init();
    s_xfer_t x;
    s_xfer_init(&x, "wait [mock:stall]", true, NULL);
    curl_multi_add_handle(multi, x.h);
    /* Drive the transfer until the server holds the request, then 300 ms more. */
    int64_t deadline = s_ms() + WAIT_MS;
    int64_t until = 0;
    while (!until || s_ms() < until) {
        int running = 0;
        assert_int_equal(curl_multi_perform(multi, &running), CURLM_OK);
        curl_multi_poll(multi, NULL, 0, 20, NULL);
        if (!until && s_stat("stalled") == stalled0 + 1) {
            until = s_ms() + 300;
        }
        assert_true(s_ms() < deadline);
    }
    assert_int_equal(x.len, 0);
    long code = 0;
    curl_easy_getinfo(x.h, CURLINFO_RESPONSE_CODE, &code);
    assert_int_equal(code, 0); /* not even a status line */
    curl_multi_remove_handle(multi, x.h);
    s_xfer_free(&x); /* closes the connection */
    curl_multi_cleanup(multi);
    s_wait_stat("stalled", stalled0);
}

static void test_a_client_leaving_mid_stream_aborts_its_reply(void **state) {
    (void)state;
    long long aborted0 = s_stat("replies_aborted");
    long long active0 = s_stat("replies_active");
    CURLM *multi = curl_multi_init();
    s_xfer_t x;
    s_xfer_init(&x, "long [mock:duration 8000]", true, NULL);
    curl_multi_add_handle(multi, x.h);
    s_drive(multi, &x, 1, true);
    curl_multi_remove_handle(multi, x.h);
    s_xfer_free(&x);
    curl_multi_cleanup(multi);
    s_wait_stat("replies_aborted", aborted0 + 1);
    assert_int_equal(s_stat("replies_active"), active0);
}

static void s_expect_error(const char *method, const char *path, const char *body, long status) {
    char url[192];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    proc_http_t r = {0};
    assert_int_equal(proc_http(method, url, NULL, body, &r), 0);
    assert_int_equal(r.status, status);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_true(json_is_string(json_object_get(json_object_get(j, "error"), "message")));
    json_decref(j);
    proc_http_free(&r);
}

static void test_bad_input_gets_an_openai_error(void **state) {
    (void)state;
    long long errors0 = s_stat("errors");
    s_expect_error("POST", "/v1/chat/completions", "{not json", 400);
    s_expect_error("POST", "/v1/chat/completions", "{\"messages\":[]}", 400);
    char *zero = s_chat_body("[mock:chunks 0]", true);
    s_expect_error("POST", "/chat/completions", zero, 400);
    free(zero);
    s_expect_error("GET", "/v1/chat/completions", NULL, 405);
    s_expect_error("GET", "/nowhere", NULL, 404);
    /* A head over 16 KiB: 431, and the connection is closed (its end is unknown). */
    int fd = s_connect();
    char *big = mem_alloc(20000);
    memset(big, 'a', 19999);
    big[19999] = '\0';
    char *req = mem_printf("GET /stats HTTP/1.1\r\nX-Big: %s\r\n\r\n", big);
    s_write_all(fd, req, strlen(req));
    char *got = s_read_until(fd, NULL);
    close(fd);
    assert_non_null(strstr(got, "HTTP/1.1 431"));
    free(got);
    free(req);
    free(big);
    assert_int_equal(s_stat("errors"), errors0 + 6);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_mockmodel PATH-TO-chatfleet-mockmodel\n");
        return 2;
    }
    s_bin = argv[1];
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_streams_carry_every_chunk_and_take_their_duration),
        cmocka_unit_test(test_a_header_overrides_the_directive),
        cmocka_unit_test(test_a_plain_request_gets_one_completion_after_its_duration),
        cmocka_unit_test(test_pipelined_requests_are_answered_in_order),
        cmocka_unit_test(test_torn_head_and_body_with_expect_continue),
        cmocka_unit_test(test_a_stalled_request_gets_no_byte_until_the_client_leaves),
        cmocka_unit_test(test_a_client_leaving_mid_stream_aborts_its_reply),
        cmocka_unit_test(test_bad_input_gets_an_openai_error),
    };
    int rc = cmocka_run_group_tests(tests, s_setup, s_teardown);
    curl_global_cleanup();
    return rc;
}
