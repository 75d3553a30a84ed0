/*
 * a2a_task: an A2A task read back from the chat tables (a2a.h has the mapping). A task is
 * one user message: its id is the message id in decimal, or "q" and the queued message id
 * while it waits in the queue (the promoted message records that id). Its state, answer
 * text and structured artifact are derived on every read from committed rows only, so a
 * task survives gateway restarts and looks the same from every gateway.
 */
#ifndef CHATFLEET_A2A_TASK_H
#define CHATFLEET_A2A_TASK_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#define A2A_EXTENSION_URI    "https://docs.kedi-lang.org/a2a/extensions/structured-output/v1/"
#define A2A_ARTIFACT_NAME    "kedi-structured-output"
#define A2A_FORMAT_JSON_UTF8 "a2a_json_utf8"      /* response_format name: raw json-utf8 part */
#define A2A_FORMAT_PROTOBUF  "a2a_protobuf_value" /* response_format name: legacy data part */
#define A2A_TASK_ID_MAX      32                   /* bytes of a task id, NUL included */

typedef enum { A2A_TASK_FOUND = 0, A2A_TASK_MISSING, A2A_TASK_DB_ERROR } a2a_lookup_t;

typedef struct {
    json_t *task;   /* the Task object (owned by the caller) */
    bool terminal;  /* completed, failed or canceled */
    char state[32]; /* the v1 state name, "TASK_STATE_WORKING" */
    char context_id[40];
    char message_id[A2A_TASK_ID_MAX]; /* the user message it resolved to ("" when none) */
} a2a_task_t;

/* SQL: the timestamptz expression ts as the ISO 8601 UTC text of a task status timestamp
 * (microseconds, "Z"); such texts sort as the times do. */
#define A2A_TASK_ISO(ts) "to_char((" ts ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* Reads task_id of user_id's chats in the v1 JSON shape, or the v0.3 shape when legacy.
 * Fills out on A2A_TASK_FOUND. */
a2a_lookup_t a2a_task_load(PGconn *conn, const char *task_id, const char *user_id, bool legacy,
                           a2a_task_t *out);

/* Records the final outcome of task_id (state "canceled" or "failed"; code, message and
 * detail, a JSON object's text, may be NULL) in a2a_task_outcomes, in the caller's open
 * transaction if there is one; a second record of one task is ignored. 0, or -1 on a database
 * error. From then on every read of the task says so (ARCHITECTURE.md §8, "A2A"). */
int a2a_task_outcome_put(PGconn *conn, const char *user_id, const char *task_id,
                         const char *context_id, const char *state, const char *code,
                         const char *message, const char *detail);

/* A request refused before it reached a model (an invalid schema): a new task "r<n>" in
 * context_id, failed with code, message and detail (a JSON object's text, whose members go
 * into the task's metadata.kediStructuredOutput). 0 with task_id set, or -1. */
int a2a_task_refuse(PGconn *conn, const char *user_id, const char *context_id, const char *code,
                    const char *message, const char *detail, char task_id[A2A_TASK_ID_MAX]);

/* A task id as a client sent it, in the one form this agent answers with: "<id>", "q<id>"
 * (a queued message) or "r<id>" (a refused request), id a positive decimal integer (ASCII
 * digits only, within int64). Leading zeros are dropped and "Q"/"R" are read as "q"/"r", so
 * "007", "7" and "Q7"/"q7" name one task each way. 0 with out set, or -1 when text cannot be
 * a task id. */
int a2a_task_id_canonical(const char *text, char out[A2A_TASK_ID_MAX]);

/* The v1 or v0.3 name of a state ("TASK_STATE_CANCELED" / "canceled"). */
const char *a2a_task_state_name(const char *v1_state, bool legacy);

/* True when every number in v survives a protobuf double unchanged (jsonnumber_fits_double:
 * not 9223372036854775807, nor a bignum, nor 0.1000000000000000001). */
bool a2a_task_lossless(const json_t *v);

#endif
