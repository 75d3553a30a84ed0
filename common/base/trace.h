/*
 * trace: W3C trace context (https://www.w3.org/TR/trace-context/), the `traceparent` value
 * `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>` a request carries from the
 * gateway to the worker's turn span (issue 40). Parsing is strict: version 00 only (a later
 * version's first four fields are read as the spec asks), lowercase hex, no all-zero id.
 */
#ifndef CHATFLEET_TRACE_H
#define CHATFLEET_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#define TRACE_PARENT_LEN 55 /* characters of a version 00 traceparent, without the NUL */
#define TRACE_ID_HEX     32
#define TRACE_SPAN_HEX   16

typedef struct {
    char trace_id[TRACE_ID_HEX + 1]; /* lowercase hex */
    char span_id[TRACE_SPAN_HEX + 1];
    uint8_t flags; /* bit 0: sampled */
} trace_ctx_t;

/* Reads a traceparent header value. 0, or -1 (out untouched) when it is not a valid one. */
int trace_parse(const char *value, trace_ctx_t *out);

/* A new random trace id and span id, sampled. 0, or -1 when no randomness could be had. */
int trace_new(trace_ctx_t *out);

/* A new random span id (16 hex digits + NUL) into out. 0 or -1. */
int trace_span_id(char out[TRACE_SPAN_HEX + 1]);

/* Writes ctx as a traceparent (version 00) into out. */
void trace_format(const trace_ctx_t *ctx, char out[TRACE_PARENT_LEN + 1]);

/* The traceparent a message-making request carries on: the header value (NULL when absent)
 * rewritten as version 00 when it is valid, else a new trace. true when it came from the
 * header; out is "" only when no randomness could be had. */
bool trace_from_header(const char *value, char out[TRACE_PARENT_LEN + 1]);

#endif
