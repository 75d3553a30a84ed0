/*
 * provider: the one interface through which a generation task calls a model (ARCHITECTURE.md §7.3).
 *
 * A call takes the model config, the model-visible history and the tools on offer, streams
 * each output part to a callback as it arrives (text deltas, tool calls), and returns the
 * complete assistant content, the usage, or a classified failure (HTTP status, retryable or
 * not, retry-after). Calls are asynchronous: they run on an event loop (evloop.h), so one
 * thread holds any number of them, and each is cancellable at any point. Providers: `sim`
 * (sim.h) and, over libcurl, `openai`, `anthropic` and `ollama` (worker/providers/README.md).
 * Calls share no state.
 */
#ifndef CHATFLEET_PROVIDER_H
#define CHATFLEET_PROVIDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cancel.h"
#include "evloop.h"

/* A row of model_configs, as the generation task read it. Strings are borrowed. */
typedef struct {
    const char *name;
    const char *provider; /* sim, openai, anthropic, ollama */
    const char *model;
    const char *base_url;    /* NULL: the provider's default */
    const char *api_key_env; /* the variable the key is read from, or NULL */
    const char *api_key;     /* resolved from api_key_env, or NULL */
} provider_model_t;

/* The model of a model_configs row as JSON (its "name", "provider", "model", "base_url",
 * "api_key_env"; the key resolved from the environment). Borrows cfg's strings. */
void provider_model_of(const json_t *cfg, provider_model_t *model);

typedef struct {
    const provider_model_t *model;
    const json_t *messages; /* [{"role": "...", "content": [parts]}], oldest first; a row
                               the worker wrote as control feedback has "control": true */
    const json_t *tools;    /* [{"name", "description", "input_schema"}] on offer */
    int64_t attempt;        /* generation_attempt of this call: 1, 2, ... */
    int64_t chunk_ms;       /* sim: default pace between text chunks (0: as fast as possible) */
    /* Native constrained decoding (issue 7 item 4): when set, the provider puts this JSON
     * Schema in its own schema field (OpenAI response_format, Anthropic output_config.format,
     * Ollama format) and the reply's text is the JSON value; NULL: not requested. */
    const json_t *native_schema;
    const char *native_name; /* the schema's name, ^[A-Za-z0-9_-]{1,64}$ (OpenAI needs one) */
    /* A compaction summary call (ARCHITECTURE.md §7.6): messages end with the summary
     * instruction and no tools are offered. Network providers send it like any call; the sim
     * answers with a deterministic summary of the messages before the instruction. */
    bool summary;
    /* A title call (ARCHITECTURE.md §7.8): native_schema is the {title} schema and messages
     * an instruction and the chat's first message. Network providers send it like any native
     * call; the sim answers {"title": the message's first words}. */
    bool title;
    /* The call's reasoning effort, a name on the global scale (common/chat/effort.h: none <
     * minimal < low < medium < high < xhigh < max), already resolved and clamped by the
     * generation step; NULL: none is sent. Each network provider sends it in its own field
     * (worker/providers/README.md, "Reasoning effort"); the sim ignores it. */
    const char *reasoning_effort;
} provider_request_t;

/* Receives one streamed part: a JSON object text such as {"type":"text","text":"Hel"}. */
typedef void(provider_part_fn)(void *ctx, const char *part_json);

typedef enum {
    PROVIDER_OK = 0,
    PROVIDER_ERROR,     /* see the result's status, retryable and error */
    PROVIDER_CANCELLED, /* the cancel token was set; the result holds nothing */
} provider_rc_t;

/* A tool-call part in content carries either "args" (a JSON value) or "args_text": the
 * argument bytes exactly as the model produced them. The generation task screens args_text
 * with the strict JSON boundary before anything is stored (ARCHITECTURE.md §8),
 * so a provider must never parse and re-encode them itself. */
typedef struct {
    json_t *content;        /* owned: the assistant message's parts (PROVIDER_OK) */
    char finish[16];        /* stop, tool_calls, length, content_filter, refusal; "" = stop */
    json_t *usage;          /* owned: {"input_tokens", "output_tokens"} or NULL */
    int status;             /* HTTP status of a failure; 0 when the failure was not HTTP */
    bool retryable;         /* a later attempt may succeed */
    int64_t retry_after_ms; /* the provider asked to wait this long; -1 when it did not say */
    char error[256];        /* for people */
} provider_result_t;

/* What a call reports when it ends: rc and its result. res is valid during the call only and
 * is cleared after it: a callee that keeps content or usage takes them (sets them to NULL). */
typedef void(provider_done_fn)(void *ctx, provider_rc_t rc, provider_result_t *res);

typedef struct provider_call provider_call_t;

/* Starts a call of the model named by req->model on loop, from the loop's thread
 * (ARCHITECTURE.md §7.3): parts stream to on_part(part_ctx, part) and done(ctx, ...) runs exactly
 * once, both on the loop's thread and done never before this returns. req and everything it points
 * to need only live until this returns. The handle is valid until done runs. */
provider_call_t *provider_start(evloop_t *loop, const provider_request_t *req,
                                provider_part_fn *on_part, void *part_ctx, provider_done_fn *done,
                                void *ctx);

/* Cancels a call whose done has not run: done runs with PROVIDER_CANCELLED before this
 * returns, and nothing of the call is left on the loop. Loop thread only. */
void provider_cancel(provider_call_t *call);

/* The same call made synchronously, on a private loop in the calling thread (tests, tools):
 * returns PROVIDER_OK with out->content set, PROVIDER_ERROR with the failure classified, or
 * PROVIDER_CANCELLED within 50 ms of cancel being set. out is zeroed first; release it with
 * provider_result_clear. */
provider_rc_t provider_generate(const provider_request_t *req, cancel_t *cancel,
                                provider_part_fn *on_part, void *ctx, provider_result_t *out);

/* --- For providers: a call in progress. A provider's start function fills out as the
 * reply arrives, sets stop, impl and impl_free, and ends the call with provider_call_end. */
struct provider_call {
    evloop_t *loop;
    provider_part_fn *on_part;
    void *part_ctx;
    provider_done_fn *done;
    void *ctx;
    provider_result_t out;
    void *impl;                    /* the provider's state of this call */
    void (*stop)(void *impl);      /* stops the call's I/O and timers; never ends the call */
    void (*impl_free)(void *impl); /* frees impl (NULL: nothing to free) */
    bool starting;                 /* inside provider_start: an end is deferred */
    evloop_timer_t *deferred;      /* the deferred end, or NULL */
    provider_rc_t deferred_rc;
};

/* A new call in its starting state (starting is true: an end is deferred until the caller
 * clears it), for provider_start and for work that the generation task waits for as a call
 * (worker/mcp/mcpset.h). Never NULL. */
provider_call_t *provider_call_new(evloop_t *loop, provider_part_fn *on_part, void *part_ctx,
                                   provider_done_fn *done, void *ctx);

/* Ends the call: frees impl, runs done with rc and out, frees the call. Deferred to the
 * loop's next turn when the provider is still inside its start function. */
void provider_call_end(provider_call_t *call, provider_rc_t rc);

/* Sends part to the call's on_part as compact JSON text. */
void provider_call_emit(provider_call_t *call, const json_t *part);

void provider_result_clear(provider_result_t *r);

/* Whether an HTTP status is worth retrying: 408, 409, 425, 429 and 5xx are; any other 4xx
 * means the request itself is wrong and fails the turn at once. */
bool provider_status_retryable(int status);

/* Fills out as a failure (status may be 0) and returns PROVIDER_ERROR. */
provider_rc_t provider_fail(provider_result_t *out, int status, bool retryable,
                            int64_t retry_after_ms, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
