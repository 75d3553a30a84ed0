/*
 * ollama: the "ollama" provider, Ollama's native /api/chat streamed as NDJSON
 * (worker/providers/README.md). Tool calls arrive whole, thinking in message.thinking fragments.
 * What is sent and accepted: worker/providers/README.md.
 */
#ifndef CHATFLEET_OLLAMA_H
#define CHATFLEET_OLLAMA_H

#include "netprovider.h"

#define OLLAMA_BASE_URL_DEFAULT "http://127.0.0.1:11434" /* POST {base}/api/chat */
#define OLLAMA_TEXT_MAX_BYTES   (8 * 1024 * 1024)        /* text or thinking of one reply */
#define OLLAMA_TOOL_CALLS_MAX   64                       /* tool calls in one reply */
/* Models whose "think" takes a level ("low", "medium", "high") rather than a boolean: gpt-oss
 * (provider-wire.md §4; any other model refuses a level). */
#define OLLAMA_THINK_LEVELS_PREFIX "gpt-oss"

/* Provider "ollama" (netprovider.h). A set api_key is sent as "Authorization: Bearer"
 * (Ollama itself needs none; proxies in front of it may). */
extern const netprovider_spec_t ollama_spec;

#endif
