/* acquirer: see acquirer.h. */
#include "acquirer.h"
#include "bus.h"
#include "chatstate.h"
#include "db.h"
#include "dbpool.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

struct acquirer {
    zactor_t *actor;
};

typedef struct {
    zsock_t *pipe;
    acquirer_args_t args;
    bus_subscriber_t *sub;
    zsock_t *push;
    dbpool_t *pool;
    PGconn *conn;
    bool paused;
    bool wake;    /* a hint arrived: run a pass */
    bool refused; /* the limiter refused during the last pass (logged once per episode) */
    int64_t passes;
    int64_t acquired;
    int64_t takeovers;
} self_t;

static void s_rollback(PGconn *conn) {
    PQclear(PQexec(conn, "ROLLBACK"));
}

/* One chat: 1 when acquired, 0 when there is nothing to take (or no capacity), -1 on a
 * failure (the connection is dropped and the pass ends). */
static int s_acquire_one(self_t *self) {
    PGconn *conn = self->conn;
    char err[200];
    char q[240];
    char lock_ms[24];
    char stale[24];
    snprintf(lock_ms, sizeof lock_ms, "%d", ACQUIRER_LOCK_TIMEOUT_MS);
    snprintf(stale, sizeof stale, "%lld", (long long)self->args.lease_stale_ms);
    const char *lp[] = {lock_ms};
    if (db_exec(conn, err, sizeof err, "BEGIN", 0, NULL) != DB_OK ||
        db_exec(conn, err, sizeof err, "SELECT set_config('lock_timeout', $1, true)", 1, lp) !=
            DB_OK ||
        db_exec(conn, err, sizeof err,
                "SELECT pg_advisory_xact_lock(" ACQUIRER_LIMITER_LOCK_KEY ")", 0, NULL) != DB_OK) {
        log_warn("acquire_failed", "stage=limiter reason=%s", log_quote(err, q, sizeof q));
        s_rollback(conn);
        return -1;
    }
    db_err_t e;
    const char *sp[] = {stale};
    if (self->args.max_chats > 0) {
        /* A chat holds a slot while a worker owns it with a fresh heartbeat, whatever its
         * state (ARCHITECTURE.md §6.2). */
        PGresult *res = db_query(conn, &e, err, sizeof err,
                                 "SELECT count(*) FROM chat_heartbeats h JOIN chats c"
                                 " ON c.id = h.chat_id AND c.runner_id = h.runner_id"
                                 " AND c.worker_id IS NOT NULL WHERE h.heartbeat_at >"
                                 " statement_timestamp() - $1::bigint * interval '1 millisecond'",
                                 1, sp);
        if (!res) {
            log_warn("acquire_failed", "stage=admission reason=%s", log_quote(err, q, sizeof q));
            s_rollback(conn);
            return -1;
        }
        int64_t held = db_int64(res, 0, 0);
        PQclear(res);
        if (held >= self->args.max_chats) {
            if (!self->refused) {
                log_info("admission_refused", "worker_id=%s held=%lld max_chats=%lld",
                         self->args.worker_id, (long long)held, (long long)self->args.max_chats);
            }
            self->refused = true;
            s_rollback(conn);
            return 0;
        }
    }
    self->refused = false;
    PGresult *res = db_query(
        conn, &e, err, sizeof err,
        "SELECT c.id::text, coalesce(c.worker_id::text, '') FROM chats c"
        " WHERE c.archived = false AND c.status IN ('running', 'interrupting', 'requires_action')"
        " AND (c.worker_id IS NULL OR c.runner_id IS NULL OR NOT EXISTS (SELECT 1 FROM"
        " chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id"
        " AND h.heartbeat_at > statement_timestamp() - $1::bigint * interval '1 millisecond'))"
        " ORDER BY c.updated_at, c.id LIMIT 1 FOR UPDATE OF c SKIP LOCKED",
        1, sp);
    if (!res) {
        log_warn("acquire_failed", "stage=select reason=%s", log_quote(err, q, sizeof q));
        s_rollback(conn);
        return -1;
    }
    if (PQntuples(res) != 1) {
        PQclear(res);
        s_rollback(conn);
        return 0;
    }
    char chat_id[ID_UUID_LEN + 1];
    char previous[ID_UUID_LEN + 1];
    snprintf(chat_id, sizeof chat_id, "%s", PQgetvalue(res, 0, 0));
    snprintf(previous, sizeof previous, "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    char runner_id[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(runner_id) == 0);
    /* The bundle joins the transaction that holds the limiter lock and the row; its COMMIT
     * ends both. */
    cs_error_t cerr;
    chatstate_t *cs = chatstate_join(conn, chat_id, &cerr);
    int rc = cs ? chatstate_acquire(cs, self->args.worker_id, runner_id, &cerr) : -1;
    hint_update_t after;
    if (cs && rc == 0) {
        rc = chatstate_commit(&cs, &self->args.sink, &after, &cerr);
    }
    chatstate_destroy(&cs);
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        s_rollback(conn);
    }
    if (rc != 0) {
        log_warn("acquire_failed", "stage=acquire chat_id=%s reason=%s", chat_id,
                 log_quote(cerr.message, q, sizeof q));
        /* A conflict (the lease was renewed meanwhile) is not a broken connection. */
        return cerr.rc == CS_CONFLICT ? 0 : -1;
    }
    bool takeover = previous[0] != '\0';
    self->acquired++;
    self->takeovers += takeover;
    log_info("chat_acquired", "chat_id=%s worker_id=%s runner_id=%s takeover=%d previous=%s",
             chat_id, self->args.worker_id, runner_id, takeover, takeover ? previous : "-");
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, "SPAWN");
    zmsg_addmem(m, &after, sizeof after);
    if (zmsg_send(&m, self->push) != 0) {
        zmsg_destroy(&m);
    }
    return 1;
}

static void s_pass(self_t *self) {
    self->wake = false;
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
    int i = 0;
    for (; i < ACQUIRER_BATCH_MAX; i++) {
        int rc = s_acquire_one(self);
        if (rc < 0) {
            dbpool_put(self->pool, self->conn); /* closes a broken connection */
            self->conn = NULL;
            break;
        }
        if (rc == 0) {
            break;
        }
        /* A command (PAUSE) must not wait behind a long batch. */
        if (zsock_events(self->pipe) & ZMQ_POLLIN) {
            self->wake = true;
            break;
        }
    }
    /* A full batch means more may be waiting, and queued chats send no more hints: pass
     * again at once (after a look at the pipe) instead of waiting for the poll. */
    if (i == ACQUIRER_BATCH_MAX) {
        self->wake = true;
    }
}

static void s_actor(zsock_t *pipe, void *argp) {
    self_t self = {.pipe = pipe, .args = *(acquirer_args_t *)argp};
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
        int timeout = self.wake ? 0 : (int)(next_poll > now ? next_poll - now : 0);
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
        if (which == bus_subscriber_sock(self.sub)) {
            wire_msg_t msg;
            while (bus_subscriber_recv(self.sub, &msg, 0) == 1) {
                self.wake |= msg.type == WIRE_OWNERSHIP;
                wire_msg_clear(&msg);
            }
            if (!self.wake) {
                continue;
            }
        }
        if (self.wake || id_now_ms() >= next_poll) {
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
