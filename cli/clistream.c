/* clistream: SSE with redial, resume and dedupe; see clistream.h. */
#include "clistream.h"
#include "dynbuf.h"
#include "id.h"
#include "jsonout.h"
#include "mem.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLISTREAM_TYPE_MAX   64 /* bytes of an event name, NUL included */
#define CLISTREAM_SLICE_MS   50 /* how often a backoff sleep looks at the cancel flag */
#define CLISTREAM_STATUS_MAX 32 /* bytes of a chat status, NUL included */

typedef struct {
    int64_t id;
    int64_t revision;
} s_seen_t;

struct clistream {
    client_t *client;
    char *path;
    int64_t after_id;
    volatile sig_atomic_t *cancel;
    int dials;
    /* What the caller has been given, across dials. */
    s_seen_t *seen;
    size_t nseen;
    int64_t part_hv;
    int64_t part_ga;
    int64_t part_seq;
    char status[CLISTREAM_STATUS_MAX];
    char *last_action;
    /* The dial in progress. */
    clistream_event_fn fn;
    void *ctx;
    bool stop;
    bool got_event;
    dynbuf_t line; /* the line being read: it and its NUL fit in CLISTREAM_EVENT_MAX_BYTES */
    char type[CLISTREAM_TYPE_MAX];
    int64_t event_id;
    dynbuf_t data; /* the event's data lines, at most CLISTREAM_EVENT_MAX_BYTES */
    bool too_big;
};

clistream_t *clistream_new(client_t *client, const char *path, int64_t after_id,
                           volatile sig_atomic_t *cancel) {
    clistream_t *self = mem_calloc(1, sizeof *self);
    self->client = client;
    self->path = mem_strdup(path);
    self->after_id = after_id;
    self->cancel = cancel;
    self->seen = mem_calloc(CLISTREAM_SEEN_MAX, sizeof *self->seen);
    dynbuf_init(&self->line, CLISTREAM_EVENT_MAX_BYTES - 1);
    dynbuf_init(&self->data, CLISTREAM_EVENT_MAX_BYTES);
    return self;
}

void clistream_destroy(clistream_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    clistream_t *self = *self_p;
    free(self->path);
    free(self->seen);
    free(self->last_action);
    dynbuf_free(&self->line);
    dynbuf_free(&self->data);
    free(self);
    *self_p = NULL;
}

int clistream_dials(const clistream_t *self) {
    return self->dials;
}

int64_t clistream_after_id(const clistream_t *self) {
    return self->after_id;
}

/* True when this message revision is new to the caller (and records it). */
static bool s_message_is_new(clistream_t *self, json_t *data) {
    json_t *m = json_object_get(data, "message");
    int64_t id = json_integer_value(json_object_get(m, "id"));
    int64_t rev = json_integer_value(json_object_get(m, "revision"));
    for (size_t i = 0; i < self->nseen; i++) {
        if (self->seen[i].id == id) {
            if (rev <= self->seen[i].revision) {
                return false;
            }
            self->seen[i].revision = rev;
            return true;
        }
    }
    if (self->nseen == CLISTREAM_SEEN_MAX) { /* forget the oldest half; after_id covers them */
        memmove(self->seen, self->seen + CLISTREAM_SEEN_MAX / 2,
                (CLISTREAM_SEEN_MAX / 2) * sizeof *self->seen);
        self->nseen = CLISTREAM_SEEN_MAX / 2;
    }
    self->seen[self->nseen++] = (s_seen_t){id, rev};
    return true;
}

static bool s_part_is_new(clistream_t *self, json_t *data) {
    json_t *p = json_object_get(data, "message_part");
    int64_t hv = json_integer_value(json_object_get(p, "history_version"));
    int64_t ga = json_integer_value(json_object_get(p, "generation_attempt"));
    int64_t seq = json_integer_value(json_object_get(p, "seq"));
    if (hv == self->part_hv && ga == self->part_ga && seq <= self->part_seq) {
        return false;
    }
    self->part_hv = hv;
    self->part_ga = ga;
    self->part_seq = seq;
    return true;
}

/* Replays on a redial repeat the status and the pending calls: only changes pass. */
static bool s_is_new(clistream_t *self, const char *type, json_t *data) {
    if (!strcmp(type, "message")) {
        return s_message_is_new(self, data);
    }
    if (!strcmp(type, "message_part")) {
        return s_part_is_new(self, data);
    }
    if (!strcmp(type, "status")) {
        const char *st =
            json_string_value(json_object_get(json_object_get(data, "status"), "status"));
        if (!st || !strcmp(st, self->status)) {
            return false;
        }
        snprintf(self->status, sizeof self->status, "%s", st);
        return true;
    }
    if (!strcmp(type, "action_required")) {
        char *text = jsonout_dumps(json_object_get(data, "action_required"));
        bool same = text && self->last_action && !strcmp(text, self->last_action);
        free(self->last_action);
        self->last_action = text;
        return !same;
    }
    if (!strcmp(type, "history_reset")) {
        self->nseen = 0;
    }
    return true;
}

static void s_dispatch(clistream_t *self) {
    if (self->data.len == 0 || self->stop) {
        return;
    }
    json_t *data = NULL;
    jsonstrict_error_t err;
    const char *text = dynbuf_str(&self->data);
    if (jsonstrict_parse(text, self->data.len, &client_limits, &data, &err) != 0) {
        fprintf(stderr, "chatfleet: stream: an unreadable %s event dropped: %s\n",
                self->type[0] ? self->type : "message", err.message);
        return;
    }
    const char *type = self->type[0] ? self->type : "message";
    self->got_event = true;
    if (s_is_new(self, type, data)) {
        if (!strcmp(type, "message") && self->event_id > self->after_id) {
            self->after_id = self->event_id;
        }
        self->stop = self->fn(self->ctx, type, data, self->event_id);
    }
    json_decref(data);
}

/* Whether the field name of n bytes is name. */
static bool s_field_is(const char *field, size_t n, const char *name) {
    return n == strlen(name) && !memcmp(field, name, n);
}

/* One line (up to its first NUL, as a C string). */
static void s_line(clistream_t *self, const char *line) {
    if (*line == '\0') {
        s_dispatch(self);
        self->type[0] = '\0';
        self->event_id = 0;
        dynbuf_reset(&self->data);
        return;
    }
    if (*line == ':') {
        return; /* a keep-alive comment */
    }
    const char *colon = strchr(line, ':');
    size_t n = colon ? (size_t)(colon - line) : strlen(line);
    const char *value = line + n + (colon ? 1 : 0);
    if (*value == ' ') {
        value++;
    }
    if (s_field_is(line, n, "event")) {
        snprintf(self->type, sizeof self->type, "%s", value);
    } else if (s_field_is(line, n, "id")) {
        char *end = NULL;
        long long v = strtoll(value, &end, 10);
        self->event_id = end && *end == '\0' && v > 0 ? v : 0;
    } else if (s_field_is(line, n, "data")) {
        /* The event's data lines joined by newlines; over the cap, the dial is dropped. */
        if ((self->data.len > 0 && dynbuf_add(&self->data, "\n", 1) != 0) ||
            dynbuf_add(&self->data, value, strlen(value)) != 0) {
            self->too_big = true;
        }
    }
}

static size_t s_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    clistream_t *self = ud;
    size_t n = size * nmemb;
    size_t i = 0;
    while (i < n && !self->stop && !self->too_big) {
        size_t j = i;
        while (j < n && ptr[j] != '\r' && ptr[j] != '\n') {
            j++;
        }
        if (dynbuf_add(&self->line, ptr + i, j - i) != 0) {
            self->too_big = true;
            break;
        }
        if (j < n && ptr[j] == '\n') {
            s_line(self, dynbuf_str(&self->line));
            dynbuf_reset(&self->line);
        }
        i = j + 1; /* a CR is dropped wherever it stands */
    }
    return self->stop || self->too_big ? 0 : n;
}

static int s_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    clistream_t *self = ud;
    (void)a, (void)b, (void)c, (void)d;
    return self->cancel && *self->cancel ? 1 : 0;
}

/* One dial; returns the HTTP status (0 when no answer arrived; -1, nothing sent, when
 * client_headers refused a header), the transfer's code in *rc and libcurl's error text in
 * errbuf. */
static long s_dial(clistream_t *self, CURL *c, CURLcode *rc, char errbuf[CURL_ERROR_SIZE]) {
    char *url = mem_printf("%s%s%safter_id=%lld", client_base(self->client), self->path,
                           strchr(self->path, '?') ? "&" : "?", (long long)self->after_id);
    struct curl_slist *h = NULL;
    if (client_headers(self->client, "Accept", "text/event-stream", &h) != 0) {
        free(url);
        return -1; /* refused (on stderr): never sent */
    }
    dynbuf_reset(&self->line);
    dynbuf_reset(&self->data);
    self->type[0] = '\0';
    self->event_id = 0;
    self->too_big = false;
    errbuf[0] = '\0';
    curl_easy_reset(c);
    client_transport(self->client, c);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, CLISTREAM_STALL_SECONDS);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, self);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, s_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, self);
    self->dials++;
    *rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    free(url);
    return status;
}

static void s_sleep(clistream_t *self, int64_t ms) {
    int64_t until = id_now_ms() + ms;
    while (id_now_ms() < until && !(self->cancel && *self->cancel)) {
        struct timespec ts = {0, CLISTREAM_SLICE_MS * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

clistream_end_t clistream_run(clistream_t *self, clistream_event_fn fn, void *ctx) {
    CURL *c = curl_easy_init();
    if (!c) {
        return CLISTREAM_GAVE_UP;
    }
    self->fn = fn;
    self->ctx = ctx;
    self->stop = false;
    int failures = 0;
    clistream_end_t end = CLISTREAM_GAVE_UP;
    for (;;) {
        self->got_event = false;
        CURLcode rc = CURLE_OK;
        char errbuf[CURL_ERROR_SIZE];
        long status = s_dial(self, c, &rc, errbuf);
        if (status < 0) {
            end = CLISTREAM_REJECTED; /* a header was refused: a redial would be too */
            break;
        }
        if (self->stop) {
            end = CLISTREAM_STOPPED;
            break;
        }
        if (self->cancel && *self->cancel) {
            end = CLISTREAM_CANCELLED;
            break;
        }
        if (status >= 400 && status < 500 && status != 408 && status != 425 && status != 429) {
            fprintf(stderr, "chatfleet: stream %s: HTTP %ld\n", self->path, status);
            end = CLISTREAM_REJECTED;
            break;
        }
        /* A certificate that is not trusted will not become trusted on a redial. */
        if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
            rc == CURLE_SSL_ISSUER_ERROR || rc == CURLE_UNSUPPORTED_PROTOCOL) {
            char why[CURL_ERROR_SIZE + 256];
            client_describe(self->client, rc, errbuf, why, sizeof why);
            fprintf(stderr, "chatfleet: stream %s: %s\n", self->path, why);
            end = CLISTREAM_REJECTED;
            break;
        }
        failures = self->got_event ? 1 : failures + 1;
        if (failures > CLISTREAM_FAILURES_MAX) {
            fprintf(stderr, "chatfleet: stream %s: %d dials failed in a row\n", self->path,
                    CLISTREAM_FAILURES_MAX);
            break;
        }
        int64_t delay = CLISTREAM_BACKOFF_MIN_MS;
        for (int i = 1; i < failures && delay < CLISTREAM_BACKOFF_MAX_MS; i++) {
            delay *= 2;
        }
        s_sleep(self, delay < CLISTREAM_BACKOFF_MAX_MS ? delay : CLISTREAM_BACKOFF_MAX_MS);
    }
    curl_easy_cleanup(c);
    return end;
}
