/* provider_registry: provider_start, the dispatch by model_configs.provider to each provider's
 * start function, and provider_generate on a private loop; see provider.h. */
#include "provider.h"
#include "anthropic.h"
#include "mem.h"
#include "ollama.h"
#include "openai.h"
#include "sim.h"

#include <string.h>

#define S_SYNC_POLL_MS 50 /* provider_generate looks at its cancel token this often */

typedef void(s_start_fn)(provider_call_t *call, const provider_request_t *req);

static s_start_fn *s_find(const char *name) {
    static const struct {
        const char *name;
        s_start_fn *start;
    } known[] = {{"sim", sim_start},
                 {"openai", openai_start},
                 {"anthropic", anthropic_start},
                 {"ollama", ollama_start}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (!strcmp(name, known[i].name)) {
            return known[i].start;
        }
    }
    return NULL;
}

provider_call_t *provider_start(evloop_t *loop, const provider_request_t *req,
                                provider_part_fn *on_part, void *part_ctx, provider_done_fn *done,
                                void *ctx) {
    provider_call_t *call = provider_call_new(loop, on_part, part_ctx, done, ctx);
    const char *p = req->model && req->model->provider ? req->model->provider : "";
    s_start_fn *start = s_find(p);
    if (start) {
        start(call, req);
    } else {
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
