/* heartbeater: see heartbeater.h. */
#include "heartbeater.h"
#include "dbpool.h"
#include "leasedb.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

struct heartbeater {
    zactor_t *actor;
};

typedef struct {
    zsock_t *pipe;
    heartbeater_args_t args;
    zsock_t *push;
    dbpool_t *pool;
    PGconn *conn;
    int64_t ticks;
    int64_t failed;
    int64_t renewed;
    int64_t lost;
} self_t;

static void s_tick(self_t *self) {
    self->ticks++;
    if (!self->conn) {
        self->conn = dbpool_get(self->pool, -1);
        if (!self->conn) {
            self->failed++;
            return;
        }
    }
    lease_t *leases = NULL;
    size_t n = leaseset_snapshot(self->args.leases, &leases);
    if (n > 0) {
        bool *renewed = mem_calloc(n, sizeof *renewed);
        int rc = leasedb_renew(self->conn, self->args.worker_id, leases, n,
                               self->args.lease_stale_ms, self->args.lease_stale_ms / 3, renewed);
        if (rc < 0) {
            /* A failed tick renews nothing and cleans nothing up; the next one retries. */
            self->failed++;
            dbpool_put(self->pool, self->conn);
            self->conn = NULL;
            free(renewed);
            free(leases);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            if (renewed[i]) {
                self->renewed++;
                continue;
            }
            self->lost++;
            log_info("lease_lost", "chat_id=%s runner_id=%s worker_id=%s", leases[i].chat_id,
                     leases[i].runner_id, self->args.worker_id);
            zmsg_t *m = zmsg_new();
            zmsg_addstr(m, "CLEANUP");
            zmsg_addstr(m, leases[i].chat_id);
            zmsg_addstr(m, leases[i].runner_id);
            if (zmsg_send(&m, self->push) != 0) {
                zmsg_destroy(&m);
            }
        }
        free(renewed);
    }
    free(leases);
    (void)leasedb_sweep(self->conn, self->args.lease_stale_ms); /* logged when it fails */
}

static void s_actor(zsock_t *pipe, void *argp) {
    self_t self = {.pipe = pipe, .args = *(heartbeater_args_t *)argp};
    self.push = zsock_new(ZMQ_PUSH);
    ASSERT(self.push && zsock_connect(self.push, "%s", self.args.inbox) == 0);
    self.pool = dbpool_new(self.args.database_url, "chatfleet-worker heartbeater",
                           (int)(self.args.lease_stale_ms / 3), 1);
    zpoller_t *poller = zpoller_new(pipe, NULL);
    ASSERT(poller);
    zsock_signal(pipe, 0);
    int64_t next = id_now_ms() + self.args.heartbeat_ms;
    bool terminated = false;
    while (!terminated) {
        int64_t now = id_now_ms();
        void *which = zpoller_wait(poller, (int)(next > now ? next - now : 0));
        if (which == pipe) {
            char *cmd = zstr_recv(pipe);
            if (!cmd || streq(cmd, "$TERM")) {
                terminated = true;
            } else if (streq(cmd, "STATUS")) {
                zsock_send(pipe, "8888", (uint64_t)self.ticks, (uint64_t)self.failed,
                           (uint64_t)self.renewed, (uint64_t)self.lost);
            }
            zstr_free(&cmd);
            continue;
        }
        if (id_now_ms() >= next) {
            s_tick(&self);
            next = id_now_ms() + self.args.heartbeat_ms;
        }
    }
    zpoller_destroy(&poller);
    dbpool_put(self.pool, self.conn);
    dbpool_destroy(&self.pool);
    zsock_destroy(&self.push);
}

heartbeater_t *heartbeater_new(const heartbeater_args_t *args) {
    heartbeater_t *self = mem_calloc(1, sizeof *self);
    self->actor = zactor_new(s_actor, (void *)args);
    ASSERT(self->actor);
    return self;
}

void heartbeater_destroy(heartbeater_t **self_p) {
    heartbeater_t *self = *self_p;
    if (!self) {
        return;
    }
    zactor_destroy(&self->actor);
    free(self);
    *self_p = NULL;
}

int heartbeater_status(heartbeater_t *self, heartbeater_status_t *out) {
    uint64_t t = 0, f = 0, r = 0, l = 0;
    if (zstr_send(self->actor, "STATUS") != 0 ||
        zsock_recv(self->actor, "8888", &t, &f, &r, &l) != 0) {
        return -1;
    }
    out->ticks = (int64_t)t;
    out->failed = (int64_t)f;
    out->renewed = (int64_t)r;
    out->lost = (int64_t)l;
    return 0;
}
