/*
 * histo: lock-free latency histograms in Prometheus text form. One bucket layout for every
 * duration the processes measure (1 ms to 10 min, then +Inf); an observation is a handful of
 * relaxed atomic adds, so any thread may observe while another formats. A family holds the
 * histograms of one metric by label set, made on first use up to a fixed capacity; finding a
 * label set already made takes no lock.
 */
#ifndef CHATFLEET_HISTO_H
#define CHATFLEET_HISTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dynbuf.h"

#define HISTO_BOUNDS 18 /* finite upper bounds; the bucket after them is +Inf */
extern const double histo_bounds_s[HISTO_BOUNDS];

typedef struct {
    atomic_llong buckets[HISTO_BOUNDS + 1]; /* not cumulative: one count per bucket */
    atomic_llong sum_us;
} histo_t;

/* Counts one duration of us microseconds (a negative one as 0) in the first bucket whose
 * bound it does not exceed, and adds it to the sum. */
void histo_observe_us(histo_t *h, int64_t us);

/* The count of observations so far. */
long long histo_count(const histo_t *h);

/* Appends h's _bucket (cumulative, le="..." last), _sum (seconds) and _count lines for the
 * metric name with labels (`k="v",...`, already escaped; "" for none). 0, or -1 when out
 * passes its cap. */
int histo_append(dynbuf_t *out, const char *name, const char *labels, const histo_t *h);

/* value as a Prometheus label value (backslash, double quote and newline escaped), written
 * to buf (always NUL-terminated; a value that does not fit is cut at a whole character
 * escape). Returns buf. */
char *histo_label_escape(const char *value, char *buf, size_t size);

typedef struct histo_family histo_family_t;

/* A family of histograms named name (its # HELP text help), at most capacity label sets. */
histo_family_t *histo_family_new(const char *name, const char *help, size_t capacity);

/* The histogram of the label set labels (`k="v",...`, escaped), made when first asked for;
 * NULL when the family is full (counted in histo_family_dropped). */
histo_t *histo_family_get(histo_family_t *f, const char *labels);

/* histo_family_get, then histo_observe_us when there is room. */
void histo_family_observe_us(histo_family_t *f, const char *labels, int64_t us);

/* Observations refused because the family was full. */
long long histo_family_dropped(const histo_family_t *f);

/* Appends the family's # HELP and # TYPE lines and every label set's histogram, each label
 * set prefixed with prefix (`worker="..."`, or "" for none). 0, or -1 as histo_append. */
int histo_family_append(dynbuf_t *out, const histo_family_t *f, const char *prefix);

void histo_family_destroy(histo_family_t **f_p);

#endif
