/*
 * anthropic: the "anthropic" provider, the Messages API with streaming, tools and extended
 * thinking (worker/providers/README.md). Thinking blocks become reasoning parts that keep their
 * signature (or, redacted, their opaque data), and are sent back unchanged and in order so
 * that a later step of the same turn is accepted. What is sent and accepted:
 * worker/providers/README.md.
 */
#ifndef CHATFLEET_ANTHROPIC_H
#define CHATFLEET_ANTHROPIC_H

#include "netprovider.h"

#define ANTHROPIC_BASE_URL_DEFAULT "https://api.anthropic.com" /* POST {base}/v1/messages */
#define ANTHROPIC_VERSION          "2023-06-01"                /* anthropic-version header */
#define ANTHROPIC_MAX_TOKENS       8192              /* max_tokens (required by the API) */
#define ANTHROPIC_BLOCKS_MAX       256               /* content blocks in one reply */
#define ANTHROPIC_BLOCK_MAX_BYTES  (8 * 1024 * 1024) /* text, thinking or input JSON of a block */
#define ANTHROPIC_SIGNATURE_BYTES  16384 /* a thinking block's signature, NUL included */

/* Extended thinking's budget_tokens per reasoning effort (provider.h; none and minimal ask for
 * no thinking). The request's max_tokens is ANTHROPIC_MAX_TOKENS plus the budget, since the
 * API wants max_tokens above the budget: 32000 at max, the smallest output cap of the Claude 4
 * models. The API's least budget is 1024. */
#define ANTHROPIC_BUDGET_LOW    1024
#define ANTHROPIC_BUDGET_MEDIUM 4096
#define ANTHROPIC_BUDGET_HIGH   8192
#define ANTHROPIC_BUDGET_XHIGH  16384
#define ANTHROPIC_BUDGET_MAX    23808

/* Provider "anthropic" (netprovider.h). The key goes in x-api-key. */
extern const netprovider_spec_t anthropic_spec;

#endif
