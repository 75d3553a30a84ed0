/* titlestep: a chat's generated title as a side call, or as an idle chat's own call; see
 * titlestep.h. */
#include "titlestep.h"
#include "id.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"
#include "structured.h"
#include "title.h"

#include <string.h>

#define S_STR(x)    #x
#define S_XSTR(x)   S_STR(x)
#define S_MAX_BYTES S_XSTR(CS_TITLE_MAX_BYTES)

/* The call's state. The request's prompt lives here until the call has started (a provider
 * needs it only then, provider.h): the state waits for a job thread after the call, and with
 * thousands of turns starting at once the titles of many wait behind their first steps. */
typedef struct {
    const outformat_t *fmt; /* title_format(): shared */
    json_t *prompt;         /* NULL once the call has started */
    json_t *cfg;            /* the title model's config (read only): model borrows its strings */
    provider_model_t model;
    int64_t request_us;     /* the regeneration it serves (history_t.title_requested), or 0 */
    taskctx_phase_fn *then; /* titlestep_serve: the phase after the write; NULL for a side call */
    int64_t start_us;       /* when the call started (id_now_us) */
} s_title_t;

static void s_free(void *arg) {
    s_title_t *t = arg;
    json_decref(t->prompt);
    json_decref(t->cfg);
    free(t);
}

/* A call's state on cfg with prompt (both taken). */
static s_title_t *s_title_new(json_t *prompt, json_t *cfg, int64_t request_us) {
    s_title_t *t = mem_calloc(1, sizeof *t);
    t->prompt = prompt;
    t->fmt = title_format();
    t->cfg = cfg;
    t->request_us = request_us;
    provider_model_of(t->cfg, &t->model);
    return t;
}

static void s_hidden_part(void *arg, const char *part_json) {
    (void)arg;
    (void)part_json; /* a title is not streamed */
}

static provider_call_t *s_start(taskctx_t *ctx, provider_done_fn *done, void *done_arg) {
    s_title_t *t = ctx->body;
    json_t *no_tools = json_array();
    provider_request_t req = {.model = &t->model,
                              .messages = t->prompt,
                              .tools = no_tools,
                              .attempt = 1,
                              .chunk_ms = ctx->env->opts.sim_chunk_ms,
                              .native_schema = t->fmt->schema,
                              .native_name = TITLE_SCHEMA_NAME,
                              .title = true};
    atomic_fetch_add(&ctx->env->counters.model_calls, 1);
    log_info("title_call", "chat_id=%s model=%s requested=%d path=%s", ctx->chat_id, t->model.name,
             t->request_us > 0, t->then ? "idle" : "step");
    t->start_us = id_now_us();
    provider_call_t *call =
        provider_start(ctx->env->loop, &req, s_hidden_part, NULL, done, done_arg);
    json_decref(no_tools);
    json_decref(t->prompt); /* the provider has what it needs of the request */
    t->prompt = NULL;
    return call;
}

/* What a call came to, as one bundle writes it: owned copies, so that it outlives the call's
 * state when it is carried to the body's next bundle (taskctx_carry_t). */
typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    char *model;           /* the model's name, for the log */
    char *model_config_id; /* or NULL */
    char *title;           /* or NULL, with why in reason */
    char *usage;           /* or NULL */
    int64_t request_us;
    char reason[STRUCTURED_REASON_MAX];
    bool applied; /* the title was written (chatstate_title_outcome) */
} s_outcome_t;

static void s_outcome_free(s_outcome_t *o) {
    free(o->model);
    free(o->model_config_id);
    free(o->title);
    free(o->usage);
    free(o);
}

static int s_write(chatstate_t *cs, const cs_fence_t *fence, bool joined, void *arg,
                   cs_error_t *err) {
    s_outcome_t *o = arg;
    cs_title_outcome_t w = {.title = o->title,
                            .request_us = o->request_us,
                            .usage = o->usage,
                            .model_config_id = o->model_config_id,
                            .joined = joined};
    return chatstate_title_outcome(cs, fence, &w, &o->applied, err);
}

/* Logs what became of the outcome and frees it (taskctx_carry_t.done). */
static void s_done(void *arg, bool committed) {
    s_outcome_t *o = arg;
    bool recorded = committed && o->usage;
    char q[STRUCTURED_REASON_MAX + 8];
    if (committed && o->applied) {
        log_info("title_generated", "chat_id=%s model=%s requested=%d usage_recorded=%d title=%s",
                 o->chat_id, o->model, o->request_us > 0, recorded,
                 log_quote(o->title, q, sizeof q));
    } else {
        const char *why = !o->title   ? o->reason
                          : committed ? "a user title set since the request"
                                      : "the write failed";
        log_warn("title_not_generated",
                 "chat_id=%s model=%s requested=%d usage_recorded=%d reason=%s", o->chat_id,
                 o->model, o->request_us > 0, recorded, log_quote(why, q, sizeof q));
    }
    s_outcome_free(o);
}

/* What a call came to (title and usage taken; title NULL with why in reason), left as ctx's
 * carry when there is anything to write; logged at once when there is not. */
static void s_record(taskctx_t *ctx, const s_title_t *t, char *title, char *usage,
                     const char *reason) {
    s_outcome_t *o = mem_calloc(1, sizeof *o);
    snprintf(o->chat_id, sizeof o->chat_id, "%s", ctx->chat_id);
    o->model = mem_strdup(t->model.name ? t->model.name : "-");
    const char *cfg_id = json_string_value(json_object_get(t->cfg, "id"));
    o->model_config_id = cfg_id ? mem_strdup(cfg_id) : NULL;
    o->request_us = t->request_us;
    o->title = title;
    o->usage = usage;
    snprintf(o->reason, sizeof o->reason, "%s", reason ? reason : "");
    if (title && strlen(title) > CS_TITLE_MAX_BYTES) {
        /* The schema counts characters, a title is bounded in bytes: refused here, so that the
         * bundle never fails on it (an idle chat's owner would then never let it go). */
        free(o->title);
        o->title = NULL;
        snprintf(o->reason, sizeof o->reason, "the title is longer than " S_MAX_BYTES " bytes");
    }
    if (!o->title && !o->usage && o->request_us <= 0) {
        s_done(o, false);
        return;
    }
    ctx->carry = (taskctx_carry_t){.write = s_write, .done = s_done, .arg = o};
}

/* After the call: a title that passes its schema is written (over a user title only when the
 * user asked for it), and the call's usage is recorded either way; a failed call leaves the
 * title as it was. A cancelled call writes nothing: a request stays for the next owner. */
static taskctx_rc_t s_after(taskctx_t *ctx, PGconn *conn) {
    s_title_t *t = ctx->body;
    if (ctx->call_rc == PROVIDER_CANCELLED) {
        return TASKCTX_QUIET;
    }
    /* Background work beside (or after) a turn: its own scope, so that it never counts as a
     * turn's provider attempt (ARCHITECTURE.md §7.11). */
    if (ctx->env->stages) {
        stagemeter_observe(ctx->env->stages, STAGE_PROVIDER_ATTEMPT, STAGE_SCOPE_BACKGROUND,
                           ctx->subagent, id_now_us() - t->start_us);
    }
    char reason[STRUCTURED_REASON_MAX];
    char *title = NULL;
    char *usage = NULL;
    if (ctx->call_rc != PROVIDER_OK) {
        snprintf(reason, sizeof reason, "%s", ctx->call_res.error);
    } else {
        taskctx_price(ctx, t->cfg, t->model.name);
        usage = ctx->call_res.usage ? jsonout_dumps(ctx->call_res.usage) : NULL;
        title = title_from_reply(t->fmt, ctx->call_res.content, ctx->call_res.finish, reason,
                                 sizeof reason);
    }
    s_record(ctx, t, title, usage, reason);
    taskctx_phase_fn *then = t->then;
    if (!then) {
        return TASKCTX_DONE; /* a side call's outcome goes with the body's next bundle */
    }
    taskctx_rc_t rc = taskctx_carry_alone(ctx, conn);
    if (rc != TASKCTX_DONE) {
        return rc;
    }
    /* The idle path goes on with the abandon: the call's state is done with. */
    taskctx_reset(ctx);
    ctx->next = then;
    ctx->wait_ms = 0;
    return TASKCTX_WAIT;
}

/* Whether h is a new chat's first step: a fallback title, nothing attempted, no reply. */
static bool s_first_step(const history_t *h) {
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
    json_t *prompt = h->title_requested > 0 ? title_regen_prompt(h->messages)
                     : s_first_step(h)      ? title_prompt(h->messages)
                                            : NULL;
    if (!prompt) {
        return;
    }
    s_title_t *t = s_title_new(prompt, json_incref(h->title_model ? h->title_model : h->model),
                               h->title_requested);
    ctx->side = (taskctx_side_t){.start = s_start, .next = s_after, .body = t, .body_free = s_free};
}

/* What titlestep_serve's read found. */
typedef struct {
    taskctx_t *ctx;
    PGconn *conn;
    history_rc_t hr;
    history_t h;
} s_read_t;

/* The read under the chat row lock and the owner's fence; it writes nothing. */
static int s_read(chatstate_t *cs, void *arg, cs_error_t *err) {
    (void)cs;
    (void)err;
    s_read_t *r = arg;
    r->hr = history_read_locked(r->conn, r->ctx->chat_id, &r->ctx->fence, NULL,
                                r->ctx->env->opts.title_model, &r->h);
    return TASKCTX_BUNDLE_EMPTY;
}

taskctx_rc_t titlestep_serve(taskctx_t *ctx, PGconn *conn, taskctx_phase_fn *then) {
    s_read_t r = {.ctx = ctx, .conn = conn, .hr = HISTORY_DB};
    taskctx_rc_t rc = taskctx_bundle(ctx, conn, s_read, &r, "ReadForTitle");
    if (rc != TASKCTX_DONE || r.hr != HISTORY_OK) {
        history_clear(&r.h);
        return rc != TASKCTX_DONE ? rc : r.hr == HISTORY_DB ? TASKCTX_RETRY : TASKCTX_QUIET;
    }
    ctx->next = then;
    ctx->wait_ms = 0;
    if (r.h.title_requested <= 0) {
        history_clear(&r.h); /* served meanwhile: on with the abandon */
        return TASKCTX_WAIT;
    }
    ctx->subagent = r.h.subagent;
    json_t *cfg = r.h.title_model ? r.h.title_model : r.h.model;
    json_t *prompt = json_is_object(cfg) ? title_regen_prompt(r.h.messages) : NULL;
    s_title_t *t = s_title_new(prompt, json_incref(cfg), r.h.title_requested);
    history_clear(&r.h);
    if (!prompt) {
        /* Nothing to ask: the request is answered with its reason, so it is not asked again. */
        s_record(ctx, t, NULL, NULL,
                 json_is_object(t->cfg) ? "no user message has text" : "no model config");
        s_free(t);
        rc = taskctx_carry_alone(ctx, conn);
        return rc == TASKCTX_DONE ? TASKCTX_WAIT : rc;
    }
    t->then = then;
    ctx->body = t;
    ctx->body_free = s_free;
    ctx->call_start = s_start;
    ctx->next = s_after;
    return TASKCTX_CALL;
}
