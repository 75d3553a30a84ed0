/* httpstream: see httpstream.h. */
#include "httpstream.h"
#include "dynbuf.h"
#include "header.h"
#include "id.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

_Static_assert(HTTPSTREAM_NET_ERROR_BYTES >= CURL_ERROR_SIZE, "curl error buffer too small");

#define S_EVENT_NAME_BYTES 64 /* an SSE event name longer than this is truncated */

/* --- The splitter. --- */

struct httpstream {
    httpstream_mode_t mode;
    httpstream_event_fn *fn;
    void *ctx;
    dynbuf_t line; /* the line being read (WHOLE: the body), at most the line cap */
    bool last_cr;  /* the previous byte ended a line with CR: a following LF belongs to it */
    dynbuf_t data; /* SSE: the data lines of the pending event, at most the line cap */
    bool has_data;
    char event[S_EVENT_NAME_BYTES];
    int state; /* HTTPSTREAM_CONTINUE, a sticky DONE or ABORT, or -1 (oversize) */
};

httpstream_t *httpstream_new(httpstream_mode_t mode, size_t line_max, httpstream_event_fn *fn,
                             void *ctx) {
    httpstream_t *self = mem_calloc(1, sizeof *self);
    self->mode = mode;
    dynbuf_init(&self->line, line_max);
    dynbuf_init(&self->data, line_max);
    self->fn = fn;
    self->ctx = ctx;
    return self;
}

void httpstream_destroy(httpstream_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    dynbuf_free(&(*self_p)->line);
    dynbuf_free(&(*self_p)->data);
    free(*self_p);
    *self_p = NULL;
}

static int s_dispatch(httpstream_t *self, const char *event, const char *data, size_t len) {
    int v = self->fn(self->ctx, event, data, len);
    if (v != HTTPSTREAM_CONTINUE) {
        self->state = v;
    }
    return self->state;
}

static int s_sse_field(httpstream_t *self, const char *line, size_t len) {
    const char *colon = memchr(line, ':', len);
    size_t flen = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t vlen = len - (size_t)(value - line);
    if (vlen > 0 && value[0] == ' ') {
        value++;
        vlen--;
    }
    if (flen == 4 && !memcmp(line, "data", 4)) {
        if (self->has_data && dynbuf_add(&self->data, "\n", 1) != 0) {
            return -1;
        }
        self->has_data = true;
        return dynbuf_add(&self->data, value, vlen);
    }
    if (flen == 5 && !memcmp(line, "event", 5)) {
        size_t n = vlen < sizeof self->event - 1 ? vlen : sizeof self->event - 1;
        memcpy(self->event, value, n);
        self->event[n] = '\0';
    }
    return 0; /* id, retry and unknown fields do not matter to a provider client */
}

static int s_sse_line(httpstream_t *self, const char *line, size_t len) {
    if (len == 0) {
        int rc = HTTPSTREAM_CONTINUE;
        if (self->has_data) {
            rc = s_dispatch(self, self->event, dynbuf_str(&self->data), self->data.len);
        }
        dynbuf_reset(&self->data);
        self->has_data = false;
        self->event[0] = '\0';
        return rc;
    }
    if (line[0] == ':') {
        return HTTPSTREAM_CONTINUE;
    }
    if (s_sse_field(self, line, len)) {
        self->state = -1;
    }
    return self->state;
}

static int s_ndjson_line(httpstream_t *self, const char *line, size_t len) {
    size_t lead = 0;
    while (lead < len && (line[lead] == ' ' || line[lead] == '\t')) {
        lead++;
    }
    if (lead == len) {
        return HTTPSTREAM_CONTINUE;
    }
    return s_dispatch(self, "", line, len);
}

/* The line read so far is complete: it is handled, then the buffer is emptied for the next. */
static int s_line(httpstream_t *self) {
    const char *line = dynbuf_str(&self->line);
    size_t len = self->line.len;
    int rc =
        self->mode == HTTPSTREAM_SSE ? s_sse_line(self, line, len) : s_ndjson_line(self, line, len);
    dynbuf_reset(&self->line);
    return rc;
}

int httpstream_feed(httpstream_t *self, const char *data, size_t len) {
    if (self->mode == HTTPSTREAM_WHOLE) {
        if (self->state == HTTPSTREAM_CONTINUE && dynbuf_add(&self->line, data, len) != 0) {
            self->state = -1;
        }
        return self->state;
    }
    size_t i = 0;
    while (i < len && self->state == HTTPSTREAM_CONTINUE) {
        if (self->last_cr && data[i] == '\n') {
            i++;
        }
        self->last_cr = false;
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r') {
            j++;
        }
        if (dynbuf_add(&self->line, data + i, j - i) != 0) {
            self->state = -1;
            break;
        }
        if (j == len) {
            break;
        }
        self->last_cr = data[j] == '\r';
        i = j + 1;
        s_line(self);
    }
    return self->state;
}

int httpstream_finish(httpstream_t *self) {
    if (self->state != HTTPSTREAM_CONTINUE) {
        return self->state;
    }
    if (self->mode == HTTPSTREAM_NDJSON && self->line.len > 0) {
        s_line(self);
    } else if (self->mode == HTTPSTREAM_WHOLE) {
        s_dispatch(self, "", dynbuf_str(&self->line), self->line.len);
    }
    return self->state;
}

/* --- The HTTP call. --- */

static pthread_once_t s_curl_once = PTHREAD_ONCE_INIT;

/* The request bytes every call in flight still holds (httpstream_request_bytes_held). */
static atomic_size_t s_body_bytes_held;

static void s_curl_init(void) {
    /* curl_global_init is not thread-safe on older libcurl; once per process, here. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("curl_global_init_failed", NULL);
    }
}

struct httpstream_call {
    evloop_t *loop;
    CURL *easy;
    struct curl_slist *hdrs; /* libcurl reads it, never copies it */
    char *body;              /* the same; NULL once sent (s_release_body) */
    size_t body_len;
    httpstream_t *split;
    httpstream_result_t out;
    size_t err_len;
    int verdict;
    httpstream_done_fn *done;
    void *arg;
};

int64_t httpstream_retry_after_ms(const char *value, int64_t now_epoch_s) {
    while (*value == ' ' || *value == '\t') {
        value++;
    }
    char *end = NULL;
    double secs = strtod(value, &end);
    if (end != value) {
        while (*end == ' ' || *end == '\t') {
            end++;
        }
        if (*end == '\0' && isfinite(secs) && secs >= 0) {
            double ms = secs * 1000.0;
            return ms > HTTPSTREAM_RETRY_AFTER_MAX_MS ? HTTPSTREAM_RETRY_AFTER_MAX_MS : (int64_t)ms;
        }
        return -1;
    }
    time_t t = curl_getdate(value, NULL);
    if (t == (time_t)-1) {
        return -1;
    }
    int64_t ms = ((int64_t)t - now_epoch_s) * 1000;
    if (ms < 0) {
        return 0;
    }
    return ms > HTTPSTREAM_RETRY_AFTER_MAX_MS ? HTTPSTREAM_RETRY_AFTER_MAX_MS : ms;
}

static void s_header_value(httpstream_call_t *c, const char *name, const char *value) {
    if (!strcasecmp(name, "retry-after-ms")) {
        char *end = NULL;
        double ms = strtod(value, &end);
        if (end != value && isfinite(ms) && ms >= 0) {
            c->out.retry_after_ms =
                ms > HTTPSTREAM_RETRY_AFTER_MAX_MS ? HTTPSTREAM_RETRY_AFTER_MAX_MS : (int64_t)ms;
        }
    } else if (!strcasecmp(name, "retry-after") && c->out.retry_after_ms < 0) {
        c->out.retry_after_ms = httpstream_retry_after_ms(value, (int64_t)time(NULL));
    } else if (!strcasecmp(name, "x-should-retry")) {
        c->out.should_retry = !strcasecmp(value, "true") ? 1 : !strcasecmp(value, "false") ? 0 : -1;
    }
}

/* Frees the request body once libcurl has sent all of it and the response has begun (this
 * runs from the response callbacks), so that a stream that lasts a minute does not hold its
 * request that long (ARCHITECTURE.md §6.5). libcurl sends a body over 64 KiB straight from
 * our buffer, so the upload count must have reached its end; and it reads the body again only
 * to re-send a request on a reused connection that answered nothing, to follow a redirect or
 * to negotiate auth: a response byte rules out the first, the others are never asked for. */
static void s_release_body(httpstream_call_t *c) {
    if (!c->body) {
        return;
    }
    curl_off_t sent = 0;
    if (curl_easy_getinfo(c->easy, CURLINFO_SIZE_UPLOAD_T, &sent) != CURLE_OK ||
        sent < (curl_off_t)c->body_len) {
        return;
    }
    atomic_fetch_sub(&s_body_bytes_held, c->body_len);
    free(c->body);
    c->body = NULL;
}

size_t httpstream_request_bytes_held(void) {
    return atomic_load(&s_body_bytes_held);
}

static size_t s_on_header(char *data, size_t size, size_t n, void *arg) {
    httpstream_call_t *c = arg;
    size_t len = size * n;
    s_release_body(c);
    char line[512]; /* longer header lines are cut; none that matters here is that long */
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, data, k);
    while (k > 0 && (line[k - 1] == '\r' || line[k - 1] == '\n' || line[k - 1] == ' ')) {
        k--;
    }
    line[k] = '\0';
    if (!strncmp(line, "HTTP/", 5)) {
        /* A new response (after 100 Continue or a redirect): forget the previous one's. */
        const char *sp = strchr(line, ' ');
        long st = sp ? strtol(sp + 1, NULL, 10) : 0;
        c->out.status = st >= 100 && st <= 999 ? (int)st : 0;
        c->out.retry_after_ms = -1;
        c->out.should_retry = -1;
        return len;
    }
    char *colon = strchr(line, ':');
    if (colon) {
        *colon = '\0';
        const char *value = colon + 1;
        while (*value == ' ' || *value == '\t') {
            value++;
        }
        s_header_value(c, line, value);
    }
    return len;
}

static size_t s_on_body(char *data, size_t size, size_t n, void *arg) {
    httpstream_call_t *c = arg;
    size_t len = size * n;
    s_release_body(c);
    if (c->out.status < 200 || c->out.status > 299) {
        if (!c->out.error_body) {
            c->out.error_body = mem_calloc(1, HTTPSTREAM_ERROR_BODY_BYTES);
        }
        size_t room = HTTPSTREAM_ERROR_BODY_BYTES - 1 - c->err_len;
        size_t k = len < room ? len : room;
        memcpy(c->out.error_body + c->err_len, data, k);
        c->err_len += k;
        c->out.error_body[c->err_len] = '\0';
        return len;
    }
    int v = httpstream_feed(c->split, data, len);
    if (v != HTTPSTREAM_CONTINUE) {
        c->verdict = v;
        return 0;
    }
    return len;
}

/* The request's headers, each through header.h. NULL, with why, when one is refused. */
static struct curl_slist *s_headers(const char *const *headers, char *why, size_t why_size) {
    struct curl_slist *list = NULL;
    /* No "Expect: 100-continue" round trip before a large body. */
    if (header_append(&list, "Content-Type", "application/json") != 0 ||
        header_append(&list, "Expect", "") != 0) {
        snprintf(why, why_size, "cannot build the request headers");
        curl_slist_free_all(list);
        return NULL;
    }
    for (size_t i = 0; headers && headers[i]; i++) {
        if (header_append_line(&list, headers[i]) != 0) {
            const char *colon = strchr(headers[i], ':');
            int n = colon ? (int)(colon - headers[i]) : 0;
            snprintf(why, why_size, "the %.*s header holds a control character", n > 64 ? 64 : n,
                     headers[i]);
            curl_slist_free_all(list);
            return NULL;
        }
    }
    return list;
}

static CURL *s_easy(httpstream_call_t *c, const char *url) {
    CURL *h = curl_easy_init();
    ASSERT(h);
    curl_easy_setopt(h, CURLOPT_URL, url); /* copied by libcurl */
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->out.error);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    /* Thousands of streams at once: a small receive buffer each (libcurl's default is 16 KiB). */
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, (long)HTTPSTREAM_RECV_BUFFER_BYTES);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)HTTPSTREAM_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)HTTPSTREAM_TOTAL_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)HTTPSTREAM_IDLE_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    return h;
}

static void s_call_free(httpstream_call_t *c) {
    curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->hdrs);
    if (c->body) {
        atomic_fetch_sub(&s_body_bytes_held, c->body_len);
        free(c->body);
    }
    httpstream_destroy(&c->split);
    free(c->out.error_body);
    free(c);
}

/* How a finished transfer ended, in httpstream's words. */
static httpstream_rc_t s_outcome(httpstream_call_t *c, CURLcode cc) {
    long code = 0;
    if (curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code > 0) {
        c->out.status = (int)code;
    }
    if (c->verdict == HTTPSTREAM_DONE) {
        return HTTPSTREAM_R_DONE;
    }
    if (c->verdict == HTTPSTREAM_ABORT) {
        return HTTPSTREAM_R_ABORTED;
    }
    if (c->verdict == -1) {
        return HTTPSTREAM_R_OVERSIZE;
    }
    if (cc != CURLE_OK) {
        if (!c->out.error[0]) {
            snprintf(c->out.error, sizeof c->out.error, "%s", curl_easy_strerror(cc));
        }
        return HTTPSTREAM_R_NET;
    }
    if (c->out.status < 200 || c->out.status > 299) {
        return HTTPSTREAM_R_HTTP_ERROR;
    }
    int v = httpstream_finish(c->split);
    return v == HTTPSTREAM_DONE    ? HTTPSTREAM_R_DONE
           : v == HTTPSTREAM_ABORT ? HTTPSTREAM_R_ABORTED
           : v == -1               ? HTTPSTREAM_R_OVERSIZE
                                   : HTTPSTREAM_R_EOF;
}

static void s_transfer_done(void *arg, CURLcode cc) {
    httpstream_call_t *c = arg;
    httpstream_rc_t rc = s_outcome(c, cc);
    c->done(c->arg, rc, &c->out);
    s_call_free(c);
}

httpstream_call_t *httpstream_start(evloop_t *loop, const httpstream_request_t *req,
                                    httpstream_done_fn *done, void *arg, char *why,
                                    size_t why_size) {
    pthread_once(&s_curl_once, s_curl_init);
    if (!header_text_ok(req->url)) {
        snprintf(why, why_size, "the URL (base_url) holds a control character");
        return NULL;
    }
    struct curl_slist *hdrs = s_headers(req->headers, why, why_size);
    if (!hdrs) {
        return NULL;
    }
    httpstream_call_t *c = mem_calloc(1, sizeof *c);
    c->loop = loop;
    c->done = done;
    c->arg = arg;
    c->out.retry_after_ms = -1;
    c->out.should_retry = -1;
    c->body = mem_strdup(req->body ? req->body : "");
    c->body_len = strlen(c->body);
    atomic_fetch_add(&s_body_bytes_held, c->body_len);
    c->hdrs = hdrs;
    c->split = httpstream_new(req->mode, HTTPSTREAM_LINE_MAX_BYTES, req->on_event, req->ctx);
    c->easy = s_easy(c, req->url);
    evloop_curl_add(loop, c->easy, s_transfer_done, c);
    return c;
}

void httpstream_stop(httpstream_call_t *c) {
    evloop_curl_remove(c->loop, c->easy);
    s_call_free(c);
}

/* --- Classification and part helpers. --- */

const jsonstrict_limits_t httpstream_event_limits = {
    .max_bytes = HTTPSTREAM_LINE_MAX_BYTES,
    .max_depth = 64,
    .max_values = 65536,
    .max_keys = 4096,
    .max_items = 4096,
    .max_string_bytes = HTTPSTREAM_LINE_MAX_BYTES,
    .max_number_chars = 128,
    /* A provider's event is read, never stored as such: a logprob of 1e-300 must not drop it.
     * What the worker stores from it (text, tool arguments) passes the boundary on its own. */
    .numbers = JSONSTRICT_NUMBERS_NEAREST,
};

json_t *httpstream_parse_event(const char *who, const char *data, size_t len) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    if (jsonstrict_parse(data, len, &httpstream_event_limits, &v, &err) != 0) {
        log_warn("provider_bad_event", "provider=%s code=%s offset=%zu", who,
                 jsonstrict_code_name(err.code), err.offset);
        return NULL;
    }
    return v;
}

/* The human message and the machine code/type of an error body, when it has one. */
static void s_error_fields(const char *body, char *msg, size_t msg_size, char *kind,
                           size_t kind_size) {
    msg[0] = '\0';
    kind[0] = '\0';
    json_t *v = NULL;
    if (jsonstrict_parse(body, strlen(body), &httpstream_event_limits, &v, NULL) != 0) {
        /* Truncated on purpose: a provider's error body is only a hint for people. */
        snprintf(msg, msg_size, "%.*s", (int)(msg_size - 1), body);
        return;
    }
    json_t *e = json_object_get(v, "error");
    const char *m =
        json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "message"));
    snprintf(msg, msg_size, "%s", m ? m : "");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *type = json_string_value(json_object_get(e, "type"));
    snprintf(kind, kind_size, "%s", code ? code : type ? type : "");
    json_decref(v);
}

provider_rc_t httpstream_fail(const char *who, httpstream_rc_t rc, const httpstream_result_t *res,
                              provider_result_t *out) {
    char msg[200];
    char kind[64];
    switch (rc) {
        case HTTPSTREAM_R_HTTP_ERROR: {
            s_error_fields(res->error_body ? res->error_body : "", msg, sizeof msg, kind,
                           sizeof kind);
            bool retry = provider_status_retryable(res->status);
            if (res->should_retry >= 0) {
                retry = res->should_retry == 1;
            } else if (!strcmp(kind, "insufficient_quota")) {
                retry = false; /* a 429 that waiting does not cure (providers/README.md) */
            }
            return provider_fail(out, res->status, retry, res->retry_after_ms, "%s: HTTP %d%s%s",
                                 who, res->status, msg[0] ? ": " : "", msg);
        }
        case HTTPSTREAM_R_NET:
            return provider_fail(out, 0, true, -1, "%s: network: %s", who, res->error);
        case HTTPSTREAM_R_EOF:
            return provider_fail(out, 0, true, -1,
                                 "%s: the stream ended before its terminal event (truncated)", who);
        case HTTPSTREAM_R_OVERSIZE:
            return provider_fail(out, 0, false, -1, "%s: a stream line exceeded %d bytes", who,
                                 HTTPSTREAM_LINE_MAX_BYTES);
        case HTTPSTREAM_R_ABORTED:
            return PROVIDER_ERROR; /* the event handler has filled out already */
        case HTTPSTREAM_R_DONE:
            break;
    }
    return provider_fail(out, 0, false, -1, "%s: internal: no failure to classify", who);
}

json_t *httpstream_tool_call(const char *id, const char *name, const char *args, size_t len) {
    /* The argument bytes go on exactly as the model produced them: the generation task
     * screens them with the strict boundary before anything is stored (provider.h). */
    json_t *raw = len ? json_stringn(args, len) : json_string("{}");
    json_t *part = json_pack("{s:s, s:s, s:s, s:o}", "type", "tool-call", "tool_call_id",
                             id ? id : "", "tool_name", name ? name : "", "args_text",
                             raw ? raw : json_string("(arguments were not UTF-8)"));
    ASSERT(part);
    return part;
}

void httpstream_stop_reason(provider_result_t *out, const char *reason) {
    static const char *const map[][2] = {
        {"stop", "stop"},
        {"end_turn", "stop"},
        {"stop_sequence", "stop"},
        {"tool_calls", "tool_calls"},
        {"tool_use", "tool_calls"},
        {"function_call", "tool_calls"},
        {"length", "length"},
        {"max_tokens", "length"},
        {"content_filter", "content_filter"},
        {"refusal", "refusal"},
        {"pause_turn", "length"},
    };
    const char *ours = "length";
    for (size_t i = 0; reason && i < sizeof map / sizeof map[0]; i++) {
        if (!strcmp(reason, map[i][0])) {
            ours = map[i][1];
        }
    }
    snprintf(out->finish, sizeof out->finish, "%s", ours);
}

static const char *s_field(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

json_t *httpstream_chat_messages(const json_t *history, json_t *(*user)(const json_t *m),
                                 json_t *(*assistant)(const json_t *m),
                                 void (*tool_results)(json_t *out, const json_t *m)) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(history, i, m) {
        const char *role = s_field(m, "role");
        if (!strcmp(role, "assistant")) {
            json_array_append_new(out, assistant(m));
        } else if (!strcmp(role, "tool")) {
            tool_results(out, m);
        } else if (!strcmp(role, "user")) {
            json_array_append_new(out, user(m));
        } else if (!strcmp(role, "system")) {
            char *text = httpstream_text_of(m);
            json_array_append_new(out, json_pack("{s:s, s:s}", "role", role, "content", text));
            free(text);
        }
    }
    return out;
}

httpstream_part_kind_t httpstream_user_part(const json_t *part, unsigned takes) {
    static const char *const images[] = {"image/png", "image/jpeg", "image/gif", "image/webp"};
    const char *type = s_field(part, "type");
    if (!strcmp(type, "text")) {
        return json_is_string(json_object_get(part, "text")) ? HTTPSTREAM_PART_TEXT
                                                             : HTTPSTREAM_PART_SKIP;
    }
    if (strcmp(type, "file")) {
        return HTTPSTREAM_PART_SKIP;
    }
    const char *media = s_field(part, "media_type");
    if (!json_is_string(json_object_get(part, "data"))) {
        return HTTPSTREAM_PART_PLACEHOLDER;
    }
    if ((takes & HTTPSTREAM_TAKES_PDF) && !strcmp(media, "application/pdf")) {
        return HTTPSTREAM_PART_PDF;
    }
    for (size_t i = 0; (takes & HTTPSTREAM_TAKES_IMAGE) && i < sizeof images / sizeof *images;
         i++) {
        if (!strcmp(media, images[i])) {
            return HTTPSTREAM_PART_IMAGE;
        }
    }
    return HTTPSTREAM_PART_PLACEHOLDER;
}

bool httpstream_has_files(const json_t *msg) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        if (!strcmp(s_field(p, "type"), "file")) {
            return true;
        }
    }
    return false;
}

char *httpstream_data_url(const json_t *part) {
    return mem_printf("data:%s;base64,%s", s_field(part, "media_type"), s_field(part, "data"));
}

char *httpstream_file_placeholder(const json_t *part) {
    const char *name = s_field(part, "name");
    return mem_printf("[attachment %s (%s) is not supported by this model]",
                      name[0] ? name : s_field(part, "file_id"), s_field(part, "media_type"));
}

json_t *httpstream_function_tools(const json_t *tools) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *schema = json_object_get(t, "input_schema");
        json_array_append_new(out, json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function",
                                             "function", "name", s_field(t, "name"), "description",
                                             s_field(t, "description"), "parameters",
                                             json_is_object(schema)
                                                 ? json_incref(schema)
                                                 : json_pack("{s:s}", "type", "object")));
    }
    return out;
}

void httpstream_emit(provider_part_fn *on_part, void *ctx, const json_t *part) {
    if (!on_part) {
        return;
    }
    char *text = jsonout_dumps(part);
    on_part(ctx, text);
    free(text);
}

char *httpstream_url(const char *base_url, const char *dflt, const char *path) {
    const char *base = base_url && base_url[0] ? base_url : dflt;
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/') {
        n--;
    }
    return mem_printf("%.*s%s", (int)n, base, path);
}

char *httpstream_result_text(const json_t *part) {
    const json_t *r = json_object_get(part, "result");
    if (json_is_string(r)) {
        return mem_strdup(json_string_value(r));
    }
    if (!r) {
        return mem_strdup("null");
    }
    return jsonout_dumps(r);
}

char *httpstream_text_of(const json_t *msg) {
    dynbuf_t b;
    dynbuf_init(&b, SIZE_MAX / 2); /* uncapped: the history it copies is already in memory */
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(msg, "content"), i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *t = json_string_value(json_object_get(p, "text"));
        if (t && type && !strcmp(type, "text")) {
            (void)dynbuf_add(&b, t, strlen(t));
        }
    }
    char *text = dynbuf_take(&b);
    return text ? text : mem_strdup("");
}

int httpstream_key_header(const char *who, const provider_model_t *model, const char *name,
                          const char *prefix, char **header, provider_result_t *out) {
    *header = NULL;
    const char *key = model->api_key;
    if (!key || !key[0]) {
        return 0;
    }
    if (!header_text_ok(key)) {
        const char *env = model->api_key_env ? model->api_key_env : "(none)";
        log_error("provider_key_refused",
                  "provider=%s model=%s api_key_env=%s reason=\"the key holds a control "
                  "character\"",
                  who, model->name ? model->name : "", env);
        provider_fail(out, 0, false, -1,
                      "%s: the API key in %s (model %s) holds a control character; the request "
                      "was not sent",
                      who, env, model->name ? model->name : "");
        return -1;
    }
    *header = mem_printf("%s: %s%s", name, prefix, key);
    return 0;
}

typedef struct {
    provider_call_t *call;
    const char *who;
    httpstream_call_t *http;
    httpstream_ok_fn *ok;
    void *state;
    void (*state_free)(void *state);
} s_exchange_t;

static void s_exchange_free(void *arg) {
    s_exchange_t *x = arg;
    x->state_free(x->state);
    free(x);
}

static void s_exchange_stop(void *arg) {
    s_exchange_t *x = arg;
    httpstream_stop(x->http);
    x->http = NULL;
}

static void s_exchange_done(void *arg, httpstream_rc_t rc, const httpstream_result_t *res) {
    s_exchange_t *x = arg;
    provider_call_t *call = x->call;
    x->http = NULL;
    provider_rc_t prc = PROVIDER_OK;
    if (rc == HTTPSTREAM_R_DONE) {
        x->ok(x->state, &call->out);
    } else {
        prc = httpstream_fail(x->who, rc, res, &call->out);
    }
    provider_call_end(call, prc);
}

void httpstream_exchange(provider_call_t *call, const char *who, httpstream_request_t req,
                         const json_t *body, httpstream_ok_fn *ok, void *state,
                         void (*state_free)(void *state)) {
    s_exchange_t *x = mem_calloc(1, sizeof *x);
    *x = (s_exchange_t){
        .call = call, .who = who, .ok = ok, .state = state, .state_free = state_free};
    call->impl = x;
    call->impl_free = s_exchange_free;
    call->stop = s_exchange_stop;
    char *text = jsonout_dumps(body);
    req.body = text;
    char why[160];
    x->http = httpstream_start(call->loop, &req, s_exchange_done, x, why, sizeof why);
    free(text);
    if (!x->http) {
        /* Refused before anything was sent: a configuration fault, not worth a retry. */
        provider_call_end(
            call, provider_fail(&call->out, 0, false, -1, "%s: request refused: %s", who, why));
    }
}

void httpstream_call_id(char out[HTTPSTREAM_CALL_ID_BYTES]) {
    char uuid[ID_UUID_LEN + 1];
    if (id_uuid_new(uuid) != 0) {
        snprintf(uuid, sizeof uuid, "%lld", (long long)id_now_ms());
    }
    size_t n = 0;
    n += (size_t)snprintf(out, HTTPSTREAM_CALL_ID_BYTES, "call_");
    for (const char *c = uuid; *c && n + 1 < HTTPSTREAM_CALL_ID_BYTES; c++) {
        if (*c != '-') {
            out[n++] = *c;
        }
    }
    out[n] = '\0';
}

static bool s_kind_fatal(const char *kind) {
    static const char *const fatal[] = {
        "invalid_request_error", "authentication_error", "permission_error",
        "not_found_error",       "billing_error",        "insufficient_quota",
        "request_too_large",     "invalid_api_key",      "context_length_exceeded",
    };
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        if (!strcmp(kind, fatal[i])) {
            return true;
        }
    }
    return false;
}

httpstream_verdict_t httpstream_stream_error(const char *who, const json_t *err,
                                             provider_result_t *out) {
    const char *msg = json_is_string(err) ? json_string_value(err)
                                          : json_string_value(json_object_get(err, "message"));
    const char *type = json_string_value(json_object_get(err, "type"));
    const char *code = json_string_value(json_object_get(err, "code"));
    bool fatal = (type && s_kind_fatal(type)) || (code && s_kind_fatal(code));
    (void)provider_fail(out, 0, !fatal, -1, "%s: error in the stream: %s%s%s", who,
                        type   ? type
                        : code ? code
                               : "error",
                        msg ? ": " : "", msg ? msg : "");
    return HTTPSTREAM_ABORT;
}
