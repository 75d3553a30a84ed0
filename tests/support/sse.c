/* sse: a threaded SSE test client; see sse.h. */
#include "jsonstrict.h"
#include "sse.h"
#include "id.h"
#include "mem.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sse {
    pthread_t thread;
    pthread_mutex_t lock;
    char *url;
    char auth[256];
    char last_id[64];
    bool stop;
    char *buf; /* unparsed tail */
    size_t len;
    json_t *events;
};

static void s_parse(sse_t *self) {
    char *end;
    while ((end = strstr(self->buf, "\n\n"))) {
        *end = '\0';
        json_t *ev = json_pack("{s:s,s:I,s:n}", "event", "message", "id", (json_int_t)0, "data");
        for (char *line = self->buf; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) {
                *nl = '\0';
            }
            if (!strncmp(line, "event: ", 7)) {
                json_object_set_new(ev, "event", json_string(line + 7));
            } else if (!strncmp(line, "id: ", 4)) {
                json_object_set_new(ev, "id", json_integer(strtoll(line + 4, NULL, 10)));
            } else if (!strncmp(line, "data: ", 6)) {
                json_object_set_new(ev, "data", jsonstrict_load_stored(line + 6, strlen(line + 6)));
                json_object_set_new(ev, "raw", json_string(line + 6));
            }
            line = nl ? nl + 1 : NULL;
        }
        bool comment = self->buf[0] == ':';
        size_t used = (size_t)(end - self->buf) + 2;
        memmove(self->buf, self->buf + used, self->len - used + 1);
        self->len -= used;
        if (comment) {
            json_decref(ev);
        } else {
            json_array_append_new(self->events, ev);
        }
    }
}

static size_t s_write(char *data, size_t size, size_t n, void *ctx) {
    sse_t *self = ctx;
    size_t add = size * n;
    pthread_mutex_lock(&self->lock);
    self->buf = mem_realloc(self->buf, self->len + add + 1);
    memcpy(self->buf + self->len, data, add);
    self->len += add;
    self->buf[self->len] = '\0';
    s_parse(self);
    pthread_mutex_unlock(&self->lock);
    return add;
}

static int s_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    sse_t *self = ctx;
    pthread_mutex_lock(&self->lock);
    bool stop = self->stop;
    pthread_mutex_unlock(&self->lock);
    return stop ? 1 : 0;
}

static void *s_run(void *arg) {
    sse_t *self = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, self->auth);
    if (self->last_id[0]) {
        h = curl_slist_append(h, self->last_id);
    }
    curl_easy_setopt(c, CURLOPT_URL, self->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, self);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, s_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, self);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_perform(c);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

sse_t *sse_open(const char *url, const char *token, int64_t last_event_id) {
    sse_t *self = mem_calloc(1, sizeof *self);
    pthread_mutex_init(&self->lock, NULL);
    self->url = mem_strdup(url);
    snprintf(self->auth, sizeof self->auth, "Authorization: Bearer %s", token);
    if (last_event_id > 0) {
        snprintf(self->last_id, sizeof self->last_id, "Last-Event-ID: %lld",
                 (long long)last_event_id);
    }
    self->buf = mem_strdup("");
    self->events = json_array();
    ASSERT(pthread_create(&self->thread, NULL, s_run, self) == 0);
    return self;
}

void sse_close(sse_t **self_p) {
    sse_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    json_decref(self->events);
    free(self->buf);
    free(self->url);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

int sse_count(sse_t *self) {
    pthread_mutex_lock(&self->lock);
    int n = (int)json_array_size(self->events);
    pthread_mutex_unlock(&self->lock);
    return n;
}

json_t *sse_get(sse_t *self, int index) {
    pthread_mutex_lock(&self->lock);
    json_t *e = json_array_get(self->events, (size_t)index);
    pthread_mutex_unlock(&self->lock);
    return e; /* events are never removed, so the pointer stays valid */
}

int sse_wait(sse_t *self, int from, const char *name, int (*match)(json_t *event, void *ctx),
             void *ctx, int timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    for (int i = from;;) {
        while (i < sse_count(self)) {
            json_t *e = sse_get(self, i);
            if (!strcmp(json_string_value(json_object_get(e, "event")), name) &&
                (!match || match(e, ctx))) {
                return i;
            }
            i++;
        }
        if (id_now_ms() > deadline) {
            return -1;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
