/* usagemeter: see usagemeter.h. */
#include "usagemeter.h"
#include "mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_kinds[USAGEMETER_KINDS] = {"input_tokens", "output_tokens",
                                                      "cache_read_tokens", "cache_creation_tokens",
                                                      "reasoning_tokens"};

typedef struct {
    char model[USAGEMETER_NAME_MAX];
    long long tokens[USAGEMETER_KINDS];
    long long cost_micros;
    long long replies;
} s_row_t;

struct usagemeter {
    pthread_mutex_t lock;
    int count;
    s_row_t rows[USAGEMETER_MODELS_MAX + 1]; /* the last one is "other" */
};

usagemeter_t *usagemeter_new(void) {
    usagemeter_t *self = mem_calloc(1, sizeof *self);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    snprintf(self->rows[USAGEMETER_MODELS_MAX].model, USAGEMETER_NAME_MAX, "other");
    return self;
}

void usagemeter_destroy(usagemeter_t **self_p) {
    usagemeter_t *self = *self_p;
    if (!self) {
        return;
    }
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* The row of model (under the lock): found, new, or "other" once the table is full. */
static s_row_t *s_row(usagemeter_t *self, const char *model) {
    for (int i = 0; i < self->count; i++) {
        if (!strncmp(self->rows[i].model, model, USAGEMETER_NAME_MAX - 1)) {
            return &self->rows[i];
        }
    }
    if (self->count == USAGEMETER_MODELS_MAX) {
        return &self->rows[USAGEMETER_MODELS_MAX];
    }
    s_row_t *r = &self->rows[self->count++];
    snprintf(r->model, sizeof r->model, "%s", model);
    return r;
}

void usagemeter_add(usagemeter_t *self, const char *model, const json_t *usage) {
    pthread_mutex_lock(&self->lock);
    s_row_t *r = s_row(self, model && model[0] ? model : "-");
    r->replies++;
    for (int k = 0; k < USAGEMETER_KINDS; k++) {
        const json_t *v = json_object_get(usage, s_kinds[k]);
        if (json_is_integer(v) && json_integer_value(v) > 0) {
            r->tokens[k] += (long long)json_integer_value(v);
        }
    }
    const json_t *cost = json_object_get(usage, "total_cost_micros");
    if (json_is_integer(cost) && json_integer_value(cost) > 0) {
        r->cost_micros += (long long)json_integer_value(cost);
    }
    pthread_mutex_unlock(&self->lock);
}

/* A label value: model names come from the configuration; quotes, backslashes and control
 * bytes become '_' so that the exposition stays well-formed. */
static void s_label(const char *in, char out[USAGEMETER_NAME_MAX]) {
    size_t i = 0;
    for (; in[i] && i < USAGEMETER_NAME_MAX - 1; i++) {
        unsigned char c = (unsigned char)in[i];
        out[i] = c == '"' || c == '\\' || c < 0x20 ? '_' : (char)c;
    }
    out[i] = '\0';
}

char *usagemeter_metrics(usagemeter_t *self, const char *worker_id, char *text) {
    pthread_mutex_lock(&self->lock);
    int n = self->count;
    s_row_t rows[USAGEMETER_MODELS_MAX + 1];
    memcpy(rows, self->rows, sizeof rows);
    pthread_mutex_unlock(&self->lock);
    if (rows[USAGEMETER_MODELS_MAX].replies > 0) {
        rows[n++] = rows[USAGEMETER_MODELS_MAX];
    }
    char *out = mem_printf("%s# TYPE chatfleet_worker_model_tokens_total counter\n", text);
    free(text);
    for (int i = 0; i < n; i++) {
        char model[USAGEMETER_NAME_MAX];
        s_label(rows[i].model, model);
        for (int k = 0; k < USAGEMETER_KINDS; k++) {
            char kind[32];
            snprintf(kind, sizeof kind, "%.*s", (int)(strlen(s_kinds[k]) - strlen("_tokens")),
                     s_kinds[k]);
            char *next =
                mem_printf("%schatfleet_worker_model_tokens_total{worker=\"%s\",model=\"%s\","
                           "kind=\"%s\"} %lld\n",
                           out, worker_id, model, kind, rows[i].tokens[k]);
            free(out);
            out = next;
        }
    }
    const char *families[] = {"cost_micros", "replies"};
    for (int f = 0; f < 2; f++) {
        char *next =
            mem_printf("%s# TYPE chatfleet_worker_model_%s_total counter\n", out, families[f]);
        free(out);
        out = next;
        for (int i = 0; i < n; i++) {
            char model[USAGEMETER_NAME_MAX];
            s_label(rows[i].model, model);
            next = mem_printf(
                "%schatfleet_worker_model_%s_total{worker=\"%s\",model=\"%s\"} %lld\n", out,
                families[f], worker_id, model, f == 0 ? rows[i].cost_micros : rows[i].replies);
            free(out);
            out = next;
        }
    }
    return out;
}
