/*
 * structured: the worker's pure structured-output logic (issue 7 item 2; ARCHITECTURE.md
 * §8): the state of the governing request rebuilt from durable evidence rows,
 * the finalizer tool, the classification of a model batch, the check of a submission, and the
 * step decision. No I/O; generation.c reads the rows and commits what this module decides.
 *
 * Metadata this module reads and writes (chat_messages.structured_output, always with
 * structured_output_request_id = the request UUID; never shown to clients or models):
 *   assistant row of every model step while the request is open:
 *     {"type":"structured-output-step","request_id":R,"finish":F,
 *      "rejection":"text_only"|"invalid_arguments"|"invalid_batch"|"ineligible"|
 *                  "invalid_output" (absent: none),
 *      "rejected_calls":[{"tool_call_id","reason"}] (absent: none),
 *      "reason":"..." (native mode, invalid_output: why the text was refused),
 *      "value":V (native mode: the reply's text, accepted as the candidate)}
 *     F is the provider's finish: stop, tool_calls, length, content_filter, refusal.
 *   tool row that acknowledges a valid submission:
 *     {"type":"structured-output-candidate","request_id":R,"tool_call_id":ID,"value":V}
 *   model-only user row of feedback after a text-only ending:
 *     {"type":"structured-output-feedback","request_id":R,"rejections":N}
 *   model-only user row holding a stop hook's model_context at the request's end, which
 *   continues the request once (ARCHITECTURE.md §7.10): the current candidate is void, and the
 *   model must submit again (not a rejection; at most one per request):
 *     {"type":"structured-output-invalidation","request_id":R}
 * A receipt ({"type":"structured-output-outcome"}) closes the request (chatstate_receipt).
 *
 * Native mode (issue 7 item 4): when the model config declares native_structured_output and
 * the chat has no dynamic tools, no tool is offered; the provider constrains decoding with the
 * schema and the reply's text is the submission, screened and checked like the finalizer's
 * arguments. Its step row carries the candidate ("value") or the refusal ("invalid_output").
 */
#ifndef CHATFLEET_STRUCTURED_H
#define CHATFLEET_STRUCTURED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "id.h"
#include "outformat.h"

#define STRUCTURED_REJECTIONS_MAX 3    /* rejected finalization batches that fail the request */
#define STRUCTURED_ISSUES_MAX     3    /* validator issues quoted back to the model */
#define STRUCTURED_REASON_MAX     512  /* bytes of a rejection reason, NUL included */
#define STRUCTURED_ERROR_MAX      1024 /* bytes of a tool error text, NUL included */

#define STRUCTURED_TYPE_STEP         "structured-output-step"
#define STRUCTURED_TYPE_CANDIDATE    "structured-output-candidate"
#define STRUCTURED_TYPE_FEEDBACK     "structured-output-feedback"
#define STRUCTURED_TYPE_INVALIDATION "structured-output-invalidation"

/* What the durable rows of one request say. */
typedef struct {
    char request_id[ID_UUID_LEN + 1];
    int steps;            /* assistant steps committed for this request */
    int rejections;       /* rejected finalization batches */
    json_t *candidate;    /* owned: the current candidate's value (JSON null is a value), or
                             NULL when there is none */
    char last_finish[16]; /* the latest step's finish, "" before any */
    char last_reject[24]; /* the latest step's rejection, "" when it had none */
    char last_reason[STRUCTURED_REASON_MAX]; /* the latest step's "reason", "" when none */
    bool continued; /* a stop hook continued the request once (an invalidation row) */
    bool malformed; /* an evidence row of an unknown or broken shape (or a second
                       invalidation): fail closed */
} structured_state_t;

/* Rebuilds the state of request_id from evidence, [{"id","role","so"}] oldest first (every
 * row bound to the request, as history_load returns them). A candidate is cleared by a later
 * rejected finalizer batch or an invalidation and replaced by a later candidate. */
void structured_derive(const char *request_id, const json_t *evidence, structured_state_t *out);
void structured_state_clear(structured_state_t *st);

/* The finalizer's tool spec for the caller's output schema: {"name","description",
 * "input_schema":{"type":"object","properties":{"output":S},"required":["output"],
 * "additionalProperties":false}}. New reference. */
json_t *structured_tool_spec(const json_t *schema);

/* The concise system instruction that accompanies the finalizer (static text). */
const char *structured_instruction(void);

/* Whether a request is served in native mode: model (history_t.model) declares
 * native_structured_output true and the chat declares no dynamic tools. */
bool structured_native(const json_t *model, const json_t *dynamic_tools);

/* The system instruction of native mode (static text). */
const char *structured_native_instruction(void);

/* Checks a native-mode reply (its content parts and finish): with no tool call and an
 * eligible finish, the concatenated text must pass the strict JSON boundary and the schema.
 * Returns 0 with *value (new reference), or -1 with the reason in reason (bounded by size).
 * A truncated, refused or filtered reply is never accepted. */
int structured_check_text(const outformat_t *fmt, const json_t *content, const char *finish,
                          json_t **value, char *reason, size_t size);

/* Classifies a model batch (its content parts) for the open request. Returns NULL when the
 * batch is not a rejection (ordinary tool calls only, a text-only ending after a candidate,
 * a refusal or filtered ending without calls, or exactly one finalizer call of an eligible
 * attempt, which structured_check decides), else the rejection name. *finalizers receives the
 * number of finalizer calls. */
const char *structured_classify(const json_t *content, const char *finish, bool have_candidate,
                                int *finalizers);

/* Whether a finish reason lets a finalizer call count (stop or tool_calls; "" = stop). */
bool structured_eligible(const char *finish);

/* Checks a submission's arguments: exactly {"output": V} with V valid under fmt's schema.
 * Returns 0 with *value = V (new reference), or -1 with the reason (the first validator
 * issues, path and message) in reason. */
int structured_check(const outformat_t *fmt, const json_t *args, json_t **value, char *reason,
                     size_t size);

typedef enum {
    STRUCTURED_CONTINUE = 0, /* the ordinary step goes on (with the finalizer on offer) */
    STRUCTURED_SUCCEED,      /* receipt succeeded with the candidate, FinishTurn */
    STRUCTURED_EXHAUSTED,    /* receipt failed validation_exhausted, FinishTurn */
    STRUCTURED_NOT_PRODUCED, /* receipt failed not_produced, FinishTurn */
    STRUCTURED_FEEDBACK,     /* commit the feedback row; the model is called next (after a
                                text_only or invalid_output rejection) */
} structured_decision_t;

/* The decision of a step whose ordinary decision is to call the model (finishing false) or
 * to finish the turn (finishing true); steps_max bounds the request's steps (0: none). */
structured_decision_t structured_decide(const structured_state_t *st, bool finishing,
                                        long long steps_max);

const char *structured_decision_name(structured_decision_t d);

/* The open request of a step: its parsed format and the state its rows say. */
typedef struct {
    const char *request_id; /* borrowed */
    outformat_t *fmt;       /* owned */
    structured_state_t st;
    bool native; /* native mode (structured_native); the caller sets it after opening */
} structured_turn_t;

/* Parses the stored format_text (untrusted: the strict boundary, then outformat_parse) and
 * derives the state from evidence. Returns 0, or -1 with the reason in why when the request
 * cannot be served (the format does not parse or compile, malformed metadata, a dynamic tool
 * named like the finalizer): the caller fails it with configuration_error. Close *t either
 * way. */
int structured_turn_open(structured_turn_t *t, const char *request_id, const char *format_text,
                         const json_t *evidence, const json_t *dynamic_tools, char *why,
                         size_t size);
void structured_turn_close(structured_turn_t *t);

/* The current candidate as receipt text, checked again (recovered metadata is untrusted: the
 * strict boundary, then the schema). Caller frees; NULL when there is none or it fails. */
char *structured_candidate_text(const structured_turn_t *t);

#endif
