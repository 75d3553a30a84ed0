/*
 * chatmove: the execution states of a chat, the transitions, and the table of allowed moves
 * between them (ARCHITECTURE.md §4: a legend of every state name, and the move table). Pure data
 * and classification: no I/O. chatstate.c consults it for every transition; the table is the
 * single place that says what may happen.
 */
#ifndef CHATFLEET_CHATMOVE_H
#define CHATFLEET_CHATMOVE_H

#include <stdbool.h>

typedef enum {
    ES_NONE = -1, /* "no state": marks an unused slot in a rule */
    ES_N = 0,     /* chat does not exist */
    ES_W,
    ES_E0,
    ES_E1,
    ES_R0,
    ES_R1,
    ES_I0,
    ES_I1,
    ES_A0,
    ES_A1,
    ES_XW,
    ES_XE0,
    ES_XE1,
    ES_INVALID,
    ES_COUNT
} exec_state_t;

typedef enum {
    MV_CREATE = 0,
    MV_SET_ARCHIVED_TRUE,
    MV_SET_ARCHIVED_FALSE,
    MV_SET_TITLE,
    MV_SEND_QUEUE,
    MV_SEND_INTERRUPT,
    MV_EDIT,
    MV_DELETE_QUEUED,
    MV_PROMOTE_QUEUED,
    MV_INTERRUPT,
    MV_COMPLETE_REQUIRES_ACTION,
    MV_REQUEST_COMPACTION,
    MV_CLEAR_CONTEXT,
    MV_RECONCILE_INVALID,
    MV_ACQUIRE,
    MV_ABANDON,
    MV_COMMIT_STEP,
    MV_ENTER_REQUIRES_ACTION,
    MV_FINISH_INTERRUPTION,
    MV_RECORD_GENERATION_ATTEMPT,
    MV_RECORD_RETRY_STATE,
    MV_FINISH_TURN,
    MV_FINISH_ERROR,
    MV_CANCEL_REQUIRES_ACTION,
    MV_COUNT
} chatmove_t;

/* Classifies a chat row. status is the chats.status text; exists false gives ES_N. */
exec_state_t chatmove_classify(bool exists, const char *status, bool archived, bool queue_nonempty);

/* True for R0, R1, I0, I1, A0, A1: a worker should be driving the chat. */
bool chatmove_runnable(exec_state_t state);

/* True when the table allows the move from this state. The ownership moves (Acquire,
 * Abandon) and SetTitle (metadata) are not execution moves and are reported as allowed from
 * every existing state, leaving it unchanged: their own preconditions live in chatstate. */
bool chatmove_allowed(exec_state_t from, chatmove_t move);

/* True when `to` is a result the table permits for this move from `from` (the "/ removed
 * last queued" style variants give two permitted results). */
bool chatmove_result_ok(exec_state_t from, chatmove_t move, exec_state_t to);

/* Whether the move carries chats.compaction_requested_at forward (ARCHITECTURE.md §4.3, "The
 * compaction marker"): the moves that keep an active turn alive (Acquire, Abandon, SetArchived,
 * SetTitle, queueing or deleting a queued message, and the generation step's own
 * RecordGenerationAttempt, RecordRetryState and CommitStep) and RequestCompaction, which sets it.
 * Every other move clears it by construction, in cs_finish, so a request never replays on a
 * later turn. */
bool chatmove_keeps_compaction(chatmove_t move);

/* Short names: "R0", "XE1", "Invalid"; "SendMessage(queue)", "FinishTurn". */
const char *chatmove_state_name(exec_state_t state);
const char *chatmove_name(chatmove_t move);

#endif
