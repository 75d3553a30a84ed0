/*
 * a2a_send: what a SendMessage (or message/send) asks for, read and validated by the
 * structured-output extension's rules before anything is written, and its store: a new chat
 * whose first message is the task, or a message in the caller's context, and the inline push
 * notification config for that task (ARCHITECTURE.md §8, "A2A").
 */
#ifndef CHATFLEET_A2A_SEND_H
#define CHATFLEET_A2A_SEND_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "a2a_task.h"
#include "admithook.h"
#include "gateway.h"

#define A2A_META_KEY "kediStructuredOutput"
#define A2A_SEND_MODES                                                                             \
    (-2) /* a2a_send_parse: the accepted output modes exclude application/json                     \
          */

/* What one SendMessage asks for. */
typedef struct {
    char *content; /* JSON array of parts (owned) */
    gateway_format_t format;
    const char *context_id; /* the canonical form in context_buf, or NULL for a new chat */
    char context_buf[ID_UUID_LEN + 1];
    const char *schema_field; /* where the request's schema came from, for its errors */
    bool blocking;
    char chat_id[ID_UUID_LEN + 1]; /* a new chat's id, minted for its hooks; "" when none */
    admithook_context_t context;   /* what the lifecycle hooks added (a2a_send_admit) */
    json_t *push;                  /* the inline push config (borrowed from params), or NULL */
    bool push_legacy;              /* push has the v0.3 shape (authentication.schemes) */
    const char *push_field;        /* where push came from, for its errors (a literal) */
    json_t *files;                 /* the message's file parts (a2a_file.h), stored before the
                                      message (owned) */
} a2a_send_t;

/* Validates a SendMessage's params into s: 0, -1 (invalid params) or A2A_SEND_MODES, with
 * *data naming the field of the JSON-RPC request. An inline push config
 * (configuration.taskPushNotificationConfig, or pushNotificationConfig: v0.3 and the older v1
 * drafts) is checked first, as a2a_push_config_check does, and set in s->push, so that a bad
 * one stores nothing, not even a refused task. The caller frees s->content and s->files and
 * clears s->format either way. */
int a2a_send_parse(json_t *params, bool legacy, a2a_send_t *s, json_t **data);

/* The lifecycle hooks of a SendMessage (ARCHITECTURE.md §7.10, admithook.h), before anything
 * is written: for a new chat session_start (its id minted into s->chat_id) and
 * user_prompt_submit, for a context of the caller's user_prompt_submit (a context that is not
 * theirs gets no event: the store answers it). An override replaces s->content, context goes
 * to s->context. 0, or -1 with the refusal in h (403 hook_denied, 502/503
 * hook_dispatch_failed). */
int a2a_send_admit(gateway_t *gw, const http_req_t *req, a2a_send_t *s, http_resp_t *h);

/* A new chat (the default model; s->chat_id when the hooks minted one) whose first message is
 * the task, followed by the hooks' context; chat_id and task_id set. 0, or -1. */
int a2a_send_create(gateway_t *gw, PGconn *conn, const http_req_t *req, a2a_send_t *s,
                    char chat_id[ID_UUID_LEN + 1], char task_id[A2A_TASK_ID_MAX]);

/* The message in s->context_id, sent or queued (the task "q<id>"); 0, or -1 with the HTTP
 * failure in h (404 when the context is not the caller's). */
int a2a_send_append(gateway_t *gw, PGconn *conn, const http_req_t *req, a2a_send_t *s,
                    char task_id[A2A_TASK_ID_MAX], http_resp_t *h);

/* Stores s->push (nothing to do when NULL) as the config of task_id, through the binding's own
 * create (a2a_push_rpc, A2A_PUSH_CREATE), so that the pusher delivers the task's state changes
 * like those of a config made by CreateTaskPushNotificationConfig. 0; or a JSON-RPC error code
 * (-32602 with *data naming the SendMessage's field: a limit reached, a URL the policy now
 * refuses; -32603 or -32001 otherwise, *data NULL). */
int a2a_send_push(PGconn *conn, const char *user_id, const a2a_send_t *s, const char *task_id,
                  json_t **data);

/* A gateway helper's HTTP validation failure (h's body, consumed) as JSON-RPC error data whose
 * fields name the JSON-RPC request; schema_field is where the schema came from, or NULL. */
json_t *a2a_send_error_data(http_resp_t *h, const char *schema_field);

#endif
