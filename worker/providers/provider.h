/*
 * provider: the one interface through which a generation task calls a model (ARCHITECTURE.md §7.3).
 *
 * A call takes the model config, the model-visible history and the tools on offer, streams
 * each output part to a callback as it arrives (text deltas, tool calls), and returns the
 * complete assistant content, the usage, or a classified failure (HTTP status, retryable or
 * not, retry-after). Every provider is cancellable mid-stream through a cancel_t and returns
 * PROVIDER_CANCELLED promptly when it is set. Providers: `sim` (sim.h) and, over libcurl,
 * `openai`, `anthropic` and `ollama` (worker/providers/README.md).
 * Thread-safe: calls share no state.
 */
#ifndef CHATFLEET_PROVIDER_H
#define CHATFLEET_PROVIDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cancel.h"

/* A row of model_configs, as the generation task read it. Strings are borrowed. */
typedef struct {
    const char *name;
    const char *provider; /* sim, openai, anthropic, ollama */
    const char *model;
    const char *base_url; /* NULL: the provider's default */
    const char *api_key;  /* resolved from api_key_env, or NULL */
} provider_model_t;

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

/* Calls the model named by req->model. Returns PROVIDER_OK with out->content set,
 * PROVIDER_ERROR with the failure classified, or PROVIDER_CANCELLED. out is zeroed first;
 * release it with provider_result_clear. */
provider_rc_t provider_generate(const provider_request_t *req, cancel_t *cancel,
                                provider_part_fn *on_part, void *ctx, provider_result_t *out);

void provider_result_clear(provider_result_t *r);

/* Whether an HTTP status is worth retrying: 408, 409, 425, 429 and 5xx are; any other 4xx
 * means the request itself is wrong and fails the turn at once. */
bool provider_status_retryable(int status);

/* Fills out as a failure (status may be 0) and returns PROVIDER_ERROR. */
provider_rc_t provider_fail(provider_result_t *out, int status, bool retryable,
                            int64_t retry_after_ms, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
