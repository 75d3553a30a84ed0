/*
 * history: what a worker task reads from the database, always under the chat row lock and
 * a fence (ARCHITECTURE.md §5.2: a task never mixes reads from states with differing
 * history versions, statuses or runners), and the generation step's decision over the
 * model-visible history (ARCHITECTURE.md §7.3).
 *
 * history_load is the only read a generation task makes; chatstate is the only writer.
 */
#ifndef CHATFLEET_HISTORY_H
#define CHATFLEET_HISTORY_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "chatstate.h"
#include "compaction.h"
#include "effort.h"
#include "taskctx.h"
#include "trace.h"

#define HISTORY_MAX_MESSAGES 100000 /* rows one load reads; a longer history fails the load */

typedef enum {
    HISTORY_OK = 0,
    HISTORY_FENCED,    /* the chat no longer matches the fence: a quiet exit */
    HISTORY_NOT_FOUND, /* the chat is gone: a quiet exit */
    HISTORY_DB,        /* database failure: retry with backoff */
} history_rc_t;

typedef struct {
    int64_t history_version;
    int64_t generation_attempt;
    int64_t deadline_in_ms;    /* requires_action_deadline_at - now(), or INT64_MAX if unset */
    bool compaction_requested; /* compaction_requested_at is set (ARCHITECTURE.md §7.6) */
    json_t *dynamic_tools;     /* owned: the chat's declared tools, an array (maybe empty) */
    json_t *mcp_servers;       /* owned: the MCP servers the chat enabled, names (mcpset.h) */
    json_t *messages;          /* owned: [{"id", "role", "content", "control", "model_only",
                                  "compressed", "usage", "hook"}], model-visible, from the latest
                                  context boundary (system rows always), oldest first; "hook" is
                                  the event of a hook context row (§7.10), else null */
    json_t *model;             /* owned, shared read-only (never change it): {"id","name",
                                  "provider","model","base_url","api_key_env",
                                  "native_structured_output","context_limit",
                                  "compression_threshold","prices","options",
                                  "user_threshold"} or null
                                  when none resolves */
    /* Automatic compaction (ARCHITECTURE.md §7.6). */
    json_t *summarizer; /* owned: the compaction model override's config (the shape of model),
                           or NULL when none is configured or it does not resolve */
    json_t *summary;    /* owned: the result of the chat_summarized call that follows the latest
                           boundary, or NULL (no boundary, or it is a clear) */
    int64_t summary_revision;     /* the revision of summary's row: history_version when that
                                     compaction is the chat's latest history change (§7.10) */
    compaction_trigger_t trigger; /* the binding automatic trigger */
    /* Titles (ARCHITECTURE.md §7.8). */
    bool title_fallback;     /* the chat's title is still the fallback */
    int64_t title_requested; /* title_requested_at (a regeneration the owner asked for) in
                                microseconds since the epoch, or 0 when none is pending */
    json_t *title_model;     /* owned: the title model's config (CHATFLEET_TITLE_MODEL), or NULL
                                when none is configured or it does not resolve */
    /* The governing structured request (ARCHITECTURE.md §8): the latest real
     * user row (role user, not deleted, visibility not 'model') when it carries a request
     * and no receipt closes it yet. request_id is "" when none is open. */
    char request_id[ID_UUID_LEN + 1];
    char *response_format; /* owned: its stored response_format (untrusted JSON text) */
    json_t *evidence;      /* owned: [{"id","role","so"}] of its step, candidate and feedback
                              rows, oldest first (empty when none is open) */
    /* Steering (issue 38): the chat's last_reasoning_effort ("" when unset; effort.h) and its
     * plan mode, read with the row (steer.h makes the step's effort and tools of them). */
    char reasoning_effort[EFFORT_NAME_MAX];
    bool plan_mode;
    /* Stage timings (worker/env/stagemeter.h): the chat has a parent, and the age of its
     * latest real user row (its prompt: not a model-only row a turn adds) on the database's
     * clock in microseconds (-1 when it has none). */
    bool subagent;
    int64_t trigger_age_us;
    /* That row's id, the turn's identity (worker/env/turnset.h); 0 when it has none. */
    int64_t trigger_id;
    /* How long that row waited in the queue before its promotion (microseconds; -1 when it
     * was never queued: migration 0022). */
    int64_t trigger_queued_us;
    /* The traceparent stored with that row (migration 0018; trace.h), or trace_id "" when
     * it has none: the turn's span joins that trace (issue 40). */
    trace_ctx_t trace;
} history_t;

/* Reads the chat in one read-only snapshot, checks the fence, then (with_messages)
 * the model config, the model-visible history (each message with "control": true when it is
 * a structured-output feedback row) and the governing structured request, and commits. On anything
 * but HISTORY_OK *out holds nothing. A fence mismatch is logged as event fence_mismatch. */
history_rc_t history_load(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                          bool with_messages, history_t *out);

/* history_load's reads (with messages) inside a transaction the caller opened, holds the chat
 * row lock in and ends (a bundle: the reads then see exactly what the bundle's writes build
 * on), plus what automatic compaction needs: the override's config (cc->model; one that does
 * not resolve is logged and ignored), the latest summary's result, and the binding trigger
 * (the owner's threshold for the chat's model, else the model's, else cc's default), and
 * whether the title is the fallback or a new one was requested, with title_model's config (a
 * name, "" for none) in either case. On
 * failure the caller's transaction is failed or left as it was; out holds nothing. */
history_rc_t history_read_locked(PGconn *conn, const char *chat_id, const cs_fence_t *fence,
                                 const compaction_config_t *cc, const char *title_model,
                                 history_t *out);

void history_clear(history_t *h);

typedef enum {
    DECIDE_CALL_MODEL = 0,  /* ask the model for the next step */
    DECIDE_RUN_LOCAL,       /* pending local (or unknown) tool calls: run and commit them */
    DECIDE_REQUIRES_ACTION, /* only dynamic tool calls are pending: wait for the client */
    DECIDE_FINISH_TURN,     /* nothing left to do for this history (or the step limit) */
    DECIDE_COMPACT,         /* a compaction was requested and there is something to summarize */
    DECIDE_OVER_LIMIT,      /* still over the compaction limit after a summary: FinishError */
    DECIDE_AGENT_WAIT,      /* only wait_agent calls are pending: an agent wait (chatstate.h) */
} decide_t;

/* history_decide's flags. */
#define HISTORY_COMPACTION_REQUESTED 1u /* compaction_requested_at is set */
#define HISTORY_RESUME_AFTER_SUMMARY 2u /* the latest boundary is an automatic summary */

/* The next step for messages (as history_load returns them; control rows do not start a
 * turn). dynamic_tools is the chat's declared tools (may be NULL). max_steps bounds assistant
 * responses per turn. HISTORY_COMPACTION_REQUESTED in flags: after the tool guards and before
 * the completeness check it gives DECIDE_COMPACT when an assistant row follows the latest
 * boundary, else DECIDE_FINISH_TURN (ARCHITECTURE.md §7.6). Trailing model-only user rows (a
 * boundary and the user rows it replays) ask for no reply, unless HISTORY_RESUME_AFTER_SUMMARY
 * says the boundary is an automatic summary, made in the middle of a turn that goes on. The
 * automatic gate is the caller's (compaction_gate, on DECIDE_CALL_MODEL). When the result is
 * DECIDE_RUN_LOCAL, *pending (when non-NULL) receives a new array of the pending local
 * tool-call parts, oldest first; otherwise it is set to NULL. */
decide_t history_decide(const json_t *messages, const json_t *dynamic_tools, int64_t max_steps,
                        unsigned flags, json_t **pending);

const char *history_decision_name(decide_t d);

#endif
