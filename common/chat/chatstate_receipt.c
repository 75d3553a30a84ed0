/* chatstate: terminal structured-output receipts (ARCHITECTURE.md §8). A receipt
 * is an assistant row visible to the user and to no model, carrying the outcome of one
 * request UUID; at most one per UUID ever, checked under the chat lock and by a unique index.
 * The insert trigger exempts receipt-only inserts, so writing one never moves the fence of
 * unrelated work. */
#include "chatstate_priv.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS_RECEIPT_SQL                                                                             \
    "INSERT INTO chat_messages (chat_id, role, visibility, content,"                               \
    " structured_output_request_id, structured_output)"                                            \
    " SELECT $1, 'assistant', 'user', json_build_array(json_build_object('type', 'text',"          \
    " 'text', $5::text)), $2::uuid, CASE WHEN $3::text = 'succeeded' THEN json_build_object("      \
    "'type', 'structured-output-outcome', 'request_id', $2::text, 'status', $3::text, 'value',"    \
    " $6::json) ELSE json_build_object('type', 'structured-output-outcome', 'request_id',"         \
    " $2::text, 'status', $3::text, 'error', json_build_object('code', $4::text, 'message',"       \
    " $7::text)) END"                                                                              \
    " WHERE NOT EXISTS (SELECT 1 FROM chat_messages r WHERE"                                       \
    " r.structured_output_request_id = $2::uuid"                                                   \
    " AND r.structured_output ->> 'type' = 'structured-output-outcome') RETURNING id"

/* The error message of a failed or canceled receipt: a fixed sentence per code, never text
 * from a provider or a model (api-shapes.md §6: the message is sanitized). */
static const char *s_error_message(const char *code) {
    static const char *const messages[][2] = {
        {"not_produced", "The model did not produce the structured output."},
        {"validation_exhausted", "The output did not match the schema after every repair."},
        {"generation_failed", "The model call failed."},
        {"configuration_error", "The model configuration cannot produce structured output."},
        {"interrupted", "The request was interrupted."},
        {"superseded", "An edit replaced the request."},
        {"queue_deleted", "The queued request was deleted."},
    };
    for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
        if (!strcmp(messages[i][0], code)) {
            return messages[i][1];
        }
    }
    return "The structured output request did not succeed.";
}

int chatstate_receipt(chatstate_t *self, const char *request_id, const char *status,
                      const char *code, const char *value_json, bool *written, cs_error_t *err) {
    if (written) {
        *written = false;
    }
    if (self->failed || !self->open) {
        return cs_fail(self, err, CS_DB, "bundle already failed");
    }
    bool ok = !strcmp(status, "succeeded")
                  ? value_json != NULL
                  : (!strcmp(status, "failed") || !strcmp(status, "canceled")) && code != NULL;
    if (!id_uuid_valid(request_id) || !ok) {
        return cs_fail(self, err, CS_BAD_INPUT, "receipt: bad request id, status or code");
    }
    char *text = value_json ? mem_strdup(value_json)
                            : mem_printf("The structured output request %s (%s).", status, code);
    const char *p[] = {self->chat_id,
                       request_id,
                       status,
                       code,
                       text,
                       value_json,
                       value_json ? NULL : s_error_message(code)};
    PGresult *res = cs_query(self, err, CS_RECEIPT_SQL, 7, p);
    free(text);
    if (!res) {
        return -1;
    }
    if (PQntuples(res) == 1) {
        cs_ids_push_inserted(self, db_int64(res, 0, 0));
        if (written) {
            *written = true;
        }
    }
    PQclear(res);
    return 0;
}

int cs_cancel_each(chatstate_t *self, PGresult *ids, const char *code, cs_error_t *err) {
    for (int i = 0; i < PQntuples(ids); i++) {
        if (!PQgetisnull(ids, i, 0) && chatstate_receipt(self, PQgetvalue(ids, i, 0), "canceled",
                                                         code, NULL, NULL, err) != 0) {
            return -1;
        }
    }
    return 0;
}

int cs_cancel_open_request(chatstate_t *self, const char *code, cs_error_t *err) {
    const char *p[] = {self->chat_id};
    /* The latest real user request governs; it is open until a receipt closes it. */
    PGresult *res = cs_query(self, err,
                             "SELECT structured_output_request_id::text FROM chat_messages"
                             " WHERE id = (SELECT max(id) FROM chat_messages WHERE chat_id = $1"
                             " AND role = 'user' AND NOT deleted AND visibility <> 'model')"
                             " AND structured_output ->> 'type' = 'structured-output-request'",
                             1, p);
    if (!res) {
        return -1;
    }
    int rc = cs_cancel_each(self, res, code, err);
    PQclear(res);
    return rc;
}
