/*
 * generation: one step of the generation task (ARCHITECTURE.md §7.3).
 *
 * Loads the model-visible history under the fence and decides: run pending local tools
 * (CommitStep with their results), enter requires_action for pending dynamic tools, finish
 * a complete turn (or one at the step limit), or call the model. A model call is preceded
 * by RecordGenerationAttempt, streams into the part buffer as episode (chat,
 * history_version, attempt), and ends in one CommitStep carrying the assistant message
 * (with its usage) and the results of all its local tool calls together. A failed call is
 * classified: non-retryable, or retryable past env->max_retries, ends in FinishError;
 * otherwise RecordRetryState, a cancellable backoff (the provider's retry-after when it gave
 * one) and another attempt. Each step ends after one bundle (a reply without tool calls
 * also finishes the turn in it); the runner spawns the next step when it sees the new
 * history version. The step runs in phases (taskctx.h): the model call and the backoff hold
 * no connection.
 *
 * While a structured request governs the turn (history.h, structured.h) the step also offers
 * the finalizer, screens every tool call's raw arguments before the assistant row is stored,
 * checks submissions, stamps the step's metadata on its rows, and ends the request with its
 * receipt in the bundle of the FinishTurn or FinishError that ends the turn
 * (ARCHITECTURE.md §8; worker/turn/README.md, "Structured output").
 */
#ifndef CHATFLEET_GENERATION_H
#define CHATFLEET_GENERATION_H

#include <jansson.h>
#include <stddef.h>

#include "taskctx.h"

/* The generation task's first phase. TASKCTX_CALL (a model call, then the phases that
 * commit it) or TASKCTX_DONE after its transition committed, TASKCTX_QUIET on a fence
 * mismatch or cancellation, TASKCTX_RETRY on a database failure (the caller backs off and
 * starts over here, which reloads the history). */
taskctx_rc_t generation_step(taskctx_t *ctx, PGconn *conn);

/* The assistant content an interrupted episode leaves: consecutive text deltas merged into
 * one text part, other parts kept as streamed, as the JSON text of the parts array (written
 * by jsonout, so reals keep their shortest form), owned by the caller; NULL when no part is
 * left. Exposed for the interrupt task and unit tests. */
char *generation_partial(const char *const *parts, size_t count);

#endif
