/*
 * ratelog: log lines about network input at a bounded rate (broker/README.md "Counters").
 *
 * Each kind of event (a short name, e.g. "forbidden") has a token bucket: RATELOG_BURST
 * lines at once, then one per RATELOG_INTERVAL_MS. A line that does not fit is suppressed
 * and counted; the next line of that kind that is written carries suppressed=N. So a flood
 * of one kind costs about one log line per second, never one per message, while the first
 * occurrences are always seen. Counting the events themselves is the caller's job.
 */
#ifndef CHATFLEET_RATELOG_H
#define CHATFLEET_RATELOG_H

#include <stdbool.h>
#include <stdint.h>

#define RATELOG_BURST       20
#define RATELOG_INTERVAL_MS 1000
#define RATELOG_KINDS_MAX   16
#define RATELOG_PEER_MS     10000 /* one line per peer (ratelog_allow_peer) per this */
#define RATELOG_PEERS       256   /* peers remembered (direct-mapped by hash) */

typedef struct ratelog ratelog_t;

ratelog_t *ratelog_new(void);
void ratelog_destroy(ratelog_t **self_p);

/* Whether a line of kind may be written at now_ms; when it may, *suppressed is set to the
 * lines of that kind suppressed since the last one written (to be logged with it). Kinds are
 * compared by pointer value: pass string literals. Beyond RATELOG_KINDS_MAX kinds, every
 * unknown kind shares one bucket. */
bool ratelog_allow(ratelog_t *self, const char *kind, int64_t now_ms, int64_t *suppressed);

/* As ratelog_allow, but first at most one line per peer (any text naming it, e.g. reason,
 * address and key) per RATELOG_PEER_MS, so that a few loud peers cannot use up the kind's
 * bucket and hide the others; *repeats is set to the lines of that peer held back since its
 * last one (RATELOG_PEERS are remembered; two peers sharing a slot are told apart by a hash
 * of the text, and each push the other out). */
bool ratelog_allow_peer(ratelog_t *self, const char *kind, const char *peer, int64_t now_ms,
                        int64_t *suppressed, int64_t *repeats);

/* Lines suppressed so far, over all kinds. */
int64_t ratelog_suppressed_total(const ratelog_t *self);

#endif
