/* admithook: see admithook.h and ARCHITECTURE.md §7.10. */
#include "admithook.h"
#include "jsonstrict.h"

#include "jsonout.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool admithook_enabled(const gateway_t *gw) {
    return hooks_enabled(gw->hooks);
}

void admithook_begin(admithook_t *self, gateway_t *gw, const char *chat_id, const char *user_id,
                     const char *source) {
    *self = (admithook_t){.gw = gw, .chat_id = chat_id, .user_id = user_id, .source = source};
    int rc = id_uuid_new(self->submission_id);
    ASSERT(rc == 0);
}

/* The error envelope with the reference's "kind" (api-shapes.md §1's hook responses). */
static void s_refuse(http_resp_t *resp, int status, const char *message, const char *detail,
                     const char *kind) {
    json_t *body = json_pack("{s:s, s:s, s:s}", "message", message, "detail", detail, "kind", kind);
    ASSERT(body);
    http_json(resp, status, body);
}

/* Dispatches event with data (stolen); on HOOKS_OK fills *res and *answer, else refuses. */
static int s_dispatch(admithook_t *self, hooks_event_t event, json_t *data, hooks_result_t *res,
                      json_t **answer, http_resp_t *resp) {
    json_object_set_new(data, "submission_id", json_string(self->submission_id));
    json_object_set_new(data, "source", json_string(self->source));
    json_object_set_new(data, "user_id", json_string(self->user_id));
    char id[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id(self->chat_id, 0, 0, event, self->submission_id, id);
    hooks_rc_t rc =
        hooks_call(self->gw->hooks, HOOKS_ADMISSION, event, id, self->chat_id, data, res, answer);
    json_decref(data);
    if (rc == HOOKS_OK) {
        return 0;
    }
    char *detail = mem_printf("%s hook failed: %s", hooks_event_name(event), res->error);
    if (rc == HOOKS_E_BUSY) {
        s_refuse(resp, 503, "Service unavailable.", detail, "hook_dispatch_failed");
        resp->retry_after_s = HTTP_RETRY_AFTER_S;
    } else {
        s_refuse(resp, 502, "A lifecycle hook failed.", detail, "hook_dispatch_failed");
    }
    free(detail);
    json_decref(*answer);
    *answer = NULL;
    return -1;
}

void admithook_context_clear(admithook_context_t *ctx) {
    for (int i = 0; i < ctx->count; i++) {
        free(ctx->texts[i]);
    }
    *ctx = (admithook_context_t){0};
}

/* Adds a row of role and visibility holding text to ctx. */
static void s_context_row(admithook_t *self, admithook_context_t *ctx, const char *role,
                          const char *visibility, const char *text) {
    json_t *content = json_pack("[{s:s, s:s}]", "type", "text", "text", text);
    ASSERT(content);
    ctx->texts[ctx->count] = jsonout_dumps(content);
    json_decref(content);
    ctx->rows[ctx->count] = (cs_message_t){.role = role,
                                           .visibility = visibility,
                                           .content = ctx->texts[ctx->count],
                                           .created_by = self->user_id,
                                           .so_meta = CS_HOOK_CONTEXT_META};
    ctx->count++;
}

/* Appends the context rows res added to ctx. */
static void s_context(admithook_t *self, admithook_context_t *ctx, const hooks_result_t *res) {
    if (res->model_context) {
        s_context_row(self, ctx, "user", "model", res->model_context);
    }
    if (res->user_context) {
        s_context_row(self, ctx, "assistant", "user", res->user_context);
    }
}

int admithook_session(admithook_t *self, admithook_context_t *ctx, http_resp_t *resp) {
    admithook_context_clear(ctx);
    hooks_result_t res;
    json_t *answer = NULL;
    if (s_dispatch(self, HOOKS_SESSION_START, json_object(), &res, &answer, resp) != 0) {
        return -1;
    }
    s_context(self, ctx, &res);
    json_decref(answer);
    return 0;
}

/* The prompt's text: the parts' texts joined by newlines. */
static char *s_prompt(const json_t *parts) {
    size_t n = 0;
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        n += json_string_length(json_object_get(p, "text")) + 1;
    }
    char *out = mem_calloc(1, n + 1);
    char *w = out;
    json_array_foreach(parts, i, p) {
        const char *t = json_string_value(json_object_get(p, "text"));
        size_t len = json_string_length(json_object_get(p, "text"));
        if (i > 0) {
            *w++ = '\n';
        }
        memcpy(w, t ? t : "", len);
        w += len;
    }
    return out;
}

int admithook_prompt(admithook_t *self, char **content, admithook_context_t *ctx,
                     http_resp_t *resp) {
    json_t *parts = jsonstrict_load_stored(*content, strlen(*content)); /* gateway_content's text */
    ASSERT(json_is_array(parts));
    char *prompt = s_prompt(parts);
    json_t *data = json_pack("{s:s, s:o}", "prompt", prompt, "content", parts);
    free(prompt);
    ASSERT(data);
    hooks_result_t res;
    json_t *answer = NULL;
    if (s_dispatch(self, HOOKS_USER_PROMPT_SUBMIT, data, &res, &answer, resp) != 0) {
        return -1;
    }
    int rc = 0;
    if (res.deny) {
        char q[512];
        log_info("hook_denied", "hook=user_prompt_submit chat_id=%s reason=%s", self->chat_id,
                 log_quote(res.reason ? res.reason : "", q, sizeof q));
        s_refuse(resp, 403, "The prompt was denied by a lifecycle hook.",
                 res.reason ? res.reason : "denied by a user_prompt_submit hook", "hook_denied");
        rc = -1;
    } else {
        if (res.input) {
            json_t *over = json_pack("[{s:s, s:O}]", "type", "text", "text", res.input);
            ASSERT(over);
            free(*content);
            *content = jsonout_dumps(over);
            json_decref(over);
        }
        s_context(self, ctx, &res);
    }
    json_decref(answer);
    return rc;
}

int admithook_run(admithook_t *self, PGconn **conn, bool session, char **content,
                  admithook_context_t *ctx, http_resp_t *resp) {
    if (conn) {
        pool_put(self->gw->pool, *conn);
        *conn = NULL;
    }
    int rc = session ? admithook_session(self, ctx, resp) : 0;
    if (rc == 0 && content) {
        rc = admithook_prompt(self, content, ctx, resp);
    }
    if (conn) {
        *conn = pool_get(self->gw->pool);
    }
    return rc;
}
