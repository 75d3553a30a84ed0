/*
 * steer: what a chat's steering settings make of a generation step (issue 38): the reasoning
 * effort of its model call, the tools on offer, and the plan-mode system block.
 *
 * Effort (chatd-architecture.md, "Reasoning effort"): the chat's last_reasoning_effort if set,
 * else the model config's default, clamped to the config's max on the global scale
 * (common/chat/effort.h); a config without options.reasoning_effort sends none, whatever the
 * user chose. Plan mode (chats.plan_mode): the model is offered only the tools that change
 * nothing (the local tools, all of which only read; list_agents, list_subagent_models and
 * wait_agent; MCP tools whose annotations say readOnlyHint: true; never the client's dynamic
 * tools, which carry no such marker) and the prompt begins with the plan block; a call of any
 * other tool is answered with a tool error and never run (batch_set_plan, and toolstep for
 * calls read back from history). Thread-safe.
 */
#ifndef CHATFLEET_STEER_H
#define CHATFLEET_STEER_H

#include <jansson.h>
#include <stdbool.h>

#include "history.h"
#include "structured.h"
#include "taskctx.h"

/* The plan block when CHATFLEET_PLAN_MODE_INSTRUCTIONS is unset. */
#define STEER_PLAN_INSTRUCTIONS                                                                    \
    "You are in plan mode: investigate and answer with a plan; do not make changes. Only tools "   \
    "that change nothing are available: read, search and inspect what you need, then describe "    \
    "the changes you would make, step by step, and stop. The user turns plan mode off when the "   \
    "plan is to be carried out."

/* The effort of h's model call (a static name of effort.h), or NULL: none is sent. */
const char *steer_effort(const history_t *h);

/* The tools a model call of h offers, as a new array of {"name", "description",
 * "input_schema"}: the local tools, the subagent tools (when env allows subagents), the enabled
 * MCP servers' tools, the chat's dynamic tools and, while a request is open (turn), the
 * finalizer; in plan mode only those that change nothing (above) and the finalizer; none at
 * all for a native structured turn. */
json_t *steer_tools(const taskctx_env_t *env, const history_t *h, const structured_turn_t *turn);

/* Whether tools (as steer_tools made them) offer name. */
bool steer_offers(const json_t *tools, const char *name);

/* The plan-mode system row that begins the prompt, {"role": "system", "content": [{"type":
 * "text", "text": ...}]}: opts->plan_instructions, or STEER_PLAN_INSTRUCTIONS when it is "".
 * A new reference. */
json_t *steer_plan_block(const taskctx_options_t *opts);

#endif
