/* titlestep: a new chat's title as a side call; see titlestep.h. */
#include "titlestep.h"
#include "log.h"
#include "mem.h"
#include "structured.h"
#include "title.h"

#include <string.h>

/* The side call's state: what the request points to lives here until it ends. */
typedef struct {
    outformat_t *fmt;
    json_t *prompt;
    json_t *cfg; /* the title model's config (read only): model borrows its strings */
    json_t *no_tools;
    provider_model_t model;
} s_title_t;

static void s_free(void *arg) {
    s_title_t *t = arg;
    outformat_destroy(&t->fmt);
    json_decref(t->prompt);
    json_decref(t->cfg);
    json_decref(t->no_tools);
    free(t);
}

static void s_hidden_part(void *arg, const char *part_json) {
    (void)arg;
    (void)part_json; /* a title is not streamed */
}

static provider_call_t *s_start(taskctx_t *side, provider_done_fn *done, void *done_arg) {
    s_title_t *t = side->body;
    provider_request_t req = {.model = &t->model,
                              .messages = t->prompt,
                              .tools = t->no_tools,
                              .attempt = 1,
                              .chunk_ms = side->env->opts.sim_chunk_ms,
                              .native_schema = t->fmt->schema,
                              .native_name = TITLE_SCHEMA_NAME,
                              .title = true};
    atomic_fetch_add(&side->env->counters.model_calls, 1);
    log_info("title_call", "chat_id=%s model=%s", side->chat_id, t->model.name);
    return provider_start(side->env->loop, &req, s_hidden_part, NULL, done, done_arg);
}

typedef struct {
    const cs_fence_t *fence;
    const char *title;
    bool applied;
} s_write_t;

static int s_write(chatstate_t *cs, void *arg, cs_error_t *err) {
    s_write_t *w = arg;
    return chatstate_set_generated_title(cs, w->fence, w->title, &w->applied, err);
}

/* After the call: a title that passes its schema is written (never over a user title);
 * anything else leaves the fallback. */
static taskctx_rc_t s_after(taskctx_t *side, PGconn *conn) {
    s_title_t *t = side->body;
    if (side->call_rc == PROVIDER_CANCELLED) {
        return TASKCTX_QUIET;
    }
    char reason[STRUCTURED_REASON_MAX];
    char *title = NULL;
    if (side->call_rc != PROVIDER_OK) {
        snprintf(reason, sizeof reason, "%s", side->call_res.error);
    } else {
        taskctx_price(side, t->cfg, t->model.name);
        title = title_from_reply(t->fmt, side->call_res.content, side->call_res.finish, reason,
                                 sizeof reason);
    }
    s_write_t w = {.fence = &side->fence, .title = title};
    taskctx_rc_t rc = !title ? TASKCTX_DONE
                      : conn ? taskctx_bundle(side, conn, s_write, &w, "SetTitle")
                             : TASKCTX_RETRY;
    char q[STRUCTURED_REASON_MAX + 8];
    if (w.applied) {
        log_info("title_generated", "chat_id=%s model=%s title=%s", side->chat_id, t->model.name,
                 log_quote(title, q, sizeof q));
    } else {
        log_warn("title_not_generated", "chat_id=%s model=%s reason=%s", side->chat_id,
                 t->model.name,
                 log_quote(title ? "a user title, or the write failed" : reason, q, sizeof q));
    }
    free(title);
    return rc;
}

/* Whether h is a new chat's first step: a fallback title, nothing attempted, no reply. */
static bool s_wanted(const history_t *h) {
    if (!h->title_fallback || h->generation_attempt != 0) {
        return false;
    }
    size_t i;
    json_t *m;
    json_array_foreach(h->messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "assistant")) {
            return false;
        }
    }
    return true;
}

void titlestep_ask(taskctx_t *ctx, const history_t *h) {
    json_t *prompt = s_wanted(h) ? title_prompt(h->messages) : NULL;
    if (!prompt) {
        return;
    }
    s_title_t *t = mem_calloc(1, sizeof *t);
    t->prompt = prompt;
    t->fmt = title_format_new();
    t->cfg = json_incref(h->title_model ? h->title_model : h->model);
    t->no_tools = json_array();
    provider_model_of(t->cfg, &t->model);
    ctx->side = (taskctx_side_t){.start = s_start, .next = s_after, .body = t, .body_free = s_free};
}
