/* provider: the shared result helpers every provider uses; see provider.h. The dispatch by
 * name is provider_registry.c, so that this file depends on no provider. */
#include "provider.h"

#include <stdarg.h>
#include <stdio.h>

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
