/*
 * bench_fanout: N SSE clients (ssefan) on one chat of a running gateway, for
 * tests/bench/streams/run, spread over PROCS client processes (forked; each runs one ssefan
 * on its share of the streams, one thread on epoll) so that the client is not what limits the
 * delivery measured. The parent opens nothing: it waits until every process has its streams'
 * response heads (or the open deadline passed) and prints "READY ..." so the driver can start
 * the worker, then samples the gateway's Threads, VmRSS and CPU (utime + stime) and each client
 * process's CPU every ~100 ms until every process is done (its open streams all have the
 * assistant's message, or the deadline passed). Every client records when it read each
 * message_part (by seq) in memory shared with the parent, which merges the shares.
 *
 * Delivery is measured three ways: from the worker's hand-off of a part to each client's read
 * (the chat's prompt asks the sim for [sim:clock], so each text part starts with "@MICROS@ ",
 * the monotonic clock when the sim handed it to the worker's part path; this machine's clients
 * read the same clock); for each seq, from the first client to read it to each client reading
 * it (the fan-out spread); and from the reference client (stream 0) reading it to each other
 * client. The lag is also given for the second half of the parts alone (late_lag): the
 * episode's start, when every stream reads the chat once for the hint that the turn runs, is
 * behind them. The streaming phase is from the first part any client read to the last: the
 * gateway's CPU over it divided by the deliveries (client, seq) in it is its CPU per delivered
 * part; each client process's CPU over it says whether the client kept up.
 *
 *   bench_fanout BASE_URL TOKEN CHAT_ID N GATEWAY_PID [DEADLINE_S [PROCS [PAUSE_MS]]]
 *
 * PAUSE_MS (0: none) makes each client process read in rounds: all that is ready, then a
 * pause of PAUSE_MS in which nothing wakes it. Clients on other machines cost the gateway no
 * context switch; clients on the gateway's own cores that wait in epoll are woken by its
 * writes and preempt it (on 2 shared cores, one wake-up per few writes), so a pause keeps the
 * bench closer to remote clients, and adds at most PAUSE_MS to a lag measured.
 *
 * Prints "READY ...", one "CLIENT k key=value ..." line per process (its share) and one
 * "RESULT key=value ..." line (all of them) on stdout; progress on stderr. Exit 0 always.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mem.h"
#include "proc.h"
#include "ssefan.h"

#define SAMPLE_MS    100
#define OPEN_LIMIT_S 120  /* the most the streams may take to open */
#define SEQ_MAX      1024 /* parts recorded per client; a later seq is not counted */
#define PROCS_MAX    64
#define SAMPLES_MAX  (1 << 16)

/* One client process's share, in shared memory. */
typedef struct {
    int first; /* its clients are first .. first + count - 1 */
    int count;
    pid_t pid;
    atomic_int opened;    /* streams with a 200 head */
    atomic_int open_done; /* its opening phase ended */
    atomic_int answered;  /* its clients that got the assistant's message */
    atomic_int max_seq;
    atomic_int failed;
    atomic_int done;
} share_t;

/* Memory the client processes write and the parent reads. */
typedef struct {
    int64_t t0_us;
    _Atomic int64_t stamp[SEQ_MAX + 1]; /* per seq: the sim's hand-off stamp, 0 unknown */
    share_t share[PROCS_MAX];
} shared_t;

/* In a client process: its share and where its clients' reads go. */
typedef struct {
    shared_t *sh;
    share_t *me;
    int32_t *at; /* the process's rows of the shared matrix: [count][SEQ_MAX + 1] */
    bool *answered;
} child_t;

/* One sample of a process's CPU (clock ticks of utime + stime). */
typedef struct {
    int64_t t_us;
    long ticks;
} cpu_sample_t;

typedef struct {
    cpu_sample_t *v;
    size_t n;
} cpu_series_t;

/* utime + stime of pid in clock ticks, or -1. */
static long s_cpu_ticks(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) {
        return -1;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) {
        return -1;
    }
    return (long)(ut + st);
}

static void s_sample(cpu_series_t *s, pid_t pid, int64_t now) {
    long t = s_cpu_ticks(pid);
    if (t >= 0 && s->n < SAMPLES_MAX) {
        s->v[s->n++] = (cpu_sample_t){now, t};
    }
}

/* The CPU ticks at time t, interpolated between the samples around it (clamped). */
static double s_ticks_at(const cpu_series_t *s, int64_t t) {
    if (s->n == 0) {
        return 0;
    }
    if (t <= s->v[0].t_us) {
        return (double)s->v[0].ticks;
    }
    for (size_t i = 1; i < s->n; i++) {
        if (t <= s->v[i].t_us) {
            const cpu_sample_t *a = &s->v[i - 1], *b = &s->v[i];
            double f = (double)(t - a->t_us) / (double)(b->t_us - a->t_us);
            return (double)a->ticks + f * (double)(b->ticks - a->ticks);
        }
    }
    return (double)s->v[s->n - 1].ticks;
}

/* CPU milliseconds of the series between t1 and t2. */
static double s_cpu_ms(const cpu_series_t *s, int64_t t1, int64_t t2) {
    return (s_ticks_at(s, t2) - s_ticks_at(s, t1)) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* The busiest second of the series between t1 and t2, in percent of one core. */
static double s_cpu_peak_pct(const cpu_series_t *s, int64_t t1, int64_t t2) {
    double peak = 0;
    for (int64_t t = t1; t < t2; t += 100000) {
        int64_t e = t + 1000000 < t2 ? t + 1000000 : t2;
        if (e - t < 500000) {
            break;
        }
        double pct = s_cpu_ms(s, t, e) * 1000.0 / (double)(e - t) * 100.0;
        peak = pct > peak ? pct : peak;
    }
    return peak;
}

static void s_on_event(void *ctx, int conn, const char *event, const char *data, size_t len,
                       int64_t now_us) {
    (void)len;
    child_t *c = ctx;
    if (!strcmp(event, "message")) {
        if (!c->answered[conn] && strstr(data, "\"role\":\"assistant\"")) {
            c->answered[conn] = true;
            atomic_fetch_add_explicit(&c->me->answered, 1, memory_order_relaxed);
        }
        return;
    }
    if (strcmp(event, "message_part") != 0) {
        return;
    }
    const char *s = strstr(data, "\"seq\":");
    long seq = s ? strtol(s + 6, NULL, 10) : 0;
    if (seq <= 0 || seq > SEQ_MAX) {
        return;
    }
    int32_t *at = &c->at[(size_t)conn * (SEQ_MAX + 1) + (size_t)seq];
    if (*at == 0) {
        int64_t rel = now_us - c->sh->t0_us + 1; /* 0 is "not read" */
        *at = rel > INT32_MAX ? INT32_MAX : (int32_t)rel;
        if (!atomic_load_explicit(&c->sh->stamp[seq], memory_order_relaxed)) {
            const char *stamp = strstr(data, "\"text\":\"@");
            long long t = stamp ? strtoll(stamp + 9, NULL, 10) : 0;
            atomic_store_explicit(&c->sh->stamp[seq], t > 0 ? t : -1, memory_order_relaxed);
        }
    }
    if (seq > atomic_load_explicit(&c->me->max_seq, memory_order_relaxed)) {
        atomic_store_explicit(&c->me->max_seq, (int)seq, memory_order_relaxed);
    }
}

/* A client process: opens its share of the streams, then reads until each open one has the
 * answer or the deadline passed. Never returns. */
static void s_child(shared_t *sh, int k, int procs, int32_t *matrix, char **argv, pid_t gw,
                    long deadline_s, long pause_ms) {
    share_t *me = &sh->share[k];
    ssefan_t *fan = ssefan_new(argv[1], argv[2]);
    if (!fan) {
        atomic_store(&me->open_done, 1);
        atomic_store(&me->done, 1);
        _exit(2);
    }
    ssefan_set_pace(fan, SSEFAN_CONNECTING_MAX / procs);
    child_t c = {.sh = sh,
                 .me = me,
                 .at = matrix + (size_t)me->first * (SEQ_MAX + 1),
                 .answered = mem_calloc((size_t)me->count, sizeof(bool))};
    ssefan_set_handler(fan, s_on_event, &c);
    char path[256];
    snprintf(path, sizeof path, "/api/v2/chats/%s/stream", argv[3]);
    for (int i = 0; i < me->count; i++) {
        ssefan_open(fan, path);
    }
    int64_t open_deadline = ssefan_now_us() + OPEN_LIMIT_S * 1000000LL;
    /* Open: the head is in (200) and the first sync's snapshot too (its status event), so the
     * worker starts on streams that are all past their first read. */
    int pending = me->count, ok = 0;
    while (pending > 0 && ssefan_now_us() < open_deadline && kill(gw, 0) == 0) {
        ssefan_poll(fan, 50);
        pending = ok = 0;
        for (int i = 0; i < me->count; i++) {
            ssefan_state_t st = ssefan_state(fan, i);
            bool head = st == SSEFAN_OPEN && ssefan_status(fan, i) == 200;
            bool synced = head && ssefan_count(fan, i, "status") > 0;
            ok += synced;
            pending += st == SSEFAN_QUEUED || st == SSEFAN_CONNECTING || (head && !synced);
        }
    }
    atomic_store(&me->opened, ok);
    atomic_store(&me->open_done, 1);
    int64_t end = ssefan_now_us() + deadline_s * 1000000LL;
    while (ssefan_now_us() < end) {
        /* In rounds: what is ready, then a pause in which no write of the gateway wakes it. */
        ssefan_poll(fan, pause_ms > 0 ? 0 : 50);
        if (pause_ms > 0) {
            usleep((useconds_t)pause_ms * 1000);
        }
        int open = ssefan_in_state(fan, SSEFAN_OPEN);
        int answered = atomic_load(&me->answered);
        if ((answered > 0 && answered >= open) || open == 0 || kill(gw, 0) != 0) {
            break;
        }
    }
    atomic_store(&me->failed, ssefan_in_state(fan, SSEFAN_FAILED));
    atomic_store(&me->done, 1);
    ssefan_destroy(&fan);
    free(c.answered);
    _exit(0);
}

static int s_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a;
    int32_t y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static double s_pct_ms(const int32_t *v, size_t n, double p) {
    if (n == 0) {
        return -1;
    }
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[k] / 1000.0;
}

/* "p50 p99 max" of n sorted lags into out (or "-" each when there are none). */
static void s_lag_text(const int32_t *v, size_t n, char out[3][24]) {
    for (int k = 0; k < 3; k++) {
        double x =
            k == 2 ? (n ? (double)v[n - 1] / 1000.0 : -1) : s_pct_ms(v, n, k == 0 ? 0.50 : 0.99);
        snprintf(out[k], sizeof out[k], n ? "%.2f" : "-", x);
    }
}

/* The lags of clients first .. first + count - 1 (sorted) into *out; returns how many. Also
 * counts their deliveries. */
static size_t s_lags(const shared_t *sh, const int32_t *matrix, int first, int count, int from_seq,
                     int max_seq, int32_t **out, size_t *deliveries) {
    size_t cap = (size_t)count * (size_t)max_seq + 1, n = 0;
    int32_t *v = mem_alloc(cap * sizeof *v);
    *deliveries = 0;
    for (int i = first; i < first + count; i++) {
        const int32_t *row = matrix + (size_t)i * (SEQ_MAX + 1);
        for (int s = from_seq; s <= max_seq; s++) {
            if (!row[s]) {
                continue;
            }
            (*deliveries)++;
            int64_t stamp = atomic_load(&sh->stamp[s]);
            int64_t read = sh->t0_us + row[s] - 1;
            if (stamp > 0 && read >= stamp) {
                v[n++] = read - stamp > INT32_MAX ? INT32_MAX : (int32_t)(read - stamp);
            }
        }
    }
    qsort(v, n, sizeof *v, s_cmp);
    *out = v;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_fanout BASE_URL TOKEN CHAT_ID N GATEWAY_PID [DEADLINE_S "
                        "[PROCS [PAUSE_MS]]]\n");
        return 2;
    }
    long nl = strtol(argv[4], NULL, 10);
    int n = nl > 0 && nl <= 200000 ? (int)nl : 0;
    pid_t gw = (pid_t)strtol(argv[5], NULL, 10);
    long deadline_s = argc > 6 ? strtol(argv[6], NULL, 10) : 120;
    long pl = argc > 7 ? strtol(argv[7], NULL, 10) : 1;
    int procs = pl < 1 ? 1 : pl > PROCS_MAX ? PROCS_MAX : (int)pl;
    long pause_ms = argc > 8 ? strtol(argv[8], NULL, 10) : 0;
    procs = procs > n ? (n > 0 ? n : 1) : procs;
    ssefan_t *probe = ssefan_new(argv[1], argv[2]);
    if (!probe || n == 0) {
        fprintf(stderr, "bench_fanout: bad base url or N\n");
        return 2;
    }
    ssefan_destroy(&probe);
    long nofile = ssefan_raise_nofile();
    size_t mlen = (size_t)n * (SEQ_MAX + 1) * sizeof(int32_t);
    shared_t *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int32_t *matrix = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || matrix == MAP_FAILED) {
        fprintf(stderr, "bench_fanout: mmap failed\n");
        return 2;
    }
    sh->t0_us = ssefan_now_us();
    long rss_idle = proc_status_value(gw, "VmRSS:");
    long rss_peak = rss_idle;
    long threads_peak = proc_status_value(gw, "Threads:");
    fflush(NULL);
    for (int k = 0; k < procs; k++) {
        share_t *s = &sh->share[k];
        s->first = (int)((int64_t)n * k / procs);
        s->count = (int)((int64_t)n * (k + 1) / procs) - s->first;
        pid_t pid = fork();
        if (pid == 0) {
            s_child(sh, k, procs, matrix, argv, gw, deadline_s, pause_ms);
        }
        s->pid = pid;
        if (pid < 0) {
            atomic_store(&s->open_done, 1);
            atomic_store(&s->done, 1);
        }
    }
    cpu_series_t gcpu = {mem_calloc(SAMPLES_MAX, sizeof(cpu_sample_t)), 0};
    cpu_series_t ccpu[PROCS_MAX];
    bool reaped[PROCS_MAX] = {false};
    for (int k = 0; k < procs; k++) {
        ccpu[k] = (cpu_series_t){mem_calloc(SAMPLES_MAX, sizeof(cpu_sample_t)), 0};
    }
    int64_t t_open = ssefan_now_us();
    long long open_ms = -1;
    int64_t next_report = 0;
    bool ready = false, gw_died = false;
    for (;;) {
        int64_t now = ssefan_now_us();
        long th = proc_status_value(gw, "Threads:");
        long rss = proc_status_value(gw, "VmRSS:");
        gw_died |= th < 0 || kill(gw, 0) != 0;
        threads_peak = th > threads_peak ? th : threads_peak;
        rss_peak = rss > rss_peak ? rss : rss_peak;
        s_sample(&gcpu, gw, now);
        int opened = 0, open_done = 0, done = 0, answered = 0, max_seq = 0;
        for (int k = 0; k < procs; k++) {
            share_t *s = &sh->share[k];
            if (!reaped[k] && s->pid > 0) {
                s_sample(&ccpu[k], s->pid, now);
                reaped[k] = waitpid(s->pid, NULL, WNOHANG) == s->pid;
            }
            opened += atomic_load(&s->opened);
            open_done += atomic_load(&s->open_done);
            done += reaped[k] || s->pid <= 0;
            answered += atomic_load(&s->answered);
            int m = atomic_load(&s->max_seq);
            max_seq = m > max_seq ? m : max_seq;
        }
        if (!ready && open_done == procs) {
            ready = true;
            long long ms = open_ms = (long long)((now - t_open) / 1000);
            printf("READY streams=%d open=%d ms=%lld\n", n, opened, ms);
            fflush(stdout);
            fprintf(stderr,
                    "bench_fanout: %d of %d streams open (200) in %lld ms (%d processes, "
                    "nofile %ld)\n",
                    opened, n, ms, procs, nofile);
            next_report = now + 5000000;
        }
        if (done == procs) {
            break;
        }
        if (ready && now >= next_report) {
            next_report += 5000000;
            fprintf(stderr, "bench_fanout: answered %d, max seq %d\n", answered, max_seq);
        }
        usleep(SAMPLE_MS * 1000);
    }
    /* The streaming phase: the first part read by any client to the last. */
    int max_seq = 0, answered = 0, ok = 0, failed = 0;
    for (int k = 0; k < procs; k++) {
        int m = atomic_load(&sh->share[k].max_seq);
        max_seq = m > max_seq ? m : max_seq;
        answered += atomic_load(&sh->share[k].answered);
        ok += atomic_load(&sh->share[k].opened);
        failed += atomic_load(&sh->share[k].failed);
    }
    int32_t t_first = INT32_MAX, t_last = 0;
    int all_parts = 0;
    for (int i = 0; i < n; i++) {
        const int32_t *row = matrix + (size_t)i * (SEQ_MAX + 1);
        int got = 0;
        for (int s = 1; s <= max_seq; s++) {
            if (row[s]) {
                got++;
                t_first = row[s] < t_first ? row[s] : t_first;
                t_last = row[s] > t_last ? row[s] : t_last;
            }
        }
        all_parts += max_seq > 0 && got == max_seq;
    }
    int64_t w1 = sh->t0_us + t_first - 1, w2 = sh->t0_us + t_last - 1;
    double window_ms = t_last > 0 ? (double)(w2 - w1) / 1000.0 : 0;
    /* Each process's share. */
    double cpu_pct_max = 0, cpu_peak_max = 0;
    for (int k = 0; k < procs; k++) {
        share_t *s = &sh->share[k];
        int32_t *lags;
        size_t dl;
        size_t nl2 = s_lags(sh, matrix, s->first, s->count, 1, max_seq, &lags, &dl);
        char lag[3][24];
        s_lag_text(lags, nl2, lag);
        double cms = window_ms > 0 ? s_cpu_ms(&ccpu[k], w1, w2) : 0;
        double pct = window_ms > 0 ? cms / window_ms * 100.0 : 0;
        double peak = window_ms > 0 ? s_cpu_peak_pct(&ccpu[k], w1, w2) : 0;
        cpu_pct_max = pct > cpu_pct_max ? pct : cpu_pct_max;
        cpu_peak_max = peak > cpu_peak_max ? peak : cpu_peak_max;
        printf("CLIENT %d streams=%d open=%d parts=%d deliveries=%zu answered=%d lag_p50_ms=%s "
               "lag_p99_ms=%s lag_max_ms=%s cpu_ms=%.0f cpu_pct=%.1f cpu_peak_pct=%.1f\n",
               k, s->count, atomic_load(&s->opened), atomic_load(&s->max_seq), dl,
               atomic_load(&s->answered), lag[0], lag[1], lag[2], cms, pct, peak);
        free(lags);
    }
    /* Delivery: per seq, the first read by any client and the reference client's read. */
    size_t cap = (size_t)n * (size_t)max_seq + 1, ns = 0, nr = 0;
    int32_t *spread = mem_alloc(cap * sizeof *spread);
    int32_t *refd = mem_alloc(cap * sizeof *refd);
    for (int s = 1; s <= max_seq; s++) {
        int32_t first = 0;
        for (int i = 0; i < n; i++) {
            int32_t a = matrix[(size_t)i * (SEQ_MAX + 1) + (size_t)s];
            first = a && (!first || a < first) ? a : first;
        }
        int32_t r = matrix[s];
        for (int i = 0; i < n && first; i++) {
            int32_t a = matrix[(size_t)i * (SEQ_MAX + 1) + (size_t)s];
            if (a) {
                spread[ns++] = a - first;
                if (r && i != 0) {
                    refd[nr++] = a - r;
                }
            }
        }
    }
    qsort(spread, ns, sizeof *spread, s_cmp);
    qsort(refd, nr, sizeof *refd, s_cmp);
    int32_t *lags;
    size_t deliveries;
    size_t nlags = s_lags(sh, matrix, 0, n, 1, max_seq, &lags, &deliveries);
    char lag[3][24];
    s_lag_text(lags, nlags, lag);
    /* The second half of the parts alone: the episode's start (every stream's sync of the
     * hint that the turn runs, one read each) is behind it. */
    int32_t *lags2;
    size_t d2;
    size_t nlags2 = s_lags(sh, matrix, 0, n, max_seq / 2 + 1, max_seq, &lags2, &d2);
    char lag2[3][24];
    s_lag_text(lags2, nlags2, lag2);
    free(lags2);
    double gw_ms = window_ms > 0 ? s_cpu_ms(&gcpu, w1, w2) : 0;
    long open_peak_kb = rss_peak - rss_idle;
    printf("RESULT streams=%d clients=%d open=%d open_ms=%lld parts=%d all_parts=%d answered=%d "
           "lag_p50_ms=%s lag_p99_ms=%s lag_max_ms=%s lags=%zu late_lag_p50_ms=%s "
           "late_lag_p99_ms=%s late_lag_max_ms=%s spread_p50_ms=%.2f spread_p99_ms=%.2f "
           "spread_max_ms=%.2f ref_p50_ms=%.2f "
           "ref_p99_ms=%.2f deliveries=%zu window_ms=%.0f gw_cpu_ms=%.0f gw_cpu_pct=%.1f "
           "gw_us_per_part=%.2f client_cpu_pct_max=%.1f client_cpu_peak_pct=%.1f "
           "threads_peak=%ld rss_idle_kb=%ld rss_peak_kb=%ld kb_per_stream=%.1f "
           "gateway_alive=%d failed=%d\n",
           n, procs, ok, open_ms, max_seq, all_parts, answered, lag[0], lag[1], lag[2], nlags,
           lag2[0], lag2[1], lag2[2], s_pct_ms(spread, ns, 0.50), s_pct_ms(spread, ns, 0.99),
           ns ? (double)spread[ns - 1] / 1000.0 : -1, s_pct_ms(refd, nr, 0.50),
           s_pct_ms(refd, nr, 0.99), deliveries, window_ms, gw_ms,
           window_ms > 0 ? gw_ms / window_ms * 100.0 : 0,
           deliveries ? gw_ms * 1000.0 / (double)deliveries : -1, cpu_pct_max, cpu_peak_max,
           threads_peak, rss_idle, rss_peak, ok > 0 ? (double)open_peak_kb / ok : -1,
           gw_died ? 0 : kill(gw, 0) == 0, failed);
    fflush(stdout);
    free(spread);
    free(refd);
    free(lags);
    free(gcpu.v);
    for (int k = 0; k < procs; k++) {
        free(ccpu[k].v);
    }
    munmap(matrix, mlen);
    munmap(sh, sizeof *sh);
    return 0;
}
