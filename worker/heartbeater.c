/* heartbeater: see heartbeater.h. */
#include "heartbeater.h"
#include "acquirer.h"
#include "db.h"
#include "dbpool.h"
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

static char *s_array(const lease_t *leases, size_t n, bool runner) {
    size_t cap = n * (ID_UUID_LEN + 1) + 3;
    char *buf = mem_alloc(cap);
    size_t off = 0;
    buf[off++] = '{';
    for (size_t i = 0; i < n; i++) {
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? "," : "",
                                runner ? leases[i].runner_id : leases[i].chat_id);
    }
    snprintf(buf + off, cap - off, "}");
    return buf;
}

/* Renews; returns the renewed rows, or NULL when the tick failed. */
static PGresult *s_renew(self_t *self, const lease_t *leases, size_t n) {
    PGconn *conn = self->conn;
    char err[200];
    char q[240];
    char bound[24];
    char stale[24];
    snprintf(bound, sizeof bound, "%lld", (long long)(self->args.lease_stale_ms / 3));
    snprintf(stale, sizeof stale, "%lld", (long long)self->args.lease_stale_ms);
    const char *bp[] = {bound};
    if (db_exec(conn, err, sizeof err, "BEGIN", 0, NULL) != DB_OK ||
        db_exec(conn, err, sizeof err,
                "SELECT set_config('lock_timeout', $1, true),"
                " set_config('statement_timeout', $1, true)",
                1, bp) != DB_OK ||
        db_exec(conn, err, sizeof err,
                "SELECT pg_advisory_xact_lock(" ACQUIRER_LIMITER_LOCK_KEY ")", 0, NULL) != DB_OK) {
        log_warn("heartbeat_failed", "stage=lock reason=%s", log_quote(err, q, sizeof q));
        PQclear(PQexec(conn, "ROLLBACK"));
        return NULL;
    }
    char *chats = s_array(leases, n, false);
    char *runners = s_array(leases, n, true);
    const char *p[] = {chats, runners, stale, self->args.worker_id};
    db_err_t e;
    /* statement_timestamp() is read after the lock was granted, so a lease an admission
     * counted as stale cannot be renewed afterwards (ARCHITECTURE.md §6.1). */
    PGresult *res = db_query(
        conn, &e, err, sizeof err,
        "UPDATE chat_heartbeats hb SET heartbeat_at = statement_timestamp()"
        " FROM unnest($1::uuid[], $2::uuid[]) AS runners(chat_id, runner_id)"
        " JOIN chats c ON c.id = runners.chat_id AND c.runner_id = runners.runner_id"
        " AND c.worker_id = $4::uuid"
        " WHERE hb.chat_id = runners.chat_id AND hb.runner_id = runners.runner_id"
        " AND hb.heartbeat_at > statement_timestamp() - $3::bigint * interval '1 millisecond'"
        " RETURNING hb.chat_id::text, hb.runner_id::text",
        4, p);
    free(chats);
    free(runners);
    if (!res || db_exec(conn, err, sizeof err, "COMMIT", 0, NULL) != DB_OK) {
        log_warn("heartbeat_failed", "stage=renew reason=%s", log_quote(err, q, sizeof q));
        PQclear(res);
        PQclear(PQexec(conn, "ROLLBACK"));
        return NULL;
    }
    return res;
}

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
        PGresult *res = s_renew(self, leases, n);
        if (!res) {
            self->failed++;
            dbpool_put(self->pool, self->conn);
            self->conn = NULL;
            free(leases);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            bool renewed = false;
            for (int r = 0; r < PQntuples(res) && !renewed; r++) {
                renewed = !strcmp(PQgetvalue(res, r, 0), leases[i].chat_id) &&
                          !strcmp(PQgetvalue(res, r, 1), leases[i].runner_id);
            }
            if (renewed) {
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
        PQclear(res);
    }
    free(leases);
    char stale[24];
    snprintf(stale, sizeof stale, "%lld", (long long)self->args.lease_stale_ms);
    const char *sp[] = {stale};
    char err[200];
    if (db_exec(self->conn, err, sizeof err,
                "DELETE FROM chat_heartbeats"
                " WHERE heartbeat_at < now() - $1::bigint * interval '1 millisecond'",
                1, sp) != DB_OK) {
        char q[240];
        log_warn("heartbeat_sweep_failed", "reason=%s", log_quote(err, q, sizeof q));
    }
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
