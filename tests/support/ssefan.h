/*
 * ssefan: thousands of Server-Sent Events clients in one thread, for the gateway's admission
 * test and the fan-out bench. Non-blocking sockets on epoll speak raw HTTP/1.1 (a GET with
 * "Authorization: Bearer"), decode a chunked body, and split it into SSE events; per
 * connection it keeps the HTTP status, a count of events by name and the monotonic time of
 * the first message_part, and it can hand every event to a callback. No thread and no
 * libcurl: a curl handle per stream costs more than the gateway's side being measured.
 * Opening is paced (at most SSEFAN_CONNECTING_MAX connections, or ssefan_set_pace's, waiting
 * for their response head), so a burst of opens does not overflow the server's listen backlog.
 * One ssefan per process or thread: a bench that needs more client CPU runs several.
 */
#ifndef CHATFLEET_SSEFAN_H
#define CHATFLEET_SSEFAN_H

#include <stddef.h>
#include <stdint.h>

#define SSEFAN_CONNECTING_MAX 256       /* connections opened but without a response head yet */
#define SSEFAN_HEAD_MAX_BYTES 8192      /* a response head longer than this fails the connection */
#define SSEFAN_LINE_MAX_BYTES (1 << 20) /* an SSE line longer than this fails the connection */
#define SSEFAN_NAMES_MAX      16        /* distinct event names counted; others are not counted */

typedef struct ssefan ssefan_t;

typedef enum {
    SSEFAN_QUEUED = 0, /* not connected yet (paced) */
    SSEFAN_CONNECTING, /* connecting, or the request sent and the head not in */
    SSEFAN_OPEN,       /* the head is in (any status) and the body is being read */
    SSEFAN_CLOSED,     /* the server closed it or the body ended */
    SSEFAN_FAILED      /* connect, send or parse failed */
} ssefan_state_t;

/* Called for every complete event, in the thread that runs ssefan_poll: conn is the index
 * ssefan_open returned, event the "event:" name ("message" when absent), data the joined
 * "data:" lines (NUL-terminated; valid only during the call), now_us the monotonic clock
 * when the bytes were read. */
typedef void(ssefan_event_fn)(void *ctx, int conn, const char *event, const char *data, size_t len,
                              int64_t now_us);

/* Clients of base_url ("http://HOST:PORT", an IPv4 address) with the bearer token (NULL: no
 * Authorization). Raises this process's RLIMIT_NOFILE to its hard limit. NULL when base_url
 * cannot be parsed. */
ssefan_t *ssefan_new(const char *base_url, const char *token);

/* Closes every connection and frees everything; safe on NULL; sets *self_p to NULL. */
void ssefan_destroy(ssefan_t **self_p);

/* Raises RLIMIT_NOFILE's soft limit to the hard one (children inherit it); returns the soft
 * limit now in force. */
long ssefan_raise_nofile(void);

/* Sets the most connections waiting for their response head at once (SSEFAN_CONNECTING_MAX
 * unless set; at least 1): clients in several processes share the server's listen backlog. */
void ssefan_set_pace(ssefan_t *self, int connecting_max);

/* Sets the event callback (fn NULL: none). */
void ssefan_set_handler(ssefan_t *self, ssefan_event_fn *fn, void *ctx);

/* Queues a stream of GET path; returns its index (0, 1, ...). It connects during
 * ssefan_poll. */
int ssefan_open(ssefan_t *self, const char *path);

/* Runs the event loop for at least timeout_ms and until what is ready is read (0: only what
 * is ready, all of it) and returns the number of events parsed; -1 when epoll fails. */
int ssefan_poll(ssefan_t *self, int timeout_ms);

/* Closes the connection conn (its state becomes SSEFAN_CLOSED). */
void ssefan_close(ssefan_t *self, int conn);

/* The number of connections opened so far. */
int ssefan_size(const ssefan_t *self);

ssefan_state_t ssefan_state(const ssefan_t *self, int conn);

/* The response status of conn (0 until its head is in). */
int ssefan_status(const ssefan_t *self, int conn);

/* Events named name received on conn so far (0 for a name never seen). */
int ssefan_count(const ssefan_t *self, int conn, const char *name);

/* The monotonic microseconds at which conn read its first message_part, or 0. */
int64_t ssefan_first_part_us(const ssefan_t *self, int conn);

/* How many connections are in state (queued, connecting, ...). */
int ssefan_in_state(const ssefan_t *self, ssefan_state_t state);

/* The monotonic clock in microseconds (the one every time above is on). */
int64_t ssefan_now_us(void);

#endif
