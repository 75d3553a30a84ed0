/* provider_registry: provider_generate, the dispatch by model_configs.provider to each
 * provider's generate function; see provider.h. */
#include "provider.h"
#include "anthropic.h"
#include "ollama.h"
#include "openai.h"
#include "sim.h"

#include <string.h>

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
