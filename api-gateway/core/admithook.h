/*
 * admithook: the lifecycle hooks a request dispatches before it commits anything
 * (ARCHITECTURE.md §7.10): session_start when a chat is created or a message edited, and
 * user_prompt_submit for the prompt a create, send or edit submits. Both admit new work into a
 * chat (HOOKS_ADMISSION: the admission share of the cap) and are dispatched blocking on the
 * request pool thread that runs the handler, bounded by CHATFLEET_HOOKS_TIMEOUT_MS; the caller
 * holds no database connection while one waits. They fail closed: a denied prompt is 403
 * (kind hook_denied), a consumer that is down or answers invalidly is 502 and a full cap 503
 * (kind hook_dispatch_failed), and nothing is stored.
 */
#ifndef CHATFLEET_ADMITHOOK_H
#define CHATFLEET_ADMITHOOK_H

#include "gateway.h"

/* One submission's hook dispatches: the ids of its events share a submission UUID minted
 * here, since a request is never redelivered. */
typedef struct {
    gateway_t *gw;
    const char *chat_id;
    const char *user_id;
    const char *source; /* "create", "send" or "edit" */
    char submission_id[ID_UUID_LEN + 1];
} admithook_t;

/* The rows the answers to session_start and user_prompt_submit added (model_context: a
 * model-only user row; user_context: an assistant row only users see), stored right after
 * the prompt in its bundle. */
typedef struct {
    cs_message_t rows[4];
    int count;
    char *texts[4]; /* the rows' contents */
} admithook_context_t;

/* Frees what ctx holds; safe on an empty one. */
void admithook_context_clear(admithook_context_t *ctx);

/* True when the gateway dispatches hooks (CHATFLEET_HOOKS_URL is set). */
bool admithook_enabled(const gateway_t *gw);

/* Starts a submission of source for chat_id by user_id (all borrowed for its life). */
void admithook_begin(admithook_t *self, gateway_t *gw, const char *chat_id, const char *user_id,
                     const char *source);

/* Dispatches session_start; the context its answer added goes to *ctx (emptied first). 0, or
 * -1 with the failure in resp. */
int admithook_session(admithook_t *self, admithook_context_t *ctx, http_resp_t *resp);

/* Dispatches user_prompt_submit for *content (a JSON array of text parts, heap text). On
 * allow returns 0; when the consumer overrode the prompt, *content is replaced (the old text
 * freed) by one text part holding the override, and the context it added is appended to
 * *ctx (rows created by self's user). A deny or a failure: -1 with it in resp. */
int admithook_prompt(admithook_t *self, char **content, admithook_context_t *ctx,
                     http_resp_t *resp);

/* A submission's whole admission (only when admithook_enabled), with no database connection
 * held while its hooks wait, so that a slow consumer cannot drain the pool: when conn is not
 * NULL, *conn goes back to the gateway's pool first, and *conn is a connection taken again on
 * return, whatever the outcome. Dispatches session_start when session is true (as
 * admithook_session), then user_prompt_submit for *content when content is not NULL (as
 * admithook_prompt). 0, or -1 with the refusal in resp; ctx is the caller's to clear either
 * way. */
int admithook_run(admithook_t *self, PGconn **conn, bool session, char **content,
                  admithook_context_t *ctx, http_resp_t *resp);

#endif
