/* chatmove: execution states and the allowed-move table; see chatmove.h. */
#include "chatmove.h"

#include <string.h>

typedef struct {
    exec_state_t from;
    chatmove_t move;
    exec_state_t to[2]; /* permitted results; ES_NONE when only one */
} rule_t;

#define ONE(s)                                                                                     \
    { s, ES_NONE }
#define TWO(a, b)                                                                                  \
    { a, b }

/* The execution-state diagram, one row per edge (variants folded into two results). */
static const rule_t s_rules[] = {
    {ES_N, MV_CREATE, TWO(ES_R0, ES_W)}, /* W when the initial history has no user message */

    {ES_W, MV_SEND_QUEUE, ONE(ES_R0)},
    {ES_W, MV_SEND_INTERRUPT, ONE(ES_R0)},
    {ES_W, MV_EDIT, ONE(ES_R0)},
    {ES_W, MV_REQUEST_COMPACTION, ONE(ES_R0)},
    {ES_W, MV_CLEAR_CONTEXT, ONE(ES_W)},
    {ES_W, MV_FINISH_ERROR, ONE(ES_E0)},
    {ES_W, MV_SET_ARCHIVED_TRUE, ONE(ES_XW)},

    {ES_E0, MV_SEND_QUEUE, ONE(ES_R0)},
    {ES_E0, MV_SEND_INTERRUPT, ONE(ES_R0)},
    {ES_E0, MV_EDIT, ONE(ES_R0)},
    {ES_E0, MV_REQUEST_COMPACTION, ONE(ES_R0)},
    {ES_E0, MV_CLEAR_CONTEXT, ONE(ES_W)},
    {ES_E0, MV_SET_ARCHIVED_TRUE, ONE(ES_XE0)},

    {ES_E1, MV_SEND_QUEUE, ONE(ES_R1)},
    {ES_E1, MV_SEND_INTERRUPT, ONE(ES_R1)},
    {ES_E1, MV_EDIT, ONE(ES_R0)},
    {ES_E1, MV_REQUEST_COMPACTION, ONE(ES_R1)},
    {ES_E1, MV_DELETE_QUEUED, TWO(ES_E0, ES_E1)},
    {ES_E1, MV_PROMOTE_QUEUED, TWO(ES_R0, ES_R1)},
    {ES_E1, MV_SET_ARCHIVED_TRUE, ONE(ES_XE1)},

    {ES_R0, MV_RECORD_GENERATION_ATTEMPT, ONE(ES_R0)},
    {ES_R0, MV_RECORD_RETRY_STATE, ONE(ES_R0)},
    {ES_R0, MV_COMMIT_STEP, ONE(ES_R0)},
    {ES_R0, MV_ENTER_REQUIRES_ACTION, ONE(ES_A0)},
    {ES_R0, MV_INTERRUPT, ONE(ES_I0)},
    {ES_R0, MV_SEND_INTERRUPT, ONE(ES_I1)},
    {ES_R0, MV_EDIT, ONE(ES_R0)},
    {ES_R0, MV_FINISH_TURN, ONE(ES_W)},
    {ES_R0, MV_FINISH_ERROR, ONE(ES_E0)},
    {ES_R0, MV_SEND_QUEUE, ONE(ES_R1)},

    {ES_R1, MV_RECORD_GENERATION_ATTEMPT, ONE(ES_R1)},
    {ES_R1, MV_RECORD_RETRY_STATE, ONE(ES_R1)},
    {ES_R1, MV_COMMIT_STEP, ONE(ES_R1)},
    {ES_R1, MV_ENTER_REQUIRES_ACTION, ONE(ES_A1)},
    {ES_R1, MV_INTERRUPT, ONE(ES_I1)},
    {ES_R1, MV_SEND_INTERRUPT, ONE(ES_I1)},
    {ES_R1, MV_EDIT, ONE(ES_R0)},
    {ES_R1, MV_FINISH_ERROR, ONE(ES_E1)},
    {ES_R1, MV_SEND_QUEUE, ONE(ES_R1)},
    {ES_R1, MV_DELETE_QUEUED, TWO(ES_R0, ES_R1)},
    {ES_R1, MV_PROMOTE_QUEUED, ONE(ES_I1)},
    {ES_R1, MV_FINISH_TURN, TWO(ES_R0, ES_R1)},

    {ES_I0, MV_SEND_QUEUE, ONE(ES_I1)},
    {ES_I0, MV_SEND_INTERRUPT, ONE(ES_I1)},
    {ES_I0, MV_EDIT, ONE(ES_R0)},
    {ES_I0, MV_FINISH_INTERRUPTION, ONE(ES_W)},

    {ES_I1, MV_SEND_QUEUE, ONE(ES_I1)},
    {ES_I1, MV_SEND_INTERRUPT, ONE(ES_I1)},
    {ES_I1, MV_EDIT, ONE(ES_R0)},
    {ES_I1, MV_DELETE_QUEUED, TWO(ES_I0, ES_I1)},
    {ES_I1, MV_PROMOTE_QUEUED, ONE(ES_I1)},
    {ES_I1, MV_FINISH_INTERRUPTION, TWO(ES_R0, ES_R1)},

    {ES_A0, MV_COMPLETE_REQUIRES_ACTION, ONE(ES_R0)},
    {ES_A0, MV_INTERRUPT, ONE(ES_R0)},
    {ES_A0, MV_CANCEL_REQUIRES_ACTION, ONE(ES_R0)},
    {ES_A0, MV_SEND_QUEUE, ONE(ES_A1)},
    {ES_A0, MV_SEND_INTERRUPT, ONE(ES_R1)},
    {ES_A0, MV_EDIT, ONE(ES_R0)},

    {ES_A1, MV_COMPLETE_REQUIRES_ACTION, ONE(ES_R1)},
    {ES_A1, MV_INTERRUPT, ONE(ES_R1)},
    {ES_A1, MV_CANCEL_REQUIRES_ACTION, ONE(ES_R1)},
    {ES_A1, MV_SEND_QUEUE, ONE(ES_A1)},
    {ES_A1, MV_SEND_INTERRUPT, ONE(ES_R1)},
    {ES_A1, MV_EDIT, ONE(ES_R0)},
    {ES_A1, MV_DELETE_QUEUED, TWO(ES_A0, ES_A1)},
    {ES_A1, MV_PROMOTE_QUEUED, TWO(ES_R0, ES_R1)},

    {ES_XW, MV_SET_ARCHIVED_FALSE, ONE(ES_W)},
    {ES_XE0, MV_SET_ARCHIVED_FALSE, ONE(ES_E0)},
    {ES_XE1, MV_SET_ARCHIVED_FALSE, ONE(ES_E1)},

    {ES_INVALID, MV_RECONCILE_INVALID, TWO(ES_E0, ES_E1)},
};

#define RULE_COUNT (sizeof s_rules / sizeof s_rules[0])

static const char *s_state_names[ES_COUNT] = {"N",  "W",  "E0", "E1", "R0",  "R1",  "I0",
                                              "I1", "A0", "A1", "XW", "XE0", "XE1", "Invalid"};

static const char *s_move_names[MV_COUNT] = {
    "Create",
    "SetArchived(true)",
    "SetArchived(false)",
    "SetTitle",
    "SendMessage(queue)",
    "SendMessage(interrupt)",
    "EditMessage",
    "DeleteQueuedMessage",
    "PromoteQueuedMessage",
    "Interrupt",
    "CompleteRequiresAction",
    "RequestCompaction",
    "ClearContext",
    "ReconcileInvalidState",
    "Acquire",
    "Abandon",
    "CommitStep",
    "EnterRequiresAction",
    "FinishInterruption",
    "RecordGenerationAttempt",
    "RecordRetryState",
    "FinishTurn",
    "FinishError",
    "CancelRequiresAction",
};

exec_state_t chatmove_classify(bool exists, const char *status, bool archived,
                               bool queue_nonempty) {
    if (!exists) {
        return ES_N;
    }
    bool q = queue_nonempty;
    if (archived) {
        if (!strcmp(status, "waiting")) {
            return q ? ES_INVALID : ES_XW;
        }
        if (!strcmp(status, "error")) {
            return q ? ES_XE1 : ES_XE0;
        }
        return ES_INVALID;
    }
    if (!strcmp(status, "waiting")) {
        return q ? ES_INVALID : ES_W;
    }
    if (!strcmp(status, "error")) {
        return q ? ES_E1 : ES_E0;
    }
    if (!strcmp(status, "running")) {
        return q ? ES_R1 : ES_R0;
    }
    if (!strcmp(status, "interrupting")) {
        return q ? ES_I1 : ES_I0;
    }
    if (!strcmp(status, "requires_action")) {
        return q ? ES_A1 : ES_A0;
    }
    return ES_INVALID;
}

bool chatmove_runnable(exec_state_t s) {
    return s == ES_R0 || s == ES_R1 || s == ES_I0 || s == ES_I1 || s == ES_A0 || s == ES_A1;
}

static const rule_t *s_find(exec_state_t from, chatmove_t move) {
    for (size_t i = 0; i < RULE_COUNT; i++) {
        if (s_rules[i].from == from && s_rules[i].move == move) {
            return &s_rules[i];
        }
    }
    return NULL;
}

/* The moves that leave the execution state alone, whatever it is. */
static bool s_stateless(chatmove_t move) {
    return move == MV_ACQUIRE || move == MV_ABANDON || move == MV_SET_TITLE;
}

bool chatmove_keeps_compaction(chatmove_t move) {
    switch (move) {
        case MV_SET_ARCHIVED_TRUE:
        case MV_SET_ARCHIVED_FALSE:
        case MV_SET_TITLE:
        case MV_SEND_QUEUE:
        case MV_DELETE_QUEUED:
        case MV_REQUEST_COMPACTION:
        case MV_ACQUIRE:
        case MV_ABANDON:
        case MV_RECORD_GENERATION_ATTEMPT:
        case MV_RECORD_RETRY_STATE:
        case MV_COMMIT_STEP:
            return true;
        default:
            return false;
    }
}

bool chatmove_allowed(exec_state_t from, chatmove_t move) {
    if (s_stateless(move)) {
        return from != ES_N;
    }
    return s_find(from, move) != NULL;
}

bool chatmove_result_ok(exec_state_t from, chatmove_t move, exec_state_t to) {
    if (s_stateless(move)) {
        return to == from;
    }
    const rule_t *r = s_find(from, move);
    return r && to != ES_NONE && (r->to[0] == to || r->to[1] == to);
}

const char *chatmove_state_name(exec_state_t state) {
    return state >= 0 && state < ES_COUNT ? s_state_names[state] : "?";
}

const char *chatmove_name(chatmove_t move) {
    return move >= 0 && move < MV_COUNT ? s_move_names[move] : "?";
}
