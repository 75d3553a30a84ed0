/*
 * sse: a Server-Sent Events client for tests: reads a stream on its own thread with libcurl
 * and keeps every event (name, id, data parsed as JSON) for the test to wait on.
 */
#ifndef CHATFLEET_SSE_H
#define CHATFLEET_SSE_H

#include <jansson.h>
#include <stdint.h>

typedef struct sse sse_t;

/* Connects to url with the bearer token (and Last-Event-ID when last_event_id > 0). */
sse_t *sse_open(const char *url, const char *token, int64_t last_event_id);
void sse_close(sse_t **self_p);

/* Events received so far. The returned event (owned by the client) has "event" (name),
 * "id" (integer, 0 when absent), "data" (parsed as stored text: numbers keep their literals,
 * jsonstrict_load_stored) and "raw" (the data line's text as received). */
int sse_count(sse_t *self);
json_t *sse_get(sse_t *self, int index);

/* Waits until an event named name arrives at or after index from; returns its index or -1
 * after timeout_ms. match may be NULL, or a function that must also accept the event. */
int sse_wait(sse_t *self, int from, const char *name, int (*match)(json_t *event, void *ctx),
             void *ctx, int timeout_ms);

#endif
