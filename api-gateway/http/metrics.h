/*
 * metrics: the gateway's Prometheus text exposition (GET /metrics): requests by route and
 * status, a latency histogram per route, and gauges read at scrape time (open streams).
 * Thread-safe; recording a request is one mutex-protected update.
 */
#ifndef CHATFLEET_METRICS_H
#define CHATFLEET_METRICS_H

#include <stdint.h>

#define METRICS_ROUTES_MAX   64 /* distinct route labels */
#define METRICS_STATUSES_MAX 16 /* distinct statuses per route */

typedef struct metrics metrics_t;

/* A gauge read at scrape time. */
typedef int64_t (*metrics_gauge_fn)(void *ctx);

metrics_t *metrics_new(void);
void metrics_destroy(metrics_t **self_p);

/* Counts one request of route (a pattern such as "GET /api/v2/chats/{}") with its status
 * and latency. Routes beyond METRICS_ROUTES_MAX are counted under "other". */
void metrics_request(metrics_t *self, const char *route, int status, double seconds);

/* Adds a gauge (name must be a valid metric name; fn is called at every scrape). */
void metrics_gauge(metrics_t *self, const char *name, const char *help, metrics_gauge_fn fn,
                   void *ctx);

/* The exposition text, newly allocated (caller frees). */
char *metrics_render(metrics_t *self);

#endif
