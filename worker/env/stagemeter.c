/* stagemeter: stage timings and turn outcomes; see stagemeter.h. */
#include "stagemeter.h"
#include "histo.h"
#include "mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MODELS_MAX     64 /* model names with series of their own; the rest are "other" */
#define S_MODEL_NAME_MAX 160

static const char *const s_stage_names[STAGE_COUNT] = {
    "acquisition", "queue_wait",          "prepare",          "generation_step",
    "stream",      "time_to_first_token", "provider_attempt", "tool_call",
    "commit",      "compaction",          "retry_backoff"};
static const char *const s_outcome_names[TURN_OUTCOME_COUNT] = {"completed", "error", "interrupted",
                                                                "abandoned"};

struct stagemeter {
    histo_family_t *stages; /* stage, scope, chat_kind */
    histo_family_t *models; /* stage, chat_kind, model */
    /* Each series' histogram once its label set was made: an observation then formats and
     * looks up nothing. Model index S_MODELS_MAX is "other". */
    _Atomic(histo_t *) stage_h[STAGE_COUNT][2][2];
    _Atomic(histo_t *) model_h[STAGE_COUNT][2][S_MODELS_MAX + 1];
    atomic_llong outcomes[TURN_OUTCOME_COUNT][2];
    atomic_llong counts[STAGE_COUNT];
    pthread_mutex_t names_lock; /* the model names given series so far */
    char names[S_MODELS_MAX][S_MODEL_NAME_MAX];
    atomic_int name_count;
};

const char *stagemeter_stage_name(stage_t s) {
    return s >= 0 && s < STAGE_COUNT ? s_stage_names[s] : "unknown";
}

const char *stagemeter_outcome_name(turn_outcome_t o) {
    return o >= 0 && o < TURN_OUTCOME_COUNT ? s_outcome_names[o] : "unknown";
}

stagemeter_t *stagemeter_new(void) {
    stagemeter_t *m = mem_calloc(1, sizeof *m);
    m->stages = histo_family_new("chatfleet_stage_duration_seconds",
                                 "Duration of one turn lifecycle stage.", STAGE_COUNT * 2 * 2);
    m->models = histo_family_new("chatfleet_model_stage_duration_seconds",
                                 "Duration of one provider stage, by model config.",
                                 3 * 2 * (S_MODELS_MAX + 1));
    pthread_mutex_init(&m->names_lock, NULL);
    return m;
}

static const char *s_kind(bool subagent) {
    return subagent ? "subagent" : "root";
}

/* Makes the histogram of labels in family f and keeps it at *slot (NULL when f is full: the
 * observation is dropped, and counted as such by f). Threads that race here get the same
 * histogram for the same labels. */
static histo_t *s_series(_Atomic(histo_t *) *slot, histo_family_t *f, const char *labels) {
    histo_t *h = histo_family_get(f, labels);
    atomic_store_explicit(slot, h, memory_order_release);
    return h;
}

void stagemeter_observe(stagemeter_t *m, stage_t s, stage_scope_t scope, bool subagent,
                        int64_t us) {
    ASSERT(s >= 0 && s < STAGE_COUNT);
    _Atomic(histo_t *) *slot = &m->stage_h[s][scope == STAGE_SCOPE_TURN ? 0 : 1][subagent];
    histo_t *h = atomic_load_explicit(slot, memory_order_acquire);
    if (!h) {
        char labels[128];
        snprintf(labels, sizeof labels, "stage=\"%s\",scope=\"%s\",chat_kind=\"%s\"",
                 s_stage_names[s], scope == STAGE_SCOPE_TURN ? "turn" : "background",
                 s_kind(subagent));
        h = s_series(slot, m->stages, labels);
    }
    if (h) {
        histo_observe_us(h, us);
    }
    atomic_fetch_add_explicit(&m->counts[s], 1, memory_order_relaxed);
}

/* The index of name's series (S_MODELS_MAX: "other", when the names are used up). */
static int s_model(stagemeter_t *m, const char *name) {
    int n = atomic_load_explicit(&m->name_count, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!strcmp(m->names[i], name)) {
            return i;
        }
    }
    if (strlen(name) >= S_MODEL_NAME_MAX) {
        return S_MODELS_MAX;
    }
    pthread_mutex_lock(&m->names_lock);
    int now = atomic_load_explicit(&m->name_count, memory_order_relaxed);
    int found = S_MODELS_MAX;
    for (int i = n; i < now && found == S_MODELS_MAX; i++) {
        found = !strcmp(m->names[i], name) ? i : found;
    }
    if (found == S_MODELS_MAX && now < S_MODELS_MAX) {
        snprintf(m->names[now], S_MODEL_NAME_MAX, "%s", name);
        atomic_store_explicit(&m->name_count, now + 1, memory_order_release);
        found = now;
    }
    pthread_mutex_unlock(&m->names_lock);
    return found;
}

void stagemeter_observe_model(stagemeter_t *m, stage_t s, bool subagent, const char *model,
                              int64_t us) {
    stagemeter_observe(m, s, STAGE_SCOPE_TURN, subagent, us);
    int i = s_model(m, model && model[0] ? model : "other");
    _Atomic(histo_t *) *slot = &m->model_h[s][subagent][i];
    histo_t *h = atomic_load_explicit(slot, memory_order_acquire);
    if (!h) {
        char esc[2 * S_MODEL_NAME_MAX + 1];
        histo_label_escape(i < S_MODELS_MAX ? m->names[i] : "other", esc, sizeof esc);
        char labels[sizeof esc + 96];
        snprintf(labels, sizeof labels, "stage=\"%s\",chat_kind=\"%s\",model=\"%s\"",
                 s_stage_names[s], s_kind(subagent), esc);
        h = s_series(slot, m->models, labels);
    }
    if (h) {
        histo_observe_us(h, us);
    }
}

void stagemeter_count_outcome(stagemeter_t *m, turn_outcome_t o, bool subagent) {
    ASSERT(o >= 0 && o < TURN_OUTCOME_COUNT);
    atomic_fetch_add_explicit(&m->outcomes[o][subagent ? 1 : 0], 1, memory_order_relaxed);
}

long long stagemeter_count(stagemeter_t *m, stage_t s) {
    return atomic_load_explicit(&m->counts[s], memory_order_relaxed);
}

int stagemeter_append(stagemeter_t *m, dynbuf_t *out, const char *worker_id) {
    char prefix[128];
    char esc[96];
    snprintf(prefix, sizeof prefix, "worker=\"%s\"",
             histo_label_escape(worker_id, esc, sizeof esc));
    int rc = histo_family_append(out, m->stages, prefix);
    if (rc == 0) {
        rc = histo_family_append(out, m->models, prefix);
    }
    if (rc == 0) {
        rc = dynbuf_addf(out, "# HELP chatfleet_turn_outcomes_total Turns closed, by outcome.\n"
                              "# TYPE chatfleet_turn_outcomes_total counter\n");
    }
    for (int o = 0; o < TURN_OUTCOME_COUNT && rc == 0; o++) {
        for (int k = 0; k < 2 && rc == 0; k++) {
            rc = dynbuf_addf(out,
                             "chatfleet_turn_outcomes_total{%s,outcome=\"%s\",chat_kind=\"%s\"}"
                             " %lld\n",
                             prefix, s_outcome_names[o], s_kind(k == 1),
                             (long long)atomic_load(&m->outcomes[o][k]));
        }
    }
    return rc;
}

void stagemeter_destroy(stagemeter_t **m_p) {
    stagemeter_t *m = *m_p;
    if (!m) {
        return;
    }
    histo_family_destroy(&m->stages);
    histo_family_destroy(&m->models);
    pthread_mutex_destroy(&m->names_lock);
    free(m);
    *m_p = NULL;
}
