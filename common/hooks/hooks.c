/*
 * hooks: see hooks.h and ARCHITECTURE.md §7.10. A dispatch is one libcurl transfer, on the
 * owner's event loop or blocking on the caller's thread; the cap is counted under a mutex
 * because callers run on job threads.
 */
#include "hooks.h"
#include "hex.h"
#include "config.h"

#include "dynbuf.h"
#include "header.h"
#include "id.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "log.h"
#include "mem.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TIMEOUT_DEFAULT_MS 10000
#define S_INFLIGHT_DEFAULT   64

static const char *const s_names[HOOKS_EVENT_COUNT] = {
    "session_start", "user_prompt_submit", "pre_tool_use", "post_tool_use",
    "pre_compact",   "post_compact",       "stop"};

struct hooks {
    hooks_config_t cfg;
    hooks_runner_t runner; /* runner.curl_add NULL: hooks_call only */
    pthread_mutex_t mu;
    int64_t inflight[2]; /* per hooks_class_t, under mu */
    /* Admitted dispatches waiting for a slot, oldest first, under mu. */
    struct s_dispatch *wait_head;
    struct s_dispatch **wait_tail;
    int64_t waiting;
};

/* One dispatch, from hooks_dispatch to its done callback. */
typedef struct s_dispatch {
    struct s_dispatch *next; /* in the waiting list */
    hooks_t *hooks;
    hooks_class_t cls;
    hooks_event_t event;
    CURL *easy;
    struct curl_slist *hdrs;
    char *body;
    dynbuf_t answer; /* at most HOOKS_ANSWER_MAX_BYTES */
    bool too_large;
    hooks_result_t res;
    hooks_done_fn *done;
    void *arg;
} s_dispatch_t;

static char *s_env_str(const char *name) {
    const char *v = getenv(name);
    return v && *v ? mem_strdup(v) : NULL;
}

static int s_env_num(const char *name, int64_t dflt, int64_t *out, char *err, size_t err_size) {
    if (config_env_int(name, dflt, 1, out) != 0) {
        snprintf(err, err_size, "%s: must be a positive integer, got \"%s\"", name, getenv(name));
        return -1;
    }
    return 0;
}

int hooks_config_read(hooks_config_t *out, int64_t threads, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    out->url = s_env_str("CHATFLEET_HOOKS_URL");
    out->secret = s_env_str("CHATFLEET_HOOKS_SECRET");
    if (s_env_num("CHATFLEET_HOOKS_TIMEOUT_MS", S_TIMEOUT_DEFAULT_MS, &out->timeout_ms, err,
                  err_size) ||
        s_env_num("CHATFLEET_HOOKS_MAX_INFLIGHT", S_INFLIGHT_DEFAULT, &out->max_inflight, err,
                  err_size)) {
        hooks_config_clear(out);
        return -1;
    }
    int64_t half = out->max_inflight / 2 > 0 ? out->max_inflight / 2 : 1;
    if (threads > 0 && threads / 2 < half) {
        half = threads / 2 > 0 ? threads / 2 : 1;
    }
    if (s_env_num("CHATFLEET_HOOKS_ADMISSION_MAX", half, &out->admission_max, err, err_size)) {
        hooks_config_clear(out);
        return -1;
    }
    if (out->admission_max > out->max_inflight) {
        snprintf(err, err_size,
                 "CHATFLEET_HOOKS_ADMISSION_MAX: must not exceed "
                 "CHATFLEET_HOOKS_MAX_INFLIGHT");
        hooks_config_clear(out);
        return -1;
    }
    if (out->url && threads > 0 && out->admission_max >= threads) {
        snprintf(err, err_size,
                 "CHATFLEET_HOOKS_ADMISSION_MAX (%" PRId64 ") must be below CHATFLEET_HTTP_THREADS"
                 " (%" PRId64 "): admission hooks block a request thread each, and a slow"
                 " consumer would hold them all",
                 out->admission_max, threads);
        hooks_config_clear(out);
        return -1;
    }
    /* The URL goes into every request line and the secret signs every body: a control
     * character in either is a mistake (or an injection) to refuse here, not at first use. */
    if (out->url && !header_text_ok(out->url)) {
        snprintf(err, err_size, "CHATFLEET_HOOKS_URL: must not hold control characters");
        hooks_config_clear(out);
        return -1;
    }
    if (out->url && strncmp(out->url, "http://", 7) && strncmp(out->url, "https://", 8)) {
        snprintf(err, err_size, "CHATFLEET_HOOKS_URL: must be an http:// or https:// URL");
        hooks_config_clear(out);
        return -1;
    }
    if (out->secret && !header_text_ok(out->secret)) {
        snprintf(err, err_size, "CHATFLEET_HOOKS_SECRET: must not hold control characters");
        hooks_config_clear(out);
        return -1;
    }
    if (out->url && !out->secret) {
        snprintf(err, err_size, "CHATFLEET_HOOKS_SECRET: required when CHATFLEET_HOOKS_URL is set");
        hooks_config_clear(out);
        return -1;
    }
    return 0;
}

void hooks_config_clear(hooks_config_t *cfg) {
    free(cfg->url);
    free(cfg->secret);
    cfg->url = NULL;
    cfg->secret = NULL;
}

hooks_t *hooks_new(const hooks_config_t *cfg, const hooks_runner_t *runner) {
    hooks_t *self = mem_calloc(1, sizeof *self);
    self->cfg = *cfg;
    self->cfg.url = cfg->url ? mem_strdup(cfg->url) : NULL;
    self->cfg.secret = cfg->secret ? mem_strdup(cfg->secret) : NULL;
    if (runner) {
        self->runner = *runner;
    }
    self->wait_tail = &self->wait_head;
    pthread_mutex_init(&self->mu, NULL);
    return self;
}

void hooks_destroy(hooks_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    hooks_t *self = *self_p;
    hooks_config_clear(&self->cfg);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

bool hooks_enabled(const hooks_t *self) {
    return self && self->cfg.url;
}

void hooks_log_config(const hooks_t *self) {
    log_info("hooks_config",
             "url=%s secret=%s timeout_ms=%" PRId64 " max_inflight=%" PRId64
             " admission_max=%" PRId64,
             self->cfg.url ? self->cfg.url : "off", self->cfg.secret ? "***" : "none",
             self->cfg.timeout_ms, self->cfg.max_inflight, self->cfg.admission_max);
}

const char *hooks_event_name(hooks_event_t event) {
    return event < HOOKS_EVENT_COUNT ? s_names[event] : "unknown";
}

void hooks_event_id(const char *chat_id, int64_t history_version, int64_t attempt,
                    hooks_event_t event, const char *tool_call_id,
                    char out[HOOKS_EVENT_ID_LEN + 1]) {
    /* Newline-separated coordinates: none of them can hold a newline that matters, and the
     * tool call id comes last so its content cannot shift the others. */
    char *text = mem_printf("%s\n%" PRId64 "\n%" PRId64 "\n%s\n%s", chat_id, history_version,
                            attempt, hooks_event_name(event), tool_call_id ? tool_call_id : "");
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    int ok = EVP_Digest(text, strlen(text), md, &md_len, EVP_sha256(), NULL);
    ASSERT(ok == 1 && md_len == 32);
    free(text);
    hex_encode(md, md_len, out);
}

int hooks_sign(const char *secret, const char *body, size_t len, char *out, size_t size) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    if (size < 7 + 64 + 1 || !HMAC(EVP_sha256(), secret, (int)strlen(secret),
                                   (const unsigned char *)body, len, mac, &mac_len)) {
        return -1;
    }
    memcpy(out, "sha256=", 7);
    hex_encode(mac, mac_len, out + 7);
    return 0;
}

static int s_invalid(hooks_result_t *res, const char *fmt, const char *field) {
    res->rc = HOOKS_E_INVALID;
    snprintf(res->error, sizeof res->error, fmt, field);
    return -1;
}

int hooks_answer_check(hooks_event_t event, const json_t *answer, hooks_result_t *res) {
    memset(res, 0, sizeof *res);
    if (!json_is_object(answer)) {
        return s_invalid(res, "hook answer: must be a JSON object%s", "");
    }
    bool decides = event == HOOKS_PRE_TOOL_USE || event == HOOKS_USER_PROMPT_SUBMIT;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)answer, key, v) {
        if (!strcmp(key, "decision")) {
            if (!decides) {
                return s_invalid(res, "hook answer: decision: not accepted on %s",
                                 hooks_event_name(event));
            }
            const char *d = json_string_value(v);
            if (!d || (strcmp(d, "allow") && strcmp(d, "deny"))) {
                return s_invalid(res, "hook answer: decision: must be \"allow\" or \"deny\"%s", "");
            }
            res->deny = !strcmp(d, "deny");
        } else if (!strcmp(key, "input")) {
            if (!decides) {
                return s_invalid(res, "hook answer: input: not accepted on %s",
                                 hooks_event_name(event));
            }
            if (event == HOOKS_PRE_TOOL_USE ? !json_is_object(v) : !json_is_string(v)) {
                return s_invalid(res, "hook answer: input: must be %s",
                                 event == HOOKS_PRE_TOOL_USE ? "an object" : "a string");
            }
            res->input = v;
        } else if (!strcmp(key, "reason") || !strcmp(key, "model_context") ||
                   !strcmp(key, "user_context")) {
            if (!json_is_string(v)) {
                return s_invalid(res, "hook answer: %s: must be a string", key);
            }
            const char *s = json_string_value(v);
            if (key[0] == 'r') {
                res->reason = s;
            } else if (key[0] == 'm') {
                res->model_context = s;
            } else {
                res->user_context = s;
            }
        } else {
            return s_invalid(res, "hook answer: %s: unknown field", key);
        }
    }
    if (res->deny && res->input) {
        return s_invalid(res, "hook answer: input: not accepted with a deny decision%s", "");
    }
    res->rc = HOOKS_OK;
    return 0;
}

static size_t s_on_body(char *ptr, size_t size, size_t n, void *arg) {
    s_dispatch_t *d = arg;
    size_t bytes = size * n;
    if (dynbuf_add(&d->answer, ptr, bytes) != 0) {
        d->too_large = true;
        return 0; /* ends the transfer with an error */
    }
    return bytes;
}

static void s_on_done(void *arg, CURLcode result);

/* Whether a dispatch of cls fits in the cap now; under mu. */
static bool s_room(const hooks_t *self, hooks_class_t cls) {
    int64_t total = self->inflight[HOOKS_ADMISSION] + self->inflight[HOOKS_ADMITTED];
    return total < self->cfg.max_inflight &&
           (cls == HOOKS_ADMITTED || self->inflight[HOOKS_ADMISSION] < self->cfg.admission_max);
}

/* Gives a slot back and starts the oldest waiting dispatch that now fits (loop thread). */
static void s_release(hooks_t *self, hooks_class_t cls) {
    pthread_mutex_lock(&self->mu);
    self->inflight[cls]--;
    s_dispatch_t *next = NULL;
    if (self->wait_head && s_room(self, HOOKS_ADMITTED)) {
        next = self->wait_head;
        self->wait_head = next->next;
        if (!self->wait_head) {
            self->wait_tail = &self->wait_head;
        }
        self->waiting--;
        self->inflight[HOOKS_ADMITTED]++;
    }
    pthread_mutex_unlock(&self->mu);
    if (next) {
        self->runner.curl_add(self->runner.ctx, next->easy, s_on_done, next);
    }
}

/* Runs done, logs a failure once, releases the slot (when one was taken) and frees d. */
static void s_finish(s_dispatch_t *d, bool held) {
    if (d->res.rc != HOOKS_OK) {
        char q[HOOKS_ERROR_MAX + 8];
        log_warn("hook_failed", "hook=%s error=%s", hooks_event_name(d->event),
                 log_quote(d->res.error, q, sizeof q));
    }
    if (held) {
        s_release(d->hooks, d->cls); /* first, so done may dispatch again */
    }
    d->done(d->arg, &d->res);
    if (d->easy) {
        curl_easy_cleanup(d->easy);
    }
    curl_slist_free_all(d->hdrs);
    free(d->body);
    dynbuf_free(&d->answer);
    free(d);
}

/* Ends a dispatch that never took a slot: the cap was taken, or its request was refused. */
static void s_busy(void *arg) {
    s_finish(arg, false);
}

/* Reads the ended transfer of d into d->res; returns the parsed answer res points into (the
 * caller frees it after res is read), or NULL. */
static json_t *s_conclude(s_dispatch_t *d, CURLcode result) {
    long status = 0;
    curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &status);
    json_t *answer = NULL;
    if (result != CURLE_OK) {
        d->res.rc = HOOKS_E_TRANSPORT;
        snprintf(d->res.error, sizeof d->res.error, "hook consumer: %s",
                 d->too_large ? "answer over 64 KiB" : curl_easy_strerror(result));
    } else if (status < 200 || status > 299) {
        d->res.rc = HOOKS_E_TRANSPORT;
        snprintf(d->res.error, sizeof d->res.error, "hook consumer: HTTP status %ld", status);
    } else if (d->answer.len == 0) {
        answer = json_object(); /* an empty 2xx answer allows and adds nothing */
        hooks_answer_check(d->event, answer, &d->res);
    } else {
        jsonstrict_error_t err;
        if (jsonstrict_parse(dynbuf_str(&d->answer), d->answer.len, NULL, &answer, &err)) {
            d->res.rc = HOOKS_E_INVALID;
            snprintf(d->res.error, sizeof d->res.error, "hook answer: %.120s at %.100s",
                     err.message, err.path[0] ? err.path : "/");
        } else {
            hooks_answer_check(d->event, answer, &d->res);
        }
    }
    return answer;
}

static void s_on_done(void *arg, CURLcode result) {
    s_dispatch_t *d = arg;
    json_t *answer = s_conclude(d, result);
    s_finish(d, true);
    json_decref(answer); /* after done: res pointed into it */
}

static void s_start(void *arg) {
    s_dispatch_t *d = arg;
    d->hooks->runner.curl_add(d->hooks->runner.ctx, d->easy, s_on_done, d);
}

/* A dispatch of event with its signed body and its transfer, not started. */
static s_dispatch_t *s_prepare(hooks_t *self, hooks_class_t cls, hooks_event_t event,
                               const char *event_id, const char *chat_id, const json_t *payload) {
    s_dispatch_t *d = mem_calloc(1, sizeof *d);
    d->hooks = self;
    d->cls = cls;
    d->event = event;
    dynbuf_init(&d->answer, HOOKS_ANSWER_MAX_BYTES);
    /* sent_at is the wall clock, signed with the body: a consumer rejects a replay by it
     * (deploy/OPERATIONS.md, "Hooks"). */
    char sent_at[ID_RFC3339_MS_LEN + 1];
    id_wall_rfc3339_ms(sent_at);
    json_t *body =
        json_pack("{s:s, s:s, s:s, s:s, s:O}", "event_id", event_id, "event",
                  hooks_event_name(event), "chat_id", chat_id, "sent_at", sent_at, "data", payload);
    ASSERT(body);
    d->body = jsonout_dumps(body); /* numbers as their literals (jsonnumber.h) */
    json_decref(body);
    ASSERT(d->body);
    char sig[96];
    int rc = hooks_sign(self->cfg.secret, d->body, strlen(d->body), sig, sizeof sig);
    ASSERT(rc == 0);
    /* Every header goes through header.h, which refuses a control character: the event id
     * comes from the caller, and a refused one fails the dispatch unsent. */
    if (header_append(&d->hdrs, "Content-Type", "application/json") != 0 ||
        header_append(&d->hdrs, HOOKS_SIGNATURE_HEADER, sig) != 0 ||
        header_append(&d->hdrs, "X-Chatfleet-Event-Id", event_id) != 0 ||
        header_append(&d->hdrs, "Expect", "") != 0) {
        d->res.rc = HOOKS_E_TRANSPORT;
        snprintf(d->res.error, sizeof d->res.error,
                 "hook request refused: the event id is not a valid header value");
        return d; /* no transfer: the caller ends it unsent */
    }
    d->easy = curl_easy_init();
    ASSERT(d->easy);
    curl_easy_setopt(d->easy, CURLOPT_URL, self->cfg.url);
    curl_easy_setopt(d->easy, CURLOPT_HTTPHEADER, d->hdrs);
    curl_easy_setopt(d->easy, CURLOPT_POSTFIELDS, d->body);
    curl_easy_setopt(d->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(d->body));
    curl_easy_setopt(d->easy, CURLOPT_TIMEOUT_MS, (long)self->cfg.timeout_ms);
    curl_easy_setopt(d->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(d->easy, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(d->easy, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(d->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    return d;
}

void hooks_dispatch(hooks_t *self, hooks_class_t cls, hooks_event_t event, const char *event_id,
                    const char *chat_id, const json_t *payload, hooks_done_fn *done, void *arg) {
    ASSERT(self->runner.curl_add && self->runner.post);
    s_dispatch_t *d = s_prepare(self, cls, event, event_id, chat_id, payload);
    d->done = done;
    d->arg = arg;
    if (!d->easy) {
        self->runner.post(self->runner.ctx, s_busy, d); /* refused: ends unsent, no slot */
        return;
    }
    /* Admission takes a slot of its share or is refused; admitted work waits for a slot,
     * which frees within the timeout of a dispatch in flight. */
    pthread_mutex_lock(&self->mu);
    bool room = s_room(self, cls);
    bool wait = !room && cls == HOOKS_ADMITTED;
    if (room) {
        self->inflight[cls]++;
    } else if (wait) {
        *self->wait_tail = d;
        self->wait_tail = &d->next;
        self->waiting++;
    }
    pthread_mutex_unlock(&self->mu);
    if (room) {
        self->runner.post(self->runner.ctx, s_start, d);
    } else if (!wait) {
        d->res.rc = HOOKS_E_BUSY;
        snprintf(d->res.error, sizeof d->res.error, "hook dispatch cap reached (admission)");
        self->runner.post(self->runner.ctx, s_busy, d);
    }
}

/* The done of a blocking call: hands the result to the caller's copy. */
static void s_call_done(void *arg, const hooks_result_t *res) {
    *(hooks_result_t *)arg = *res;
}

hooks_rc_t hooks_call(hooks_t *self, hooks_class_t cls, hooks_event_t event, const char *event_id,
                      const char *chat_id, const json_t *payload, hooks_result_t *res,
                      json_t **answer) {
    s_dispatch_t *d = s_prepare(self, cls, event, event_id, chat_id, payload);
    d->done = s_call_done;
    d->arg = res;
    *answer = NULL;
    if (!d->easy) {
        s_finish(d, false); /* refused: ends unsent, no slot */
        return res->rc;
    }
    pthread_mutex_lock(&self->mu);
    bool room = s_room(self, cls);
    if (room) {
        self->inflight[cls]++;
    }
    pthread_mutex_unlock(&self->mu);
    if (!room) {
        d->res.rc = HOOKS_E_BUSY;
        snprintf(d->res.error, sizeof d->res.error, "hook dispatch cap reached");
        s_finish(d, false);
        return res->rc;
    }
    *answer = s_conclude(d, curl_easy_perform(d->easy));
    s_finish(d, true);
    return res->rc;
}

void hooks_inflight(hooks_t *self, int64_t *admission, int64_t *admitted, int64_t *waiting) {
    pthread_mutex_lock(&self->mu);
    *waiting = self->waiting;
    *admission = self->inflight[HOOKS_ADMISSION];
    *admitted = self->inflight[HOOKS_ADMITTED];
    pthread_mutex_unlock(&self->mu);
}
