/* provider: dispatch by model_configs.provider and the shared failure helpers; provider.h. */
#include "provider.h"
#include "anthropic.h"
#include "ollama.h"
#include "openai.h"
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

provider_rc_t provider_generate(const provider_request_t *req, cancel_t *cancel,
                                provider_part_fn *on_part, void *ctx, provider_result_t *out) {
    memset(out, 0, sizeof *out);
    out->retry_after_ms = -1;
    const char *p = req->model && req->model->provider ? req->model->provider : "";
    if (strcmp(p, "sim") == 0) {
        return sim_generate(req, cancel, on_part, ctx, out);
    }
    if (strcmp(p, "openai") == 0) {
        return openai_generate(req, cancel, on_part, ctx, out);
    }
    if (strcmp(p, "anthropic") == 0) {
        return anthropic_generate(req, cancel, on_part, ctx, out);
    }
    if (strcmp(p, "ollama") == 0) {
        return ollama_generate(req, cancel, on_part, ctx, out);
    }
    return provider_fail(out, 0, false, -1, "provider %s is not known to this worker", p);
}

void provider_result_clear(provider_result_t *r) {
    json_decref(r->content);
    json_decref(r->usage);
    r->content = NULL;
    r->usage = NULL;
}
