/* metrics: Prometheus counters and histograms; see metrics.h. */
#include "metrics.h"
#include "mem.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_GAUGES_MAX 8

static const double s_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                  0.1,   0.25,   0.5,   1,    2.5,   5};
#define NBOUNDS (sizeof s_bounds / sizeof s_bounds[0])

typedef struct {
    char label[96];
    int statuses[METRICS_STATUSES_MAX];
    int64_t counts[METRICS_STATUSES_MAX];
    int nstatuses;
    int64_t buckets[NBOUNDS]; /* cumulative at render time, per-bucket here */
    int64_t total;
    double sum;
} route_t;

typedef struct {
    char name[64];
    char help[128];
    metrics_gauge_fn fn;
    void *ctx;
} gauge_t;

struct metrics {
    pthread_mutex_t lock;
    route_t routes[METRICS_ROUTES_MAX];
    int nroutes;
    gauge_t gauges[METRICS_GAUGES_MAX];
    int ngauges;
};

metrics_t *metrics_new(void) {
    metrics_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    return self;
}

void metrics_destroy(metrics_t **self_p) {
    metrics_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

static route_t *s_route(metrics_t *self, const char *label) {
    for (int i = 0; i < self->nroutes; i++) {
        if (!strcmp(self->routes[i].label, label)) {
            return &self->routes[i];
        }
    }
    if (self->nroutes == METRICS_ROUTES_MAX) {
        return strcmp(label, "other") ? s_route(self, "other") : &self->routes[0];
    }
    route_t *r = &self->routes[self->nroutes++];
    snprintf(r->label, sizeof r->label, "%s", label);
    return r;
}

void metrics_request(metrics_t *self, const char *route, int status, double seconds) {
    pthread_mutex_lock(&self->lock);
    route_t *r = s_route(self, route);
    int k = 0;
    while (k < r->nstatuses && r->statuses[k] != status) {
        k++;
    }
    if (k == r->nstatuses && k < METRICS_STATUSES_MAX) {
        r->statuses[r->nstatuses++] = status;
    }
    if (k < METRICS_STATUSES_MAX) {
        r->counts[k]++;
    }
    for (size_t b = 0; b < NBOUNDS; b++) {
        if (seconds <= s_bounds[b]) {
            r->buckets[b]++;
            break;
        }
    }
    r->total++;
    r->sum += seconds;
    pthread_mutex_unlock(&self->lock);
}

void metrics_gauge(metrics_t *self, const char *name, const char *help, metrics_gauge_fn fn,
                   void *ctx) {
    pthread_mutex_lock(&self->lock);
    ASSERT(self->ngauges < METRICS_GAUGES_MAX);
    gauge_t *g = &self->gauges[self->ngauges++];
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->help, sizeof g->help, "%s", help);
    g->fn = fn;
    g->ctx = ctx;
    pthread_mutex_unlock(&self->lock);
}

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} text_t;

static void s_add(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_add(text_t *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *line = mem_vprintf(fmt, ap);
    va_end(ap);
    size_t n = strlen(line);
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->buf = mem_realloc(t->buf, t->cap);
    }
    memcpy(t->buf + t->len, line, n + 1);
    t->len += n;
    free(line);
}

char *metrics_render(metrics_t *self) {
    text_t t = {mem_strdup(""), 0, 1};
    pthread_mutex_lock(&self->lock);
    s_add(&t, "# HELP chatfleet_http_requests_total HTTP requests by route and status.\n"
              "# TYPE chatfleet_http_requests_total counter\n");
    for (int i = 0; i < self->nroutes; i++) {
        const route_t *r = &self->routes[i];
        for (int k = 0; k < r->nstatuses; k++) {
            s_add(&t, "chatfleet_http_requests_total{route=\"%s\",status=\"%d\"} %lld\n", r->label,
                  r->statuses[k], (long long)r->counts[k]);
        }
    }
    s_add(&t, "# HELP chatfleet_http_request_seconds HTTP request latency by route.\n"
              "# TYPE chatfleet_http_request_seconds histogram\n");
    for (int i = 0; i < self->nroutes; i++) {
        const route_t *r = &self->routes[i];
        int64_t cum = 0;
        for (size_t b = 0; b < NBOUNDS; b++) {
            cum += r->buckets[b];
            s_add(&t, "chatfleet_http_request_seconds_bucket{route=\"%s\",le=\"%g\"} %lld\n",
                  r->label, s_bounds[b], (long long)cum);
        }
        s_add(&t, "chatfleet_http_request_seconds_bucket{route=\"%s\",le=\"+Inf\"} %lld\n",
              r->label, (long long)r->total);
        s_add(&t, "chatfleet_http_request_seconds_sum{route=\"%s\"} %.6f\n", r->label, r->sum);
        s_add(&t, "chatfleet_http_request_seconds_count{route=\"%s\"} %lld\n", r->label,
              (long long)r->total);
    }
    gauge_t gauges[METRICS_GAUGES_MAX];
    int ngauges = self->ngauges;
    memcpy(gauges, self->gauges, sizeof gauges);
    pthread_mutex_unlock(&self->lock);
    for (int i = 0; i < ngauges; i++) {
        s_add(&t, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", gauges[i].name, gauges[i].help,
              gauges[i].name, gauges[i].name, (long long)gauges[i].fn(gauges[i].ctx));
    }
    return t.buf;
}
