/* ratelog: per-kind token buckets for log lines; see ratelog.h. */
#include "ratelog.h"
#include "mem.h"

#include <stdlib.h>

typedef struct {
    const char *kind;
    int64_t tokens;
    int64_t last_refill_ms;
    int64_t suppressed;
} s_bucket_t;

typedef struct {
    uint64_t hash; /* of the peer's text; 0: empty */
    int64_t last_ms;
    int64_t repeats;
} s_peer_t;

struct ratelog {
    s_bucket_t buckets[RATELOG_KINDS_MAX];
    s_peer_t peers[RATELOG_PEERS];
    int n;
    int64_t suppressed_total;
};

ratelog_t *ratelog_new(void) {
    return mem_calloc(1, sizeof(ratelog_t));
}

void ratelog_destroy(ratelog_t **self_p) {
    free(*self_p);
    *self_p = NULL;
}

static s_bucket_t *s_bucket(ratelog_t *self, const char *kind, int64_t now_ms) {
    for (int i = 0; i < self->n; i++) {
        if (self->buckets[i].kind == kind) {
            return &self->buckets[i];
        }
    }
    if (self->n == RATELOG_KINDS_MAX) {
        return &self->buckets[RATELOG_KINDS_MAX - 1];
    }
    s_bucket_t *b = &self->buckets[self->n++];
    b->kind = kind;
    b->tokens = RATELOG_BURST;
    b->last_refill_ms = now_ms;
    return b;
}

bool ratelog_allow(ratelog_t *self, const char *kind, int64_t now_ms, int64_t *suppressed) {
    s_bucket_t *b = s_bucket(self, kind, now_ms);
    int64_t refill = (now_ms - b->last_refill_ms) / RATELOG_INTERVAL_MS;
    if (refill > 0) {
        b->tokens = b->tokens + refill > RATELOG_BURST ? RATELOG_BURST : b->tokens + refill;
        b->last_refill_ms += refill * RATELOG_INTERVAL_MS;
    }
    if (b->tokens == 0) {
        b->suppressed++;
        self->suppressed_total++;
        return false;
    }
    b->tokens--;
    *suppressed = b->suppressed;
    b->suppressed = 0;
    return true;
}

int64_t ratelog_suppressed_total(const ratelog_t *self) {
    return self->suppressed_total;
}

bool ratelog_allow_peer(ratelog_t *self, const char *kind, const char *peer, int64_t now_ms,
                        int64_t *suppressed, int64_t *repeats) {
    uint64_t h = 1469598103934665603ULL;
    for (const char *c = peer; *c; c++) {
        h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    }
    h |= 1; /* never 0, the empty slot */
    s_peer_t *p = &self->peers[h % RATELOG_PEERS];
    if (p->hash == h && now_ms - p->last_ms < RATELOG_PEER_MS) {
        p->repeats++;
        self->suppressed_total++;
        return false;
    }
    if (!ratelog_allow(self, kind, now_ms, suppressed)) {
        return false;
    }
    *repeats = p->hash == h ? p->repeats : 0;
    p->hash = h;
    p->last_ms = now_ms;
    p->repeats = 0;
    return true;
}
