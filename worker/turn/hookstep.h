/*
 * hookstep: a step's local tool calls run under the lifecycle hooks (ARCHITECTURE.md §7.10),
 * as one call on the event loop like a model call: pre_tool_use for every call, the tools
 * (a denied call answered as denied, an overridden input used instead of the model's), then
 * post_tool_use with each result (local tools, or MCP calls); and one event alone (stop,
 * pre_compact). A hook that fails (hooks.h) fails the whole call, so the step commits nothing and
 * the turn ends in error.
 */
#ifndef CHATFLEET_HOOKSTEP_H
#define CHATFLEET_HOOKSTEP_H

#include "hooks.h"
#include "mcpset.h"
#include "provider.h"

#include <jansson.h>
#include <stdint.h>

/* The dispatcher's runner on loop (ARCHITECTURE.md §7.10: the worker's dispatches are
 * transfers on its event loop). */
hooks_runner_t hookstep_runner(evloop_t *loop);

/* Starts the hooked run of calls (the pending tool-call parts, borrowed) of chat at
 * history_version, on loop's thread: local tools when mcp is NULL, else MCP calls made through
 * mcp for the chat's enabled servers (borrowed), after their pre_tool_use round, as one call
 * on the loop (mcpset_start) that a cancellation cancels too. done runs once on the loop:
 * PROVIDER_OK with res->content = {tool_call_id: {"result", "is_error"}} (batch_pending's answers),
 * or PROVIDER_ERROR with res->error naming the hook that failed (not retryable), or
 * PROVIDER_CANCELLED. Tool events carry ids of (chat, history_version, event, tool_call_id),
 * so a step made again after a takeover sends the same ids. */
provider_call_t *hookstep_start(hooks_t *hooks, evloop_t *loop, const char *chat_id,
                                int64_t history_version, const json_t *calls, mcpset_t *mcp,
                                const json_t *enabled, provider_done_fn *done, void *ctx);

/* Starts one dispatch of event (an admitted one, payload borrowed) as a call on loop's
 * thread: done runs once on the loop with PROVIDER_OK when the consumer answered validly
 * (res->content: {"model_context"?, "user_context"?}, what the answer added),
 * PROVIDER_ERROR with res->error naming the event when it failed (not retryable), or
 * PROVIDER_CANCELLED. The event id is that of (chat, history_version, event). */
provider_call_t *hookstep_event_start(hooks_t *hooks, evloop_t *loop, hooks_event_t event,
                                      const char *chat_id, int64_t history_version,
                                      const json_t *payload, provider_done_fn *done, void *ctx);

#endif
