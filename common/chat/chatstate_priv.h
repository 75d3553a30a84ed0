/*
 * chatstate_priv: what the chatstate source files share, from the bottom up:
 * chatstate_stmt.c (a bundle's statements, its row and the checks on it), chatstate_receipt.c
 * (structured-output receipts), chatstate.c (bundles and the moves both sides share),
 * chatstate_user.c and chatstate_worker.c (the transitions a user and a worker make), and
 * chatstate_meta.c (labels, pins, the read marker) and chatstate_title.c (title requests, the
 * usage of title calls). A file calls only the files before it.
 * Not for other modules.
 */
#ifndef CHATFLEET_CHATSTATE_PRIV_H
#define CHATFLEET_CHATSTATE_PRIV_H

#include "chatstate.h"
#include "db.h"

typedef struct {
    char status[16];
    bool archived;
    char worker_id[ID_UUID_LEN + 1]; /* "" when NULL */
    char runner_id[ID_UUID_LEN + 1];
    int64_t history_version;
    int64_t generation_attempt;
    int64_t queue_len;
    int64_t snapshot_version;
    int64_t queue_version;
    int64_t retry_state_version;
    bool needs_owner;                     /* no fresh lease holds the chat */
    char owner_id[ID_UUID_LEN + 1];       /* the user the chat belongs to */
    bool compaction_requested;            /* compaction_requested_at is set */
    bool agent_wait;                      /* waiting_on_agents: requires_action on subagents */
    char parent_chat_id[ID_UUID_LEN + 1]; /* "" for a root */
    bool title_requested;                 /* title_requested_at is set (chatstate_title.c) */
} cs_row_t;

typedef struct {
    int64_t *ids;
    int count;
    int cap;
} cs_ids_t;

struct chatstate {
    PGconn *conn;
    cs_settings_t settings; /* the starter's, copied */
    char chat_id[ID_UUID_LEN + 1];
    bool open;   /* a transaction (nested: the bundle's savepoint) is in progress */
    bool nested; /* chatstate_nest: the caller owns the transaction */
    bool failed; /* a transition failed: the bundle may only be rolled back */
    bool handed; /* released with its RELEASE sent ahead: the caller's next query runs it */
    /* Joined, nested or begun ahead: the start (lock, bump, load) was sent ahead and its load
     * is kept in first until the bundle's first read. A move reads it before anything else
     * unless it sends its writes behind it (ahead: Acquire, CommitStep, a title's outcome;
     * ARCHITECTURE.md §4.4, §6.2) and checks it after. */
    bool first_pending;
    bool ahead;
    PGresult *first;
    cs_row_t row;
    bool row_fresh; /* row reflects every write made so far in the bundle */
    /* cs_exec_row: the last statement sent returns the row, which its callback parses into
     * row (returned: it had one) when the bundle next reads. */
    bool row_coming;
    bool returned;
    bool title_set; /* SetTitle ran in this bundle (its hint says so) */
    exec_state_t state;
    cs_ids_t inserted;
    cs_ids_t deleted;
    char wake[ID_UUID_LEN + 1]; /* chatstate_commit_wake's chat: "" when none */
    hint_update_t *family; /* the family members a root's archive changed (chatstate_family.c) */
    int family_count;
    struct {
        int64_t **outs; /* where each message insert sent ahead wants its id (NULL: nowhere) */
        int count;
        int cap;
        int head; /* the next insert whose result comes back */
    } insert_outs;
};

/* Where a new child chat sits (chatstate_family.c). */
typedef struct {
    char root_chat_id[ID_UUID_LEN + 1];
    int depth;
} cs_family_t;

/* Locks c->parent_chat_id's family (its root) and checks that the child may join it: the
 * parent is the owner's (CS_NOT_FOUND), the root is not archived, the family is under
 * CS_FAMILY_MAX, and the depth and children caps hold (CS_CONFLICT); fills f. 0 or -1 (the
 * bundle poisoned). */
int cs_family_join(chatstate_t *self, const cs_create_t *c, cs_family_t *f, cs_error_t *err);

/* SetArchived's family part, after the chat's own: unarchiving a child whose parent is
 * archived is refused (CS_CONFLICT); a root takes every descendant along, or the bundle fails
 * when one of them is not waiting or in error. 0 or -1. */
int cs_family_archive(chatstate_t *self, bool archived, cs_error_t *err);

/* A CTE "pending": call_id, name, args (json, as stored), mid, ord of every outstanding tool call
 * of chat $1: tool-call parts of active assistant rows (receipts excluded, provider-executed calls
 * excluded) with no tool-result of the same id in an active tool row. Only rows after the
 * latest user row are scanned: every transition that inserts a user row answers the
 * outstanding calls first, so none can stand before it. */
#define CS_PENDING_CALLS_SQL                                                                       \
    "WITH active AS (SELECT id, role, content FROM chat_messages"                                  \
    " WHERE chat_id = $1 AND NOT deleted AND id > coalesce((SELECT max(id) FROM chat_messages"     \
    " WHERE chat_id = $1 AND role = 'user' AND NOT deleted AND (structured_output ->> 'type')"     \
    " IS DISTINCT FROM 'hook-context'), 0)"                                                        \
    " AND (structured_output ->> 'type') IS DISTINCT FROM 'structured-output-outcome'),"           \
    " calls AS (SELECT m.id AS mid, e.ord, e.p ->> 'tool_call_id' AS call_id,"                     \
    " e.p ->> 'tool_name' AS name, coalesce(e.p -> 'args', '{}'::json) AS args FROM active m,"     \
    " json_array_elements(m.content) WITH ORDINALITY AS e(p, ord)"                                 \
    " WHERE m.role = 'assistant' AND e.p ->> 'type' = 'tool-call'"                                 \
    " AND e.p ->> 'tool_call_id' IS NOT NULL"                                                      \
    " AND coalesce(e.p ->> 'provider_executed', 'false') <> 'true'),"                              \
    " results AS (SELECT e.p ->> 'tool_call_id' AS call_id FROM active m,"                         \
    " json_array_elements(m.content) AS e(p)"                                                      \
    " WHERE m.role = 'tool' AND e.p ->> 'type' = 'tool-result'),"                                  \
    " pending AS (SELECT c.* FROM calls c"                                                         \
    " WHERE NOT EXISTS (SELECT 1 FROM results r WHERE r.call_id = c.call_id))"

/* CompleteRequiresAction's writes after its cs_start (the user's or an agent wait's): every
 * pending call answered exactly once by results, the suffix inserted, the chat running. */
int cs_complete_pending(chatstate_t *self, const cs_tool_result_t *results, int result_count,
                        const cs_message_t *suffix, int suffix_count, cs_error_t *err);

/* Checks m's hook context rows (chatstate.h, cs_message_t.context); -1 (bundle poisoned,
 * CS_BAD_INPUT) when one is not a hook context row. */
int cs_context_check(chatstate_t *self, const cs_message_t *m, cs_error_t *err);

/* m's checked hook context rows as the JSON array a queued row keeps them in
 * (chat_queued_messages.hook_context): [{"role","visibility","content","structured_output"}].
 * Caller frees. */
char *cs_context_json(const cs_message_t *m);

/* Fills err and poisons the bundle; returns -1. */
int cs_fail(chatstate_t *self, cs_error_t *err, cs_rc_t rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Runs a statement in the bundle; NULL (bundle poisoned, err filled) on failure. */
PGresult *cs_query(chatstate_t *self, cs_error_t *err, const char *sql, int n,
                   const char *const *params);
int cs_exec(chatstate_t *self, cs_error_t *err, const char *sql, int n, const char *const *params);

/* Sends a statement ahead (as cs_exec) whose result the bundle's next read keeps in *keep
 * (NULL before; the caller PQclears it): a write whose rows matter costs no round trip of
 * its own. 0, or -1 (bundle poisoned). */
int cs_keep(chatstate_t *self, cs_error_t *err, const char *sql, int n, const char *const *params,
            PGresult **keep);

/* The statement that loads the row of chat $1 (the columns cs_row_from reads, with the
 * bundle's lease stale threshold in it). Caller frees. */
char *cs_row_sql(const chatstate_t *self);

/* Fills the bundle's row from a result of cs_row_sql and frees it: 0, or -1 (CS_NOT_FOUND, the
 * bundle failed) when it has no row. */
int cs_row_from(chatstate_t *self, PGresult *res, cs_error_t *err);

/* The checks of a move from state that do not depend on a fence: an invalid chat
 * (CS_INVALID_STATE), the move table (CS_CONFLICT naming the state). 0 or -1. */
int cs_move_check(chatstate_t *self, exec_state_t state, chatmove_t move, cs_error_t *err);

/* Sends an UPDATE of chat $1 aliased c (sql, without RETURNING) ahead, as cs_exec, with the
 * row's columns RETURNING, so that the next cs_load reads the row from it and runs no
 * statement of its own (unless another statement was sent after it, or the UPDATE's WHERE
 * refused the row). Once read, self->returned says whether it wrote the row. 0 or -1. */
int cs_exec_row(chatstate_t *self, cs_error_t *err, const char *sql, int n,
                const char *const *params);

/* Loads the chat row and queue length, and classifies the state (a no-op while the row
 * loaded by begin or the last cs_finish is still current). */
int cs_load(chatstate_t *self, cs_error_t *err);

/* Marks the row stale: the next cs_load reads it again. Every write goes through cs_query,
 * which calls this. */
void cs_touch(chatstate_t *self);

/* Loads the row and checks, in order: the fence (owner, status, versions: CS_FENCED), the
 * invalid state (CS_INVALID_STATE), the move table (CS_CONFLICT naming the state). */
int cs_start(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, cs_error_t *err);

/* Whether row r still matches fence f (NULL: no fence): 0, or -1 with CS_FENCED naming what
 * changed (logged). */
int cs_fence_check(chatstate_t *self, const cs_row_t *r, const cs_fence_t *f, cs_error_t *err);

/* cs_start for a move whose writes do not depend on the row it starts from: while the bundle's
 * start is still pending (chatstate_begin_ahead, joined, nested), they go out behind it
 * (self->ahead) and nothing is checked yet (self->state is not the move's start then);
 * otherwise cs_start. 0 or -1. */
int cs_start_ahead(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, cs_error_t *err);

/* Ends the writes of a move begun with cs_start_ahead (rc: 0 when they were all sent): when they
 * went ahead, reads them with the move's closing load, then makes cs_start's checks on the
 * start's row, which decide first whatever the writes did, and sets *from to its state
 * (ARCHITECTURE.md §4.4). Otherwise rc. 0 or -1. */
int cs_ahead_end(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, int rc,
                 exec_state_t *from, cs_error_t *err);

/* For a move whose writes went out behind the bundle's start (self->ahead) and have run: the
 * checks cs_start makes (fence, NULL for none; invalid state; move table), on the row the start
 * loaded (CS_NOT_FOUND when it had none); *from is that row's state. 0, or -1 with the bundle
 * failed, so that the caller's rollback undoes the writes. */
int cs_first_check(chatstate_t *self, chatmove_t move, const cs_fence_t *fence, exec_state_t *from,
                   cs_error_t *err);

/* Clears compaction_requested_at when the move does not carry it forward
 * (chatmove_keeps_compaction), then reloads and checks that the result is one the table permits
 * for (from, move). */
int cs_finish(chatstate_t *self, exec_state_t from, chatmove_t move, cs_error_t *err);

/* Sets status (and clears last_error when clear_error) and bumps updated_at. */
int cs_set_status(chatstate_t *self, const char *status, bool clear_error, cs_error_t *err);

/* Links the files content (a JSON array of parts) names in its "file" parts to the chat, in
 * the bundle (ARCHITECTURE.md §3, "Files"): each must be a complete upload of the chat's owner
 * held by no other chat (else CS_BAD_INPUT); the chat's earliest-uploaded other files are
 * deleted to keep it within settings.max_attachments, and a message naming more than that
 * is refused. A no-op for content without file parts. 0 or -1. */
int cs_link_files(chatstate_t *self, const char *content, cs_error_t *err);

/* Inserts one message row; queued_id is 0 or the queue row it was promoted from. */
int cs_insert(chatstate_t *self, const cs_message_t *msg, int64_t queued_id, int64_t *id_out,
              cs_error_t *err);
int cs_insert_all(chatstate_t *self, const cs_message_t *msgs, int count, cs_error_t *err);

/* Answers every outstanding tool call in active history with a synthetic error result. */
int cs_answer_pending(chatstate_t *self, const char *reason, cs_error_t *err);

/* Moves a queued message (queued_id, or the head when 0) into history as a user turn,
 * answering outstanding tool calls first. Fails unless exactly one queue row is removed. */
int cs_promote(chatstate_t *self, int64_t queued_id, int64_t *message_id, cs_error_t *err);

/* Promotes the queue head if there is one and lands in running; otherwise waiting, and with
 * release also unowned (Abandon's writes, in the same statement). */
int cs_land_after_turn(chatstate_t *self, int64_t *promoted, bool release, cs_error_t *err);

/* The interruption epilogue shared by the worker and the HTTP Interrupt on unowned chats. */
int cs_finish_interruption(chatstate_t *self, const cs_message_t *partial, int count,
                           int64_t *promoted, cs_error_t *err);

/* Records an inserted message id for chatstate_inserted(). */
void cs_ids_push_inserted(chatstate_t *self, int64_t id);

/* Writes a canceled receipt with code for each request UUID in column 0 of ids (NULLs are
 * skipped, as are UUIDs that already have a receipt). */
int cs_cancel_each(chatstate_t *self, PGresult *ids, const char *code, cs_error_t *err);

/* Cancels the open structured request of active history, if there is one. */
int cs_cancel_open_request(chatstate_t *self, const char *code, cs_error_t *err);

/* Records a soft-deleted message id for chatstate_deleted(). */
void cs_deleted_push(chatstate_t *self, int64_t id);

#endif
