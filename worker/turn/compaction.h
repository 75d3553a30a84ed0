/*
 * compaction: what the generation task needs to compact a chat (ARCHITECTURE.md §7.6): the
 * automatic trigger (the binding token point of the chat and override triggers, and the gate
 * that compares the latest known context size with it), the summarizer's prompt built from the
 * model-visible history since
 * the latest context boundary, the "Summarizing..." progress part, and the rows of the
 * compaction CommitStep (the compressed triplet: a model-only summary boundary, a visible
 * chat_summarized call and its result, all stamped with the request's source; then the
 * trailing unanswered user rows replayed verbatim as uncompressed model-only rows).
 *
 * Pure: no I/O. The generation task makes the summary call through the provider layer and
 * commits the rows with chatstate_commit_compaction, which clears the request in the same
 * transaction.
 */
#ifndef CHATFLEET_COMPACTION_H
#define CHATFLEET_COMPACTION_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "chatstate.h"

#define COMPACTION_TOOL        "chat_summarized"
#define COMPACTION_PART_TYPE   "compaction" /* the progress part's type; never committed */
#define COMPACTION_MANUAL      "manual"     /* source of a compaction POST /compact asked for */
#define COMPACTION_AUTOMATIC   "automatic"  /* source of one the trigger started */
#define COMPACTION_CALL_ID_MAX 48           /* "summary_" and a UUID, NUL included */
/* The override (deployment compaction model) trigger fires at this share of its window. */
#define COMPACTION_OVERRIDE_WINDOW_PERCENT 80
/* A threshold of 100 disables the chat trigger. */
#define COMPACTION_THRESHOLD_OFF_PERCENT 100

/* The binding automatic trigger of one chat (ARCHITECTURE.md §7.6): the chat trigger is
 * threshold_percent of the chat model's window; the override trigger exists while a
 * compaction model override resolves and is COMPACTION_OVERRIDE_WINDOW_PERCENT of its window.
 * The lower token point binds, ties to the chat trigger; an override point beyond the chat
 * model's window never fires, and a chat model without a known window has no trigger. */
typedef struct {
    int64_t context_limit;  /* the chat model's window in tokens; 0: unknown */
    int64_t chat_point;     /* the chat trigger's token point; -1: disabled or no window */
    int64_t override_point; /* the override trigger's token point; -1: none */
    bool override_binds;    /* the override trigger binds (else the chat trigger, if any) */
    int threshold_percent;  /* the binding trigger's threshold; the chat's when none binds */
    int64_t trigger_limit;  /* the binding trigger's window; 0 when no trigger is enabled */
} compaction_trigger_t;

/* The trigger for a chat model with window chat_limit (0: unknown) and threshold (0..100),
 * and an override whose window is override_limit (-1: no override resolves; 0: unknown). */
compaction_trigger_t compaction_trigger(int64_t chat_limit, int threshold, int64_t override_limit);

typedef enum {
    COMPACTION_GATE_NONE = 0,   /* below the binding point, no usage known, or no trigger */
    COMPACTION_GATE_RUN,        /* compact automatically before calling the model */
    COMPACTION_GATE_OVER_LIMIT, /* the first reply after a summary is still over: error */
} compaction_gate_t;

/* The automatic gate before a model call. messages: history_t.messages (from the latest
 * boundary; assistant rows carry "usage", read by usage_context_tokens); summary: the
 * chat_summarized result that follows the latest boundary, or NULL when that boundary is a clear or
 * there is none. The latest usage is the newest uncompressed assistant row's after the boundary (a
 * summary's own usage sits on its compressed call row, which is never model-visible). Still over
 * limit: that row is the first reply after a summary recorded under the same threshold and trigger
 * window, and the threshold is not 0 ("always compact"). *tokens receives the context size read
 * (-1: none). */
compaction_gate_t compaction_gate(const json_t *messages, const json_t *summary,
                                  const compaction_trigger_t *t, int64_t *tokens);

/* The FinishError JSON text of the still-over-limit error (caller frees): kind
 * "context_limit", naming what can clear it (the owner's threshold when the chat trigger
 * binds, an override model with a larger window when the override trigger does, both when
 * tokens also reach the other enabled trigger). */
char *compaction_over_limit_error(const compaction_trigger_t *t, int64_t tokens);

/* The summarizer's prompt for messages (history_t.messages: from the latest boundary on,
 * system rows first): a system instruction, every row but structured feedback and the
 * trailing unanswered user rows (those after the last assistant row), and a user row asking
 * for the summary. *replay receives a new array of the contents of those trailing user rows,
 * oldest first (maybe empty). Returns a new reference. */
json_t *compaction_prompt(const json_t *messages, json_t **replay);

/* Adds to a summarizer's prompt (compaction_prompt's) the context a pre_compact hook's answer
 * added ({"model_context"?, "user_context"?}, ARCHITECTURE.md §7.10), as a user row right
 * before the summary request: it guides the summary and becomes no row of the chat. */
void compaction_guide(json_t *prompt, const json_t *answer);

/* The progress part streamed while the summary call runs, as JSON text (caller frees):
 * {"type":"compaction","tool_name":"chat_summarized","tool_call_id","source","status":
 * "Summarizing..."}. */
char *compaction_progress_part(const char *call_id, const char *source);

/* A fresh tool-call id for the chat_summarized pair into out. 0, or -1 without randomness. */
int compaction_call_id(char out[COMPACTION_CALL_ID_MAX]);

/* The concatenated text parts of a reply's content (caller frees); "" when there is none. */
char *compaction_summary_text(const json_t *content);

typedef struct compaction_step compaction_step_t;

/* What a compaction's rows record besides the summary. Strings are borrowed. */
typedef struct {
    const char *call_id;                 /* the chat_summarized pair's id */
    const char *source;                  /* COMPACTION_MANUAL or COMPACTION_AUTOMATIC */
    const char *usage;                   /* the summary call's usage (JSON text) or NULL */
    const char *model_config_id;         /* the chat's model config id, or NULL */
    const char *summary_model;           /* the name of the model config that wrote the summary */
    const compaction_trigger_t *trigger; /* the binding trigger when the summary was made */
} compaction_meta_t;

/* The rows of the compaction CommitStep for summary (the model's text) and the replayed
 * contents (compaction_prompt's *replay). The call row carries the summary call's usage and
 * args {source}; the result row {source, summary, replayed_messages, threshold_percent,
 * trigger_context_limit_tokens, context_limit_tokens, summary_model}. Never NULL. */
compaction_step_t *compaction_step_new(const char *summary, const json_t *replay,
                                       const compaction_meta_t *meta);

/* The rows (valid until the step is destroyed). */
const cs_message_t *compaction_step_rows(const compaction_step_t *self, int *count);

void compaction_step_destroy(compaction_step_t **self_p);

#endif
