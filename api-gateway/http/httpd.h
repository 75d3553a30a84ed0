/*
 * httpd: the gateway's HTTP server on libmicrohttpd (ARCHITECTURE.md §7.1). A few I/O threads
 * (epoll) own every socket and no connection owns a thread. Admission happens as soon as a
 * request head is in: a connection beyond the total or per-address cap gets 503 with
 * Retry-After, a declared body over the cap 413, an unknown route 404 or 405, and a route
 * that is not open is authenticated before any of its body is read (401 at once). Handlers
 * then run on a small pool of request threads while the connection is suspended, since
 * they block on PostgreSQL. A request head that is not complete within the head deadline
 * (from accept, or from the previous response on a kept-alive connection), or a body not
 * complete within the body deadline, has its connection cut. A stream's response resumes
 * its suspended connection whenever it has bytes (feed.h).
 *
 * With TLS (ARCHITECTURE.md §1.1, "Transport security") libmicrohttpd speaks HTTPS through
 * GnuTLS on the same threads; the handshake counts as part of the request head, so a client
 * that never completes it is cut at the head deadline like any slow head.
 */
#ifndef CHATFLEET_HTTPD_H
#define CHATFLEET_HTTPD_H

#include <stdint.h>

#include "http.h"
#include "metrics.h"

#define HTTPD_SWEEP_MS 200 /* how often the deadlines are checked */

/* The server's limits (CHATFLEET_HTTP_*, ARCHITECTURE.md §10). */
typedef struct {
    int max_connections;     /* open connections, streams included; beyond: 503 */
    int max_per_address;     /* open connections from one client address; beyond: 503 */
    int64_t head_timeout_ms; /* a request head (or the next one on a kept-alive connection) */
    int64_t body_timeout_ms; /* a request body, from the end of its head */
    int io_threads;          /* threads that own the sockets */
    int request_threads;     /* threads that run handlers */
} httpd_limits_t;

/* HTTPS material, in memory (the gateway reads the files, main.c). */
typedef struct {
    const char *cert_pem;   /* certificate chain, PEM */
    const char *key_pem;    /* private key, PEM */
    const char *priorities; /* GnuTLS priority string (CONFIG_TLS_PRIORITIES by default) */
} httpd_tls_t;

typedef struct httpd httpd_t;

/* Starts serving router on host:port (IPv4) within limits, over HTTPS with tls (copied) or
 * plain HTTP when tls is NULL; every request is counted in metrics (may be NULL). NULL
 * (logged) when it cannot bind or libmicrohttpd refuses the TLS material. */
httpd_t *httpd_new(const char *listen, const httpd_limits_t *limits, const httpd_tls_t *tls,
                   const http_router_t *router, metrics_t *metrics);

/* "https" or "http". */
const char *httpd_scheme(const httpd_t *self);
void httpd_destroy(httpd_t **self_p);

/* The port actually bound (useful with port 0). */
int httpd_port(const httpd_t *self);

typedef struct {
    int64_t open;            /* connections open now */
    int64_t refused;         /* 503 at a connection cap, since start */
    int64_t cut;             /* connections cut at a head or body deadline, since start */
    int64_t handlers_queued; /* requests waiting for a request thread now */
} httpd_stats_t;
void httpd_stats(httpd_t *self, httpd_stats_t *out);

#endif
