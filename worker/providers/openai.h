/*
 * openai: the "openai" provider, OpenAI Chat Completions with streaming and tools
 * (worker/providers/README.md). Also speaks to the OpenAI-compatible servers (llama.cpp, Ollama's
 * /v1, vLLM) whose base_url ends in /v1. What is sent and accepted: worker/providers/README.md.
 */
#ifndef CHATFLEET_OPENAI_H
#define CHATFLEET_OPENAI_H

#include "netprovider.h"

#define OPENAI_BASE_URL_DEFAULT "https://api.openai.com/v1" /* POST {base}/chat/completions */
#define OPENAI_TOOL_CALLS_MAX   64                          /* parallel calls in one reply */
#define OPENAI_TEXT_MAX_BYTES   (8 * 1024 * 1024)           /* assistant text of one reply */
#define OPENAI_ARGS_MAX_BYTES   (1024 * 1024)               /* argument text of one call */

/* Provider "openai" (netprovider.h). The request carries the key as "Authorization: Bearer"
 * when req->model->api_key is set. */
extern const netprovider_spec_t openai_spec;

#endif
