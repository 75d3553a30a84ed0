/*
 * mockmodel: an evented mock model server speaking the OpenAI Chat Completions wire
 * (worker/providers/README.md, /work/shared/reference/provider-wire.md §1), for benchmarks
 * and tests that need many slow model calls at once. One thread, one epoll loop, non-blocking
 * sockets and a timer heap: a reply in flight costs a socket and a few hundred bytes, never a
 * thread, so one process holds tens of thousands of concurrent streams.
 *
 * Each reply streams `chunks` text deltas spread evenly over `duration_ms` (delta k leaves at
 * start + k * duration / chunks, never earlier), then the finish chunk (finish_reason "stop"),
 * the usage chunk and `data: [DONE]`. A request may override the defaults by a directive in
 * the text of its last user message (`[mock:duration MS]`, `[mock:chunks N]`, `[mock:stall]`)
 * or by a header (`x-mock-duration-ms`, `x-mock-chunks`, `x-mock-stall: 1`; a header wins). A
 * stalled request is read and never answered: the connection stays open until the client
 * closes it. `GET /stats` answers the counters below as JSON.
 *
 * HTTP/1.1 with keep-alive and pipelining (requests on one connection are answered in order),
 * Content-Length bodies, `Expect: 100-continue`, partial reads anywhere; chunked transfer
 * encoding for the stream (HTTP/1.0: none, and the connection closes after the reply).
 * Memory per connection is bounded: MOCKMODEL_HEADER_MAX_BYTES of headers, the configured
 * request cap for headers plus body, MOCKMODEL_OUT_MAX_BYTES of unsent output (a client that
 * stops reading past it is dropped); both buffers are freed whenever they are empty.
 */
#ifndef CHATFLEET_MOCKMODEL_H
#define CHATFLEET_MOCKMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOCKMODEL_HEADER_MAX_BYTES (16 * 1024)   /* request line and headers: 431 past it */
#define MOCKMODEL_OUT_MAX_BYTES    (1024 * 1024) /* unsent output before the client is dropped */
#define MOCKMODEL_CHUNKS_MAX       10000         /* text deltas in one reply */
#define MOCKMODEL_DURATION_MAX_MS  (3600 * 1000) /* one reply's duration */
#define MOCKMODEL_STATS_LOG_MS     5000          /* a stats line at most this often, on change */

typedef struct {
    const char *listen;       /* "HOST:PORT" (IPv4); port 0: the kernel picks one */
    int64_t duration_ms;      /* default reply duration */
    int chunks;               /* default text deltas per reply, 1..MOCKMODEL_CHUNKS_MAX */
    bool stall;               /* every chat request stalls (accepted, read, never answered) */
    size_t max_request_bytes; /* headers plus body of one request: 413 past it */
    bool verbose;             /* one line per reply too (otherwise only errors and stats) */
} mockmodel_config_t;

/* The counters `GET /stats` reports (a JSON object with these names). */
typedef struct {
    int64_t open;              /* connections open now (the /stats request's own included) */
    int64_t peak_open;         /* most connections open at once */
    int64_t accepted;          /* connections accepted in all */
    int64_t requests;          /* complete requests read */
    int64_t replies_active;    /* chat replies in progress now (streaming or waiting) */
    int64_t peak_replies;      /* most chat replies in progress at once */
    int64_t replies_completed; /* replies whose last byte was handed to the socket */
    int64_t replies_aborted;   /* replies whose client went away first */
    int64_t stalled;           /* stalled requests whose connection is still open */
    int64_t errors;            /* 4xx answers sent */
} mockmodel_stats_t;

typedef struct mockmodel mockmodel_t;

/* Binds and listens on cfg->listen (SO_REUSEADDR). Returns NULL, after logging why, when the
 * address is invalid or cannot be bound. cfg's strings are copied. */
mockmodel_t *mockmodel_new(const mockmodel_config_t *cfg);

/* Closes every connection and the listener. Safe on NULL; nulls *self_p. */
void mockmodel_destroy(mockmodel_t **self_p);

/* The port actually bound. */
int mockmodel_port(const mockmodel_t *self);

/* Runs the loop until stop_fd (a signalfd or pipe; -1: none) becomes readable. Returns 0, or
 * -1 when epoll itself fails. */
int mockmodel_run(mockmodel_t *self, int stop_fd);

/* The counters now. */
mockmodel_stats_t mockmodel_stats(const mockmodel_t *self);

#endif
