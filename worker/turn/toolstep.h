/*
 * toolstep: the phases of a generation step that are not model calls (ARCHITECTURE.md §7.9,
 * §7.10): its pending tool calls (local ones under the lifecycle hooks, MCP ones on the
 * worker's event loop) and the hook events it hears (stop, post_compact, pre_compact). Each is
 * the step's call, made with no connection held; the phase after commits what it produced in
 * one fenced bundle (stepbundle.h), or ends the turn in error when a hook failed (fail closed).
 */
#ifndef CHATFLEET_TOOLSTEP_H
#define CHATFLEET_TOOLSTEP_H

#include <jansson.h>
#include <stdbool.h>

#include "history.h"
#include "hooks.h"
#include "provider.h"
#include "structured.h"
#include "taskctx.h"

/* Hook events a step has heard before the read it makes next. */
#define TOOLSTEP_HEARD_POST_COMPACT 1u
#define TOOLSTEP_HEARD_STOP         2u

/* A step that reads and decides again, knowing the events in heard. */
typedef taskctx_rc_t toolstep_step_fn(taskctx_t *ctx, PGconn *conn, unsigned heard);

/* Pending calls read back from history (DECIDE_RUN_LOCAL): with hooks on, the local ones as
 * one hooked call; else local ones answered here and committed; once only MCP calls are left,
 * they are the call (hooked when hooks are on). TASKCTX_CALL, or the commit's result. */
taskctx_rc_t toolstep_run_pending(taskctx_t *ctx, PGconn *conn, const json_t *pending,
                                  const history_t *h, const structured_turn_t *turn);

/* Makes event (data stolen, {history_version} added) the step's call: the phase after runs
 * step again with heard (a post_compact's context committed first), or FinishError (with a
 * failed receipt of request_id, when given) when the hook failed. TASKCTX_CALL. */
taskctx_rc_t toolstep_hear(taskctx_t *ctx, hooks_event_t event, json_t *data, unsigned heard,
                           const char *request_id, toolstep_step_fn *step);

/* Makes the stop hook the step's call before FinishTurn (messages: the history read, to tell
 * whether a stop context went on once already). TASKCTX_CALL. */
taskctx_rc_t toolstep_stop(taskctx_t *ctx, const json_t *messages);

/* One hook event of the step as its call, {history_version} its data. */
provider_call_t *toolstep_event_start(taskctx_t *ctx, hooks_event_t event, provider_done_fn *done,
                                      void *arg);

/* In the phase after a hook event: true when the phase ends here (*rc: cancelled, no
 * connection, or FinishError for a failed hook); false when the hook passed (the answer's
 * context in ctx->call_res is cleared then; read it first). */
bool toolstep_event_ended(taskctx_t *ctx, PGconn *conn, taskctx_rc_t *rc);

#endif
