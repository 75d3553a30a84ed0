/*
 * httpstream: what the network providers (openai, anthropic, ollama) share: an incremental
 * splitter for Server-Sent Events and NDJSON that accepts bytes cut at any boundary, a
 * streaming HTTP POST over libcurl on an event loop (evloop.h) that feeds it, and the helpers that
 * turn the outcome into a classified provider failure (worker/providers/README.md,
 * "Classification").
 *
 * The splitter follows the WHATWG event-stream algorithm (worker/providers/README.md): lines end
 * with LF, CRLF or CR; "field: value" with one leading space stripped; several data lines
 * joined with LF; comments ignored; a blank line dispatches. In NDJSON mode every non-blank
 * line is one record. Each line is bounded by the line cap given at creation.
 * Calls share no state (curl_global_init runs once); a call lives on its loop's thread.
 */
#ifndef CHATFLEET_HTTPSTREAM_H
#define CHATFLEET_HTTPSTREAM_H

#include "evloop.h"
#include "jsonstrict.h"
#include "provider.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTPSTREAM_LINE_MAX_BYTES     (1024 * 1024) /* one SSE line / data field, one NDJSON line */
#define HTTPSTREAM_ERROR_BODY_BYTES   8192          /* kept of a non-2xx response body */
#define HTTPSTREAM_CONNECT_TIMEOUT_MS 10000         /* TCP + TLS connect */
#define HTTPSTREAM_IDLE_TIMEOUT_S     120           /* no byte at all for this long: give up */
#define HTTPSTREAM_TOTAL_TIMEOUT_MS   (600 * 1000)  /* a whole call, like the official SDKs */
#define HTTPSTREAM_RECV_BUFFER_BYTES  1024 /* libcurl's smallest receive buffer per transfer */
#define HTTPSTREAM_RETRY_AFTER_MAX_MS (3600 * 1000) /* a longer retry-after is clamped to this */
#define HTTPSTREAM_NET_ERROR_BYTES    256           /* libcurl's CURL_ERROR_SIZE */
#define HTTPSTREAM_CALL_ID_BYTES      48            /* a generated tool-call id, NUL included */

/* HTTPSTREAM_WHOLE: a non-streaming response; the whole body (bounded by the line cap) is one
 * event, dispatched when the body ends. */
typedef enum { HTTPSTREAM_SSE, HTTPSTREAM_NDJSON, HTTPSTREAM_WHOLE } httpstream_mode_t;

/* What an event handler tells the stream. */
typedef enum {
    HTTPSTREAM_CONTINUE = 0,
    HTTPSTREAM_DONE,  /* the provider's terminal event arrived: stop reading, success */
    HTTPSTREAM_ABORT, /* the handler recorded a failure: stop reading */
} httpstream_verdict_t;

/* One dispatched event. SSE: event is the event name ("" when the stream named none) and
 * data the joined data lines. NDJSON: event is "" and data is one line. data is
 * NUL-terminated at data[len] and only valid during the call. */
typedef httpstream_verdict_t(httpstream_event_fn)(void *ctx, const char *event, const char *data,
                                                  size_t len);

typedef struct httpstream httpstream_t;

/* A splitter in mode, dispatching to fn. Lines longer than line_max bytes are an error.
 * Never NULL (aborts on exhaustion). */
httpstream_t *httpstream_new(httpstream_mode_t mode, size_t line_max, httpstream_event_fn *fn,
                             void *ctx);
void httpstream_destroy(httpstream_t **self_p);

/* Feeds len bytes. Returns HTTPSTREAM_CONTINUE, the handler's DONE or ABORT (later bytes are
 * then ignored), or -1 when a line exceeded the cap (sticky). */
int httpstream_feed(httpstream_t *self, const char *data, size_t len);

/* End of input: an NDJSON line without its final newline is dispatched, and so is a WHOLE
 * body; an SSE event without its blank line is dropped, as WHATWG says. Returns like
 * httpstream_feed. */
int httpstream_finish(httpstream_t *self);

/* A call's HTTP request. headers is a NULL-terminated list of "Name: value". */
typedef struct {
    const char *url;
    const char *const *headers;
    const char *body;
    httpstream_mode_t mode;
    httpstream_event_fn *on_event; /* receives the events of a 2xx response */
    void *ctx;
} httpstream_request_t;

typedef enum {
    HTTPSTREAM_R_EOF = 0,    /* a 2xx body ended without the handler saying DONE */
    HTTPSTREAM_R_DONE,       /* the handler said DONE */
    HTTPSTREAM_R_ABORTED,    /* the handler said ABORT */
    HTTPSTREAM_R_HTTP_ERROR, /* a non-2xx status; see status and error_body */
    HTTPSTREAM_R_NET,        /* connect, read or timeout failure; see error */
    HTTPSTREAM_R_OVERSIZE,   /* a line over HTTPSTREAM_LINE_MAX_BYTES */
} httpstream_rc_t;

typedef struct {
    int status;             /* final HTTP status, 0 before any */
    int64_t retry_after_ms; /* retry-after-ms or retry-after, -1 if absent */
    int should_retry;       /* x-should-retry: 1 true, 0 false, -1 absent */
    char *error_body;       /* start of a non-2xx body (HTTPSTREAM_ERROR_BODY_BYTES at most),
                               NUL-terminated, or NULL when none came; freed with the call */
    char error[HTTPSTREAM_NET_ERROR_BYTES]; /* libcurl's message for HTTPSTREAM_R_NET */
} httpstream_result_t;

typedef struct httpstream_call httpstream_call_t;

/* Receives the outcome of a call; res is valid during the call only. */
typedef void(httpstream_done_fn)(void *arg, httpstream_rc_t rc, const httpstream_result_t *res);

/* POSTs req on loop (from its thread) and streams a 2xx body through a splitter into
 * req->on_event; done runs once on the loop's thread when the transfer ends, never before
 * this returns. req's strings are copied (the body is released once it is sent and the response
 * begins, httpstream_request_bytes_held). The handle is valid until done runs. Every header is
 * built through header.h (common/net): when the URL or a header holds a control character (or
 * a header line is not "Name: value") nothing is sent, done never runs, and this returns NULL
 * with why (bounded by why_size; a header's value is not quoted, it may be a credential). */
httpstream_call_t *httpstream_start(evloop_t *loop, const httpstream_request_t *req,
                                    httpstream_done_fn *done, void *arg, char *why,
                                    size_t why_size);

/* Ends a call whose done has not run, without running it. */
void httpstream_stop(httpstream_call_t *call);

/* The request body bytes that calls in flight hold, process-wide: a call holds its body from
 * httpstream_start until its response begins (its first header line) or it ends, whichever is
 * first, once all of it is sent; a stream that lasts a minute holds no request body. */
size_t httpstream_request_bytes_held(void);

/* Parses a retry-after value: seconds (integer or decimal) or an HTTP-date. Returns
 * milliseconds (0 for a date in the past), or -1 when it is neither. */
int64_t httpstream_retry_after_ms(const char *value, int64_t now_epoch_s);

/* Turns a call that did not succeed into a classified failure in out (provider.h) and
 * returns PROVIDER_ERROR. who names the provider in the message. HTTPSTREAM_R_EOF is a truncated
 * stream (retryable). */
provider_rc_t httpstream_fail(const char *who, httpstream_rc_t rc, const httpstream_result_t *res,
                              provider_result_t *out);

/* Caps for one streamed event's JSON (the provider's envelope, not the model's values). */
extern const jsonstrict_limits_t httpstream_event_limits;

/* Parses one event's JSON text strictly; NULL (and a logged warning) when it is not JSON. */
json_t *httpstream_parse_event(const char *who, const char *data, size_t len);

/* A new tool-call part {"type":"tool-call","tool_call_id","tool_name","args_text"} holding
 * the argument bytes the model produced, unparsed (len 0 means "{}"); the generation task
 * screens them before anything is stored (provider.h). Bytes that are not UTF-8 become a
 * placeholder text that the screen refuses. */
json_t *httpstream_tool_call(const char *id, const char *name, const char *args, size_t len);

/* Records the provider's stop reason in out->finish in chatfleet's words: stop, tool_calls,
 * length, content_filter or refusal. A reason it does not know counts as length (truncated),
 * so an attempt that did not end plainly can never yield a structured candidate. */
void httpstream_stop_reason(provider_result_t *out, const char *reason);

/* The messages array of the OpenAI-style chat wire (OpenAI, Ollama): system rows as text, user
 * rows through user(m), assistant rows through assistant(m), tool rows through
 * tool_results(out, m) (which appends one message per result). New reference. */
json_t *httpstream_chat_messages(const json_t *history, json_t *(*user)(const json_t *m),
                                 json_t *(*assistant)(const json_t *m),
                                 void (*tool_results)(json_t *out, const json_t *m));

/* The file kinds a wire format takes in a user message (a bit set for httpstream_user_part). */
#define HTTPSTREAM_TAKES_IMAGE 1u /* image/png, image/jpeg, image/gif, image/webp */
#define HTTPSTREAM_TAKES_PDF   2u /* application/pdf */

/* How one part of a user message goes on a wire. A file part is
 * {"type":"file","file_id","media_type","name","data": standard base64} (the worker's history
 * loader inlines text files and replaces expired ones before a provider sees them). */
typedef enum {
    HTTPSTREAM_PART_SKIP = 0,    /* neither a text nor a file part */
    HTTPSTREAM_PART_TEXT,        /* a text part: send its "text" */
    HTTPSTREAM_PART_IMAGE,       /* an image the wire takes: media_type and data */
    HTTPSTREAM_PART_PDF,         /* a PDF the wire takes: name and data */
    HTTPSTREAM_PART_PLACEHOLDER, /* a file the wire does not take: send the placeholder text */
} httpstream_part_kind_t;

/* What part of a user message is on a wire that takes the file kinds in takes. A file part is
 * never SKIP: one of another media type, of a kind not in takes or without data is a
 * PLACEHOLDER, so that nothing is dropped silently. */
httpstream_part_kind_t httpstream_user_part(const json_t *part, unsigned takes);

/* Whether msg (a history message) holds a file part. */
bool httpstream_has_files(const json_t *msg);

/* "data:<media_type>;base64,<data>" of a file part. Caller frees. */
char *httpstream_data_url(const json_t *part);

/* The text sent instead of a file part the wire does not take:
 * "[attachment <name> (<media_type>) is not supported by this model]" (the file_id stands for
 * a missing name). Caller frees. */
char *httpstream_file_placeholder(const json_t *part);

/* [{"type":"function","function":{"name","description","parameters"}}] for tools (an absent
 * input schema becomes {"type":"object"}). New reference. */
json_t *httpstream_function_tools(const json_t *tools);

/* Sends part to on_part (when set) as compact JSON text. */
void httpstream_emit(provider_part_fn *on_part, void *ctx, const json_t *part);

/* base_url (or dflt when NULL or empty) without trailing slashes, followed by path. Caller
 * frees. */
char *httpstream_url(const char *base_url, const char *dflt, const char *path);

/* The text of a history part's tool result, as the providers want it: a JSON string result
 * as is, any other value as compact JSON. Caller frees. */
char *httpstream_result_text(const json_t *part);

/* Records an error event that arrived inside a 2xx stream: err is the provider's error
 * value ({"type"|"code","message"} or a plain string). Retryable unless its type or code
 * says the request itself is wrong (invalid_request_error, authentication_error, ...).
 * Returns HTTPSTREAM_ABORT for the event handler to return. */
httpstream_verdict_t httpstream_stream_error(const char *who, const json_t *err,
                                             provider_result_t *out);

/* The concatenated "text" parts of a history message. Caller frees. */
char *httpstream_text_of(const json_t *msg);

/* The credential header "name: prefix key" in *header for model's non-empty key (NULL for
 * none). Returns 0, or -1 when the key holds a control character (a key with a newline would
 * inject headers): the error is logged once naming the model and its api_key_env, and out
 * holds a non-retryable failure that says the same (never the key). Caller frees *header. This
 * is the one place a resolved key is checked; httpstream_start refuses the line again. */
int httpstream_key_header(const char *who, const provider_model_t *model, const char *name,
                          const char *prefix, char **header, provider_result_t *out);

/* Fills out->content and usage from a provider's state once its stream said DONE. */
typedef void(httpstream_ok_fn)(void *state, provider_result_t *out);

/* One provider call over HTTP: writes body (jsonout) into req's body, POSTs it on the call's
 * loop and streams the 2xx response into req.on_event (whose ctx is state). The call ends
 * (provider_call_end) with PROVIDER_OK after ok(state, &call->out) when the handler said
 * DONE, else with the classified failure (httpstream_fail). state is freed with state_free
 * when the call ends or is cancelled. */
void httpstream_exchange(provider_call_t *call, const char *who, httpstream_request_t req,
                         const json_t *body, httpstream_ok_fn *ok, void *state,
                         void (*state_free)(void *state));

/* A fresh tool-call id "call_<32 hex digits>" for providers that send none. */
void httpstream_call_id(char out[HTTPSTREAM_CALL_ID_BYTES]);

#endif
