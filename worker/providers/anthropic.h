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

/* Provider "anthropic" (netprovider.h). The key goes in x-api-key. */
extern const netprovider_spec_t anthropic_spec;

#endif
