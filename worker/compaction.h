/*
 * compaction: what the generation task needs to consume a manual compaction request
 * (ARCHITECTURE.md §7.6): the summarizer's prompt built from the model-visible history since
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

#include "chatstate.h"

#define COMPACTION_TOOL        "chat_summarized"
#define COMPACTION_PART_TYPE   "compaction" /* the progress part's type; never committed */
#define COMPACTION_SOURCE      "manual"     /* the only source until automatic compaction */
#define COMPACTION_CALL_ID_MAX 48           /* "summary_" and a UUID, NUL included */

/* The summarizer's prompt for messages (history_t.messages: from the latest boundary on,
 * system rows first): a system instruction, every row but structured feedback and the
 * trailing unanswered user rows (those after the last assistant row), and a user row asking
 * for the summary. *replay receives a new array of the contents of those trailing user rows,
 * oldest first (maybe empty). Returns a new reference. */
json_t *compaction_prompt(const json_t *messages, json_t **replay);

/* The progress part streamed while the summary call runs, as JSON text (caller frees):
 * {"type":"compaction","tool_name":"chat_summarized","tool_call_id","source","status":
 * "Summarizing..."}. */
char *compaction_progress_part(const char *call_id);

/* A fresh tool-call id for the chat_summarized pair into out. 0, or -1 without randomness. */
int compaction_call_id(char out[COMPACTION_CALL_ID_MAX]);

/* The concatenated text parts of a reply's content (caller frees); "" when there is none. */
char *compaction_summary_text(const json_t *content);

typedef struct compaction_step compaction_step_t;

/* The rows of the compaction CommitStep for summary (the model's text), the replayed contents
 * (compaction_prompt's *replay), the call id, the summary call's usage (JSON text or NULL) and
 * the chat's model config id (or NULL). Never NULL. */
compaction_step_t *compaction_step_new(const char *summary, const json_t *replay,
                                       const char *call_id, const char *usage,
                                       const char *model_config_id);

/* The rows (valid until the step is destroyed). */
const cs_message_t *compaction_step_rows(const compaction_step_t *self, int *count);

void compaction_step_destroy(compaction_step_t **self_p);

#endif
