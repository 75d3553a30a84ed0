/*
 * chatstate: the one module that changes a chat's execution state (ARCHITECTURE.md §4, §5).
 *
 * A bundle is one PostgreSQL transaction: chatstate_begin() locks the chat row and advances
 * snapshot_version; each transition re-reads the state, classifies it, checks the allowed-
 * move table (chatmove.h) and, on the worker side, a fence; chatstate_commit() commits
 * and only then hands the hints to a sink. Any failed transition poisons the bundle: commit
 * refuses and the transaction is rolled back, so a rejected move leaves the database
 * exactly as it was. Nothing else writes chats, chat_messages or chat_queued_messages.
 *
 * Not thread-safe: a bundle belongs to one thread and its connection.
 */
#ifndef CHATFLEET_CHATSTATE_H
#define CHATFLEET_CHATSTATE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "chatmove.h"
#include "hint.h"
#include "id.h"

typedef enum {
    CS_OK = 0,
    CS_NOT_FOUND,     /* no such chat (or message, queued message) */
    CS_CONFLICT,      /* the table does not allow the move from this state, or a
                         precondition (nothing to compact, chat exists) fails */
    CS_INVALID_STATE, /* the chat is in an invalid state; only ReconcileInvalidState helps */
    CS_FENCED,        /* a worker fence no longer matches: a quiet, expected exit */
    CS_BAD_INPUT,     /* the caller's input does not fit the state (unknown tool call id) */
    CS_QUEUE_FULL,    /* the queue already holds the configured maximum */
    CS_RETRY,         /* serialization failure, deadlock or lock timeout: retry the bundle */
    CS_DB,            /* database or connection failure */
} cs_rc_t;

typedef struct {
    cs_rc_t rc;
    exec_state_t state; /* the state the move was attempted from, when known */
    char message[256];  /* for people: names the state and the transition */
} cs_error_t;

/* A message to insert. Text fields are JSON where noted and must already have passed the
 * strict JSON boundary; NULL means SQL NULL (or the default). */
typedef struct cs_message {
    const char *role;            /* system, user, assistant, tool */
    const char *visibility;      /* user, model, both; NULL = both */
    const char *content;         /* JSON array of parts */
    const char *created_by;      /* uuid */
    const char *model_config_id; /* uuid */
    const char *usage;           /* JSON object */
    const char *so_request_id;   /* uuid: the structured request this row carries or closes */
    const char *so_meta;         /* JSON object: internal structured-output metadata */
    const char *response_format; /* JSON: kept on a queued user message until promotion */
    /* A user message's reasoning effort (effort.h scale), or NULL: kept on a queued row
     * through promotion; a user row that enters history with one makes it the chat's
     * last_reasoning_effort, as model_config_id makes the chat's model (ARCHITECTURE.md §7.1). */
    const char *reasoning_effort;
    /* The W3C traceparent of the request that made a user message (common/base/trace.h), or
     * NULL: kept on a queued row through promotion (migration 0018; issue 40). */
    const char *traceparent;
    /* A promoted message's queue row's creation (timestamptz text; migration 0022): set by the
     * promotion, NULL otherwise. */
    const char *queued_at;
    bool compressed; /* a context boundary row */
    /* A prompt's lifecycle hook context (ARCHITECTURE.md §7.10: model-only user rows and
     * user-only assistant rows with CS_HOOK_CONTEXT_META): inserted right after the message,
     * or, when a send queues it, kept with the queued row and inserted right after it when it
     * is promoted. Any other row is CS_BAD_INPUT. */
    const struct cs_message *context;
    int context_count;
} cs_message_t;

/* What a worker-side task captured when it started; checked under the row lock. */
typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    char runner_id[ID_UUID_LEN + 1];
    const char *status;         /* expected status, or NULL for any (Abandon) */
    int64_t history_version;    /* expected, or -1 to skip */
    int64_t generation_attempt; /* expected, or -1 to skip */
} cs_fence_t;

/* A submitted result for a pending dynamic tool call. */
typedef struct {
    const char *tool_call_id;
    const char *output; /* JSON */
    bool is_error;
} cs_tool_result_t;

/* Chat creation parameters. */
typedef struct {
    const char *chat_id; /* NULL: a new UUID is minted; an existing id is a conflict */
    const char *owner_id;
    const char *title; /* NULL: fallback title from the first user message */
    bool title_from_user;
    const char *model_config_id;
    const char *system_prompt; /* becomes a model-only system message */
    const char *dynamic_tools; /* JSON array */
    const char *mcp_servers;   /* JSON array of MCP server names (ARCHITECTURE.md §7.9), or NULL */
    const char *labels;        /* JSON object of string labels (chatstate_set_labels), or NULL */
    bool plan_mode;            /* the chat starts in plan mode (chatstate_set_plan_mode) */
    const cs_message_t *messages;
    int message_count;
    /* A subagent chat (ARCHITECTURE.md §3, "Families"): its parent, one of the owner's chats,
     * or NULL for a root. The root is locked while the child is created (one creation at a
     * time per family), and an archived root refuses it, as does a family of CS_FAMILY_MAX
     * chats besides its root; so do the caps when set (0: none): the child's depth (the
     * parent's plus one) over max_depth, or a parent already holding max_children. */
    const char *parent_chat_id;
    int max_depth;
    int max_children;
    /* The parent's spawn_agent call that creates the child (chats.spawn_call_id), or NULL:
     * at most one child per call, so that running the call again creates nothing (the
     * unique index refuses it, CS_CONFLICT). */
    const char *spawn_call_id;
} cs_create_t;

/* The most chats a family holds besides its root, whatever the caps: what a family archive
 * locks and a root's JSON embeds stays bounded. */
#define CS_FAMILY_MAX 1024

typedef enum { CS_BUSY_QUEUE = 0, CS_BUSY_INTERRUPT } cs_busy_t;

typedef struct chatstate chatstate_t;

/* What a bundle takes from the process's configuration. The caller owns it and hands it to
 * every bundle it starts (chatstate_create, _begin, _join, _nest), which keeps a copy: two
 * callers in one process may use different settings. */
typedef struct {
    /* CHATFLEET_LEASE_STALE_MS: a heartbeat row older than this holds no lease, so its chat
     * needs an owner (every load of the row) and Acquire may take it. Must be > 0. */
    int64_t lease_stale_ms;
    /* CHATFLEET_REQUIRES_ACTION_DEADLINE_MS: how long EnterRequiresAction gives the user.
     * Only that move reads it: > 0 for a bundle that makes it; 0 in one that never does. */
    int64_t requires_action_deadline_ms;
    /* CHATFLEET_CHAT_MAX_ATTACHMENTS: the most files a chat holds (ARCHITECTURE.md §3,
     * "Files"). A message that names files links them in the transition that persists it;
     * with this below 1 such a transition fails (CS_BAD_INPUT) instead of choosing a cap. */
    int max_attachments;
    /* CHATFLEET_WORKER_USER_MAX_CHATS: Acquire refuses a chat whose owner already holds this
     * many fresh leases per unit of its weight (users.chat_weight), subagents' included
     * (ARCHITECTURE.md §6.2, "Fair share"); 0: no cap. Only Acquire reads it. */
    int64_t user_max_chats;
} cs_settings_t;

/* Creates a chat (N -> R0, or N -> W when no user message is given: model-only user rows,
 * like a session_start hook context, are none) in its own bundle and
 * commits it. Writes the chat id into chat_id_out. */
int chatstate_create(PGconn *conn, const cs_settings_t *settings, const cs_create_t *params,
                     const hint_sink_t *sink, char chat_id_out[ID_UUID_LEN + 1], cs_error_t *err);

/* BEGIN; lock the chat and advance snapshot_version. NULL on failure (CS_NOT_FOUND when the
 * chat does not exist), with the transaction rolled back. */
chatstate_t *chatstate_begin(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                             cs_error_t *err);

/* chatstate_begin without waiting: BEGIN, the lock and the load are sent ahead and read with
 * the bundle's first read, so that statements the caller sends in between (a step's history
 * reads) ride the same round trip. A failure of the start (a chat that does not exist, a lock
 * that timed out) is then that read's; NULL only when the start could not be sent. */
chatstate_t *chatstate_begin_ahead(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                                   cs_error_t *err);

/* The same as chatstate_begin inside a transaction the caller already opened (to take a lock
 * first); the bundle's commit or destroy ends that transaction. The bundle's start is sent
 * ahead and read with its first move's round trip (ARCHITECTURE.md §6.2 step 4): a failure
 * of the start (a chat that does not exist) is that move's, and NULL only when the start
 * could not be sent. */
chatstate_t *chatstate_join(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                            cs_error_t *err);

/* A bundle nested in a transaction the caller owns and ends, so that one transaction can
 * carry bundles for several chats (the acquirer's batch, ARCHITECTURE.md §6.2). The bundle is
 * a SAVEPOINT: chatstate_release() keeps its work, chatstate_destroy() without a release
 * rolls back to the savepoint, so a failed transition undoes only its own bundle and the
 * transaction goes on. One nested bundle at a time per connection; chatstate_commit refuses
 * one. Its start is sent ahead as chatstate_join's; NULL only when it could not be sent. */
chatstate_t *chatstate_nest(PGconn *conn, const cs_settings_t *settings, const char *chat_id,
                            cs_error_t *err);

/* The hints a bundle owes once its transaction has committed. */
typedef struct {
    hint_update_t update;
    bool ownership; /* also an ownership hint: the chat is runnable without a fresh lease */
} cs_hints_t;

/* Ends a nested bundle and keeps its work (RELEASE SAVEPOINT). Refuses a bundle in which a
 * transition failed (rolled back to its savepoint instead). Always destroys the bundle. On 0,
 * hints receives the post-transition row, which the caller publishes with chatstate_publish
 * after its own COMMIT and never before. The RELEASE is sent ahead (db_send, ARCHITECTURE.md
 * §4.4): the caller's next query on the connection (the next bundle's start, its COMMIT) runs
 * it in that query's round trip and reports its failure as its own. */
int chatstate_release(chatstate_t **self_p, cs_hints_t *hints, cs_error_t *err);

/* Publishes a committed bundle's hints to sink (may be NULL): the update hint, and the
 * ownership hint when it is owed. Only after COMMIT (chatstate_commit calls it itself). */
void chatstate_publish(const hint_sink_t *sink, const cs_hints_t *hints);

/* COMMIT and publish the update hint (and the ownership hint when the chat is runnable
 * without a fresh lease) to sink (may be NULL). Refuses a bundle in which a transition
 * failed. Always destroys the bundle. When after is non-NULL it receives the committed
 * post-transition row. Returns 0 or -1. */
int chatstate_commit(chatstate_t **self_p, const hint_sink_t *sink, hint_update_t *after,
                     cs_error_t *err);

/* ROLLBACK (when still open) and free. Safe on NULL. */
void chatstate_destroy(chatstate_t **self_p);

/* The chat's execution state after the bundle's last move (ES_N before the first). */
exec_state_t chatstate_state(const chatstate_t *self);

/* The ids of the message rows this bundle inserted, in insertion order, and of those it
 * soft-deleted. Valid until the bundle is destroyed. */
const int64_t *chatstate_inserted(const chatstate_t *self, int *count);
const int64_t *chatstate_deleted(const chatstate_t *self, int *count);

/* A read-only query: call_id, tool_name and args (JSON) of every outstanding tool call of
 * chat $1 in active history, oldest first (what requires_action is waiting for). */
extern const char *const chatstate_pending_calls_sql;

/* The same, without the calls an agent wait holds (CS_AGENT_WAIT_TOOL): what a client is
 * asked to answer. */
extern const char *const chatstate_client_calls_sql;

/* --- Transitions used by the HTTP side. Each returns 0, or -1 with err filled. --- */

int chatstate_set_archived(chatstate_t *self, bool archived, cs_error_t *err);

#define CS_TITLE_MAX_BYTES 200 /* longest title a user may set or create a chat with */

/* A user title (title_source 'user', title_updated_at now): metadata, so allowed in every
 * state, the invalid one included, and the state is left as it was. A title that is not 1
 * to CS_TITLE_MAX_BYTES bytes is CS_BAD_INPUT naming the field "title". */
int chatstate_set_title(chatstate_t *self, const char *title, cs_error_t *err);

/* A generated title (ARCHITECTURE.md §7.8): written only over a fallback or generated title,
 * never over a user one (the ranking fallback < generated < user); title_updated_at now,
 * updated_at untouched. *applied says whether it was written (only then is the title hint
 * set). Metadata like chatstate_set_title, and the same bounds; written only by the owner the
 * fence names (worker_id and runner_id; CS_FENCED otherwise), so a worker that was paused and
 * taken over writes nothing. The bundle's commit does not wait for its WAL flush (a crash may
 * lose the title, never anything else's order): call it in a bundle of its own. */
int chatstate_set_generated_title(chatstate_t *self, const cs_fence_t *fence, const char *title,
                                  bool *applied, cs_error_t *err);

/* --- Title regeneration and background calls' usage (chatstate_title.c; ARCHITECTURE.md §7.7,
 * §7.8; issue 38). --- */

/* The owner's request for a new generated title (POST /chats/{id}/title/regenerate): sets
 * title_requested_at, metadata like SetTitle (every state but archived: CS_CONFLICT). The
 * marker is durable until a worker clears it with chatstate_title_outcome; an idle chat with
 * the marker asks for an owner (the bundle's ownership hint). */
int chatstate_request_title(chatstate_t *self, cs_error_t *err);

/* Whether the owner the fence names (worker and runner; CS_FENCED otherwise) must serve a title
 * request before it lets the chat go: *wanted when the chat is idle (waiting or error), not
 * archived and has title_requested_at. Loads the row as Abandon does and writes nothing, so
 * chatstate_abandon may follow in the same bundle. 0 or -1. */
int chatstate_title_wanted(chatstate_t *self, const cs_fence_t *fence, bool *wanted,
                           cs_error_t *err);

/* What one title call came to. */
typedef struct {
    const char *title;           /* the generated title to write, or NULL (none came) */
    int64_t request_us;          /* the request it serves: title_requested_at in microseconds
                                    since the epoch, as read; 0 for a new chat's first title */
    const char *usage;           /* the call's usage (a JSON object, as a message's), or NULL */
    const char *model_config_id; /* the config that answered (uuid), or NULL */
    bool joined; /* written in another move's bundle (a turn's): its commit stays durable */
} cs_title_outcome_t;

/* A title call's outcome in one bundle, written only by the owner the fence names (CS_FENCED
 * otherwise): the title with source 'generated' (title_updated_at now, updated_at untouched)
 * over a fallback or generated title, and over a user title only when o->request_us is set and
 * the request is newer than that title (the user asked for it); the usage as a chat_usage row
 * of kind 'title' (the tokens were spent, whether or not a title was written); the request's
 * marker cleared when it is still the one read (a newer request stays for another call).
 * *applied says whether the title was written (only then is the title hint set). A bundle
 * with usage or a request commits durably; a bare title alone in its bundle (not o->joined)
 * does not wait for its WAL flush, as chatstate_set_generated_title. A title that is not 1 to
 * CS_TITLE_MAX_BYTES bytes is CS_BAD_INPUT. 0 or -1. */
int chatstate_title_outcome(chatstate_t *self, const cs_fence_t *fence, const cs_title_outcome_t *o,
                            bool *applied, cs_error_t *err);

/* --- Organization metadata and the read marker (chatstate_meta.c; issue 38). Labels and pins
 * are metadata like a user title: allowed in every state, the invalid one included, the state
 * left as it was, and no version moved but the bundle's snapshot_version. --- */

/* chatstate_begin for a bundle that may renumber the owner's pins (chatstate_set_pin_order,
 * and an archive, which unpins): BEGIN, then the owner's pin lock, then the chat's row lock,
 * in that order, so that two such bundles of one owner never hold each other's rows while
 * they wait for the lock. NULL on failure (CS_RETRY when the lock's wait may be retried). */
chatstate_t *chatstate_begin_pinning(PGconn *conn, const cs_settings_t *settings,
                                     const char *chat_id, cs_error_t *err);

/* Replaces the chat's labels with labels, a JSON object of string values the caller checked
 * (the gateway's rules: api-gateway/core/chatlist.h). updated_at untouched. */
int chatstate_set_labels(chatstate_t *self, const char *labels, cs_error_t *err);

/* Pins, moves or unpins the chat among its owner's pinned chats, numbered 1..n without gap:
 * 0 unpins (the pins after it move up); a positive pin_order appends an unpinned chat (n + 1)
 * or moves a pinned one to pin_order clamped to 1..n, shifting those in between. Under the
 * owner's pin lock (re-entrant; taken first by chatstate_begin_pinning), so that two moves of
 * one owner never give two chats one place. CS_BAD_INPUT naming "pin_order": a negative
 * pin_order, pinning an archived chat or a child (only roots are pinned). updated_at
 * untouched; the other chats' new places carry no hint. */
int chatstate_set_pin_order(chatstate_t *self, int32_t pin_order, cs_error_t *err);

/* Advances user_id's read marker of chat_id to message_id (never back), in a statement of its
 * own (no bundle, no version moved): only when user_id owns the chat. 0, or -1 (logged). */
int chatstate_mark_read(PGconn *conn, const char *chat_id, const char *user_id, int64_t message_id);

/* --- Steering for the next turns (chatstate_steer.c; issue 38): metadata like a user title,
 * allowed in every state, the state left as it was. --- */

/* Plan mode on or off (chats.plan_mode): its turns offer only read-only tools. Turning it on
 * while a structured request is pending (a message's with no receipt yet, or a queued one's)
 * is CS_CONFLICT: an incompatible mode never drops an output obligation (ARCHITECTURE.md §8). */
int chatstate_set_plan_mode(chatstate_t *self, bool on, cs_error_t *err);

/* The MCP servers the chat's turns use from their next step on (chats.mcp_servers): a JSON
 * array of names the caller checked against the deployment's (ARCHITECTURE.md §7.9). */
int chatstate_set_mcp_servers(chatstate_t *self, const char *servers_json, cs_error_t *err);

/* Inserts the user message or queues it; max_queue caps the queue (0: no cap). On success
 * *queued_id is the new queued row (or 0) and *message_id the row that entered history
 * for this send (or 0 when it was queued). A structured request (msg->so_request_id) in a
 * chat in plan mode is CS_BAD_INPUT naming response_format (ARCHITECTURE.md §8). */
int chatstate_send_message(chatstate_t *self, const cs_message_t *msg, cs_busy_t busy,
                           int max_queue, int64_t *message_id, int64_t *queued_id, cs_error_t *err);

typedef enum {
    CS_EDIT_SET_FORMAT = 0,  /* msg's response_format and request id as given (none: text) */
    CS_EDIT_PRESERVE_FORMAT, /* keep the edited message's format, under a fresh request id */
} cs_edit_format_t;

/* Truncates active history from message_id on, clears the queue, writes superseded receipts
 * for the structured requests they carried, inserts the replacement. A replacement that is a
 * structured request (given or preserved) in a chat in plan mode is CS_BAD_INPUT naming
 * response_format. */
int chatstate_edit_message(chatstate_t *self, int64_t message_id, const cs_message_t *msg,
                           cs_edit_format_t format, cs_error_t *err);

/* The structured_output of a lifecycle hook's context row (ARCHITECTURE.md §7.10): no prompt
 * of the user's, so a turn's pending calls are scanned across it. */
#define CS_HOOK_CONTEXT_META "{\"type\":\"hook-context\"}"

/* Removes a queued message; a structured one gets its queue_deleted receipt at once. */
int chatstate_delete_queued(chatstate_t *self, int64_t queued_id, cs_error_t *err);
int chatstate_promote_queued(chatstate_t *self, int64_t queued_id, cs_error_t *err);

/* Interrupts active work; an unowned running or interrupting chat finishes the interruption
 * in the same bundle. */
int chatstate_interrupt(chatstate_t *self, const char *reason, cs_error_t *err);

/* Answers every pending dynamic tool call (all of them, each exactly once), then inserts
 * the optional suffix. */
int chatstate_complete_requires_action(chatstate_t *self, const cs_tool_result_t *results,
                                       int result_count, const cs_message_t *suffix,
                                       int suffix_count, cs_error_t *err);

int chatstate_request_compaction(chatstate_t *self, cs_error_t *err);

/* Commits the clear boundary triplet and lands in waiting. */
int chatstate_clear_context(chatstate_t *self, const char *created_by, cs_error_t *err);

int chatstate_reconcile_invalid(chatstate_t *self, cs_error_t *err);

/* Writes the terminal receipt of a structured request into the open bundle: status is
 * "succeeded" (value_json is the validated value, JSON null included), "failed" or
 * "canceled" (code names why; the row's structured_output is then {"request_id","status",
 * "error":{"code","message"}}, the message a fixed sentence per code, api-shapes.md §6). Not a
 * transition of its own: it goes in the bundle of the
 * FinishTurn, FinishError or FinishInterruption that ends the request, before it. A UUID
 * that already has a receipt is left alone (*written false, still 0). */
int chatstate_receipt(chatstate_t *self, const char *request_id, const char *status,
                      const char *code, const char *value_json, bool *written, cs_error_t *err);

/* --- Transitions used by the worker. Fenced ones check the fence under the row lock. --- */

/* Takes ownership when the chat is runnable and has no fresh lease; inserts the heartbeat
 * row without a limiter slot (chatstate_acquire_slot with slots NULL). */
int chatstate_acquire(chatstate_t *self, const char *worker_id, const char *runner_id,
                      cs_error_t *err);

/* The concurrency limiter's candidate slots for one or more Acquires (ARCHITECTURE.md §6.2).
 * The caller chose them (slots not held by a fresh heartbeat row when it looked) and keeps
 * them in ascending order; Acquires in one transaction share the cursor, so the transaction
 * claims slots in ascending order and two claiming transactions never wait on each other in
 * a cycle. */
typedef struct {
    const int32_t *slots; /* candidates, ascending, each in 1..CHATFLEET_WORKER_MAX_CHATS */
    /* Optional, per candidate: no heartbeat row held the slot at all when the caller looked,
     * and runner ids are new. The stale-holder delete is then skipped: a row that appeared
     * since is a concurrent claim, which the insert meets as a conflict. */
    const bool *vacant;
    int count;
    int next;      /* in/out: the first candidate not tried yet */
    int32_t taken; /* out: the slot the heartbeat row holds; 0 when none */
} cs_slots_t;

/* Acquire under the limiter: as chatstate_acquire, and the heartbeat row claims a slot, the
 * first candidate from slots->next on that it can hold. A stale row holding the candidate is
 * deleted first; a fresh holder, or a concurrent claim of the same slot (decided by the
 * unique index on chat_heartbeats.slot, which waits for an uncommitted claim to end), moves
 * on to the next candidate. slots->next moves past every candidate tried, taken or not (a
 * chat held by a fresh lease gives its first candidate back: nothing claimed it). No
 * candidate left: CS_CONFLICT with taken 0; a wait that ran out (lock_timeout): CS_RETRY. A
 * failure poisons the bundle. slots NULL: no slot, as chatstate_acquire. */
int chatstate_acquire_slot(chatstate_t *self, const char *worker_id, const char *runner_id,
                           cs_slots_t *slots, cs_error_t *err);

/* Clears ownership when (worker_id, runner_id) still own the chat. */
int chatstate_abandon(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err);

int chatstate_commit_step(chatstate_t *self, const cs_fence_t *fence, const cs_message_t *msgs,
                          int count, cs_error_t *err);

/* The compaction step (ARCHITECTURE.md §7.6): CommitStep of msgs (the compressed triplet and the
 * replayed user rows) that also consumes the compaction request, clearing
 * compaction_requested_at in the same transaction. CS_CONFLICT when no request is pending. */
int chatstate_commit_compaction(chatstate_t *self, const cs_fence_t *fence,
                                const cs_message_t *msgs, int count, cs_error_t *err);
/* Lands in requires_action with its deadline the bundle's requires_action_deadline_ms from now. */
int chatstate_enter_requires_action(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err);

/* The tool whose calls an agent wait holds (ARCHITECTURE.md §3, "Agent waits"): args
 * {"agent_ids": [...]}, none or empty meaning every child of the chat. */
#define CS_AGENT_WAIT_TOOL "wait_agent"

/* Lands in requires_action as an agent wait: no owner, lease, limiter slot or deadline, marked
 * waiting_on_agents, so that no acquirer takes the chat and no user answers its calls. Every
 * pending call must be a CS_AGENT_WAIT_TOOL call (CS_BAD_INPUT otherwise). The bundle owes a
 * wake of the chat itself (chatstate_commit_wake): its children may have ended already. */
int chatstate_enter_agent_wait(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err);

/* Inserts the partial suffix (may be empty), answers its open tool calls as interrupted,
 * and lands in waiting or promotes the queue head. */
int chatstate_finish_interruption(chatstate_t *self, const cs_fence_t *fence,
                                  const cs_message_t *partial, int count, cs_error_t *err);

/* Increments generation_attempt; *attempt receives the new value. */
int chatstate_record_generation_attempt(chatstate_t *self, const cs_fence_t *fence,
                                        int64_t *attempt, cs_error_t *err);
int chatstate_record_retry_state(chatstate_t *self, const cs_fence_t *fence, const char *retry_json,
                                 cs_error_t *err);

/* Inserts the terminal messages (receipts; may be empty) and finishes the turn. */
int chatstate_finish_turn(chatstate_t *self, const cs_fence_t *fence, const cs_message_t *msgs,
                          int count, cs_error_t *err);

/* FinishTurn (no terminal messages) that, when it lands the chat waiting (nothing queued), is
 * also Abandon: the owner lets the chat go in the same statement. A promoted queue head keeps
 * the chat running and owned. */
int chatstate_finish_turn_release(chatstate_t *self, const cs_fence_t *fence, cs_error_t *err);
int chatstate_finish_error(chatstate_t *self, const cs_fence_t *fence, const char *error_json,
                           const cs_message_t *msgs, int count, cs_error_t *err);
int chatstate_cancel_requires_action(chatstate_t *self, const cs_fence_t *fence, const char *reason,
                                     cs_error_t *err);

/* --- Agent waits and family interrupts (chatstate_agents.c; ARCHITECTURE.md §3). --- */

/* Resumes parent_id if it is in an agent wait and every child its pending wait_agent calls
 * name has ended (waiting or error; a name that is not a child of the parent counts as ended,
 * with an error entry): one bundle answers every pending call with {"agents": [{"agent_id",
 * "title", "status": "completed"|"error"|"not_found", "answer"?, "value"?, "error"?}]} and sets
 * the parent running, to be acquired. Anything else is left alone, *resumed false. Any number
 * of callers may try at once: the parent's row lock and the calls it consumes make exactly one
 * resumption. 0, or -1 with err (CS_RETRY: try again). */
int chatstate_agents_resume(PGconn *conn, const cs_settings_t *settings, const char *parent_id,
                            const hint_sink_t *sink, bool *resumed, cs_error_t *err);

/* chatstate_commit, then, once committed, chatstate_agents_resume of the chat whose agent wait
 * the bundle may have released: the parent when the bundle ended a child's turn (a runnable
 * child landed in waiting or error), the chat itself when it entered an agent wait (a failure
 * of the resumption is logged: the sweep retries it). What every committer of bundles that
 * may end a child's turn or enter an agent wait calls. */
int chatstate_commit_wake(chatstate_t **self_p, const hint_sink_t *sink, hint_update_t *after,
                          cs_error_t *err);

/* The safety net for a wake lost to a crash between a child's end and its committer's
 * chatstate_agents_resume: tries up to limit agent waits none of whose children is active,
 * oldest first. *resumed counts the resumptions. 0, or -1 with err. */
int chatstate_agents_sweep(PGconn *conn, const cs_settings_t *settings, const hint_sink_t *sink,
                           int limit, int *resumed, cs_error_t *err);

/* Interrupts every active descendant of chat_id (not the chat itself), shallowest first, each
 * in a bundle of its own (chatstate_interrupt; one that ended meanwhile is skipped). *count
 * counts the interrupts. 0, or -1 with err on the first database failure. */
int chatstate_interrupt_descendants(PGconn *conn, const cs_settings_t *settings,
                                    const char *chat_id, const char *reason,
                                    const hint_sink_t *sink, int *count, cs_error_t *err);

/* --- The auto-archive tick (chatstate_archive.c; ARCHITECTURE.md §3, "Families"). --- */

/* The session advisory lock that keeps the tick to one caller at a time deployment-wide:
 * pg_try_advisory_lock(CS_AUTO_ARCHIVE_LOCK_CLASS, CS_AUTO_ARCHIVE_LOCK_OBJECT), two int keys.
 * chatfleet's other advisory locks: MIGRATION_LOCK_KEY (migration.c, one bigint key), the
 * per-owner upload lock (chatfile.c, one bigint key, a hash) and LEASEDB_SLOT_LOCK_CLASS
 * (worker/lease/leasedb.h, two keys: that class and a slot); the class below is none of them. */
#define CS_AUTO_ARCHIVE_LOCK_CLASS  0x63666172 /* "cfar" */
#define CS_AUTO_ARCHIVE_LOCK_OBJECT 0
#define CS_AUTO_ARCHIVE_BATCH_MAX   1000
#define CS_AUTO_ARCHIVE_DAYS_MAX    36500
/* The longest a family's transaction waits for the lock of one of its chats (a bundle holds
 * one for milliseconds); then the family is skipped until the next tick. */
#define CS_AUTO_ARCHIVE_LOCK_TIMEOUT_MS 1000

typedef struct {
    /* The clock: a timestamptz PostgreSQL reads ("2024-06-10T15:00:00Z"). The cutoff is 00:00
     * UTC of its day minus days. A parameter, so that tests (and the worker's test clock
     * offset) choose it. */
    const char *now;
    int days;                /* CHATFLEET_AUTO_ARCHIVE_DAYS: 1..CS_AUTO_ARCHIVE_DAYS_MAX */
    int batch;               /* candidates read per tick: 1..CS_AUTO_ARCHIVE_BATCH_MAX */
    const char *worker_id;   /* who archives, for the log lines; NULL: "-" */
    int64_t lock_timeout_ms; /* 0: CS_AUTO_ARCHIVE_LOCK_TIMEOUT_MS */
} cs_auto_archive_t;

typedef struct {
    bool locked_out; /* another session held the tick's advisory lock: nothing was done */
    int candidates;  /* roots read as candidates (without locks); == batch: there may be more */
    int archived;    /* families archived */
    int skipped;     /* candidates that no longer qualified once locked, or whose locks or
                        SetArchived failed in a way worth a retry on the next tick */
    char cutoff[32]; /* the cutoff, "YYYY-MM-DDT00:00:00Z" */
} cs_auto_archive_result_t;

/* One auto-archive tick on conn (no transaction open on it). Unless another session holds the
 * advisory lock above (out->locked_out, 0 returned), it reads up to batch candidate roots
 * without locks, oldest first: a root (no parent), not archived, not pinned (pin_order 0),
 * not running, interrupting or requires_action, no chat of its family in one of those
 * statuses either, created before the cutoff, and no non-deleted message in the family (the
 * root and every chat whose root_chat_id it is) created at or after the cutoff. Each is then
 * archived in a transaction of its own as PATCH {"archived": true} archives it
 * (chatstate_set_archived on the root: the whole family): the root is locked, then every
 * descendant (depth, id order, as SetArchived locks them), the candidate rule is checked again
 * under those locks, and a family that no longer qualifies (a message arrived, a pin, a run)
 * is rolled back untouched and skipped. Hints go to sink after each commit. Logs one line per
 * family archived (event auto_archived: chat_id, worker_id, family_size, snapshot_version)
 * and per family skipped. The lock is held for the tick and released before return.
 * 0, or -1 with err: CS_BAD_INPUT naming the argument (days, batch, a now PostgreSQL cannot
 * read), CS_DB (the connection failed; out counts what was done before). */
int chatstate_auto_archive(PGconn *conn, const cs_settings_t *settings,
                           const cs_auto_archive_t *args, const hint_sink_t *sink,
                           cs_auto_archive_result_t *out, cs_error_t *err);

#endif
