/* otlp: OTLP/HTTP JSON span export; see otlp.h. */
#include "otlp.h"
#include "id.h"
#include "jsonout.h"
#include "log.h"
#include "mem.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct otlp {
    char *url;
    char *instance;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    otlp_span_t *ring; /* OTLP_QUEUE_MAX spans, head .. head + count */
    size_t head;
    size_t count;
    atomic_bool stop;
    atomic_llong exported, dropped, posts_failed;
};

int64_t otlp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static json_t *s_attr(const char *key, const char *value) {
    return json_pack("{s:s, s:{s:s}}", "key", key, "value", "stringValue", value);
}

static json_t *s_span_json(const otlp_span_t *s) {
    char start[24], end[24];
    snprintf(start, sizeof start, "%lld", (long long)s->start_ns);
    snprintf(end, sizeof end, "%lld", (long long)s->end_ns);
    json_t *attrs = json_array();
    json_array_append_new(attrs, s_attr("chat_id", s->chat_id));
    json_array_append_new(attrs, s_attr("chat_kind", s->chat_kind));
    json_array_append_new(attrs, s_attr("scope", "turn"));
    if (s->outcome[0]) {
        json_array_append_new(attrs, s_attr("turn_outcome", s->outcome));
    }
    if (s->model[0]) {
        json_array_append_new(attrs, s_attr("model", s->model));
    }
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:o, s:{s:i}}", "traceId", s->trace_id, "spanId",
                  s->span_id, "name", s->name, "kind", 1, "startTimeUnixNano", start,
                  "endTimeUnixNano", end, "attributes", attrs, "status", "code", s->error ? 2 : 0);
    if (s->parent_id[0]) {
        json_object_set_new(j, "parentSpanId", json_string(s->parent_id));
    }
    return j;
}

/* The ExportTraceServiceRequest of n spans. */
static char *s_body(const otlp_t *self, const otlp_span_t *spans, size_t n) {
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(list, s_span_json(&spans[i]));
    }
    json_t *res_attrs = json_array();
    json_array_append_new(res_attrs, s_attr("service.name", "chatfleet-worker"));
    json_array_append_new(res_attrs, s_attr("service.instance.id", self->instance));
    json_t *req =
        json_pack("{s:[{s:{s:o}, s:[{s:{s:s}, s:o}]}]}", "resourceSpans", "resource", "attributes",
                  res_attrs, "scopeSpans", "scope", "name", "chatfleet", "spans", list);
    char *text = jsonout_dumps(req);
    json_decref(req);
    return text;
}

static size_t s_discard(char *data, size_t size, size_t n, void *arg) {
    (void)data;
    (void)arg;
    return size * n;
}

/* One POST: 0 on a 2xx answer. */
static int s_post(const otlp_t *self, const char *body) {
    CURL *c = curl_easy_init();
    if (!c) {
        return -1;
    }
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, self->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)OTLP_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long status = 0;
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK && status >= 200 && status < 300 ? 0 : -1;
}

/* Posts n spans (retried once); counts the outcome. */
static void s_export(otlp_t *self, const otlp_span_t *spans, size_t n) {
    char *body = s_body(self, spans, n);
    int rc = s_post(self, body);
    if (rc != 0 && !atomic_load(&self->stop)) { /* no retry while shutting down */
        rc = s_post(self, body);
    }
    free(body);
    if (rc == 0) {
        atomic_fetch_add(&self->exported, (long long)n);
        return;
    }
    atomic_fetch_add(&self->posts_failed, 1);
    atomic_fetch_add(&self->dropped, (long long)n);
    log_warn("otlp_export_failed", "url=%s spans=%zu", self->url, n);
}

/* Takes up to OTLP_BATCH_MAX queued spans into batch (under the lock). */
static size_t s_take(otlp_t *self, otlp_span_t *batch) {
    size_t n = self->count < OTLP_BATCH_MAX ? self->count : OTLP_BATCH_MAX;
    for (size_t i = 0; i < n; i++) {
        batch[i] = self->ring[(self->head + i) % OTLP_QUEUE_MAX];
    }
    self->head = (self->head + n) % OTLP_QUEUE_MAX;
    self->count -= n;
    return n;
}

static void *s_run(void *arg) {
    otlp_t *self = arg;
    otlp_span_t *batch = mem_calloc(OTLP_BATCH_MAX, sizeof *batch);
    pthread_mutex_lock(&self->lock);
    for (;;) {
        int64_t deadline = id_now_ms() + OTLP_FLUSH_MS;
        while (!self->stop && self->count < OTLP_BATCH_MAX && id_now_ms() < deadline) {
            struct timespec at = id_timespec_at(deadline);
            pthread_cond_timedwait(&self->cond, &self->lock, &at);
        }
        bool stop = self->stop;
        size_t n = s_take(self, batch);
        size_t rest = stop ? self->count : 0; /* shutting down: one last batch, no more */
        self->count -= rest;
        pthread_mutex_unlock(&self->lock);
        atomic_fetch_add(&self->dropped, (long long)rest);
        if (n > 0) {
            s_export(self, batch, n);
        }
        pthread_mutex_lock(&self->lock);
        if (stop) {
            break;
        }
    }
    pthread_mutex_unlock(&self->lock);
    free(batch);
    return NULL;
}

/* Releases what otlp_new made, its thread gone or never started. */
static void s_free(otlp_t *self) {
    pthread_mutex_destroy(&self->lock);
    pthread_cond_destroy(&self->cond);
    free(self->ring);
    free(self->url);
    free(self->instance);
    free(self);
}

otlp_t *otlp_new(const char *endpoint, const char *instance_id) {
    if (!endpoint || !endpoint[0]) {
        return NULL;
    }
    otlp_t *self = mem_calloc(1, sizeof *self);
    size_t len = strlen(endpoint);
    while (len > 0 && endpoint[len - 1] == '/') {
        len--;
    }
    self->url = mem_printf("%.*s/v1/traces", (int)len, endpoint);
    self->instance = mem_strdup(instance_id);
    self->ring = mem_calloc(OTLP_QUEUE_MAX, sizeof *self->ring);
    pthread_mutex_init(&self->lock, NULL);
    id_cond_init(&self->cond);
    if (pthread_create(&self->thread, NULL, s_run, self) != 0) {
        log_error("otlp_start_failed", "url=%s", self->url);
        s_free(self);
        return NULL;
    }
    return self;
}

bool otlp_add(otlp_t *self, const otlp_span_t *span) {
    pthread_mutex_lock(&self->lock); /* held for a copy: the thread posts outside it */
    bool room = self->count < OTLP_QUEUE_MAX && !self->stop;
    if (room) {
        self->ring[(self->head + self->count) % OTLP_QUEUE_MAX] = *span;
        self->count++;
        if (self->count >= OTLP_BATCH_MAX) {
            pthread_cond_signal(&self->cond);
        }
    }
    pthread_mutex_unlock(&self->lock);
    if (!room) {
        atomic_fetch_add(&self->dropped, 1);
    }
    return room;
}

void otlp_stats(otlp_t *self, otlp_stats_t *out) {
    out->exported = atomic_load(&self->exported);
    out->dropped = atomic_load(&self->dropped);
    out->posts_failed = atomic_load(&self->posts_failed);
}

void otlp_destroy(otlp_t **self_p) {
    otlp_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_signal(&self->cond);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    s_free(self);
    *self_p = NULL;
}
