/*
 * stagemeter: the worker's stage timings and turn outcomes (issue 40; the seed's lifecycle
 * stages), over histo.h. chatfleet_stage_duration_seconds{stage,scope,chat_kind} times every
 * stage; the provider's stages (provider_attempt, stream, time_to_first_token) are observed a
 * second time on chatfleet_model_stage_duration_seconds{stage,chat_kind,model}, model being the
 * model config name; chatfleet_turn_outcomes_total{outcome,chat_kind} counts every closed
 * turn once. chat_kind is "subagent" for a chat with a parent, else "root". Any thread may
 * observe; nothing here blocks beyond making a label set the first time.
 */
#ifndef CHATFLEET_STAGEMETER_H
#define CHATFLEET_STAGEMETER_H

#include <stdbool.h>
#include <stdint.h>

#include "dynbuf.h"

typedef enum {
    STAGE_ACQUISITION = 0, /* the turn's trigger (its latest user row) to its first step here */
    STAGE_QUEUE_WAIT,      /* a queued message's wait, from queueing to promotion */
    STAGE_PREPARE,         /* a step's reads and prompt, to the model call's start */
    STAGE_GENERATION_STEP, /* one step, from its reads to the commit that ends it */
    STAGE_STREAM,          /* a provider call that answered, from the request to its last part */
    STAGE_TIME_TO_FIRST_TOKEN, /* the request to the first streamed part */
    STAGE_PROVIDER_ATTEMPT,    /* one provider call, any outcome but cancelled */
    STAGE_TOOL_CALL,           /* one local tool run */
    STAGE_COMMIT,              /* a CommitStep transaction */
    STAGE_COMPACTION,          /* a compaction step, from its reads to its commit */
    STAGE_RETRY_BACKOFF,       /* the wait before a failed model call is tried again */
    STAGE_COUNT
} stage_t;

typedef enum { STAGE_SCOPE_TURN = 0, STAGE_SCOPE_BACKGROUND } stage_scope_t;

typedef enum {
    TURN_COMPLETED = 0, /* FinishTurn or EnterRequiresAction committed */
    TURN_ERROR,         /* FinishError committed */
    TURN_INTERRUPTED,   /* FinishInterruption committed */
    TURN_ABANDONED,     /* closed without one of those: its runner exited (lost ownership,
                           released, shut down) or a newer prompt replaced it (turnset.h) */
    TURN_OUTCOME_COUNT
} turn_outcome_t;

/* The label values ("acquisition", "turn", "completed", ...). */
const char *stagemeter_stage_name(stage_t s);
const char *stagemeter_outcome_name(turn_outcome_t o);

typedef struct stagemeter stagemeter_t;

stagemeter_t *stagemeter_new(void);

/* Observes us microseconds of stage s. */
void stagemeter_observe(stagemeter_t *m, stage_t s, stage_scope_t scope, bool subagent, int64_t us);

/* Observes a provider stage on the stage family (scope turn) and on the model family under
 * model (a model config name; the first 64 names, the rest as "other"). */
void stagemeter_observe_model(stagemeter_t *m, stage_t s, bool subagent, const char *model,
                              int64_t us);

/* Counts one closed turn. */
void stagemeter_count_outcome(stagemeter_t *m, turn_outcome_t o, bool subagent);

/* The count of observations of stage s (every scope and kind), for logs and tests. */
long long stagemeter_count(stagemeter_t *m, stage_t s);

/* Appends the three families, every series labelled worker="worker_id". 0, or -1 when out
 * passes its cap. */
int stagemeter_append(stagemeter_t *m, dynbuf_t *out, const char *worker_id);

void stagemeter_destroy(stagemeter_t **m_p);

#endif
