/*
 * hooks: the lifecycle hook dispatcher (ARCHITECTURE.md §7.10), shared by the worker and the
 * gateway. It POSTs one signed JSON event to the deployment's consumer (CHATFLEET_HOOKS_URL)
 * and hands back the consumer's validated decision, either as a transfer on the owner's event
 * loop (hooks_dispatch: the worker's, so a dispatch holds neither a thread nor a database
 * connection) or blocking on the calling thread (hooks_call: the gateway's request pool).
 * Hooks fail closed: no answer, a timeout, a non-2xx status or an invalid answer is a failed
 * dispatch, and the caller stops the operation. Nothing about a dispatch is stored; the event
 * id is derived from durable state so a retry after takeover carries the same id.
 */
#ifndef CHATFLEET_HOOKS_H
#define CHATFLEET_HOOKS_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Answers over this many bytes are invalid (the consumer's answer is small). */
#define HOOKS_ANSWER_MAX_BYTES (64 * 1024)
/* The longest error sentence a failed dispatch carries. */
#define HOOKS_ERROR_MAX 256
/* An event id: the hex SHA-256 of the event's durable coordinates. */
#define HOOKS_EVENT_ID_LEN 64
/* The header carrying "sha256=<hex HMAC-SHA256(secret, body)>". */
#define HOOKS_SIGNATURE_HEADER "X-Chatfleet-Signature"

typedef enum {
    HOOKS_SESSION_START = 0,
    HOOKS_USER_PROMPT_SUBMIT,
    HOOKS_PRE_TOOL_USE,
    HOOKS_POST_TOOL_USE,
    HOOKS_PRE_COMPACT,
    HOOKS_POST_COMPACT,
    HOOKS_STOP,
    HOOKS_EVENT_COUNT
} hooks_event_t;

/* Which part of the cap a dispatch draws on: admitting new work into a chat, or work a chat
 * already admitted. The caller declares it; the event type does not determine it. */
typedef enum { HOOKS_ADMISSION = 0, HOOKS_ADMITTED } hooks_class_t;

typedef struct {
    char *url;             /* CHATFLEET_HOOKS_URL; NULL = hooks off */
    char *secret;          /* CHATFLEET_HOOKS_SECRET; required with a URL */
    int64_t timeout_ms;    /* CHATFLEET_HOOKS_TIMEOUT_MS, default 10000 */
    int64_t max_inflight;  /* CHATFLEET_HOOKS_MAX_INFLIGHT, default 64 */
    int64_t admission_max; /* CHATFLEET_HOOKS_ADMISSION_MAX, default max_inflight / 2, and
                              below the gateway's request threads (hooks_config_read) */
} hooks_config_t;

typedef enum {
    HOOKS_OK = 0,      /* the consumer answered validly */
    HOOKS_E_BUSY,      /* admission only: its share of the dispatch cap is taken */
    HOOKS_E_TRANSPORT, /* no connection, a timeout, a non-2xx status */
    HOOKS_E_INVALID    /* the answer is not a valid decision for this event */
} hooks_rc_t;

/* The outcome of one dispatch. Owned by the dispatcher; valid during the done callback. */
typedef struct {
    hooks_rc_t rc;
    bool deny;                   /* "decision":"deny" (pre_tool_use, user_prompt_submit) */
    const char *reason;          /* "reason", or NULL */
    const json_t *input;         /* "input" override (tool input object or prompt string) */
    const char *model_context;   /* "model_context": for the model only, or NULL */
    const char *user_context;    /* "user_context": shown to the user, or NULL */
    char error[HOOKS_ERROR_MAX]; /* why rc != HOOKS_OK, one sentence */
} hooks_result_t;

typedef void(hooks_done_fn)(void *arg, const hooks_result_t *result);

typedef struct hooks hooks_t;

/* The event loop hooks_dispatch runs its transfers on (the worker's; hookstep_runner). post
 * may be called from any thread and runs fn(arg) on the loop's thread; curl_add is called on
 * the loop's thread only and runs done(arg, result) there when the transfer ends. */
typedef void(hooks_fn)(void *arg);
typedef void(hooks_curl_done_fn)(void *arg, CURLcode result);
typedef struct {
    void *ctx;
    void (*post)(void *ctx, hooks_fn *fn, void *arg);
    void (*curl_add)(void *ctx, CURL *easy, hooks_curl_done_fn *done, void *arg);
} hooks_runner_t;

/* Reads CHATFLEET_HOOKS_* into *out. threads is the number of request threads a blocking
 * caller runs hooks_call on (the gateway's CHATFLEET_HTTP_THREADS; ARCHITECTURE.md §7.10),
 * or 0 for a caller that never blocks (the worker). With threads > 0 the admission share
 * defaults to the smaller of max_inflight / 2 and threads / 2 (at least 1), and a share that
 * is not below threads is refused while hooks are on, naming both settings: a slow consumer
 * could otherwise hold every request thread. A URL that is not http(s) or holds a control
 * character, and a secret that holds one, are refused naming the variable. Returns 0, or -1
 * with the variable and why in err. The caller frees with hooks_config_clear. */
int hooks_config_read(hooks_config_t *out, int64_t threads, char *err, size_t err_size);
void hooks_config_clear(hooks_config_t *cfg);

/* A dispatcher with a copy of cfg, whose hooks_dispatch runs on runner (copied; NULL: only
 * hooks_call may be used). Never NULL. */
hooks_t *hooks_new(const hooks_config_t *cfg, const hooks_runner_t *runner);

/* Frees the dispatcher; call only after every dispatch's done ran. Safe on NULL; nulls. */
void hooks_destroy(hooks_t **self_p);

/* True when a URL is configured. */
bool hooks_enabled(const hooks_t *self);

/* Logs one hooks_config line (the secret redacted). */
void hooks_log_config(const hooks_t *self);

/* The event name on the wire ("pre_tool_use"). */
const char *hooks_event_name(hooks_event_t event);

/* Fills out with the event id of (chat, history_version, generation_attempt, event, tool call
 * id or NULL): the same coordinates always give the same id, on any worker. */
void hooks_event_id(const char *chat_id, int64_t history_version, int64_t attempt,
                    hooks_event_t event, const char *tool_call_id,
                    char out[HOOKS_EVENT_ID_LEN + 1]);

/* Writes "sha256=<hex>" of HMAC-SHA256(secret, body) into out (at least 72 bytes). Returns 0
 * or -1 when the library fails. */
int hooks_sign(const char *secret, const char *body, size_t len, char *out, size_t size);

/* Validates a consumer answer for event into *res, which keeps references into answer (the
 * caller keeps answer alive while it reads res). An empty object is "allow, nothing added".
 * Returns 0, or -1 with res->rc = HOOKS_E_INVALID and the field path in res->error. */
int hooks_answer_check(hooks_event_t event, const json_t *answer, hooks_result_t *res);

/* Dispatches event with the given id and payload (the event's own fields, borrowed) for chat.
 * done(arg, result) runs exactly once on the loop's thread, when the consumer answered or
 * failed. When the cap is taken, an admission dispatch ends at once with HOOKS_E_BUSY (its
 * share, CHATFLEET_HOOKS_ADMISSION_MAX, or the whole cap) while an admitted one waits, oldest
 * first, for a slot (it never waits on admission work beyond that share). An event id that
 * header.h refuses (a control character) ends it unsent with HOOKS_E_TRANSPORT. Any thread. */
void hooks_dispatch(hooks_t *self, hooks_class_t cls, hooks_event_t event, const char *event_id,
                    const char *chat_id, const json_t *payload, hooks_done_fn *done, void *arg);

/* Dispatches event like hooks_dispatch, but blocking on the calling thread for at most
 * CHATFLEET_HOOKS_TIMEOUT_MS (the gateway's request pool, ARCHITECTURE.md §7.10). It never
 * waits for a slot: with the cap (or, for admission, its share) taken it fails at once with
 * HOOKS_E_BUSY. A dispatcher uses hooks_dispatch or hooks_call, never both (a slot freed here
 * starts no waiting dispatch). Fills *res and returns res->rc; *answer (NULL when none) holds the
 * parsed answer res points into, which the caller json_decref's after reading res. */
hooks_rc_t hooks_call(hooks_t *self, hooks_class_t cls, hooks_event_t event, const char *event_id,
                      const char *chat_id, const json_t *payload, hooks_result_t *res,
                      json_t **answer);

/* Dispatches in flight now, per class, and admitted ones waiting for a slot (for status and
 * tests). */
void hooks_inflight(hooks_t *self, int64_t *admission, int64_t *admitted, int64_t *waiting);

#endif
