/*
 * hookcons: a lifecycle hook consumer for tests (ARCHITECTURE.md §7.10): an HTTP server on
 * 127.0.0.1 in a thread of its own that keeps every POST it receives (body, signature and
 * event id headers) and answers each as the test scripted it for the event named in the body.
 * It stops and starts again on the same port, so a test can take the consumer down.
 */
#ifndef CHATFLEET_HOOKCONS_H
#define CHATFLEET_HOOKCONS_H

#include <jansson.h>
#include <stdbool.h>

#define HOOKCONS_SEEN_MAX 1024 /* requests kept; later ones are answered but not kept */

typedef struct hookcons hookcons_t;

/* Starts a consumer on port (0: a free one). Aborts the test on failure. */
hookcons_t *hookcons_new(int port);

/* Stops the server (closing requests left unanswered) and frees it. Safe on NULL; nulls. */
void hookcons_destroy(hookcons_t **self_p);

int hookcons_port(const hookcons_t *self);

/* Answers later requests for event (NULL: every event without an answer of its own) with
 * status and body, or never (hang: the request stays open until the client gives up). */
void hookcons_answer(hookcons_t *self, const char *event, int status, const char *body, bool hang);

/* The number of requests kept so far, and the i-th one's parts (copies; the caller frees). */
int hookcons_seen(hookcons_t *self);
char *hookcons_body(hookcons_t *self, int i);
char *hookcons_header(hookcons_t *self, int i, const char *name);

/* The requests kept from index from on whose chat_id is chat, as parsed bodies (a new array),
 * or NULL when any kept request from there on is not signed with secret (HMAC-SHA256 of its
 * body, hooks.h), its body is not JSON or its sent_at is not the wall clock as RFC 3339 UTC
 * with milliseconds, within five minutes of now: every delivery must verify. */
json_t *hookcons_events(hookcons_t *self, int from, const char *chat, const char *secret);

/* The string at key of an event of hookcons_events (at data.key when in_data), or "". */
const char *hookcons_str(const json_t *ev, const char *key, bool in_data);

#endif
