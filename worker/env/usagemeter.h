/*
 * usagemeter: the worker's token and cost counters by model, for /metrics (ARCHITECTURE.md
 * §7.7). Every successful model call adds its usage (usage.h's stored shape) under the name
 * of the model config that answered it. Bounded: USAGEMETER_MODELS_MAX names, then one
 * "other" row. Thread-safe (one mutex; an add is a few additions).
 */
#ifndef CHATFLEET_USAGEMETER_H
#define CHATFLEET_USAGEMETER_H

#include <jansson.h>

#define USAGEMETER_MODELS_MAX 64 /* model names counted separately; the rest are "other" */
#define USAGEMETER_NAME_MAX   64 /* a model name's bytes kept, NUL included */
#define USAGEMETER_KINDS      5  /* input, output, cache_read, cache_creation, reasoning */

typedef struct usagemeter usagemeter_t;

usagemeter_t *usagemeter_new(void);
void usagemeter_destroy(usagemeter_t **self_p);

/* Adds usage (a stored usage object; NULL counts the call only) for model. */
void usagemeter_add(usagemeter_t *self, const char *model, const json_t *usage);

/* Prometheus text of the counters, appended to text (consumed; a new string returned):
 * chatfleet_worker_model_tokens_total{worker,model,kind}, chatfleet_worker_model_cost_micros_total
 * {worker,model} and chatfleet_worker_model_replies_total{worker,model}. */
char *usagemeter_metrics(usagemeter_t *self, const char *worker_id, char *text);

#endif
