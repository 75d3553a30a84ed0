/* stepbundle: see stepbundle.h. */
#include "stepbundle.h"
#include "jsonout.h"
#include "log.h"
#include "outformat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_receipt(chatstate_t *cs, const stepbundle_args_t *a, cs_error_t *err) {
    if (!a->receipt_id) {
        return 0;
    }
    bool written = false;
    int rc = chatstate_receipt(cs, a->receipt_id, a->receipt_status, a->receipt_code,
                               a->receipt_value, &written, err);
    if (rc == 0) {
        log_info("structured_receipt", "request_id=%s status=%s code=%s written=%d", a->receipt_id,
                 a->receipt_status, a->receipt_code ? a->receipt_code : "-", written);
    }
    return rc;
}

int stepbundle_commit_step(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    if (chatstate_commit_step(cs, a->fence, a->msgs, a->count, err) != 0) {
        return -1;
    }
    if (!a->finish) {
        return 0;
    }
    /* The row is still locked by this bundle and the step just checked the fence; the
     * versions it moved are the step's own, so they are not checked again. */
    cs_fence_t after = *a->fence;
    after.history_version = -1;
    after.generation_attempt = -1;
    /* Nothing queued: the chat waits, and the Abandon the runner would spawn next goes in the
     * landing's own statement (another worker takes the chat's next turn, ARCHITECTURE.md
     * §7.3). */
    return chatstate_finish_turn_release(cs, &after, err);
}

/* A manual compaction consumes the request; an automatic one is an ordinary CommitStep (no
 * request can be pending while the chat runs: RequestCompaction needs W, E0 or E1). */
int stepbundle_commit_compaction(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    return a->automatic ? chatstate_commit_step(cs, a->fence, a->msgs, a->count, err)
                        : chatstate_commit_compaction(cs, a->fence, a->msgs, a->count, err);
}

int stepbundle_enter_ra(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    return chatstate_enter_requires_action(cs, a->fence, err);
}

int stepbundle_enter_agent_wait(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    return chatstate_enter_agent_wait(cs, a->fence, err);
}

int stepbundle_finish_turn(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    if (s_receipt(cs, a, err) != 0) {
        return -1;
    }
    return chatstate_finish_turn(cs, a->fence, a->msgs, a->count, err);
}

int stepbundle_finish_error(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    if (s_receipt(cs, a, err) != 0) {
        return -1;
    }
    return chatstate_finish_error(cs, a->fence, a->error_json, NULL, 0, err);
}

int stepbundle_record_attempt(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    return chatstate_record_generation_attempt(cs, a->fence, &a->attempt, err);
}

int stepbundle_record_retry(chatstate_t *cs, void *arg, cs_error_t *err) {
    stepbundle_args_t *a = arg;
    return chatstate_record_retry_state(cs, a->fence, a->error_json, err);
}

/* FinishError with error_json (JSON text), and a failed receipt (code) when request_id is
 * set; the error is for people, the code for clients. */
taskctx_rc_t stepbundle_finish_failed(taskctx_t *ctx, PGconn *conn, const char *request_id,
                                      const char *code, const char *ej) {
    stepbundle_args_t a = {.fence = &ctx->fence,
                           .error_json = ej,
                           .receipt_id = request_id,
                           .receipt_status = request_id ? "failed" : NULL,
                           .receipt_code = code};
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, stepbundle_finish_error, &a, "FinishError");
    if (rc == TASKCTX_DONE) {
        atomic_fetch_add(&ctx->env->counters.turns_failed, 1);
        taskctx_outcome(ctx, TURN_ERROR);
    }
    return rc;
}

/* stepbundle_finish_failed with the error {kind, message: why}. */
taskctx_rc_t stepbundle_fail_request(taskctx_t *ctx, PGconn *conn, const char *request_id,
                                     const char *code, const char *kind, const char *why) {
    json_t *e = json_pack("{s:s, s:s}", "kind", kind, "message", why);
    char *ej = jsonout_dumps(e);
    json_decref(e);
    taskctx_rc_t rc = stepbundle_finish_failed(ctx, conn, request_id, code, ej);
    free(ej);
    return rc;
}

static taskctx_rc_t s_feedback(taskctx_t *ctx, PGconn *conn, const structured_turn_t *t) {
    /* Bounded: the reason is at most STRUCTURED_REASON_MAX bytes and the rest is static. */
    char text[STRUCTURED_ERROR_MAX];
    if (t->native && !strcmp(t->st.last_reject, "invalid_output")) {
        snprintf(text, sizeof text, "Your reply was not accepted: %s. %s Repairs left: %d.",
                 t->st.last_reason, structured_native_instruction(),
                 STRUCTURED_REJECTIONS_MAX - t->st.rejections);
    } else {
        snprintf(text, sizeof text,
                 "Your reply ended without calling " OUTFORMAT_FINALIZER ". %s Repairs left: %d.",
                 structured_instruction(), STRUCTURED_REJECTIONS_MAX - t->st.rejections);
    }
    json_t *c = json_pack("[{s:s, s:s}]", "type", "text", "text", text);
    json_t *m = json_pack("{s:s, s:s, s:i}", "type", STRUCTURED_TYPE_FEEDBACK, "request_id",
                          t->request_id, "rejections", t->st.rejections);
    char *content = jsonout_dumps(c);
    char *meta = jsonout_dumps(m);
    json_decref(c);
    json_decref(m);
    cs_message_t msg = {.role = "user",
                        .visibility = "model",
                        .content = content,
                        .so_request_id = t->request_id,
                        .so_meta = meta};
    stepbundle_args_t a = {.fence = &ctx->fence, .msgs = &msg, .count = 1};
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, stepbundle_commit_step, &a, "CommitStep");
    free(content);
    free(meta);
    return rc;
}

/* A stop hook's model_context at a request's end that would succeed: the invalidation row
 * (the context, for the model only, bound to the request) and the user_context row in one
 * CommitStep; the turn goes on and the model must submit again. */
static taskctx_rc_t s_invalidate(taskctx_t *ctx, PGconn *conn, const structured_turn_t *t,
                                 const json_t *stop) {
    batch_t *b = batch_new();
    batch_event_context(b, stop, "stop", false);
    int n = 0;
    const cs_message_t *context = batch_rows(b, &n);
    json_t *c =
        json_pack("[{s:s, s:O}]", "type", "text", "text", json_object_get(stop, "model_context"));
    json_t *m =
        json_pack("{s:s, s:s}", "type", STRUCTURED_TYPE_INVALIDATION, "request_id", t->request_id);
    char *content = jsonout_dumps(c);
    char *meta = jsonout_dumps(m);
    json_decref(c);
    json_decref(m);
    cs_message_t msgs[2] = {{.role = "user",
                             .visibility = "model",
                             .content = content,
                             .so_request_id = t->request_id,
                             .so_meta = meta}};
    if (n == 1) {
        msgs[1] = context[0];
    }
    log_info("structured_invalidated", "chat_id=%s request_id=%s", ctx->chat_id, t->request_id);
    stepbundle_args_t a = {.fence = &ctx->fence, .msgs = msgs, .count = 1 + n};
    taskctx_rc_t rc =
        taskctx_bundle(ctx, conn, stepbundle_commit_step, &a, "CommitStep(stop invalidation)");
    free(content);
    free(meta);
    batch_destroy(&b);
    return rc;
}

/* Carries out a structured decision other than STRUCTURED_CONTINUE. */
taskctx_rc_t stepbundle_turn_end(taskctx_t *ctx, PGconn *conn, const structured_turn_t *t,
                                 structured_decision_t d, const json_t *stop) {
    if (d == STRUCTURED_FEEDBACK) {
        return s_feedback(ctx, conn, t);
    }
    if (d == STRUCTURED_SUCCEED && !t->st.continued &&
        json_is_string(json_object_get(stop, "model_context"))) {
        return s_invalidate(ctx, conn, t, stop);
    }
    char *value = d == STRUCTURED_SUCCEED ? structured_candidate_text(t) : NULL;
    if (d == STRUCTURED_SUCCEED && !value) {
        log_warn("structured_candidate_invalid", "chat_id=%s request_id=%s", ctx->chat_id,
                 t->request_id);
        d = STRUCTURED_NOT_PRODUCED;
    }
    /* The stop answer's user_context (model_context no more: the request has ended). */
    batch_t *b = batch_new();
    batch_event_context(b, stop, "stop", false);
    stepbundle_args_t a = {.fence = &ctx->fence,
                           .receipt_id = t->request_id,
                           .receipt_status = value ? "succeeded" : "failed",
                           .receipt_code = value ? NULL : structured_decision_name(d),
                           .receipt_value = value};
    a.msgs = batch_rows(b, &a.count);
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, stepbundle_finish_turn, &a, "FinishTurn");
    if (rc == TASKCTX_DONE) {
        atomic_fetch_add(&ctx->env->counters.turns_finished, 1);
        taskctx_outcome(ctx, TURN_COMPLETED);
    }
    batch_destroy(&b);
    free(value);
    return rc;
}

/* Commits the batch's rows in one CommitStep (and FinishTurn with it when finish is set)
 * and destroys the batch. */
taskctx_rc_t stepbundle_commit_batch(taskctx_t *ctx, PGconn *conn, batch_t **b, bool finish) {
    stepbundle_args_t a = {.fence = &ctx->fence, .finish = finish};
    a.msgs = batch_rows(*b, &a.count);
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, stepbundle_commit_step, &a,
                                     finish ? "CommitStep+FinishTurn" : "CommitStep");
    if (rc == TASKCTX_DONE && finish) {
        atomic_fetch_add(&ctx->env->counters.turns_finished, 1);
        taskctx_outcome(ctx, TURN_COMPLETED);
    }
    batch_destroy(b);
    return rc;
}
