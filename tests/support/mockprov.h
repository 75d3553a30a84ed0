/*
 * mockprov: an in-process mock model-provider HTTP server for tests. It listens on
 * 127.0.0.1 at a free port and answers each request with the next scripted reply, written as
 * a list of chunks with optional delays, so a test decides exactly where the bytes of an
 * SSE or NDJSON stream are cut (mid-line, mid-UTF-8) and whether the stream ends cleanly,
 * hangs, or drops the connection. It speaks no wire format itself: the bodies are the real
 * OpenAI, Anthropic or Ollama streams a test writes (worker/providers/README.md). Every request is
 * recorded (method, path, headers, body) for the test to assert the request wire format.
 *
 * Typical use:
 *     mockprov_t *mp = mockprov_new();
 *     mockprov_reply_t *r = mockprov_reply_new(200, "text/event-stream");
 *     mockprov_reply_body(r, "data: {...}\n\ndata: [DONE]\n\n", 3, 1); // 3-byte chunks, 1 ms apart
 *     mockprov_push(mp, &r);
 *     ... point a model config's base_url at mockprov_url(mp) and run the call ...
 *     json_t *req = mockprov_request(mp, 0); // {"method","path","headers","body_text","body"}
 *     mockprov_destroy(&mp);
 *
 * A request that finds the queue empty gets the default reply when one is set
 * (mockprov_set_default, for long-running tests such as a worker cluster), or else a 500
 * with {"error":{"type":"mockprov","message":"no scripted reply"}}. Thread-safe; every
 * connection is served on its own thread (libmicrohttpd), so delays never block another.
 */
#ifndef CHATFLEET_MOCKPROV_H
#define CHATFLEET_MOCKPROV_H

#include <jansson.h>
#include <stddef.h>

#define MOCKPROV_BODY_MAX_BYTES (8 * 1024 * 1024) /* a request body is cut at this size */

typedef struct mockprov mockprov_t;
typedef struct mockprov_reply mockprov_reply_t;

/* Starts a server on 127.0.0.1 with an OS-chosen port. NULL when it cannot listen. */
mockprov_t *mockprov_new(void);

/* Stops the server (connections still held open are ended first) and frees every queued
 * reply and record. Safe on NULL; nulls *self_p. */
void mockprov_destroy(mockprov_t **self_p);

/* "http://127.0.0.1:PORT", owned by the server; the port alone. */
const char *mockprov_url(const mockprov_t *self);
int mockprov_port(const mockprov_t *self);

/* A reply with this status and Content-Type (NULL: none). Never NULL. */
mockprov_reply_t *mockprov_reply_new(int status, const char *content_type);

/* Adds a response header, e.g. ("retry-after", "2"). */
void mockprov_reply_header(mockprov_reply_t *r, const char *name, const char *value);

/* Appends one chunk of len bytes, written after waiting delay_ms (0: at once). */
void mockprov_reply_chunk(mockprov_reply_t *r, const char *data, size_t len, int delay_ms);

/* Appends body cut into chunks of piece bytes (0: one chunk), each after delay_ms. */
void mockprov_reply_body(mockprov_reply_t *r, const char *body, size_t piece, int delay_ms);

/* After the last chunk, keeps the connection open for hold_ms before ending it (a stalled
 * stream, to test cancellation and idle handling). */
void mockprov_reply_hold(mockprov_reply_t *r, int hold_ms);

/* Ends the body by dropping the connection instead of finishing the chunked encoding. */
void mockprov_reply_abort(mockprov_reply_t *r);

/* Queues *r_p (FIFO) and takes ownership; nulls *r_p. */
void mockprov_push(mockprov_t *self, mockprov_reply_t **r_p);

/* Queues an OpenAI Chat Completions stream whose reply is text (no JSON escaping is done:
 * plain text only). */
void mockprov_push_openai_text(mockprov_t *self, const char *text);

/* Queues an OpenAI Chat Completions stream whose reply calls tool name with the JSON
 * arguments text args under the call id id. */
void mockprov_push_openai_call(mockprov_t *self, const char *id, const char *name,
                               const char *args);

/* Sets the reply for requests that find the queue empty (replacing any earlier one); takes
 * ownership. NULL clears it. */
void mockprov_set_default(mockprov_t *self, mockprov_reply_t **r_p);

/* Replies still queued. */
int mockprov_pending(mockprov_t *self);

/* Requests received so far (counted once their body is complete). */
int mockprov_request_count(mockprov_t *self);

/* Waits up to timeout_ms until at least n requests were received. Returns 0, or -1 on
 * timeout. */
int mockprov_wait_requests(mockprov_t *self, int n, int timeout_ms);

/* Request index as a new reference (the caller json_decref()s it), or NULL:
 * {"method", "path", "headers": {lowercase name: value}, "body_text", "body": parsed or
 * null}. */
json_t *mockprov_request(mockprov_t *self, int index);

#endif
