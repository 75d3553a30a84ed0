/*
 * bench_watch: the load side of tests/bench/watch/run. Many users chat through a running
 * gateway (a thread and one keep-alive libcurl handle each) while one more user, X, runs
 * sequential turns whose latency is the figure; optionally, W watches per chatting user
 * (GET /api/v2/chats/watch, ssefan, one thread) are held open and read, and their events
 * counted. The gateway's Threads and VmRSS are sampled every ~100 ms.
 *
 *   bench_watch seed  BASE_URL TOKENS_FILE CHATS
 *   bench_watch phase BASE_URL TOKENS_FILE X_TOKEN GATEWAY_PID WATCHES_PER_USER TURNS THINK_MS
 *
 * seed: every user of TOKENS_FILE (one bearer token a line) creates CHATS chats with one
 * message each, without waiting for the answers (the driver waits on PostgreSQL).
 * phase: opens the watches (0: none) and waits for their heads, starts the chatting users,
 * lets them run for WARMUP_MS, then X runs TURNS turns one after another (a turn: POST
 * /api/v2/chats, then GET /api/v2/chats/{id} every X_POLL_MS until the chat is waiting with
 * a newer snapshot_version), then the users stop and the watches are read for DRAIN_MS more.
 * A chatting user's turn alternates: a new chat every CREATE_EVERY turns, otherwise a message
 * to one of its newest chats in turn, polled every LOAD_POLL_MS until answered, then THINK_MS
 * of thinking. Only the turns a user completed inside X's window are counted.
 *
 * Prints "RESULT key=value ..." on stdout; progress on stderr. Exit 0 unless misused.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "proc.h"
#include "ssefan.h"

#define USERS_MAX       1000
#define TOKEN_MAX_BYTES 128       /* a token line longer than this is refused */
#define BODY_MAX_BYTES  (1 << 20) /* a response body longer than this is cut (and fails) */
#define X_POLL_MS       5
#define LOAD_POLL_MS    50
#define TURN_LIMIT_MS   60000 /* a turn not answered by then counts as an error */
#define WARMUP_MS       3000
#define DRAIN_MS        1500
#define SAMPLE_MS       100
#define CREATE_EVERY    4 /* a chatting user's every 4th turn is a new chat */
#define ROTATE_CHATS    8 /* ... the others go to its 8 newest chats in turn */
#define X_TURNS_MAX     100000
#define CHAT_ID_BYTES   37

static const char *s_base;
static atomic_bool s_load_stop;
static atomic_bool s_watch_stop;
static atomic_bool s_window; /* X's measured window is open */

typedef struct {
    char *p;
    size_t len;
    bool cut;
} body_t;

typedef struct {
    CURL *curl;
    struct curl_slist *headers;
    body_t body;
} client_t;

typedef struct {
    const char *token;
    client_t http;
    char chats[ROTATE_CHATS][CHAT_ID_BYTES];
    int nchats;
    int next;
    long turns;    /* completed inside the window */
    long requests; /* completed inside the window */
    long errors;   /* failed requests or turns, whole phase */
    int seed;
    pthread_t thread;
} user_t;

static int64_t s_now_ms(void) {
    return ssefan_now_us() / 1000;
}

static void s_sleep_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static size_t s_write(char *data, size_t size, size_t n, void *ctx) {
    body_t *b = ctx;
    size_t len = size * n;
    if (b->len + len > BODY_MAX_BYTES) {
        b->cut = true;
        return len;
    }
    b->p = mem_realloc(b->p, b->len + len + 1);
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return len;
}

static void s_client_init(client_t *c, const char *token) {
    c->curl = curl_easy_init();
    ASSERT(c->curl);
    char *auth = mem_printf("Authorization: Bearer %s", token);
    c->headers = curl_slist_append(NULL, auth);
    c->headers = curl_slist_append(c->headers, "Content-Type: application/json");
    free(auth);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &c->body);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
}

static void s_client_fini(client_t *c) {
    curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->body.p);
}

/* One request on c's connection; the body is in c->body.p. Returns the HTTP status, or 0
 * when the transfer failed. */
static long s_request(client_t *c, const char *method, const char *path, const char *json) {
    char url[512];
    snprintf(url, sizeof url, "%s%s", s_base, path);
    c->body.len = 0;
    c->body.cut = false;
    if (c->body.p) {
        c->body.p[0] = '\0';
    }
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, json);
    } else {
        curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
    }
    if (curl_easy_perform(c->curl) != CURLE_OK || c->body.cut) {
        return 0;
    }
    long code = 0;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
    return code;
}

/* The number after "key": in text, or -1. */
static long s_json_long(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *s = text ? strstr(text, pat) : NULL;
    return s ? strtol(s + strlen(pat), NULL, 10) : -1;
}

/* Copies the first "id":"..." of text into out (CHAT_ID_BYTES); 0, or -1 when there is none. */
static int s_json_id(const char *text, char *out) {
    const char *s = text ? strstr(text, "\"id\":\"") : NULL;
    if (!s) {
        return -1;
    }
    s += 6;
    const char *e = strchr(s, '"');
    if (!e || e - s != CHAT_ID_BYTES - 1) {
        return -1;
    }
    memcpy(out, s, CHAT_ID_BYTES - 1);
    out[CHAT_ID_BYTES - 1] = '\0';
    return 0;
}

/* Polls chat until it is waiting with a snapshot_version above after; counts the GETs into
 * *requests. 0 when answered, -1 on an error or after TURN_LIMIT_MS. */
static int s_await(client_t *c, const char *chat, long after, int poll_ms, const atomic_bool *stop,
                   long *requests) {
    char path[128];
    snprintf(path, sizeof path, "/api/v2/chats/%s", chat);
    int64_t limit = s_now_ms() + TURN_LIMIT_MS;
    while (s_now_ms() < limit && !(stop && atomic_load(stop))) {
        long code = s_request(c, "GET", path, NULL);
        (*requests)++;
        if (code != 200) {
            return -1;
        }
        if (strstr(c->body.p, "\"status\":\"waiting\"") &&
            s_json_long(c->body.p, "snapshot_version") > after) {
            return 0;
        }
        s_sleep_ms(poll_ms);
    }
    return -1;
}

static const char *s_content(const char *text, char *buf, size_t size) {
    snprintf(buf, size, "{\"content\":[{\"type\":\"text\",\"text\":\"[sim:words 5] %s\"}]}", text);
    return buf;
}

/* One turn on a new chat (POST /api/v2/chats); the chat's id into id. */
static int s_turn_new(client_t *c, char *id, int poll_ms, const atomic_bool *stop, long *requests) {
    char json[256];
    long code = s_request(c, "POST", "/api/v2/chats", s_content("hi", json, sizeof json));
    (*requests)++;
    if ((code != 200 && code != 201) || s_json_id(c->body.p, id) != 0) {
        return -1;
    }
    long v = s_json_long(c->body.p, "snapshot_version");
    return s_await(c, id, v, poll_ms, stop, requests);
}

/* One turn on an existing chat (POST /api/v2/chats/{id}/messages). */
static int s_turn_send(client_t *c, const char *id, const atomic_bool *stop, long *requests) {
    char path[128];
    char json[256];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", id);
    long code = s_request(c, "POST", path, s_content("again", json, sizeof json));
    (*requests)++;
    if (code != 200 && code != 201) {
        return -1;
    }
    /* The send's revision is the chat's snapshot_version after it. */
    return s_await(c, id, s_json_long(c->body.p, "revision"), LOAD_POLL_MS, stop, requests);
}

static int s_think_ms;

static void *s_user_loop(void *arg) {
    user_t *u = arg;
    for (long k = 0; !atomic_load(&s_load_stop); k++) {
        long requests = 0;
        int rc;
        if (u->nchats == 0 || k % CREATE_EVERY == 0) {
            char id[CHAT_ID_BYTES];
            rc = s_turn_new(&u->http, id, LOAD_POLL_MS, &s_load_stop, &requests);
            if (rc == 0) {
                memcpy(u->chats[u->nchats % ROTATE_CHATS], id, CHAT_ID_BYTES);
                u->nchats++;
            }
        } else {
            int n = u->nchats < ROTATE_CHATS ? u->nchats : ROTATE_CHATS;
            rc = s_turn_send(&u->http, u->chats[u->next++ % n], &s_load_stop, &requests);
        }
        if (atomic_load(&s_window)) {
            u->requests += requests;
            u->turns += rc == 0;
        }
        u->errors += rc != 0 && !atomic_load(&s_load_stop);
        for (int64_t t = s_now_ms() + s_think_ms; s_now_ms() < t && !atomic_load(&s_load_stop);) {
            s_sleep_ms(10);
        }
    }
    return NULL;
}

static void *s_seed_loop(void *arg) {
    user_t *u = arg;
    char json[256];
    for (int i = 0; i < u->seed; i++) {
        long code =
            s_request(&u->http, "POST", "/api/v2/chats", s_content("seed", json, sizeof json));
        u->requests++;
        u->errors += code != 200 && code != 201;
    }
    return NULL;
}

/* Reads TOKENS_FILE into users; returns how many. */
static int s_read_tokens(const char *file, user_t *users) {
    FILE *fp = fopen(file, "r");
    if (!fp) {
        return 0;
    }
    char line[TOKEN_MAX_BYTES + 2];
    int n = 0;
    while (n < USERS_MAX && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0]) {
            users[n].token = mem_strdup(line);
            s_client_init(&users[n].http, line);
            n++;
        }
    }
    fclose(fp);
    return n;
}

/* The watches: one ssefan per chatting user (a token each), read by one thread that also
 * samples the gateway. */
typedef struct {
    ssefan_t **fans;
    int nfans;
    pid_t gw;
    long events;
    long created;
    long status_change;
    long other;
    long window_events; /* read while X's window was open */
    long threads_peak;
    long rss_peak;
} watch_t;

static void s_on_event(void *ctx, int conn, const char *event, const char *data, size_t len,
                       int64_t now_us) {
    (void)conn;
    (void)data;
    (void)len;
    (void)now_us;
    watch_t *w = ctx;
    w->events++;
    w->window_events += atomic_load(&s_window);
    if (!strcmp(event, "created")) {
        w->created++;
    } else if (!strcmp(event, "status_change")) {
        w->status_change++;
    } else {
        w->other++;
    }
}

static void s_sample(watch_t *w) {
    long th = proc_status_value(w->gw, "Threads:");
    long rss = proc_status_value(w->gw, "VmRSS:");
    w->threads_peak = th > w->threads_peak ? th : w->threads_peak;
    w->rss_peak = rss > w->rss_peak ? rss : w->rss_peak;
}

static void *s_watch_loop(void *arg) {
    watch_t *w = arg;
    int64_t next_sample = 0;
    while (!atomic_load(&s_watch_stop)) {
        int got = 0;
        for (int i = 0; i < w->nfans; i++) {
            got += ssefan_poll(w->fans[i], 0);
        }
        if (s_now_ms() >= next_sample) {
            next_sample = s_now_ms() + SAMPLE_MS;
            s_sample(w);
        }
        /* A sweep is an epoll_wait per user: pausing after each keeps this client's CPU (on
         * the cores the gateway shares) small; the events wait in the socket buffers. */
        (void)got;
        s_sleep_ms(10);
    }
    return NULL;
}

/* The CPU time pid has used, user + system, in clock ticks (/proc/PID/stat), or -1. */
static long s_cpu_ticks(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        return -1;
    }
    char line[1024];
    long ticks = -1;
    /* The command name may hold spaces: the fields counted from the last ')'. */
    if (fgets(line, sizeof line, fp)) {
        char *p = strrchr(line, ')');
        unsigned long ut = 0;
        unsigned long st = 0;
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2) {
            ticks = (long)(ut + st);
        }
    }
    fclose(fp);
    return ticks;
}

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_pct(const double *v, int n, double p) {
    return n > 0 ? v[(int)(p * (n - 1) + 0.5)] : -1;
}

static int s_seed(int argc, char **argv, user_t *users) {
    if (argc < 5) {
        return 2;
    }
    int n = s_read_tokens(argv[3], users);
    long chats = strtol(argv[4], NULL, 10);
    for (int i = 0; i < n; i++) {
        users[i].seed = (int)chats;
        pthread_create(&users[i].thread, NULL, s_seed_loop, &users[i]);
    }
    long requests = 0;
    long errors = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(users[i].thread, NULL);
        requests += users[i].requests;
        errors += users[i].errors;
    }
    printf("RESULT users=%d requests=%ld errors=%ld\n", n, requests, errors);
    return 0;
}

static int s_phase(int argc, char **argv, user_t *users) {
    if (argc < 9) {
        return 2;
    }
    int n = s_read_tokens(argv[3], users);
    pid_t gw = (pid_t)strtol(argv[5], NULL, 10);
    long per_user = strtol(argv[6], NULL, 10);
    long turns = strtol(argv[7], NULL, 10);
    s_think_ms = (int)strtol(argv[8], NULL, 10);
    if (n == 0 || per_user < 0 || turns <= 0 || turns > X_TURNS_MAX) {
        fprintf(stderr, "bench_watch: no tokens, or bad WATCHES_PER_USER or TURNS\n");
        return 2;
    }
    ssefan_raise_nofile();
    watch_t w = {.gw = gw, .threads_peak = -1, .rss_peak = -1};
    long rss_start = proc_status_value(gw, "VmRSS:");
    long threads_start = proc_status_value(gw, "Threads:");
    int64_t t_open = s_now_ms();
    if (per_user > 0) {
        w.fans = mem_calloc((size_t)n, sizeof *w.fans);
        w.nfans = n;
        for (int i = 0; i < n; i++) {
            w.fans[i] = ssefan_new(s_base, users[i].token);
            ASSERT(w.fans[i]);
            ssefan_set_handler(w.fans[i], s_on_event, &w);
            for (long k = 0; k < per_user; k++) {
                ssefan_open(w.fans[i], "/api/v2/chats/watch");
            }
        }
        /* Every head in, or 60 s. */
        for (int64_t end = s_now_ms() + 60000; s_now_ms() < end;) {
            int pending = 0;
            for (int i = 0; i < n; i++) {
                ssefan_poll(w.fans[i], 0);
                pending += ssefan_in_state(w.fans[i], SSEFAN_QUEUED) +
                           ssefan_in_state(w.fans[i], SSEFAN_CONNECTING);
            }
            if (pending == 0) {
                break;
            }
            s_sleep_ms(5);
        }
    }
    int open = 0;
    for (int i = 0; i < w.nfans; i++) {
        for (int k = 0; k < ssefan_size(w.fans[i]); k++) {
            open += ssefan_state(w.fans[i], k) == SSEFAN_OPEN && ssefan_status(w.fans[i], k) == 200;
        }
    }
    int64_t open_ms = s_now_ms() - t_open;
    fprintf(stderr, "bench_watch: %d of %ld watches open (200) in %lld ms; %d users chatting\n",
            open, per_user * n, (long long)open_ms, n);
    pthread_t watcher;
    pthread_create(&watcher, NULL, s_watch_loop, &w);
    for (int i = 0; i < n; i++) {
        pthread_create(&users[i].thread, NULL, s_user_loop, &users[i]);
    }
    s_sleep_ms(WARMUP_MS);

    client_t x = {0};
    s_client_init(&x, argv[4]);
    double *lat = mem_calloc((size_t)turns, sizeof *lat);
    int nlat = 0;
    long x_errors = 0;
    long x_requests = 0;
    atomic_store(&s_window, true);
    long cpu0 = s_cpu_ticks(gw);
    int64_t t0 = s_now_ms();
    int64_t next_report = t0 + 5000;
    for (long i = 0; i < turns; i++) {
        char id[CHAT_ID_BYTES];
        int64_t a = ssefan_now_us();
        if (s_turn_new(&x, id, X_POLL_MS, NULL, &x_requests) == 0) {
            lat[nlat++] = (double)(ssefan_now_us() - a) / 1000.0;
        } else {
            x_errors++;
        }
        if (s_now_ms() >= next_report) {
            next_report += 5000;
            fprintf(stderr, "bench_watch: X %ld/%ld turns, last %.1f ms\n", i + 1, turns,
                    nlat ? lat[nlat - 1] : -1.0);
        }
    }
    int64_t window_ms = s_now_ms() - t0;
    long cpu1 = s_cpu_ticks(gw);
    atomic_store(&s_window, false);
    atomic_store(&s_load_stop, true);
    long load_turns = 0;
    long load_requests = 0;
    long load_errors = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(users[i].thread, NULL);
        load_turns += users[i].turns;
        load_requests += users[i].requests;
        load_errors += users[i].errors;
    }
    s_sleep_ms(DRAIN_MS);
    atomic_store(&s_watch_stop, true);
    pthread_join(watcher, NULL);
    int still_open = 0;
    int failed = 0;
    for (int i = 0; i < w.nfans; i++) {
        still_open += ssefan_in_state(w.fans[i], SSEFAN_OPEN);
        failed += ssefan_in_state(w.fans[i], SSEFAN_FAILED);
    }
    qsort(lat, (size_t)nlat, sizeof *lat, s_cmp);
    double sum = 0;
    for (int i = 0; i < nlat; i++) {
        sum += lat[i];
    }
    double secs = (double)window_ms / 1000.0;
    double cpu_s =
        cpu0 >= 0 && cpu1 >= cpu0 ? (double)(cpu1 - cpu0) / (double)sysconf(_SC_CLK_TCK) : -1.0;
    printf("RESULT x_turns=%d x_errors=%ld x_p50_ms=%.1f x_p90_ms=%.1f x_p99_ms=%.1f "
           "x_mean_ms=%.1f x_max_ms=%.1f window_s=%.1f load_turns=%ld load_turns_s=%.1f "
           "load_requests=%ld load_requests_s=%.1f load_errors=%ld watches=%ld watches_open=%d "
           "watches_open_end=%d watches_failed=%d open_ms=%lld events=%ld window_events=%ld "
           "events_created=%ld events_status=%ld events_other=%ld threads_start=%ld "
           "threads_peak=%ld rss_start_kb=%ld rss_peak_kb=%ld gw_cpu_s=%.1f gw_cpu_pct=%.0f "
           "gateway_alive=%d\n",
           nlat, x_errors, s_pct(lat, nlat, 0.50), s_pct(lat, nlat, 0.90), s_pct(lat, nlat, 0.99),
           nlat ? sum / nlat : -1.0, nlat ? lat[nlat - 1] : -1.0, secs, load_turns,
           secs > 0 ? (double)load_turns / secs : 0.0, load_requests,
           secs > 0 ? (double)load_requests / secs : 0.0, load_errors, per_user * n, open,
           still_open, failed, (long long)open_ms, w.events, w.window_events, w.created,
           w.status_change, w.other, threads_start, w.threads_peak, rss_start, w.rss_peak, cpu_s,
           secs > 0 ? 100.0 * cpu_s / secs : 0.0, kill(gw, 0) == 0);
    fflush(stdout);
    s_client_fini(&x);
    free(lat);
    for (int i = 0; i < w.nfans; i++) {
        ssefan_destroy(&w.fans[i]);
    }
    free(w.fans);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK) {
        fprintf(stderr, "usage: bench_watch seed BASE_URL TOKENS_FILE CHATS\n"
                        "       bench_watch phase BASE_URL TOKENS_FILE X_TOKEN GATEWAY_PID "
                        "WATCHES_PER_USER TURNS THINK_MS\n");
        return 2;
    }
    s_base = argv[2];
    user_t *users = mem_calloc(USERS_MAX, sizeof *users);
    int rc = 2;
    if (!strcmp(argv[1], "seed")) {
        rc = s_seed(argc, argv, users);
    } else if (!strcmp(argv[1], "phase")) {
        rc = s_phase(argc, argv, users);
    }
    if (rc == 2) {
        fprintf(stderr, "bench_watch: bad arguments (see the comment at the top)\n");
    }
    for (int i = 0; i < USERS_MAX && users[i].token; i++) {
        s_client_fini(&users[i].http);
        free((char *)users[i].token);
    }
    free(users);
    curl_global_cleanup();
    return rc;
}
