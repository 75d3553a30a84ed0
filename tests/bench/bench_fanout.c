/*
 * bench_fanout: N SSE clients (ssefan, one thread) on one chat of a running gateway, for
 * tests/bench/streams/run. It opens the streams, prints "READY ..." once every stream has its
 * response head (or the open deadline passed) so the driver can start the worker, then records
 * when each client read each message_part (by seq) until the assistant's message reached
 * every open client or the deadline passed, sampling the gateway's Threads and VmRSS every
 * ~100 ms throughout. Delivery is measured three ways: from the worker's hand-off of a part to
 * each client's read (the chat's prompt asks the sim for [sim:clock], so each text part starts
 * with "@MICROS@ ", the monotonic clock when the sim handed it to the worker's part path; this
 * machine's clients read the same clock); for each seq, from the first client to read it to
 * each client reading it (the fan-out spread); and from the reference client (stream 0)
 * reading it to each other client.
 *
 *   bench_fanout BASE_URL TOKEN CHAT_ID N GATEWAY_PID [DEADLINE_S]
 *
 * Prints one line "RESULT key=value ..." on stdout; progress on stderr. Exit 0 always.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "mem.h"
#include "proc.h"
#include "ssefan.h"

#define SAMPLE_MS    100
#define OPEN_LIMIT_S 120 /* the most the streams may take to open */

typedef struct {
    int32_t *at; /* per seq (1-based): microseconds since t0 of the read, -1 not read */
    int n;
    bool answered;
} client_t;

typedef struct {
    client_t *clients;
    int32_t *lags; /* per first read of a stamped part: read - hand-off, microseconds */
    size_t nlags, lags_cap;
    int64_t t0_us;
    int max_seq;
    int answered;
} fan_t;

static void s_on_event(void *ctx, int conn, const char *event, const char *data, size_t len,
                       int64_t now_us) {
    (void)len;
    fan_t *f = ctx;
    client_t *c = &f->clients[conn];
    if (!strcmp(event, "message")) {
        if (!c->answered && strstr(data, "\"role\":\"assistant\"")) {
            c->answered = true;
            f->answered++;
        }
        return;
    }
    if (strcmp(event, "message_part") != 0) {
        return;
    }
    const char *s = strstr(data, "\"seq\":");
    long seq = s ? strtol(s + 6, NULL, 10) : 0;
    if (seq <= 0 || seq > 1000000) {
        return;
    }
    if (seq > c->n) {
        int n = (int)seq * 2;
        c->at = mem_realloc(c->at, (size_t)(n + 1) * sizeof *c->at);
        for (int i = c->n + 1; i <= n; i++) {
            c->at[i] = -1;
        }
        c->n = n;
    }
    if (c->at[seq] < 0) {
        c->at[seq] = (int32_t)(now_us - f->t0_us);
        const char *stamp = strstr(data, "\"text\":\"@");
        long long at = stamp ? strtoll(stamp + 9, NULL, 10) : 0;
        if (at > 0 && now_us >= at) {
            if (f->nlags == f->lags_cap) {
                f->lags_cap = f->lags_cap ? f->lags_cap * 2 : 4096;
                f->lags = mem_realloc(f->lags, f->lags_cap * sizeof *f->lags);
            }
            int64_t lag = now_us - at;
            f->lags[f->nlags++] = lag > INT32_MAX ? INT32_MAX : (int32_t)lag;
        }
    }
    if (seq > f->max_seq) {
        f->max_seq = (int)seq;
    }
}

static int s_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a;
    int32_t y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static double s_pct_ms(int32_t *v, size_t n, double p) {
    if (n == 0) {
        return -1;
    }
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[k] / 1000.0;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_fanout BASE_URL TOKEN CHAT_ID N GATEWAY_PID [DEADLINE_S]\n");
        return 2;
    }
    long nl = strtol(argv[4], NULL, 10);
    int n = nl > 0 && nl <= 200000 ? (int)nl : 0;
    pid_t gw = (pid_t)strtol(argv[5], NULL, 10);
    long deadline_s = argc > 6 ? strtol(argv[6], NULL, 10) : 120;
    ssefan_t *fan = ssefan_new(argv[1], argv[2]);
    if (!fan || n == 0) {
        fprintf(stderr, "bench_fanout: bad base url or N\n");
        return 2;
    }
    long nofile = ssefan_raise_nofile();
    fan_t f = {.clients = mem_calloc((size_t)n, sizeof(client_t)), .t0_us = ssefan_now_us()};
    ssefan_set_handler(fan, s_on_event, &f);
    char path[256];
    snprintf(path, sizeof path, "/api/v2/chats/%s/stream", argv[3]);
    long rss_idle = proc_status_value(gw, "VmRSS:");
    long rss_peak = rss_idle;
    long threads_peak = proc_status_value(gw, "Threads:");
    for (int i = 0; i < n; i++) {
        ssefan_open(fan, path);
    }
    int64_t next_sample = 0;
    bool gw_died = false;
    /* Phase 1: every stream has its head, or the open deadline passed, or the gateway died. */
    int64_t open_deadline = ssefan_now_us() + OPEN_LIMIT_S * 1000000LL;
    int64_t t_open = ssefan_now_us();
    int pending = n;
    while (pending > 0 && ssefan_now_us() < open_deadline && !gw_died) {
        ssefan_poll(fan, 50);
        pending = ssefan_in_state(fan, SSEFAN_QUEUED) + ssefan_in_state(fan, SSEFAN_CONNECTING);
        if (ssefan_now_us() >= next_sample) {
            next_sample = ssefan_now_us() + SAMPLE_MS * 1000;
            long th = proc_status_value(gw, "Threads:");
            long rss = proc_status_value(gw, "VmRSS:");
            gw_died = th < 0 || kill(gw, 0) != 0;
            threads_peak = th > threads_peak ? th : threads_peak;
            rss_peak = rss > rss_peak ? rss : rss_peak;
        }
    }
    int64_t open_ms = (ssefan_now_us() - t_open) / 1000;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        ok += ssefan_state(fan, i) == SSEFAN_OPEN && ssefan_status(fan, i) == 200;
    }
    printf("READY streams=%d open=%d ms=%lld\n", n, ok, (long long)open_ms);
    fflush(stdout);
    fprintf(stderr, "bench_fanout: %d of %d streams open (200) in %lld ms (nofile %ld)\n", ok, n,
            (long long)open_ms, nofile);
    /* Phase 2: until every stream still open has the answer, or the deadline. */
    int64_t end = ssefan_now_us() + deadline_s * 1000000LL;
    int64_t next_report = ssefan_now_us() + 5000000;
    while (ssefan_now_us() < end) {
        ssefan_poll(fan, 50);
        if (ssefan_now_us() >= next_sample) {
            next_sample = ssefan_now_us() + SAMPLE_MS * 1000;
            long th = proc_status_value(gw, "Threads:");
            long rss = proc_status_value(gw, "VmRSS:");
            if (th < 0 || kill(gw, 0) != 0) {
                gw_died = true;
            }
            threads_peak = th > threads_peak ? th : threads_peak;
            rss_peak = rss > rss_peak ? rss : rss_peak;
        }
        int open = ssefan_in_state(fan, SSEFAN_OPEN);
        if ((f.answered > 0 && f.answered >= open) || open == 0) {
            break;
        }
        if (ssefan_now_us() >= next_report) {
            next_report += 5000000;
            fprintf(stderr, "bench_fanout: open %d, answered %d, max seq %d\n", open, f.answered,
                    f.max_seq);
        }
    }
    /* Delivery: per seq, the first read by any client and the reference client's read. */
    size_t cap = 0;
    for (int i = 0; i < n; i++) {
        cap += (size_t)(f.clients[i].n < f.max_seq ? f.clients[i].n : f.max_seq);
    }
    int32_t *spread = mem_calloc(cap + 1, sizeof *spread);
    int32_t *refd = mem_calloc(cap + 1, sizeof *refd);
    size_t ns = 0;
    size_t nr = 0;
    int all_parts = 0;
    client_t *ref = &f.clients[0];
    for (int s = 1; s <= f.max_seq; s++) {
        int32_t first = -1;
        for (int i = 0; i < n; i++) {
            client_t *c = &f.clients[i];
            if (s <= c->n && c->at[s] >= 0 && (first < 0 || c->at[s] < first)) {
                first = c->at[s];
            }
        }
        int32_t r = s <= ref->n ? ref->at[s] : -1;
        for (int i = 0; i < n && first >= 0; i++) {
            client_t *c = &f.clients[i];
            if (s <= c->n && c->at[s] >= 0) {
                spread[ns++] = c->at[s] - first;
                if (r >= 0 && i != 0) {
                    refd[nr++] = c->at[s] - r;
                }
            }
        }
    }
    for (int i = 0; i < n; i++) {
        client_t *c = &f.clients[i];
        int got = 0;
        for (int s = 1; s <= f.max_seq && s <= c->n; s++) {
            got += c->at[s] >= 0;
        }
        all_parts += f.max_seq > 0 && got == f.max_seq;
    }
    qsort(spread, ns, sizeof *spread, s_cmp);
    qsort(f.lags, f.nlags, sizeof *f.lags, s_cmp);
    qsort(refd, nr, sizeof *refd, s_cmp);
    /* No stamped part read (a sim that does not stamp): the lag figures are "-". */
    char lag[3][24];
    for (int k = 0; k < 3; k++) {
        double v = k == 2 ? (f.nlags ? (double)f.lags[f.nlags - 1] / 1000.0 : -1)
                          : s_pct_ms(f.lags, f.nlags, k == 0 ? 0.50 : 0.99);
        if (f.nlags) {
            snprintf(lag[k], sizeof lag[k], "%.2f", v);
        } else {
            snprintf(lag[k], sizeof lag[k], "-");
        }
    }
    long open_peak_kb = rss_peak - rss_idle;
    printf("RESULT streams=%d open=%d open_ms=%lld parts=%d all_parts=%d answered=%d "
           "lag_p50_ms=%s lag_p99_ms=%s lag_max_ms=%s lags=%zu "
           "spread_p50_ms=%.2f spread_p99_ms=%.2f spread_max_ms=%.2f ref_p50_ms=%.2f "
           "ref_p99_ms=%.2f deliveries=%zu threads_peak=%ld rss_idle_kb=%ld rss_peak_kb=%ld "
           "kb_per_stream=%.1f gateway_alive=%d failed=%d\n",
           n, ok, (long long)open_ms, f.max_seq, all_parts, f.answered, lag[0], lag[1], lag[2],
           f.nlags, s_pct_ms(spread, ns, 0.50), s_pct_ms(spread, ns, 0.99),
           ns ? (double)spread[ns - 1] / 1000.0 : -1, s_pct_ms(refd, nr, 0.50),
           s_pct_ms(refd, nr, 0.99), ns, threads_peak, rss_idle, rss_peak,
           ok > 0 ? (double)open_peak_kb / ok : -1, gw_died ? 0 : kill(gw, 0) == 0,
           ssefan_in_state(fan, SSEFAN_FAILED));
    fflush(stdout);
    free(spread);
    free(refd);
    free(f.lags);
    for (int i = 0; i < n; i++) {
        free(f.clients[i].at);
    }
    free(f.clients);
    ssefan_destroy(&fan);
    return 0;
}
