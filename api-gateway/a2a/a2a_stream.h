/*
 * a2a_stream: SendStreamingMessage's SSE answer. It is a feed (feed.h) on the task's chat,
 * woken by the hub like a chat stream; each sync rereads the task (a2a_task.h) and sends
 * what changed as JSON-RPC results: the Task first, then status updates, the agent's text
 * deltas as working status messages, the artifacts, and the final status, after which the
 * feed closes. The deltas are the parts of the turn's current episode, each once and in
 * order however late the stream opened: an episode.h cursor catches up from the hub's log or
 * the worker (ARCHITECTURE.md §8, "A2A").
 */
#ifndef CHATFLEET_A2A_STREAM_H
#define CHATFLEET_A2A_STREAM_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway.h"

#define A2A_STREAM_TAIL_MS 10000 /* how long an ended task's stream asks for its episode's tail */

/* Answers req with the SSE stream of task_id in chat_id; rpc_id is the request's id (not
 * stolen). */
void a2a_stream_start(gateway_t *gw, const http_req_t *req, http_resp_t *resp, json_t *rpc_id,
                      const char *task_id, const char *chat_id, bool legacy);

#endif
