/* chatstate: title regeneration and the usage of model calls that write no message
 * (ARCHITECTURE.md §7.7, §7.8; issue 38). A title request is metadata, as a title is: SetTitle's
 * place in the move table (every state, the state left as it was). See chatstate.h. */
#include "chatstate_priv.h"

#include <stdio.h>
#include <string.h>

/* The request marker as a number, microseconds since the epoch: what the worker's read gives
 * (worker/turn/history.c) and what the clear compares, exactly. */
#define CS_TITLE_REQUEST_US "(extract(epoch FROM title_requested_at) * 1000000)::bigint"

int chatstate_request_title(chatstate_t *self, cs_error_t *err) {
    if (cs_start(self, MV_SET_TITLE, NULL, err) != 0) {
        return -1;
    }
    if (self->row.archived) {
        return cs_fail(self, err, CS_CONFLICT, "Cannot regenerate the title of an archived chat.");
    }
    exec_state_t from = self->state;
    const char *p[] = {self->chat_id};
    if (cs_exec(self, err, "UPDATE chats SET title_requested_at = now() WHERE id = $1", 1, p) !=
        0) {
        return -1;
    }
    return cs_finish(self, from, MV_SET_TITLE, err);
}

/* Only the owner a fence names: its worker and runner, whatever the state and versions. */
static cs_fence_t s_owner(const cs_fence_t *fence) {
    cs_fence_t owner = *fence;
    owner.status = NULL;
    owner.history_version = -1;
    owner.generation_attempt = -1;
    return owner;
}

int chatstate_title_wanted(chatstate_t *self, const cs_fence_t *fence, bool *wanted,
                           cs_error_t *err) {
    *wanted = false;
    cs_fence_t owner = s_owner(fence);
    if (cs_start(self, MV_ABANDON, &owner, err) != 0) {
        return -1;
    }
    exec_state_t s = self->state;
    *wanted =
        self->row.title_requested && !self->row.archived && (s == ES_W || s == ES_E0 || s == ES_E1);
    return 0;
}

/* The title write: over a fallback or generated title, and over a user title only for a
 * request ($3) made since that title was set. Returns the row when it wrote it
 * (self->returned, once read). */
static int s_write(chatstate_t *self, const char *title, const char *request, cs_error_t *err) {
    size_t n = strlen(title);
    if (n == 0 || n > CS_TITLE_MAX_BYTES) {
        return cs_fail(self, err, CS_BAD_INPUT, "title: must be a string of 1 to %d bytes",
                       CS_TITLE_MAX_BYTES);
    }
    const char *p[] = {self->chat_id, title, request};
    return cs_exec_row(self, err,
                       "UPDATE chats c SET title = $2, title_source = 'generated',"
                       " title_updated_at = now() WHERE c.id = $1 AND (title_source <> 'user'"
                       " OR ($3::bigint IS NOT NULL AND title_requested_at IS NOT NULL"
                       " AND title_updated_at <= title_requested_at))",
                       3, p);
}

int chatstate_title_outcome(chatstate_t *self, const cs_fence_t *fence, const cs_title_outcome_t *o,
                            bool *applied, cs_error_t *err) {
    *applied = false;
    cs_fence_t owner = s_owner(fence);
    /* With the bundle's start still pending (a worker's bundle, started ahead), the writes go
     * out behind it and the start's row is checked once they have run. */
    if (cs_start_ahead(self, MV_SET_TITLE, &owner, err) != 0) {
        return -1;
    }
    int rc = 0;
    if (!o->usage && o->request_us <= 0 && !o->joined) {
        /* A title alone is best-effort metadata: its commit does not wait for the WAL flush
         * (sent ahead with the write). Usage is cost accounting and a request is the user's:
         * those commit durably. */
        bool fresh = self->row_fresh;
        rc = cs_exec(self, err, "SELECT set_config('synchronous_commit', 'off', true)", 0, NULL);
        self->row_fresh = fresh; /* a setting, not a write: the loaded row still holds */
    }
    exec_state_t from = self->state;
    char us[DB_PARAM_INT64_LEN];
    const char *request = o->request_us > 0 ? db_param_int64(us, o->request_us) : NULL;
    const char *up[] = {self->chat_id, o->model_config_id, o->usage};
    const char *rp[] = {self->chat_id, request};
    /* All sent ahead: the closing load of cs_finish reads them in one round trip. The title's
     * write goes after the usage, so that without a request its row is the closing load. */
    rc = rc != 0 ||
                 (o->usage && cs_exec(self, err,
                                      "INSERT INTO chat_usage (chat_id, owner_id, model_config_id,"
                                      " kind, usage) SELECT id, owner_id, $2::uuid, 'title',"
                                      " $3::jsonb FROM chats WHERE id = $1",
                                      3, up) != 0) ||
                 (o->title && s_write(self, o->title, request, err) != 0) ||
                 (request && cs_exec(self, err,
                                     "UPDATE chats SET title_requested_at = NULL WHERE id = $1"
                                     " AND " CS_TITLE_REQUEST_US " = $2::bigint",
                                     2, rp) != 0)
             ? -1
             : 0;
    if (cs_ahead_end(self, MV_SET_TITLE, &owner, rc, &from, err) != 0 ||
        cs_finish(self, from, MV_SET_TITLE, err) != 0) {
        return -1;
    }
    *applied = o->title && self->returned;
    self->title_set = *applied;
    return 0;
}
