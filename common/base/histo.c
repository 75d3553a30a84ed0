/* histo: lock-free latency histograms; see histo.h. */
#include "histo.h"
#include "mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double histo_bounds_s[HISTO_BOUNDS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

void histo_observe_us(histo_t *h, int64_t us) {
    if (us < 0) {
        us = 0;
    }
    int b = 0;
    while (b < HISTO_BOUNDS && (double)us > histo_bounds_s[b] * 1e6) {
        b++;
    }
    atomic_fetch_add_explicit(&h->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

long long histo_count(const histo_t *h) {
    long long n = 0;
    for (int b = 0; b <= HISTO_BOUNDS; b++) {
        n += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
    }
    return n;
}

int histo_append(dynbuf_t *out, const char *name, const char *labels, const histo_t *h) {
    const char *sep = labels[0] ? "," : "";
    long long cum = 0;
    int rc = 0;
    for (int b = 0; b <= HISTO_BOUNDS && rc == 0; b++) {
        cum += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
        char le[24];
        if (b < HISTO_BOUNDS) {
            snprintf(le, sizeof le, "%g", histo_bounds_s[b]);
        } else {
            snprintf(le, sizeof le, "+Inf");
        }
        rc = dynbuf_addf(out, "%s_bucket{%s%sle=\"%s\"} %lld\n", name, labels, sep, le, cum);
    }
    double sum = (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6;
    const char *l = labels[0] ? "{" : "";
    const char *r = labels[0] ? "}" : "";
    if (rc == 0) {
        rc = dynbuf_addf(out, "%s_sum%s%s%s %.6f\n%s_count%s%s%s %lld\n", name, l, labels, r, sum,
                         name, l, labels, r, cum);
    }
    return rc;
}

char *histo_label_escape(const char *value, char *buf, size_t size) {
    ASSERT(size > 0);
    size_t n = 0;
    for (const char *p = value; *p; p++) {
        const char *rep = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
        size_t len = rep ? 2 : 1;
        if (n + len >= size) {
            break;
        }
        if (rep) {
            memcpy(buf + n, rep, 2);
        } else {
            buf[n] = *p;
        }
        n += len;
    }
    buf[n] = '\0';
    return buf;
}

typedef struct {
    char *labels;
    histo_t h;
} s_slot_t;

struct histo_family {
    char *name;
    char *help;
    size_t capacity;
    s_slot_t *slots;
    atomic_size_t published; /* slots [0, published) are complete and never change labels */
    atomic_llong dropped;
    pthread_mutex_t lock; /* taken only to make a label set */
};

histo_family_t *histo_family_new(const char *name, const char *help, size_t capacity) {
    histo_family_t *f = mem_calloc(1, sizeof *f);
    f->name = mem_strdup(name);
    f->help = mem_strdup(help);
    f->capacity = capacity;
    f->slots = mem_calloc(capacity ? capacity : 1, sizeof *f->slots);
    pthread_mutex_init(&f->lock, NULL);
    return f;
}

static histo_t *s_find(histo_family_t *f, const char *labels, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) {
        if (!strcmp(f->slots[i].labels, labels)) {
            return &f->slots[i].h;
        }
    }
    return NULL;
}

histo_t *histo_family_get(histo_family_t *f, const char *labels) {
    size_t n = atomic_load_explicit(&f->published, memory_order_acquire);
    histo_t *h = s_find(f, labels, 0, n);
    if (h) {
        return h;
    }
    pthread_mutex_lock(&f->lock);
    size_t now = atomic_load_explicit(&f->published, memory_order_relaxed);
    h = s_find(f, labels, n, now);
    if (!h && now < f->capacity) {
        f->slots[now].labels = mem_strdup(labels);
        h = &f->slots[now].h;
        atomic_store_explicit(&f->published, now + 1, memory_order_release);
    }
    pthread_mutex_unlock(&f->lock);
    if (!h) {
        atomic_fetch_add_explicit(&f->dropped, 1, memory_order_relaxed);
    }
    return h;
}

void histo_family_observe_us(histo_family_t *f, const char *labels, int64_t us) {
    histo_t *h = histo_family_get(f, labels);
    if (h) {
        histo_observe_us(h, us);
    }
}

long long histo_family_dropped(const histo_family_t *f) {
    return atomic_load_explicit(&f->dropped, memory_order_relaxed);
}

int histo_family_append(dynbuf_t *out, const histo_family_t *f, const char *prefix) {
    int rc = dynbuf_addf(out, "# HELP %s %s\n# TYPE %s histogram\n", f->name, f->help, f->name);
    size_t n = atomic_load_explicit(&f->published, memory_order_acquire);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *labels = f->slots[i].labels;
        char *all = mem_printf("%s%s%s", prefix, prefix[0] && labels[0] ? "," : "", labels);
        rc = histo_append(out, f->name, all, &f->slots[i].h);
        free(all);
    }
    return rc;
}

void histo_family_destroy(histo_family_t **f_p) {
    histo_family_t *f = *f_p;
    if (!f) {
        return;
    }
    for (size_t i = 0; i < f->capacity; i++) {
        free(f->slots[i].labels);
    }
    free(f->slots);
    free(f->name);
    free(f->help);
    pthread_mutex_destroy(&f->lock);
    free(f);
    *f_p = NULL;
}
