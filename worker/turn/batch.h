/*
 * batch: the rows of one CommitStep built from a model batch (ARCHITECTURE.md §8): the
 * assistant row, screened by the strict JSON boundary before it is stored, with its
 * step metadata while a structured request is open; then one tool row per call the worker
 * answers: local tools run, refused arguments and refused batches answered with bounded
 * errors, the finalizer's submission checked (an acknowledgment plus candidate metadata, or
 * the validator's first issues). Calls of declared dynamic tools are left to the client, and
 * MCP calls to a step of their own (ARCHITECTURE.md §7.9). In
 * native mode (structured.h) the reply's text is the submission: the step row carries the
 * checked value as the candidate, or the invalid_output rejection and its reason; any tool
 * call refuses the batch.
 *
 * Pure apart from running local tools; the caller commits the rows. Not thread-safe: one
 * batch belongs to one task.
 */
#ifndef CHATFLEET_BATCH_H
#define CHATFLEET_BATCH_H

#include <jansson.h>
#include <stdbool.h>

#include "chatstate.h"
#include "structured.h"
#include "taskctx.h"

#define BATCH_CALLS_MAX 128 /* tool calls answered in one step; the rest are answered later */

typedef struct batch batch_t;

batch_t *batch_new(void);

/* Times each local tool run as a tool_call stage of ctx's turn (taskctx_stage); without it,
 * runs are not timed. */
void batch_set_task(batch_t *self, taskctx_t *ctx);
void batch_destroy(batch_t **self_p);

/* The rows built so far (valid until the batch is destroyed). */
const cs_message_t *batch_rows(const batch_t *self, int *count);

/* True when a call of name is one the worker runs itself with tools_run: not an MCP tool, not
 * one of dynamic_tools, not the finalizer (an unknown name too: it gets an error result). */
bool batch_runs_locally(const json_t *dynamic_tools, const char *name);

/* With hooked set, local tool calls are treated like MCP calls: answered from answers and
 * otherwise left pending, because they run under the lifecycle hooks (hookstep.h). */
void batch_set_hooked(batch_t *self, bool hooked);

/* The answer to a call of a tool plan mode withholds (worker/turn/steer.h). */
#define BATCH_PLAN_REFUSAL                                                                         \
    "not executed: the chat is in plan mode, where only tools that change nothing run; this tool " \
    "is not one of them. Answer with a plan instead."

/* Plan mode (steer.h): offered is the step's tools on offer (borrowed; it must outlive the
 * batch's answers), and a call of any other tool, the client's dynamic tools included, is
 * answered with BATCH_PLAN_REFUSAL as an error and never run or left pending. NULL (the
 * default): not in plan mode. */
void batch_set_plan(batch_t *self, const json_t *offered);

/* Builds the rows of a model reply: content (its parts; every "args_text" is replaced in
 * place by the screened "args" or the placeholder {}), finish (provider_result_t.finish),
 * usage (JSON text or NULL), the chat's dynamic tools, and turn (NULL: no request open).
 * *rejection receives the step's rejection name (NULL: none) and *candidate whether a
 * submission was accepted. */
void batch_reply(batch_t *self, json_t *content, const char *finish, const char *usage,
                 const char *model_config_id, const json_t *dynamic_tools,
                 const structured_turn_t *turn, const char **rejection, bool *candidate);

/* Builds the answers to pending calls read back from history (DECIDE_RUN_LOCAL). A pending
 * finalizer is answered with an error: a submission is checked only in the step that made
 * it, so a stored placeholder can never pass as arguments. MCP calls (mcpset.h) are answered
 * from answers ({tool_call_id: {"result", "is_error"}}, may be NULL) and otherwise left
 * pending, here as in batch_reply. */
void batch_pending(batch_t *self, const json_t *pending, const json_t *dynamic_tools,
                   const structured_turn_t *turn, const json_t *answers);

/* Appends the context the lifecycle hooks added to the answers of calls (ARCHITECTURE.md
 * §7.10: answers[tool_call_id].model_context and .user_context, in the calls' order): one
 * model-only user row with every model_context, and one assistant row only users see (never
 * a model, never a user row that could hide an open structured request) with every
 * user_context, after the tool rows, each marked CS_HOOK_CONTEXT_META (history reads it as a
 * control row); nothing when the hooks added none. */
void batch_hook_context(batch_t *self, const json_t *calls, const json_t *answers);

/* Appends the rows of the context one hook event's answer added ({"model_context"?,
 * "user_context"?}; the model's only when model), as batch_hook_context does, marked
 * {"type":"hook-context","event":event}: history reads a stop's as a control row (it asks for
 * a reply), a post_compact's as a plain model-only row (ARCHITECTURE.md §7.10). */
void batch_event_context(batch_t *self, const json_t *answer, const char *event, bool model);

#endif
