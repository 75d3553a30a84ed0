/*
 * a2a: the gateway's A2A v1.0 JSON-RPC binding (ARCHITECTURE.md §8, "A2A", for the
 * structured-output extension; api-gateway/a2a/README.md for the mapping).
 *
 *   GET  /.well-known/agent-card.json   the agent card (no auth), declaring the extension;
 *                                       its URL is gateway_t.public_url (never the Host)
 *   POST /a2a                           JSON-RPC 2.0 (notifications run and are never
 *                                       answered; batches of up to A2A_BATCH_MAX calls):
 *                                       SendMessage, SendStreamingMessage (SSE), GetTask,
 *                                       ListTasks, CancelTask, SubscribeToTask (SSE), and the
 *                                       v0.3 names message/send, message/stream, tasks/get,
 *                                       tasks/cancel, tasks/resubscribe (v0.3 shapes)
 *
 * A context is a chat (contextId = chat id); a task is one turn, named by its user message
 * id (or "q<queued id>" while the message waits in the queue). A structured request per the
 * extension becomes the message's response_format; its receipt becomes the task's one
 * artifact; an invalid schema fails the task ("r<n>", code invalid_schema) and a structured
 * request must accept application/json (-32005 otherwise). A cancellation is a committed row
 * (a2a_task_outcome_put). Errors are JSON-RPC errors in an HTTP 200 answer.
 */
#ifndef CHATFLEET_A2A_H
#define CHATFLEET_A2A_H

#include "gateway.h"

#define A2A_RPC_PATH        "/a2a"
#define A2A_BLOCKING_MAX_MS 60000 /* a blocking SendMessage answers by then, working or not */
#define A2A_POLL_MS         50    /* how often a blocking SendMessage rereads its task */
#define A2A_BATCH_MAX       32    /* calls in one JSON-RPC batch */

/* The A2A routes: the agent card and the JSON-RPC endpoint (routes.c joins them in). */
extern const http_route_t a2a_route_table[];
extern const int a2a_route_count;

#endif
