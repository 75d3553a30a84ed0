/* provider: the shared result helpers every provider uses; see provider.h. The dispatch by
 * name is provider_registry.c, so that this file depends on no provider. */
#include "provider.h"
#include "id.h"
#include "jsonout.h"
#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

provider_rc_t provider_fail(provider_result_t *out, int status, bool retryable,
                            int64_t retry_after_ms, const char *fmt, ...) {
    out->status = status;
    out->retryable = retryable;
    out->retry_after_ms = retry_after_ms;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->error, sizeof out->error, fmt, ap);
    va_end(ap);
    return PROVIDER_ERROR;
}

bool provider_status_retryable(int status) {
    return status == 408 || status == 409 || status == 425 || status == 429 ||
           (status >= 500 && status <= 599);
}

void provider_result_clear(provider_result_t *r) {
    json_decref(r->content);
    json_decref(r->usage);
    r->content = NULL;
    r->usage = NULL;
}

/* --- Calls in progress. --- */

provider_call_t *provider_call_new(evloop_t *loop, provider_part_fn *on_part, void *part_ctx,
                                   provider_done_fn *done, void *ctx) {
    provider_call_t *call = mem_calloc(1, sizeof *call);
    call->loop = loop;
    call->on_part = on_part;
    call->part_ctx = part_ctx;
    call->done = done;
    call->ctx = ctx;
    call->out.retry_after_ms = -1;
    call->starting = true;
    return call;
}

static void s_end_now(provider_call_t *call, provider_rc_t rc) {
    if (call->impl_free) {
        call->impl_free(call->impl);
    }
    call->done(call->ctx, rc, &call->out);
    provider_result_clear(&call->out);
    free(call);
}

static void s_end_deferred(void *arg) {
    provider_call_t *call = arg;
    call->deferred = NULL;
    s_end_now(call, call->deferred_rc);
}

void provider_call_end(provider_call_t *call, provider_rc_t rc) {
    if (call->starting) {
        call->deferred_rc = rc;
        call->deferred = evloop_timer_at(call->loop, id_now_ms(), s_end_deferred, call);
        return;
    }
    s_end_now(call, rc);
}

void provider_cancel(provider_call_t *call) {
    if (call->deferred) {
        evloop_timer_cancel(call->loop, call->deferred);
        call->deferred = NULL;
    } else if (call->stop) {
        call->stop(call->impl);
    }
    provider_result_clear(&call->out);
    s_end_now(call, PROVIDER_CANCELLED);
}

void provider_call_emit(provider_call_t *call, const json_t *part) {
    if (!call->on_part) {
        return;
    }
    char *text = jsonout_dumps(part);
    call->on_part(call->part_ctx, text);
    free(text);
}

void provider_model_of(const json_t *cfg, provider_model_t *model) {
    const char *key_env = json_string_value(json_object_get(cfg, "api_key_env"));
    const char *name = json_string_value(json_object_get(cfg, "name"));
    const char *provider = json_string_value(json_object_get(cfg, "provider"));
    const char *m = json_string_value(json_object_get(cfg, "model"));
    *model = (provider_model_t){
        .name = name ? name : "",
        .provider = provider ? provider : "",
        .model = m ? m : "",
        .base_url = json_string_value(json_object_get(cfg, "base_url")),
        .api_key_env = key_env,
        .api_key = key_env ? getenv(key_env) : NULL,
    };
}
