/* acquirer: see acquirer.h. */
#include "acquirer.h"
#include "chatfile.h"
#include "bus.h"
#include "chatstate.h"
#include "dbpool.h"
#include "leasedb.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct acquirer {
    zactor_t *actor;
};

/* One pool of the limiter, as this acquirer passes over it. */
typedef struct {
    leasedb_pool_t kind;
    int64_t first; /* its first slot */
    int64_t size;  /* its slots; 0: no limiter */
    int batch;     /* the next pass's batch (acquirer.h) */
    bool refused;  /* the limiter refused in the last pass (logged once per episode) */
    bool bound;    /* the last quick pass had no slot to spare: none was free, or every free
                      slot it found went to a chat (more may wait for one) */
} s_pool_t;

typedef struct {
    zsock_t *pipe;
    acquirer_args_t args;
    bus_subscriber_t *sub;
    zsock_t *push;
    dbpool_t *pool;
    PGconn *conn;
    bool paused;
    bool wake;            /* a hint arrived, or a pass asked for another: run one */
    bool full;            /* the next pass is a full one (the poll's, or asked for by one) */
    int64_t last_full_ms; /* when the last full pass started */
    int64_t hint_full_at; /* when a full pass is due for a hint; 0: none */
    s_pool_t pools[2];
    int npools;
    int64_t passes;
    int64_t acquired;
    int64_t takeovers;
    int64_t archive_due_ms; /* when the next auto-archive tick is due (monotonic clock) */
} self_t;

static const char *s_pool_name(leasedb_pool_t kind) {
    return kind == LEASEDB_POOL_ROOTS       ? "roots"
           : kind == LEASEDB_POOL_SUBAGENTS ? "subagents"
                                            : "all";
}

/* On each full pass: the agent waits whose wake was lost to a crash (chatstate_agents_sweep),
 * whose resumed parents' ownership hints bring them to a worker like any runnable chat, and
 * the abandoned uploads. */
static void s_sweep(self_t *self) {
    cs_settings_t settings = {.lease_stale_ms = self->args.lease_stale_ms};
    cs_error_t err;
    int resumed = 0;
    if (chatstate_agents_sweep(self->conn, &settings, &self->args.sink, ACQUIRER_SWEEP_MAX,
                               &resumed, &err) != 0) {
        char q[300];
        log_warn("agents_sweep_failed", "worker_id=%s reason=%s", self->args.worker_id,
                 log_quote(err.message, q, sizeof q));
    } else if (resumed > 0) {
        log_info("agents_swept", "worker_id=%s resumed=%d", self->args.worker_id, resumed);
    }
    /* Uploads whose gateway died mid-body (a gateway deletes the ones it refuses itself). */
    int64_t files = chatfile_sweep(self->conn);
    if (files > 0) {
        log_info("chat_files_swept", "worker_id=%s abandoned_uploads=%lld", self->args.worker_id,
                 (long long)files);
    }
}

/* The wall clock plus offset_s (CHATFLEET_TEST_CLOCK_OFFSET_S) as UTC ISO 8601 text, what
 * chatstate_auto_archive takes as now (the date matters, not the monotonic clock). */
static void s_clock_text(int64_t offset_s, char *out, size_t size) {
    struct timespec ts;
    ASSERT(clock_gettime(CLOCK_REALTIME, &ts) == 0);
    time_t t = ts.tv_sec + (time_t)offset_s;
    struct tm tm;
    ASSERT(gmtime_r(&t, &tm));
    char day[32];
    ASSERT(strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm) > 0);
    snprintf(out, size, "%s.%03ldZ", day, ts.tv_nsec / 1000000);
}

/* The auto-archive tick, when one is due (acquirer.h). */
static void s_auto_archive(self_t *self) {
    const acquirer_args_t *a = &self->args;
    int64_t start = id_now_ms();
    if (a->auto_archive_days <= 0 || start < self->archive_due_ms) {
        return;
    }
    char now[48];
    s_clock_text(a->clock_offset_s, now, sizeof now);
    cs_settings_t settings = {.lease_stale_ms = a->lease_stale_ms};
    cs_auto_archive_t args = {.now = now,
                              .days = (int)a->auto_archive_days,
                              .batch = (int)a->auto_archive_batch,
                              .worker_id = a->worker_id};
    cs_auto_archive_result_t r;
    cs_error_t err;
    int rc = chatstate_auto_archive(self->conn, &settings, &args, &a->sink, &r, &err);
    /* A full batch may have left more behind: the next full pass ticks again. */
    bool more = rc == 0 && !r.locked_out && r.candidates >= args.batch;
    self->archive_due_ms = more ? start : start + a->auto_archive_interval_ms;
    if (rc != 0) {
        char q[300];
        log_warn("auto_archive_failed", "worker_id=%s now=%s archived=%d reason=%s", a->worker_id,
                 now, r.archived, log_quote(err.message, q, sizeof q));
    } else if (r.archived > 0 || r.skipped > 0) {
        log_info("auto_archive_tick",
                 "worker_id=%s now=%s cutoff=%s candidates=%d archived=%d skipped=%d ms=%lld",
                 a->worker_id, now, r.cutoff, r.candidates, r.archived, r.skipped,
                 (long long)(id_now_ms() - start));
    }
}

/* One acquisition transaction in one pool; a full batch, or a miss worth another look, asks
 * for another pass at once (after a look at the pipe, so that a command never waits behind
 * many): runnable chats that found no worker send no more hints. full: the takeovers of stale
 * leases (the poll's, after its quick pass); otherwise the quick pass (chats without any owner,
 * fairly across users); the pass asked for is full only after a full one that took a lease over
 * (ARCHITECTURE.md §6.2). With titles, the title pass
 * (leasedb_acquire_args_t.titles), a small batch, whose full batch asks for a full pass. -1
 * when the connection broke. */
static int s_pass_pool(self_t *self, s_pool_t *pool, bool full, bool titles) {
    leasedb_acquire_args_t a = {.worker_id = self->args.worker_id,
                                .max_chats = pool->size,
                                .first_slot = pool->first,
                                .pool = pool->kind,
                                .user_max_chats = self->args.user_max_chats,
                                .lease_stale_ms = self->args.lease_stale_ms,
                                .batch = titles ? ACQUIRER_BATCH_SMALL : pool->batch,
                                .sink = &self->args.sink,
                                .quick = !full,
                                .titles = titles};
    leasedb_batch_t b;
    if (leasedb_acquire(self->conn, &a, &b) != 0) {
        dbpool_put(self->pool, self->conn); /* closes a broken connection */
        self->conn = NULL;
        return -1;
    }
    if (!full && !titles) {
        pool->bound = b.free_slots >= 0 && b.selected >= b.free_slots;
    }
    if (b.free_slots == 0) {
        /* Every slot of the pool is held by a fresh lease: the limiter refuses (§6.2). */
        if (!pool->refused) {
            log_info("admission_refused", "worker_id=%s pool=%s first_slot=%lld slots=%lld",
                     self->args.worker_id, s_pool_name(pool->kind), (long long)pool->first,
                     (long long)pool->size);
        }
        pool->refused = true;
        return 0;
    }
    pool->refused = false;
    bool took_over = false;
    for (int i = 0; i < b.count; i++) {
        const leasedb_acquired_t *c = &b.chats[i];
        bool takeover = c->previous[0] != '\0';
        self->acquired++;
        self->takeovers += takeover;
        took_over |= takeover;
        log_info("chat_acquired",
                 "chat_id=%s worker_id=%s runner_id=%s takeover=%d previous=%s slot=%d pass=%s "
                 "pool=%s",
                 c->chat_id, self->args.worker_id, c->runner_id, takeover,
                 takeover ? c->previous : "-", (int)c->slot,
                 titles ? "title"
                 : full ? "full"
                        : "quick",
                 s_pool_name(pool->kind));
        zmsg_t *m = zmsg_new();
        zmsg_addstr(m, "SPAWN");
        zmsg_addmem(m, &c->after, sizeof c->after);
        if (zmsg_send(&m, self->push) != 0) {
            zmsg_destroy(&m);
        }
    }
    bool filled = b.count == a.batch;
    if (titles) {
        /* More title requests than a batch: another full pass at once takes the rest. */
        self->wake |= filled || b.again;
        self->full |= filled || b.again;
        return 0;
    }
    if (!full) {
        pool->batch = filled ? ACQUIRER_BATCH_MAX : ACQUIRER_BATCH_SMALL;
    }
    if (filled || b.again) {
        self->wake = true;
        self->full |= full && took_over;
    }
    return 0;
}

/* A pass over every pool: the quick one, and when full, the takeovers after it, the title
 * pass and the sweep of lost agent wakes. */
static void s_pass(self_t *self) {
    bool full = self->full;
    self->wake = false;
    self->full = false;
    if (self->paused) {
        return;
    }
    self->passes++;
    if (!self->conn) {
        self->conn = dbpool_get(self->pool, -1);
        if (!self->conn) {
            return;
        }
    }
    for (int i = 0; i < self->npools; i++) {
        if (s_pass_pool(self, &self->pools[i], false, false) != 0) {
            return;
        }
    }
    bool bound = false;
    for (int i = 0; i < self->npools; i++) {
        bound |= self->pools[i].bound;
    }
    if (self->args.limiter_full) {
        atomic_store(self->args.limiter_full, bound);
    }
    for (int i = 0; full && i < self->npools; i++) {
        if (s_pass_pool(self, &self->pools[i], true, false) != 0) {
            return;
        }
    }
    /* The poll's pass (and a hint's full pass within a second) also takes idle chats with a
     * title request, for one title call each (ARCHITECTURE.md §7.8). */
    for (int i = 0; full && i < self->npools; i++) {
        if (s_pass_pool(self, &self->pools[i], true, true) != 0) {
            return;
        }
    }
    if (full) {
        s_sweep(self);
        s_auto_archive(self);
    }
}

/* The limiter's pools (ARCHITECTURE.md §6.2): one for every chat, or, with max_subagents, the
 * roots' slots 1..max_chats and the subagents' after them. */
static void s_pools(self_t *self) {
    const acquirer_args_t *a = &self->args;
    bool split = a->max_chats > 0 && a->max_subagents > 0;
    self->pools[0] = (s_pool_t){.kind = split ? LEASEDB_POOL_ROOTS : LEASEDB_POOL_ANY,
                                .first = 1,
                                .size = a->max_chats,
                                .batch = ACQUIRER_BATCH_MAX};
    self->pools[1] = (s_pool_t){.kind = LEASEDB_POOL_SUBAGENTS,
                                .first = a->max_chats + 1,
                                .size = a->max_subagents,
                                .batch = ACQUIRER_BATCH_MAX};
    self->npools = split ? 2 : 1;
}

static void s_actor(zsock_t *pipe, void *argp) {
    /* The first pass may find a backlog: a full batch. */
    self_t self = {.pipe = pipe, .args = *(acquirer_args_t *)argp};
    s_pools(&self);
    self.sub = bus_subscriber_new(self.args.broker_sub);
    ASSERT(self.sub);
    bus_subscriber_subscribe(self.sub, PROTO_TOPIC_OWNERSHIP);
    self.push = zsock_new(ZMQ_PUSH);
    ASSERT(self.push && zsock_connect(self.push, "%s", self.args.inbox) == 0);
    self.pool = dbpool_new(self.args.database_url, "chatfleet-worker acquirer",
                           (int)self.args.statement_timeout_ms, 1);
    zpoller_t *poller = zpoller_new(pipe, bus_subscriber_sock(self.sub), NULL);
    ASSERT(poller);
    zsock_signal(pipe, 0);
    int64_t next_poll = id_now_ms(); /* the first pass runs at once */
    bool terminated = false;
    while (!terminated) {
        int64_t now = id_now_ms();
        int64_t due =
            self.hint_full_at && self.hint_full_at < next_poll ? self.hint_full_at : next_poll;
        int timeout = self.wake ? 0 : (int)(due > now ? due - now : 0);
        void *which = zpoller_wait(poller, timeout);
        if (which == pipe) {
            char *cmd = zstr_recv(pipe);
            if (!cmd || streq(cmd, "$TERM")) {
                terminated = true;
            } else if (streq(cmd, "PAUSE")) {
                self.paused = true;
                zstr_send(pipe, "PAUSED");
            } else if (streq(cmd, "STATUS")) {
                zsock_send(pipe, "888", (uint64_t)self.passes, (uint64_t)self.acquired,
                           (uint64_t)self.takeovers);
            }
            zstr_free(&cmd);
            continue;
        }
        bool hinted = false;
        if (which == bus_subscriber_sock(self.sub)) {
            wire_msg_t msg;
            while (bus_subscriber_recv(self.sub, &msg, 0) == 1) {
                hinted |= msg.type == WIRE_OWNERSHIP;
                wire_msg_clear(&msg);
            }
            self.wake |= hinted;
            if (!self.wake) {
                continue;
            }
        }
        now = id_now_ms();
        bool first_hint = false;
        if (hinted && !self.hint_full_at) {
            /* A hint may name a chat whose lease went stale (a message to a crashed worker's
             * chat), which only a full pass finds: one runs within ACQUIRER_HINT_FULL_MS of
             * the hint, and at most one per that interval for hints. It never runs in the
             * hint's own turn: the quick pass goes first, so a new chat does not wait for the
             * full pass's scan, and the full one follows at once when it is due. */
            int64_t at = self.last_full_ms + ACQUIRER_HINT_FULL_MS;
            self.hint_full_at = at > now ? at : now;
            first_hint = true;
        }
        bool full_due =
            now >= next_poll || (self.hint_full_at && now >= self.hint_full_at && !first_hint);
        if (self.wake || full_due) {
            self.full |= full_due;
            if (self.full) {
                self.last_full_ms = now;
                self.hint_full_at = 0;
            }
            s_pass(&self);
            if (id_now_ms() >= next_poll) {
                next_poll = id_now_ms() + self.args.poll_ms;
            }
        }
    }
    zpoller_destroy(&poller);
    dbpool_put(self.pool, self.conn);
    dbpool_destroy(&self.pool);
    zsock_destroy(&self.push);
    bus_subscriber_destroy(&self.sub);
}

acquirer_t *acquirer_new(const acquirer_args_t *args) {
    acquirer_t *self = mem_calloc(1, sizeof *self);
    self->actor = zactor_new(s_actor, (void *)args);
    ASSERT(self->actor);
    return self;
}

void acquirer_destroy(acquirer_t **self_p) {
    acquirer_t *self = *self_p;
    if (!self) {
        return;
    }
    zactor_destroy(&self->actor);
    free(self);
    *self_p = NULL;
}

int acquirer_pause(acquirer_t *self) {
    if (zstr_send(self->actor, "PAUSE") != 0) {
        return -1;
    }
    char *reply = zstr_recv(self->actor);
    int rc = reply && streq(reply, "PAUSED") ? 0 : -1;
    zstr_free(&reply);
    return rc;
}

int acquirer_status(acquirer_t *self, acquirer_status_t *out) {
    uint64_t p = 0, a = 0, t = 0;
    if (zstr_send(self->actor, "STATUS") != 0 || zsock_recv(self->actor, "888", &p, &a, &t) != 0) {
        return -1;
    }
    out->passes = (int64_t)p;
    out->acquired = (int64_t)a;
    out->takeovers = (int64_t)t;
    return 0;
}
