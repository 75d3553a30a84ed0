/* provider_registry: provider_start, the dispatch by model_configs.provider to the sim's start
 * function or a network provider's spec (netprovider.h), and provider_generate on a private
 * loop; see provider.h. */
#include "provider.h"
#include "anthropic.h"
#include "netprovider.h"
#include "ollama.h"
#include "openai.h"
#include "sim.h"

#include <string.h>

#define S_SYNC_POLL_MS 50 /* provider_generate looks at its cancel token this often */

static const netprovider_spec_t *const s_specs[] = {&openai_spec, &anthropic_spec, &ollama_spec};

/* Starts the call on the provider named name; false when no provider has that name. */
static bool s_start(const char *name, provider_call_t *call, const provider_request_t *req) {
    if (!strcmp(name, "sim")) {
        sim_start(call, req);
        return true;
    }
    for (size_t i = 0; i < sizeof s_specs / sizeof s_specs[0]; i++) {
        if (!strcmp(name, s_specs[i]->name)) {
            netprovider_start(s_specs[i], call, req);
            return true;
        }
    }
    return false;
}

provider_call_t *provider_start(evloop_t *loop, const provider_request_t *req,
                                provider_part_fn *on_part, void *part_ctx, provider_done_fn *done,
                                void *ctx) {
    provider_call_t *call = provider_call_new(loop, on_part, part_ctx, done, ctx);
    const char *p = req->model && req->model->provider ? req->model->provider : "";
    if (!s_start(p, call, req)) {
        provider_call_end(call, provider_fail(&call->out, 0, false, -1,
                                              "provider %s is not known to this worker", p));
    }
    call->starting = false;
    return call;
}

typedef struct {
    bool done;
    provider_rc_t rc;
    provider_result_t *out;
} s_sync_t;

static void s_sync_done(void *ctx, provider_rc_t rc, provider_result_t *res) {
    s_sync_t *s = ctx;
    s->done = true;
    s->rc = rc;
    *s->out = *res;
    res->content = NULL;
    res->usage = NULL;
}

provider_rc_t provider_generate(const provider_request_t *req, cancel_t *cancel,
                                provider_part_fn *on_part, void *ctx, provider_result_t *out) {
    memset(out, 0, sizeof *out);
    out->retry_after_ms = -1;
    evloop_t *loop = evloop_new();
    s_sync_t s = {.out = out};
    provider_call_t *call = provider_start(loop, req, on_part, ctx, s_sync_done, &s);
    while (!s.done) {
        if (cancel_is_set(cancel)) {
            provider_cancel(call);
            break;
        }
        evloop_run_once(loop, S_SYNC_POLL_MS);
    }
    evloop_destroy(&loop);
    return s.rc;
}
