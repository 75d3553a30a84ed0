/* chatstate: the transitions the HTTP side applies (ARCHITECTURE.md §4). */
#include "chatstate_priv.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REASON_NEW_MESSAGE "tool call canceled: a new user message arrived"
#define REASON_INTERRUPT   "tool call canceled: the chat was interrupted"
#define REASON_EDIT        "tool call canceled: the history was edited"

static bool s_owned(const chatstate_t *self) {
    return self->row.worker_id[0] != '\0';
}

/* Queues m with its hook context (promotion inserts it after m, cs_promote). */
static int s_enqueue(chatstate_t *self, const cs_message_t *m, int64_t *qid, cs_error_t *err) {
    if (cs_context_check(self, m, err) != 0 || cs_link_files(self, m->content, err) != 0) {
        return -1;
    }
    char *context = m->context_count ? cs_context_json(m) : NULL;
    const char *p[] = {self->chat_id,      m->content,       m->created_by, m->model_config_id,
                       m->response_format, m->so_request_id, context,       m->reasoning_effort,
                       m->traceparent};
    PGresult *res = cs_query(self, err,
                             "INSERT INTO chat_queued_messages (chat_id, content, created_by,"
                             " model_config_id, response_format, structured_output_request_id,"
                             " hook_context, reasoning_effort, traceparent) VALUES ($1, $2::json,"
                             " coalesce($3::uuid, (SELECT owner_id FROM chats WHERE id = $1)),"
                             " $4::uuid, $5::json, $6::uuid, $7::json, $8::reasoning_effort,"
                             " $9) RETURNING id",
                             9, p);
    free(context);
    if (!res) {
        return -1;
    }
    *qid = db_int64(res, 0, 0);
    PQclear(res);
    return 0;
}

/* A structured request (so_request_id set) may not run in plan mode (ARCHITECTURE.md §8): read
 * under the row lock, so that a concurrent switch is seen. CS_BAD_INPUT naming
 * response_format, or 0 (also for no request: no read then). */
static int s_plan_refuses(chatstate_t *self, const char *so_request_id, cs_error_t *err) {
    if (!so_request_id) {
        return 0;
    }
    const char *p[] = {self->chat_id};
    PGresult *res = cs_query(self, err, "SELECT plan_mode FROM chats WHERE id = $1", 1, p);
    if (!res) {
        return -1;
    }
    bool on = PQntuples(res) == 1 && db_bool(res, 0, 0);
    PQclear(res);
    return on ? cs_fail(self, err, CS_BAD_INPUT,
                        "response_format: a structured request cannot run in plan mode; turn"
                        " plan mode off first (plan_mode \"\")")
              : 0;
}

static int s_clear_deadline(chatstate_t *self, cs_error_t *err) {
    const char *p[] = {self->chat_id};
    return cs_exec(self, err, "UPDATE chats SET requires_action_deadline_at = NULL WHERE id = $1",
                   1, p);
}

int chatstate_set_archived(chatstate_t *self, bool archived, cs_error_t *err) {
    chatmove_t mv = archived ? MV_SET_ARCHIVED_TRUE : MV_SET_ARCHIVED_FALSE;
    if (cs_start(self, mv, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, archived ? "t" : "f"};
    if (cs_exec(self, err,
                "UPDATE chats SET archived = $2::boolean, updated_at = now() WHERE id = $1", 2,
                p) != 0 ||
        cs_family_archive(self, archived, err) != 0) {
        return -1;
    }
    return cs_finish(self, from, mv, err);
}

/* A title write of source (SetTitle: metadata, any state). A generated title applies only
 * over a fallback or generated one; *applied says whether it did. */
static int s_write_title(chatstate_t *self, const cs_fence_t *fence, const char *title,
                         const char *source, bool *applied, cs_error_t *err) {
    *applied = false;
    if (cs_start(self, MV_SET_TITLE, fence, err) != 0) {
        return -1;
    }
    size_t n = title ? strlen(title) : 0;
    if (n == 0 || n > CS_TITLE_MAX_BYTES) {
        return cs_fail(self, err, CS_BAD_INPUT, "title: must be a string of 1 to %d bytes",
                       CS_TITLE_MAX_BYTES);
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id, title, source};
    /* Sent ahead: its result is read with the move's closing load, in one round trip. */
    PGresult *res = NULL;
    if (cs_keep(self, err,
                "UPDATE chats SET title = $2, title_source = $3::chat_title_source,"
                " title_updated_at = now() WHERE id = $1 AND ($3 = 'user' OR"
                " title_source <> 'user') RETURNING 1",
                3, p, &res) != 0 ||
        cs_finish(self, from, MV_SET_TITLE, err) != 0) {
        PQclear(res);
        return -1;
    }
    if (!res) {
        return cs_fail(self, err, CS_DB, "internal: the title write's result was not kept");
    }
    *applied = PQntuples(res) == 1;
    PQclear(res);
    self->title_set = *applied;
    return 0;
}

int chatstate_set_title(chatstate_t *self, const char *title, cs_error_t *err) {
    bool applied;
    return s_write_title(self, NULL, title, "user", &applied, err);
}

int chatstate_set_generated_title(chatstate_t *self, const cs_fence_t *fence, const char *title,
                                  bool *applied, cs_error_t *err) {
    /* Only the owner that made the call writes it: the owner part of the fence. */
    cs_fence_t owner = *fence;
    owner.status = NULL;
    owner.history_version = -1;
    owner.generation_attempt = -1;
    /* Best-effort metadata: its commit does not wait for the WAL flush (sent ahead with the
     * write, so no round trip of its own). */
    bool fresh = self->row_fresh;
    if (cs_exec(self, err, "SELECT set_config('synchronous_commit', 'off', true)", 0, NULL) != 0) {
        return -1;
    }
    self->row_fresh = fresh; /* a setting, not a write: the loaded row still holds */
    return s_write_title(self, &owner, title, "generated", applied, err);
}

/* W, E0: the message enters history at once and the chat runs. */
static int s_send_direct(chatstate_t *self, const cs_message_t *m, int64_t *message_id,
                         cs_error_t *err) {
    if (cs_answer_pending(self, REASON_NEW_MESSAGE, err) != 0 ||
        cs_insert(self, m, 0, message_id, err) != 0) {
        return -1;
    }
    return cs_set_status(self, "running", true, err);
}

/* The unowned-chat epilogue of Interrupt and SendMessage(interrupt): a second transition,
 * FinishInterruption, in the same bundle. *promoted gets the message the queue head became. */
static int s_finish_unowned(chatstate_t *self, int64_t *promoted, cs_error_t *err) {
    if (s_owned(self)) {
        return 0;
    }
    if (cs_start(self, MV_FINISH_INTERRUPTION, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    if (cs_finish_interruption(self, NULL, 0, promoted, err) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_FINISH_INTERRUPTION, err);
}

int chatstate_send_message(chatstate_t *self, const cs_message_t *m, cs_busy_t busy, int max_queue,
                           int64_t *message_id, int64_t *queued_id, cs_error_t *err) {
    chatmove_t mv = busy == CS_BUSY_INTERRUPT ? MV_SEND_INTERRUPT : MV_SEND_QUEUE;
    *message_id = 0;
    *queued_id = 0;
    if (cs_start(self, mv, NULL, err) != 0 || s_plan_refuses(self, m->so_request_id, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    int rc;
    if (from == ES_W || from == ES_E0) {
        rc = s_send_direct(self, m, message_id, err);
    } else if (from != ES_E1 && max_queue > 0 && self->row.queue_len >= max_queue) {
        /* E1 appends and promotes the head at once, so its queue does not grow. The text is
         * the reference API's 429 detail (tests/API-FIDELITY.md). */
        return cs_fail(self, err, CS_QUEUE_FULL, "Maximum %d messages can be queued.", max_queue);
    } else if ((rc = s_enqueue(self, m, queued_id, err)) != 0) {
        return -1;
    } else if (from == ES_E1) {
        rc = cs_promote(self, 0, NULL, err) || cs_set_status(self, "running", true, err);
    } else if (busy == CS_BUSY_INTERRUPT && (from == ES_R0 || from == ES_R1)) {
        rc = cs_set_status(self, "interrupting", false, err);
    } else if (busy == CS_BUSY_INTERRUPT && (from == ES_A0 || from == ES_A1)) {
        rc = cs_answer_pending(self, REASON_INTERRUPT, err) || s_clear_deadline(self, err) ||
             cs_set_status(self, "running", false, err);
    }
    if (rc != 0 || cs_finish(self, from, mv, err) != 0) {
        return -1;
    }
    /* Landing in I1 with no owner: nothing generates, so FinishInterruption runs here too
     * (ARCHITECTURE.md §4.2: with no owner, the same bundle applies FinishInterruption). */
    if (busy == CS_BUSY_INTERRUPT &&
        (from == ES_R0 || from == ES_R1 || from == ES_I0 || from == ES_I1)) {
        int64_t promoted = 0;
        if (s_finish_unowned(self, &promoted, err) != 0) {
            return -1;
        }
        if ((from == ES_R0 || from == ES_I0) && promoted) {
            /* The promoted head was this very message: it was sent, not queued. */
            *message_id = promoted;
            *queued_id = 0;
        }
    }
    return 0;
}

/* The edited message's stored response_format (for preservation), or NULL. */
static char *s_edited_format(chatstate_t *self, const char *const *p, int *found, cs_error_t *err) {
    PGresult *res = cs_query(self, err,
                             "SELECT structured_output -> 'response_format' FROM chat_messages"
                             " WHERE chat_id = $1 AND id = $2::bigint AND role = 'user'"
                             " AND NOT deleted AND visibility <> 'model'",
                             2, p);
    if (!res) {
        *found = -1;
        return NULL;
    }
    *found = PQntuples(res) == 1;
    char *format = *found && !PQgetisnull(res, 0, 0) ? mem_strdup(PQgetvalue(res, 0, 0)) : NULL;
    PQclear(res);
    return format;
}

/* Soft-deletes the suffix from the edited message on and clears the queue, after noting the
 * structured requests they carried; then cancels those as superseded (receipts come before
 * the replacement, ARCHITECTURE.md §8). */
static int s_truncate(chatstate_t *self, const char *const *p, cs_error_t *err) {
    PGresult *open = cs_query(
        self, err,
        "SELECT m.structured_output_request_id::text FROM chat_messages m WHERE m.chat_id = $1"
        " AND m.id >= $2::bigint AND NOT m.deleted AND m.role = 'user'"
        " AND m.structured_output ->> 'type' = 'structured-output-request'"
        " UNION ALL SELECT q.structured_output_request_id::text FROM chat_queued_messages q"
        " WHERE q.chat_id = $1 AND q.structured_output_request_id IS NOT NULL",
        2, p);
    if (!open) {
        return -1;
    }
    PGresult *res = cs_query(self, err,
                             "UPDATE chat_messages SET deleted = true WHERE chat_id = $1"
                             " AND id >= $2::bigint AND NOT deleted RETURNING id",
                             2, p);
    int rc = res ? 0 : -1;
    for (int i = 0; res && i < PQntuples(res); i++) {
        cs_deleted_push(self, db_int64(res, i, 0));
    }
    PQclear(res);
    if (rc == 0) {
        rc = cs_exec(self, err, "DELETE FROM chat_queued_messages WHERE chat_id = $1", 1, p) ||
             cs_cancel_each(self, open, "superseded", err);
    }
    PQclear(open);
    return rc;
}

int chatstate_edit_message(chatstate_t *self, int64_t message_id, const cs_message_t *m,
                           cs_edit_format_t format, cs_error_t *err) {
    if (cs_start(self, MV_EDIT, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    char mid[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id, db_param_int64(mid, message_id)};
    int found = 0;
    char *kept = s_edited_format(self, p, &found, err);
    if (found <= 0) {
        return found < 0 ? -1
                         : cs_fail(self, err, CS_NOT_FOUND,
                                   "message %s is not an active user message", mid);
    }
    cs_message_t replacement = *m;
    char uuid[ID_UUID_LEN + 1];
    if (format == CS_EDIT_PRESERVE_FORMAT && kept) {
        /* The preserved format is a new request: it gets a fresh UUID. */
        if (id_uuid_new(uuid) != 0) {
            free(kept);
            return cs_fail(self, err, CS_DB, "no randomness for a request id");
        }
        replacement.response_format = kept;
        replacement.so_request_id = uuid;
    }
    int rc = s_plan_refuses(self, replacement.so_request_id, err) || s_truncate(self, p, err) ||
             cs_exec(self, err, "UPDATE chats SET requires_action_deadline_at = NULL WHERE id = $1",
                     1, p) ||
             cs_answer_pending(self, REASON_EDIT, err) ||
             cs_insert(self, &replacement, 0, NULL, err) ||
             cs_set_status(self, "running", true, err);
    free(kept);
    return rc != 0 ? -1 : cs_finish(self, from, MV_EDIT, err);
}

int chatstate_delete_queued(chatstate_t *self, int64_t queued_id, cs_error_t *err) {
    if (cs_start(self, MV_DELETE_QUEUED, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    char qid[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id, db_param_int64(qid, queued_id)};
    PGresult *res = cs_query(self, err,
                             "DELETE FROM chat_queued_messages WHERE chat_id = $1"
                             " AND id = $2::bigint RETURNING structured_output_request_id::text",
                             2, p);
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    /* A queued structured request ends here: its cancellation receipt is written at once,
     * and leaves the fence of whatever else runs untouched (the trigger exemption). */
    int rc = n == 1 ? cs_cancel_each(self, res, "queue_deleted", err)
                    : cs_fail(self, err, CS_NOT_FOUND, "queued message %s not found", qid);
    PQclear(res);
    return rc != 0 ? -1 : cs_finish(self, from, MV_DELETE_QUEUED, err);
}

int chatstate_promote_queued(chatstate_t *self, int64_t queued_id, cs_error_t *err) {
    if (cs_start(self, MV_PROMOTE_QUEUED, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    char qid[DB_PARAM_INT64_LEN];
    const char *p[] = {self->chat_id, db_param_int64(qid, queued_id)};
    int rc;
    if (from == ES_R1 || from == ES_I1) {
        /* Move it to the head; FinishInterruption promotes it after the partial suffix. */
        PGresult *res = cs_query(self, err,
                                 "UPDATE chat_queued_messages SET position = (SELECT min(position)"
                                 " - 1 FROM chat_queued_messages WHERE chat_id = $1)"
                                 " WHERE chat_id = $1 AND id = $2::bigint RETURNING id",
                                 2, p);
        if (!res) {
            return -1;
        }
        int n = PQntuples(res);
        PQclear(res);
        if (n != 1) {
            return cs_fail(self, err, CS_NOT_FOUND, "queued message %s not found", qid);
        }
        rc = cs_set_status(self, "interrupting", false, err);
    } else {
        /* E1, A1: into history now (closing a pending action first). */
        rc = cs_answer_pending(self, REASON_NEW_MESSAGE, err) || s_clear_deadline(self, err) ||
             cs_promote(self, queued_id, NULL, err) || cs_set_status(self, "running", true, err);
    }
    if (rc != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_PROMOTE_QUEUED, err);
}

int chatstate_interrupt(chatstate_t *self, const char *reason, cs_error_t *err) {
    if (cs_load(self, err) != 0) {
        return -1;
    }
    if ((self->state == ES_I0 || self->state == ES_I1) && !s_owned(self)) {
        /* Already interrupting but nobody holds it: finish here, as no runner would. */
        return s_finish_unowned(self, NULL, err);
    }
    if (cs_start(self, MV_INTERRUPT, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    int rc;
    if (from == ES_A0 || from == ES_A1) {
        char why[200];
        snprintf(why, sizeof why, "tool call canceled: %s", reason ? reason : "interrupted");
        rc = cs_answer_pending(self, why, err) || s_clear_deadline(self, err) ||
             cs_set_status(self, "running", false, err);
    } else {
        rc = cs_set_status(self, "interrupting", false, err);
    }
    if (rc != 0 || cs_finish(self, from, MV_INTERRUPT, err) != 0) {
        return -1;
    }
    return from == ES_R0 || from == ES_R1 ? s_finish_unowned(self, NULL, err) : 0;
}

int chatstate_complete_requires_action(chatstate_t *self, const cs_tool_result_t *results,
                                       int result_count, const cs_message_t *suffix,
                                       int suffix_count, cs_error_t *err) {
    if (cs_start(self, MV_COMPLETE_REQUIRES_ACTION, NULL, err) != 0) {
        return -1;
    }
    if (self->row.agent_wait) {
        return cs_fail(self, err, CS_CONFLICT,
                       "the chat waits for its subagents: their ends answer its calls");
    }
    return cs_complete_pending(self, results, result_count, suffix, suffix_count, err);
}

int cs_complete_pending(chatstate_t *self, const cs_tool_result_t *results, int result_count,
                        const cs_message_t *suffix, int suffix_count, cs_error_t *err) {
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    PGresult *pending = cs_query(self, err, chatstate_pending_calls_sql, 1, p);
    if (!pending) {
        return -1;
    }
    int npending = PQntuples(pending);
    int rc = 0;
    for (int i = 0; i < result_count && rc == 0; i++) {
        int match = -1;
        for (int j = 0; j < npending; j++) {
            if (!strcmp(PQgetvalue(pending, j, 0), results[i].tool_call_id)) {
                match = j;
            }
        }
        for (int k = 0; k < i; k++) {
            if (!strcmp(results[k].tool_call_id, results[i].tool_call_id)) {
                match = -2;
            }
        }
        if (match < 0) {
            rc = cs_fail(self, err, CS_BAD_INPUT, "results[%d].tool_call_id: %s %s", i,
                         results[i].tool_call_id,
                         match == -2 ? "is answered twice" : "is not a pending tool call");
        }
    }
    if (rc == 0 && result_count != npending) {
        rc = cs_fail(self, err, CS_BAD_INPUT,
                     "results: %d pending tool calls need a result, %d given", npending,
                     result_count);
    }
    for (int i = 0; i < result_count && rc == 0; i++) {
        const char *name = "";
        for (int j = 0; j < npending; j++) {
            if (!strcmp(PQgetvalue(pending, j, 0), results[i].tool_call_id)) {
                name = PQgetvalue(pending, j, 1);
            }
        }
        const char *rp[] = {results[i].tool_call_id, name, results[i].output,
                            results[i].is_error ? "true" : "false"};
        PGresult *js = cs_query(self, err,
                                "SELECT json_build_array(json_build_object('type',"
                                " 'tool-result', 'tool_call_id', $1::text, 'tool_name', $2::text,"
                                " 'result', $3::json, 'is_error', $4::boolean))::text",
                                4, rp);
        if (!js) {
            rc = -1;
            break;
        }
        cs_message_t m = {.role = "tool", .content = PQgetvalue(js, 0, 0)};
        rc = cs_insert(self, &m, 0, NULL, err);
        PQclear(js);
    }
    PQclear(pending);
    if (rc != 0 || cs_insert_all(self, suffix, suffix_count, err) != 0 ||
        s_clear_deadline(self, err) != 0 || cs_set_status(self, "running", false, err) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_COMPLETE_REQUIRES_ACTION, err);
}

/* The id of the latest context boundary (compaction summary or clear sentinel), or 0. */
#define CS_BOUNDARY_SQL                                                                            \
    "coalesce((SELECT max(id) FROM chat_messages WHERE chat_id = $1 AND NOT deleted"               \
    " AND compressed AND role = 'user' AND visibility = 'model'), 0)"

int chatstate_request_compaction(chatstate_t *self, cs_error_t *err) {
    if (cs_start(self, MV_REQUEST_COMPACTION, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    PGresult *res = cs_query(self, err,
                             "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND NOT deleted"
                             " AND role = 'assistant' AND NOT compressed AND id > " CS_BOUNDARY_SQL
                             " AND (structured_output ->> 'type') IS DISTINCT FROM"
                             " 'structured-output-outcome'",
                             1, p);
    if (!res) {
        return -1;
    }
    int64_t n = db_int64(res, 0, 0);
    PQclear(res);
    if (n == 0) {
        return cs_fail(self, err, CS_CONFLICT, "nothing to compact");
    }
    /* A fresh history_version gives the compaction turn a full retry budget and episode
     * keys that cannot collide with the previous turn's. */
    if (cs_exec(self, err,
                "UPDATE chats SET compaction_requested_at = now(), status = 'running',"
                " last_error = NULL, history_version = snapshot_version, generation_attempt = 0,"
                " updated_at = now() WHERE id = $1",
                1, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_REQUEST_COMPACTION, err);
}

int chatstate_clear_context(chatstate_t *self, const char *created_by, cs_error_t *err) {
    if (cs_start(self, MV_CLEAR_CONTEXT, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    PGresult *res = cs_query(self, err,
                             "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND NOT deleted"
                             " AND role <> 'system' AND visibility <> 'user'"
                             " AND id > " CS_BOUNDARY_SQL,
                             1, p);
    if (!res) {
        return -1;
    }
    int64_t n = db_int64(res, 0, 0);
    PQclear(res);
    if (n == 0) {
        return cs_fail(self, err, CS_CONFLICT, "nothing to clear");
    }
    char call_id[ID_UUID_LEN + 8] = "clear_";
    if (id_uuid_new(call_id + 6) != 0) {
        return cs_fail(self, err, CS_DB, "no randomness for a tool call id");
    }
    char *call = mem_printf("[{\"type\":\"tool-call\",\"tool_call_id\":\"%s\","
                            "\"tool_name\":\"chat_cleared\",\"args\":{}}]",
                            call_id);
    char *result = mem_printf("[{\"type\":\"tool-result\",\"tool_call_id\":\"%s\","
                              "\"tool_name\":\"chat_cleared\",\"result\":"
                              "{\"cleared\":true}}]",
                              call_id);
    cs_message_t triplet[] = {
        {.role = "user",
         .visibility = "model",
         .compressed = true,
         .created_by = created_by,
         .content = "[{\"type\":\"text\",\"text\":\"The conversation context was cleared. "
                    "Earlier messages are not part of this conversation.\"}]"},
        /* The visible pair is part of the compressed boundary: no compaction counts it. */
        {.role = "assistant",
         .visibility = "user",
         .compressed = true,
         .created_by = created_by,
         .content = call},
        {.role = "tool",
         .visibility = "user",
         .compressed = true,
         .created_by = created_by,
         .content = result},
    };
    /* The cleared history's files are released; a queued message keeps those it names. */
    int rc = cs_answer_pending(self, REASON_NEW_MESSAGE, err) ||
             cs_insert_all(self, triplet, 3, err) ||
             cs_exec(self, err,
                     "DELETE FROM chat_files WHERE chat_id = $1 AND id NOT IN (SELECT"
                     " (e.p ->> 'file_id')::uuid FROM chat_queued_messages q,"
                     " jsonb_array_elements(q.content::jsonb) AS e(p) WHERE q.chat_id = $1"
                     " AND e.p ->> 'type' = 'file' AND e.p ? 'file_id')",
                     1, p);
    free(call);
    free(result);
    /* A pending compaction request is cleared by cs_finish (ClearContext does not carry it). */
    if (rc != 0 || cs_set_status(self, "waiting", true, err) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_CLEAR_CONTEXT, err);
}

int chatstate_reconcile_invalid(chatstate_t *self, cs_error_t *err) {
    if (cs_start(self, MV_RECONCILE_INVALID, NULL, err) != 0) {
        return -1;
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    if (cs_answer_pending(self, "tool call canceled: the chat was reconciled", err) != 0 ||
        cs_exec(self, err,
                "UPDATE chats SET archived = false, status = 'error',"
                " requires_action_deadline_at = NULL, updated_at = now(),"
                " last_error = jsonb_build_object('message', 'The chat was in an invalid state."
                " Send a new message or edit the history to continue.', 'kind', 'generic')"
                " WHERE id = $1",
                1, p) != 0) {
        return -1;
    }
    return cs_finish(self, from, MV_RECONCILE_INVALID, err);
}
