/*
 * netprovider: the one start path of the network providers (openai, anthropic, ollama). Each
 * is a constant spec: where it POSTs, which headers it sends, how it builds its request body
 * and how it reads the reply; netprovider_start runs a call from a spec over httpstream.
 * What each spec holds and sends: worker/providers/README.md, "Network providers".
 */
#ifndef CHATFLEET_NETPROVIDER_H
#define CHATFLEET_NETPROVIDER_H

#include "httpstream.h"
#include "provider.h"

/* A network provider, as a static constant. The Accept and fixed lines are whole header lines,
 * "Name: value". */
typedef struct {
    const char *name;              /* model_configs.provider, and the prefix of its messages */
    const char *base_url_default;  /* used when the model config has no base_url */
    const char *path;              /* appended to the base URL */
    const char *key_name;          /* the credential header's name, sent when a key is set */
    const char *key_prefix;        /* before the key in that header's value ("" for none) */
    const char *accept_stream;     /* the Accept line of a streamed call */
    const char *accept_whole;      /* the Accept line of a summary call (HTTPSTREAM_WHOLE) */
    const char *fixed_header;      /* one more line sent on every call, or NULL */
    httpstream_mode_t stream_mode; /* how a streamed reply is framed; a summary is WHOLE */
    /* The request body (new reference), built from everything in req. */
    json_t *(*body)(const provider_request_t *req);
    /* The reply's state of one call (never NULL); it streams parts to call->on_part and
     * records failures in call->out. state_free frees it and all it holds. */
    void *(*state_new)(provider_call_t *call);
    void (*state_free)(void *state);
    httpstream_event_fn *on_event; /* a streamed reply's events; ctx is the state */
    httpstream_event_fn *on_whole; /* a summary's one response; ctx is the state */
    httpstream_ok_fn *ok;          /* content and usage once a handler said DONE */
} netprovider_spec_t;

/* The start function of a network provider (provider.h): checks the API key (a key with a
 * control character ends the call at once, not retryable, with nothing sent), builds the URL,
 * headers and body from spec and runs the exchange (httpstream_exchange) on the call's loop. */
void netprovider_start(const netprovider_spec_t *spec, provider_call_t *call,
                       const provider_request_t *req);

#endif
