/*
 * usage: token usage in the one shape chatfleet stores on a message (ARCHITECTURE.md §7.7),
 * read from each provider's own fields, and its cost from per-model prices.
 *
 * Stored shape: {"input_tokens": the prompt's tokens neither read from nor written to a cache,
 * "output_tokens": the reply's (reasoning included), and, only when the provider reported
 * them, "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens"}. The worker adds
 * "context_tokens" (the whole prompt plus the reply: what the next prompt holds),
 * "context_limit" (the model's window, when known) and "total_cost_micros" (micro-USD, when the
 * model has prices) before it commits (usage_priced). Pure: no I/O.
 */
#ifndef CHATFLEET_USAGE_H
#define CHATFLEET_USAGE_H

#include <jansson.h>
#include <stdint.h>

typedef struct {
    int64_t input_tokens;          /* uncached prompt tokens */
    int64_t output_tokens;         /* reply tokens, reasoning included */
    int64_t cache_read_tokens;     /* -1: not reported */
    int64_t cache_creation_tokens; /* -1: not reported */
    int64_t reasoning_tokens;      /* -1: not reported (part of output_tokens) */
} usage_t;

/* Nothing reported yet: zero tokens, every optional count -1. */
usage_t usage_none(void);

/* OpenAI Chat Completions' usage object: prompt_tokens (cached ones included, so they are
 * taken out of input_tokens), completion_tokens, prompt_tokens_details.cached_tokens,
 * completion_tokens_details.reasoning_tokens. */
usage_t usage_openai(const json_t *wire);

/* Anthropic's usage object (message_start's, then message_delta's: counts are cumulative, so
 * each field present replaces the one in *u): input_tokens, output_tokens,
 * cache_creation_input_tokens, cache_read_input_tokens. Anthropic reports no thinking count:
 * thinking is inside output_tokens. */
void usage_anthropic_merge(usage_t *u, const json_t *wire);

/* Ollama's last line: prompt_eval_count, eval_count (no cache or reasoning counts). */
usage_t usage_ollama(const json_t *line);

/* The stored JSON of u (a new reference). */
json_t *usage_json(const usage_t *u);

/* The context size a stored usage object reports: "context_tokens" when present, else
 * input + cache reads + cache writes + output. -1 when it holds no count at all. */
int64_t usage_context_tokens(const json_t *usage);

/* A copy of usage (a new reference; NULL when usage is NULL) with "context_tokens",
 * "context_limit" when context_limit > 0, and "total_cost_micros" when prices is an object
 * {"input", "output", "cache_read"?, "cache_write"?} of USD per million tokens (cache prices
 * default to the input price): the sum of each count times its price, rounded. */
json_t *usage_priced(const json_t *usage, const json_t *prices, int64_t context_limit);

#endif
