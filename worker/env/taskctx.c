/* taskctx: what a task body sees and how it writes; see taskctx.h. */
#include "taskctx.h"
#include "log.h"
#include "usage.h"

const int64_t taskctx_model_bucket_ms[TASKCTX_MODEL_BUCKETS - 1] = {50,   100,  250,  500,
                                                                    1000, 2500, 10000};
const char *const taskctx_error_class_names[TASKCTX_ERROR_CLASSES] = {"429", "4xx", "5xx", "none"};

int taskctx_error_class(int status) {
    return status == 429 ? 0 : status >= 400 && status < 500 ? 1 : status >= 500 ? 2 : 3;
}

void taskctx_count_model_call(taskctx_counters_t *c, int64_t ms) {
    int b = 0;
    while (b < TASKCTX_MODEL_BUCKETS - 1 && ms > taskctx_model_bucket_ms[b]) {
        b++;
    }
    atomic_fetch_add(&c->model_ms_buckets[b], 1);
    atomic_fetch_add(&c->model_ms_sum, ms);
}

taskctx_rc_t taskctx_bundle(taskctx_t *ctx, PGconn *conn, taskctx_bundle_fn *fn, void *arg,
                            const char *what) {
    if (cancel_is_set(ctx->cancel)) {
        return TASKCTX_QUIET;
    }
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(conn, &ctx->env->chat_settings, ctx->chat_id, &err);
    int rc = cs ? fn(cs, arg, &err) : -1;
    if (rc == TASKCTX_BUNDLE_EMPTY) {
        chatstate_destroy(&cs); /* rolls back */
        return TASKCTX_DONE;
    }
    if (cs && rc == 0) {
        rc = chatstate_commit_wake(&cs, &ctx->env->sink, &ctx->after, &err);
    }
    chatstate_destroy(&cs);
    if (rc == 0) {
        ctx->have_after = true;
        atomic_fetch_add(&ctx->env->counters.commits, 1);
        log_info("task_commit",
                 "chat_id=%s worker_id=%s runner_id=%s move=%s snapshot_version=%lld "
                 "history_version=%lld status=%s",
                 ctx->chat_id, ctx->fence.worker_id, ctx->fence.runner_id, what,
                 (long long)ctx->after.snapshot_version, (long long)ctx->after.history_version,
                 ctx->after.status);
        return TASKCTX_DONE;
    }
    char q[300];
    switch (err.rc) {
        case CS_FENCED:
            atomic_fetch_add(&ctx->env->counters.fence_rejects, 1);
            return TASKCTX_QUIET;
        case CS_NOT_FOUND:
            return TASKCTX_QUIET;
        case CS_CONFLICT:
        case CS_INVALID_STATE:
        case CS_BAD_INPUT:
            /* The fence held but the move table refused: the chat moved somewhere this task
             * has no business in (archived, say). Retrying cannot help; the runner sees the
             * new state and decides. */
            log_warn("task_refused", "chat_id=%s move=%s reason=%s", ctx->chat_id, what,
                     log_quote(err.message, q, sizeof q));
            return TASKCTX_QUIET;
        default:
            log_warn("task_bundle_failed", "chat_id=%s move=%s reason=%s", ctx->chat_id, what,
                     log_quote(err.message, q, sizeof q));
            return TASKCTX_RETRY;
    }
}

void taskctx_reset(taskctx_t *ctx) {
    if (ctx->body_free) {
        ctx->body_free(ctx->body);
    }
    ctx->body = NULL;
    ctx->body_free = NULL;
    ctx->next = NULL;
    ctx->call_start = NULL;
    json_decref(ctx->stop_answer);
    ctx->stop_answer = NULL;
    provider_result_clear(&ctx->call_res);
}

void taskctx_price(taskctx_t *ctx, const json_t *cfg, const char *name) {
    provider_result_t *res = &ctx->call_res;
    const json_t *cl = json_object_get(cfg, "context_limit");
    json_t *priced = usage_priced(res->usage, json_object_get(cfg, "prices"),
                                  json_is_integer(cl) ? (int64_t)json_integer_value(cl) : 0);
    json_decref(res->usage);
    res->usage = priced;
    usagemeter_add(ctx->env->usage, name, res->usage);
}
