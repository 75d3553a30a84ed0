/*
 * latency: the search bench's timer (tests/bench/search/run). It runs a list of requests, each
 * one timed on the monotonic clock from the call to its last byte, over CONC threads (each with
 * its own keep-alive connection), and prints the latency percentiles of each label and of all.
 *
 *   latency http BASE_URL CONC FILE    FILE: LABEL \t METHOD \t PATH \t TOKEN \t BODY|-
 *   latency sql CONNINFO CONC SQL FILE FILE: LABEL \t PARAM1 \t PARAM2 ... (\N is NULL)
 *
 * http: PATH is appended to BASE_URL, or is the whole URL when it starts with "http"; a
 * request counts as failed unless its status is 2xx; rows is the size of a JSON array answer
 * (the chats a list returned), 0 otherwise. sql: the one statement SQL (text with $1..),
 * prepared once on each connection and executed with each line's parameters, as the gateway
 * runs its statements (so PostgreSQL's plan cache treats both alike); rows is the number of
 * rows. One line per label, "all" last:
 *
 *   RESULT label=L n=N errors=E p50=MS p95=MS p99=MS max=MS mean=MS rows=AVG
 *
 * With LATENCY_TIMEOUT_MS=N in the environment a request or statement that takes longer
 * fails, its time then about N (curl's timeout; statement_timeout, set after the prepare).
 * With LATENCY_DUMP=PATH in the environment, each request's time is also written to PATH, one
 * line per request in FILE's order: MS \t ROWS \t FAILED \t the request's line.
 *
 * Exits 1 when an argument or the file is wrong, or a connection cannot be made.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LINE_BYTES 65536 /* one request line; the bench's longest is a few hundred bytes */
#define FIELDS_MAX 16    /* label and up to 15 parameters */
#define LABELS_MAX 64

typedef struct {
    char *field[FIELDS_MAX];
    int fields;
    double ms;
    long rows;
    int failed;
} job_t;

static job_t *s_jobs;
static int s_count;
static int s_next; /* the next job to run, under s_lock */
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *s_target; /* BASE_URL or CONNINFO */
static char *s_sql;
static int s_http;
static long s_timeout_ms; /* LATENCY_TIMEOUT_MS; 0: none */

static double s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *s_alloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "latency: out of memory\n");
        abort();
    }
    return p;
}

static char *s_dup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(s_alloc(n), s, n);
}

/* Reads FILE's lines into s_jobs, split on tabs; -1 when it cannot be read or is empty. */
static int s_load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return -1;
    }
    static char line[LINE_BYTES];
    int cap = 1024;
    s_jobs = s_alloc(cap * sizeof *s_jobs);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0]) {
            continue;
        }
        if (s_count == cap) {
            cap *= 2;
            job_t *more = realloc(s_jobs, cap * sizeof *s_jobs);
            if (!more) {
                fprintf(stderr, "latency: out of memory\n");
                abort();
            }
            s_jobs = more;
        }
        job_t *j = &s_jobs[s_count++];
        memset(j, 0, sizeof *j);
        for (char *t = line; t && j->fields < FIELDS_MAX;) {
            char *tab = strchr(t, '\t');
            if (tab) {
                *tab = '\0';
            }
            j->field[j->fields++] = s_dup(t);
            t = tab ? tab + 1 : NULL;
        }
    }
    fclose(f);
    if (s_count == 0) {
        fprintf(stderr, "latency: %s has no requests\n", path);
        return -1;
    }
    return 0;
}

typedef struct {
    char *data;
    size_t len;
} body_t;

static size_t s_write(char *ptr, size_t size, size_t n, void *userdata) {
    body_t *b = userdata;
    char *more = realloc(b->data, b->len + size * n + 1);
    if (!more) {
        return 0;
    }
    b->data = more;
    memcpy(b->data + b->len, ptr, size * n);
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

/* One HTTP request of job j on the thread's handle; the answer is parsed after the clock. */
static void s_http_run(CURL *curl, job_t *j) {
    if (j->fields < 4) {
        j->failed = 1;
        return;
    }
    char url[4096];
    char auth[512];
    bool whole = !strncmp(j->field[2], "http", 4);
    snprintf(url, sizeof url, "%s%s", whole ? "" : s_target, j->field[2]);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", j->field[3]);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    body_t b = {0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    const char *body = j->fields > 4 && strcmp(j->field[4], "-") ? j->field[4] : NULL;
    if (body) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, j->field[1]);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, s_timeout_ms);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    double t0 = s_now_ms();
    CURLcode rc = curl_easy_perform(curl);
    j->ms = s_now_ms() - t0;
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    j->failed = rc != CURLE_OK || status < 200 || status > 299;
    if (j->failed) {
        fprintf(stderr, "latency: %s %s: %s, status %ld: %.200s\n", j->field[1], j->field[2],
                curl_easy_strerror(rc), status, b.data ? b.data : "");
    }
    json_t *answer = b.data ? json_loads(b.data, 0, NULL) : NULL;
    j->rows = json_is_array(answer) ? (long)json_array_size(answer) : 0;
    json_decref(answer);
    free(b.data);
    curl_slist_free_all(h);
}

/* One statement of job j on the thread's connection: its parameters are the fields after the
 * label. */
static void s_sql_run(PGconn *conn, job_t *j) {
    const char *p[FIELDS_MAX];
    int n = j->fields - 1;
    for (int i = 0; i < n; i++) {
        p[i] = strcmp(j->field[i + 1], "\\N") ? j->field[i + 1] : NULL;
    }
    double t0 = s_now_ms();
    PGresult *res = PQexecPrepared(conn, "q", n, p, NULL, NULL, 0);
    j->ms = s_now_ms() - t0;
    j->failed = PQresultStatus(res) != PGRES_TUPLES_OK;
    if (j->failed) {
        fprintf(stderr, "latency: %s: %s", j->field[0], PQerrorMessage(conn));
    }
    j->rows = j->failed ? 0 : PQntuples(res);
    PQclear(res);
}

static void *s_thread(void *arg) {
    int *failed = arg;
    CURL *curl = NULL;
    PGconn *conn = NULL;
    if (s_http) {
        curl = curl_easy_init();
    } else {
        conn = PQconnectdb(s_target);
    }
    PGresult *prep = NULL;
    if (conn && PQstatus(conn) == CONNECTION_OK) {
        prep = PQprepare(conn, "q", s_sql, 0, NULL);
    }
    int prepared = PQresultStatus(prep) == PGRES_COMMAND_OK;
    PQclear(prep);
    if (prepared && s_timeout_ms > 0) {
        char set[64];
        snprintf(set, sizeof set, "SET statement_timeout = %ld", s_timeout_ms);
        prep = PQexec(conn, set);
        prepared = PQresultStatus(prep) == PGRES_COMMAND_OK;
        PQclear(prep);
    }
    if ((s_http && !curl) || (!s_http && !prepared)) {
        fprintf(stderr, "latency: cannot connect to %s: %s", s_target,
                conn ? PQerrorMessage(conn) : "curl_easy_init failed\n");
        pthread_mutex_lock(&s_lock);
        *failed = 1;
        pthread_mutex_unlock(&s_lock);
        PQfinish(conn);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&s_lock);
        int i = s_next < s_count ? s_next++ : -1;
        pthread_mutex_unlock(&s_lock);
        if (i < 0) {
            break;
        }
        if (s_http) {
            s_http_run(curl, &s_jobs[i]);
        } else {
            s_sql_run(conn, &s_jobs[i]);
        }
    }
    curl_easy_cleanup(curl);
    PQfinish(conn);
    return NULL;
}

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile q (0..1) of n sorted values. */
static double s_pct(const double *v, int n, double q) {
    int k = (int)(q * n + 0.999999) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* Prints the RESULT line of the jobs labelled label (all of them when label is NULL). */
static void s_report(const char *label) {
    double *v = s_alloc(s_count * sizeof *v);
    int n = 0;
    int errors = 0;
    double sum = 0;
    long rows = 0;
    for (int i = 0; i < s_count; i++) {
        job_t *j = &s_jobs[i];
        if (label && strcmp(j->field[0], label)) {
            continue;
        }
        errors += j->failed;
        v[n++] = j->ms;
        sum += j->ms;
        rows += j->rows;
    }
    qsort(v, n, sizeof *v, s_cmp);
    printf("RESULT label=%s n=%d errors=%d p50=%.2f p95=%.2f p99=%.2f max=%.2f mean=%.2f "
           "rows=%.1f\n",
           label ? label : "all", n, errors, s_pct(v, n, 0.50), s_pct(v, n, 0.95),
           s_pct(v, n, 0.99), v[n - 1], sum / n, (double)rows / n);
    free(v);
}

/* Writes every job's time, rows, failure and fields to path; -1 when it cannot. */
static int s_dump(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    for (int i = 0; i < s_count; i++) {
        job_t *j = &s_jobs[i];
        fprintf(f, "%.3f\t%ld\t%d", j->ms, j->rows, j->failed);
        for (int k = 0; k < j->fields; k++) {
            fprintf(f, "\t%s", j->field[k]);
        }
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static char *s_read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return NULL;
    }
    static char text[LINE_BYTES];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return s_dup(text);
}

int main(int argc, char **argv) {
    s_http = argc == 5 && !strcmp(argv[1], "http");
    if (!s_http && !(argc == 6 && !strcmp(argv[1], "sql"))) {
        fprintf(stderr, "usage: latency http BASE_URL CONC FILE | latency sql CONNINFO CONC SQL "
                        "FILE\n");
        return 1;
    }
    s_target = argv[2];
    int conc = (int)strtol(argv[3], NULL, 10);
    if (conc < 1 || conc > 256) {
        fprintf(stderr, "latency: CONC must be 1 to 256\n");
        return 1;
    }
    if ((!s_http && !(s_sql = s_read_file(argv[4]))) || s_load(argv[s_http ? 4 : 5]) != 0) {
        return 1;
    }
    const char *timeout = getenv("LATENCY_TIMEOUT_MS");
    s_timeout_ms = timeout ? strtol(timeout, NULL, 10) : 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    pthread_t t[256];
    int failed = 0;
    for (int i = 0; i < conc; i++) {
        pthread_create(&t[i], NULL, s_thread, &failed);
    }
    for (int i = 0; i < conc; i++) {
        pthread_join(t[i], NULL);
    }
    curl_global_cleanup();
    const char *dump = getenv("LATENCY_DUMP");
    if (failed || (dump && s_dump(dump) != 0)) {
        return 1;
    }
    const char *labels[LABELS_MAX];
    int nl = 0;
    for (int i = 0; i < s_count; i++) {
        int seen = 0;
        for (int k = 0; k < nl && !seen; k++) {
            seen = !strcmp(labels[k], s_jobs[i].field[0]);
        }
        if (!seen && nl < LABELS_MAX) {
            labels[nl++] = s_jobs[i].field[0];
        }
    }
    for (int k = 0; k < nl; k++) {
        s_report(labels[k]);
    }
    s_report(NULL);
    return 0;
}
