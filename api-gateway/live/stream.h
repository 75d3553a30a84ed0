/*
 * stream: GET /api/v2/chats/{id}/stream, Server-Sent Events implementing the stream of
 * ARCHITECTURE.md §7.3.
 *
 * Each open stream is a feed (feed.h), whose reads run as jobs on the stream pool when the hub
 * marks a sync due (an update hint or the poller) or a live part arrives. A sync is one REPEATABLE
 * READ transaction: messages changed since the last applied snapshot (revision watermark), the
 * queue, status, error, action_required and retry, then preview_reset when the episode changed and
 * a catch-up of the current episode's parts (from the hub's episode log, else from the owning
 * worker through the relay). Live parts are emitted only for the current episode with
 * contiguous seq; a part of a newer attempt starts that episode. `after_id` or Last-Event-ID
 * resumes after a message id.
 */
#ifndef CHATFLEET_STREAM_H
#define CHATFLEET_STREAM_H

#include "gateway.h"
#include "hub.h"

/* The route handler: answers with an SSE response (or an error before streaming). */
void stream_handle(void *app, http_req_t *req, http_resp_t *resp);

#define STREAM_VERSIONS_WAIT_MS 50 /* how long the poll waits for a pooled connection */

/* The hub's version reader (hub_versions_fn) on the gateway app's pool: one statement for n
 * chats; -1 when it failed or no connection came free within STREAM_VERSIONS_WAIT_MS. */
int stream_versions(void *app, const char *const *chat_ids, size_t n, int64_t *out);

#endif
