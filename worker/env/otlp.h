/*
 * otlp: the worker's span exporter (issue 40). With CHATFLEET_OTLP_ENDPOINT set, spans are
 * posted as OTLP/HTTP JSON (the JSON encoding of ExportTraceServiceRequest) to
 * {endpoint}/v1/traces by one background thread with libcurl: batched (up to OTLP_BATCH_MAX
 * spans, or whatever is queued after OTLP_FLUSH_MS), a failed post retried once, then its
 * batch dropped (counted). otlp_add never blocks on the network: the queue is bounded
 * (OTLP_QUEUE_MAX) and a span past it is dropped and counted.
 */
#ifndef CHATFLEET_OTLP_H
#define CHATFLEET_OTLP_H

#include <stdbool.h>
#include <stdint.h>

#include "trace.h"

#define OTLP_BATCH_MAX  256
#define OTLP_FLUSH_MS   1000
#define OTLP_QUEUE_MAX  4096
#define OTLP_TIMEOUT_MS 2000 /* one post; a shutdown waits at most three of them */

/* One finished span. Times are nanoseconds since the Unix epoch. */
typedef struct {
    char trace_id[TRACE_ID_HEX + 1];
    char span_id[TRACE_SPAN_HEX + 1];
    char parent_id[TRACE_SPAN_HEX + 1]; /* "" for a root */
    char name[32];                      /* chat_turn, or a stage name */
    int64_t start_ns;
    int64_t end_ns;
    char chat_id[40];
    char chat_kind[12]; /* root, subagent */
    char outcome[16];   /* chat_turn: its turn_outcome; else "" */
    char model[64];     /* the provider's stages: the model config name; else "" */
    bool error;         /* status ERROR */
} otlp_span_t;

typedef struct otlp otlp_t;

/* An exporter posting to endpoint (a base URL; "/v1/traces" is appended) as service
 * chatfleet-worker, instance instance_id; starts its thread. NULL when endpoint is NULL or
 * empty. */
otlp_t *otlp_new(const char *endpoint, const char *instance_id);

/* Queues a copy of span; false when the queue is full (the span is dropped and counted). */
bool otlp_add(otlp_t *self, const otlp_span_t *span);

typedef struct {
    long long exported; /* spans a post delivered (a 2xx answer) */
    long long dropped;  /* spans refused by a full queue or lost with a failed batch */
    long long posts_failed;
} otlp_stats_t;

void otlp_stats(otlp_t *self, otlp_stats_t *out);

/* The wall clock in nanoseconds since the epoch (span times). */
int64_t otlp_now_ns(void);

/* Stops the thread: the post in flight ends (its retry is skipped), then one last batch of
 * what is queued is posted once; the rest is dropped (counted). */
void otlp_destroy(otlp_t **self_p);

#endif
