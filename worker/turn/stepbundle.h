/*
 * stepbundle: the bundles a generation step commits (ARCHITECTURE.md §7.3, §8): its
 * transitions as taskctx_bundle_fn (the argument is a stepbundle_args_t), and the ways a step
 * ends a turn or a structured request: FinishError with a failed receipt, the finalizer's
 * decision (feedback, or the receipt with FinishTurn), a batch of rows in one CommitStep.
 */
#ifndef CHATFLEET_STEPBUNDLE_H
#define CHATFLEET_STEPBUNDLE_H

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "chatstate.h"
#include "structured.h"
#include "taskctx.h"

typedef struct {
    const cs_fence_t *fence;
    const cs_message_t *msgs;
    int count;
    const char *error_json;
    int64_t attempt;
    /* A structured request this bundle closes with its receipt, written right before the
     * FinishTurn or FinishError (ARCHITECTURE.md §8, "Receipts"); NULL: none. */
    const char *receipt_id;
    const char *receipt_status;
    const char *receipt_code;
    const char *receipt_value;
    /* CommitStep only: the step is the turn's last (a reply without tool calls and no
     * structured request open), so FinishTurn, and Abandon when the chat is left waiting,
     * follow in the same bundle. */
    bool finish;
    bool automatic; /* the compaction CommitStep of an automatic compaction */
} stepbundle_args_t;

/* The transitions (arg: a stepbundle_args_t). CommitStep, with FinishTurn (and Abandon when
 * the chat is left waiting) when finish is set; a compaction's CommitStep (the request
 * consumed unless automatic); EnterRequiresAction; FinishTurn and FinishError, each after the
 * receipt when receipt_id is set; RecordGenerationAttempt (attempt out); RecordRetryState. */
int stepbundle_commit_step(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_commit_compaction(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_enter_ra(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_enter_agent_wait(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_finish_turn(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_finish_error(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_record_attempt(chatstate_t *cs, void *arg, cs_error_t *err);
int stepbundle_record_retry(chatstate_t *cs, void *arg, cs_error_t *err);

/* FinishError with error_json ej, and a failed receipt (code) when request_id is set; the
 * error is for people, the code for clients. */
taskctx_rc_t stepbundle_finish_failed(taskctx_t *ctx, PGconn *conn, const char *request_id,
                                      const char *code, const char *ej);

/* stepbundle_finish_failed with the error {kind, message: why}. */
taskctx_rc_t stepbundle_fail_request(taskctx_t *ctx, PGconn *conn, const char *request_id,
                                     const char *code, const char *kind, const char *why);

/* Carries out a structured decision other than STRUCTURED_CONTINUE: the feedback row, or the
 * receipt (succeeded with the candidate's value, else failed with the decision's code) with
 * FinishTurn. stop is the answer of the stop hook heard at the request's end (NULL: none):
 * when the request would succeed, has not been continued yet and stop carries model_context,
 * the request goes on instead (one CommitStep of the invalidation row holding that context,
 * and the user_context row); otherwise its user_context row goes in the FinishTurn bundle
 * after the receipt (ARCHITECTURE.md §7.10, §8). */
taskctx_rc_t stepbundle_turn_end(taskctx_t *ctx, PGconn *conn, const structured_turn_t *t,
                                 structured_decision_t d, const json_t *stop);

/* Commits the batch's rows in one CommitStep (and FinishTurn with it when finish is set)
 * and destroys the batch. */
taskctx_rc_t stepbundle_commit_batch(taskctx_t *ctx, PGconn *conn, batch_t **b, bool finish);

#endif
