/*
 * a2a_send: what a SendMessage (or message/send) asks for, read and validated by the
 * structured-output extension's rules before anything is written, and its store: a new chat
 * whose first message is the task, or a message in the caller's context (ARCHITECTURE.md §8,
 * "A2A").
 */
#ifndef CHATFLEET_A2A_SEND_H
#define CHATFLEET_A2A_SEND_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "a2a_task.h"
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
} a2a_send_t;

/* Validates a SendMessage's params into s: 0, -1 (invalid params) or A2A_SEND_MODES, with
 * *data naming the field of the JSON-RPC request. The caller frees s->content and clears
 * s->format either way. */
int a2a_send_parse(json_t *params, bool legacy, a2a_send_t *s, json_t **data);

/* A new chat (the default model) whose first message is the task; chat_id and task_id set.
 * 0, or -1. */
int a2a_send_create(gateway_t *gw, PGconn *conn, const http_req_t *req, a2a_send_t *s,
                    char chat_id[ID_UUID_LEN + 1], char task_id[A2A_TASK_ID_MAX]);

/* The message in s->context_id, sent or queued (the task "q<id>"); 0, or -1 with the HTTP
 * failure in h (404 when the context is not the caller's). */
int a2a_send_append(gateway_t *gw, PGconn *conn, const http_req_t *req, a2a_send_t *s,
                    char task_id[A2A_TASK_ID_MAX], http_resp_t *h);

/* A gateway helper's HTTP validation failure (h's body, consumed) as JSON-RPC error data whose
 * fields name the JSON-RPC request; schema_field is where the schema came from, or NULL. */
json_t *a2a_send_error_data(http_resp_t *h, const char *schema_field);

#endif
