/*
 * evloop: one event loop that drives many model calls at once (ARCHITECTURE.md §7.3).
 *
 * A loop multiplexes libcurl transfers (the multi interface's socket API over epoll), timers
 * (the sim's pace, retry backoffs, requires-action deadlines) and functions posted from other
 * threads. A worker runs one loop on one thread of its own (evloop_start), so the number of
 * its threads does not grow with the number of turns in flight; a synchronous caller (a test,
 * provider_generate) runs a private loop in its own thread with evloop_run_once.
 *
 * Thread-safety: evloop_post and evloop_wake may be called from any thread; everything else
 * only on the loop's own thread (from a posted function, a timer or a transfer callback), or
 * by the thread that calls evloop_run_once on a loop that was never started.
 */
#ifndef CHATFLEET_EVLOOP_H
#define CHATFLEET_EVLOOP_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct evloop evloop_t;
typedef struct evloop_timer evloop_timer_t;

typedef void(evloop_fn)(void *arg);

/* Runs when a transfer ends; the easy handle has left the loop and belongs to the caller. */
typedef void(evloop_done_fn)(void *arg, CURLcode result);

/* A new loop, not running. Never NULL (aborts on exhaustion). */
evloop_t *evloop_new(void);

/* Runs the loop on a thread of its own until evloop_destroy. Returns 0, or -1 when the thread
 * could not be made. */
int evloop_start(evloop_t *self);

/* Stops a started loop and joins its thread, then frees the loop. Transfers still in it are
 * removed without their done callback, pending timers and posted functions are dropped: the
 * caller ends its calls before. Safe on NULL; nulls *self_p. */
void evloop_destroy(evloop_t **self_p);

/* Runs fn(arg) on the loop's thread, after the functions posted before it. Any thread. */
void evloop_post(evloop_t *self, evloop_fn *fn, void *arg);

/* One turn of a loop that was never started: waits up to timeout_ms for I/O, a due timer or a
 * post, and runs what is ready. */
void evloop_run_once(evloop_t *self, int timeout_ms);

/* A timer that runs fn(arg) once at the monotonic time at_ms (id_now_ms() scale). The handle
 * is valid until fn runs or evloop_timer_cancel. */
evloop_timer_t *evloop_timer_at(evloop_t *self, int64_t at_ms, evloop_fn *fn, void *arg);

/* Cancels a timer whose function has not run; it never will. */
void evloop_timer_cancel(evloop_t *self, evloop_timer_t *timer);

/* Transfers are spread over up to EVLOOP_MULTIS_MAX libcurl multi handles, a new one made
 * only when every one holds EVLOOP_MULTI_FILL (ARCHITECTURE.md §6.5): libcurl's search for a
 * connection to reuse walks every connection its handle has to the host. */
#define EVLOOP_MULTI_FILL 128
#define EVLOOP_MULTIS_MAX 64

/* Adds a configured easy handle; done(arg, result) runs once when the transfer ends. */
void evloop_curl_add(evloop_t *self, CURL *easy, evloop_done_fn *done, void *arg);

/* Removes a transfer that has not ended; its done callback never runs. */
void evloop_curl_remove(evloop_t *self, CURL *easy);

/* What the loop holds now (for status and tests). */
typedef struct {
    size_t transfers;
    size_t multis; /* multi handles made so far (they stay until the loop is destroyed) */
    size_t timers;
} evloop_stats_t;

void evloop_stats(const evloop_t *self, evloop_stats_t *out);

#endif
