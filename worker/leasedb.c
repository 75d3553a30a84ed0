/* leasedb: see leasedb.h. */
#include "leasedb.h"
#include "chatstate.h"
#include "db.h"
#include "log.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_ERR_LEN 200

/* BEGIN with the transaction-local bounds; 0 or -1 (err filled, nothing left open). A bound
 * of 0 is left as the session has it. The values are integers, so they can stand in the
 * simple-protocol text. */
static int s_begin(PGconn *conn, int64_t lock_ms, int64_t statement_ms, int64_t idle_ms, char *err,
                   int errlen) {
    char sql[320];
    int off = snprintf(sql, sizeof sql,
                       "BEGIN; SELECT set_config('lock_timeout', '%lld', true),"
                       " set_config('idle_in_transaction_session_timeout', '%lld', true)",
                       (long long)lock_ms, (long long)idle_ms);
    if (statement_ms > 0) {
        snprintf(sql + off, sizeof sql - (size_t)off,
                 ", set_config('statement_timeout', '%lld', true)", (long long)statement_ms);
    }
    PGresult *res = PQexec(conn, sql);
    int rc = PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : -1;
    if (rc != 0) {
        snprintf(err, (size_t)errlen, "%s",
                 res && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
                                                     : PQerrorMessage(conn));
    }
    PQclear(res);
    if (rc != 0 && PQtransactionStatus(conn) != PQTRANS_IDLE) {
        PQclear(PQexec(conn, "ROLLBACK"));
    }
    return rc;
}

/* COMMIT, and 0 only when it committed: COMMIT of a failed transaction "succeeds" as a
 * ROLLBACK. */
static int s_commit(PGconn *conn, char *err, int errlen) {
    if (PQtransactionStatus(conn) != PQTRANS_INTRANS) {
        snprintf(err, (size_t)errlen, "transaction failed before COMMIT");
        PQclear(PQexec(conn, "ROLLBACK"));
        return -1;
    }
    PGresult *res = PQexec(conn, "COMMIT");
    int rc =
        PQresultStatus(res) == PGRES_COMMAND_OK && !strcmp(PQcmdStatus(res), "COMMIT") ? 0 : -1;
    if (rc != 0) {
        snprintf(err, (size_t)errlen, "%s",
                 res && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
                                                     : PQerrorMessage(conn));
    }
    PQclear(res);
    return rc;
}

static int s_cmp_slot(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a;
    int32_t y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Up to want slots of 1..max not held by a fresh heartbeat row, as of now, ascending; the
 * count, or -1. The scan starts at a random slot and wraps around, so that workers looking at
 * once mostly pick different slots and a scan stops early while free slots are plenty. Each
 * slot returned is also this transaction's by a transaction-scoped advisory lock taken without
 * waiting, so that workers acquiring at the same time skip each other's candidates instead of
 * waiting on each other's uncommitted inserts in the slot index (the index still decides). */
static int s_free_slots(PGconn *conn, const leasedb_acquire_args_t *a, int want, int32_t *out,
                        char *err, int errlen) {
    uint32_t r = 0;
    if (id_random(&r, sizeof r) != 0) {
        r = (uint32_t)id_now_ms();
    }
    char start[16];
    char max[24];
    char stale[24];
    char limit[16];
    snprintf(start, sizeof start, "%lld", 1 + (long long)(r % (uint64_t)a->max_chats));
    snprintf(max, sizeof max, "%lld", (long long)a->max_chats);
    snprintf(stale, sizeof stale, "%lld", (long long)a->lease_stale_ms);
    snprintf(limit, sizeof limit, "%d", want);
    char lock_class[16];
    snprintf(lock_class, sizeof lock_class, "%d", LEASEDB_SLOT_LOCK_CLASS);
    const char *p[] = {start, max, stale, limit, lock_class};
    db_err_t e;
    PGresult *res = db_query(
        conn, &e, err, errlen,
        "SELECT g.s FROM (SELECT generate_series($1::int, $2::int)"
        " UNION ALL SELECT generate_series(1, $1::int - 1)) AS g(s)"
        " WHERE NOT EXISTS (SELECT 1 FROM chat_heartbeats h WHERE h.slot = g.s"
        " AND h.heartbeat_at > statement_timestamp() - $3::bigint * interval '1 millisecond')"
        " AND pg_try_advisory_xact_lock($5::int, g.s) LIMIT $4::int",
        5, p);
    if (!res) {
        return -1;
    }
    int n = PQntuples(res);
    for (int i = 0; i < n && i < want; i++) {
        out[i] = (int32_t)db_int64(res, i, 0);
    }
    PQclear(res);
    n = n < want ? n : want;
    /* Ascending: every transaction claims slots in one global order (cs_slots_t). */
    qsort(out, (size_t)n, sizeof *out, s_cmp_slot);
    return n;
}

/* The chats of the batch, locked: (id, previous worker or ""), oldest first. */
static PGresult *s_select(PGconn *conn, const leasedb_acquire_args_t *a, int limit, char *err,
                          int errlen) {
    char stale[24];
    char lim[16];
    snprintf(stale, sizeof stale, "%lld", (long long)a->lease_stale_ms);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[] = {stale, lim};
    db_err_t e;
    return db_query(
        conn, &e, err, errlen,
        "SELECT c.id::text, coalesce(c.worker_id::text, '') FROM chats c"
        " WHERE c.archived = false AND c.status IN ('running', 'interrupting', 'requires_action')"
        " AND (c.worker_id IS NULL OR c.runner_id IS NULL OR NOT EXISTS (SELECT 1 FROM"
        " chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id"
        " AND h.heartbeat_at > statement_timestamp() - $1::bigint * interval '1 millisecond'))"
        " ORDER BY c.updated_at, c.id LIMIT $2::int FOR UPDATE OF c SKIP LOCKED",
        2, p);
}

/* Why one chat was not taken, for the loop below. */
typedef enum {
    S_TAKEN,
    S_MISSED, /* this chat only: go on with the next */
    S_RETRY,  /* a slot's wait ran out: this chat again, with the next candidates */
    S_NO_SLOT,
    S_BROKEN, /* the transaction or the connection failed */
} s_outcome_t;

static s_outcome_t s_take(PGconn *conn, const leasedb_acquire_args_t *a, const char *chat,
                          cs_slots_t *slots, leasedb_acquired_t *got, cs_hints_t *hints) {
    if (slots && slots->next >= slots->count) {
        return S_NO_SLOT;
    }
    char runner[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(runner) == 0);
    int tried = slots ? slots->next : 0;
    cs_error_t cerr;
    chatstate_t *cs = chatstate_nest(conn, chat, &cerr);
    int rc = cs ? chatstate_acquire_slot(cs, a->worker_id, runner, slots, &cerr) : -1;
    if (rc == 0) {
        rc = chatstate_release(&cs, hints, &cerr);
    }
    chatstate_destroy(&cs);
    if (rc == 0) {
        snprintf(got->chat_id, sizeof got->chat_id, "%s", chat);
        snprintf(got->runner_id, sizeof got->runner_id, "%s", runner);
        got->slot = slots ? slots->taken : 0;
        got->after = hints->update;
        return S_TAKEN;
    }
    if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_INTRANS) {
        char q[320];
        log_warn("acquire_failed", "stage=acquire chat_id=%s reason=%s", chat,
                 log_quote(cerr.message, q, sizeof q));
        return S_BROKEN;
    }
    bool slot_tried = slots && slots->next > tried;
    char q[320];
    log_debug("acquire_missed", "chat_id=%s rc=%d reason=%s", chat, (int)cerr.rc,
              log_quote(cerr.message, q, sizeof q));
    if (slot_tried && cerr.rc == CS_RETRY) {
        return slots->next < slots->count ? S_RETRY : S_NO_SLOT;
    }
    if (slot_tried && cerr.rc == CS_CONFLICT && slots->next >= slots->count) {
        return S_NO_SLOT;
    }
    return S_MISSED;
}

int leasedb_acquire(PGconn *conn, const leasedb_acquire_args_t *a, leasedb_batch_t *out) {
    memset(out, 0, sizeof *out);
    out->free_slots = -1;
    ASSERT(a->batch >= 1 && a->batch <= LEASEDB_BATCH_MAX && a->lease_stale_ms > 0);
    char err[S_ERR_LEN];
    char q[S_ERR_LEN + 40];
    bool limiter = a->max_chats > 0;
    int64_t idle = a->idle_ms > 0 ? a->idle_ms : a->lease_stale_ms / 3;
    if (s_begin(conn, a->lock_timeout_ms > 0 ? a->lock_timeout_ms : LEASEDB_LOCK_TIMEOUT_MS, 0,
                idle > 0 ? idle : 1, err, sizeof err) != 0) {
        log_warn("acquire_failed", "stage=begin reason=%s", log_quote(err, q, sizeof q));
        return -1;
    }
    /* Twice the batch in candidates: a slot another worker claims first is replaced. */
    int32_t cand[2 * LEASEDB_BATCH_MAX];
    int ncand = 0;
    int limit = a->batch;
    if (limiter) {
        int want = 2 * a->batch;
        if ((int64_t)want > a->max_chats) {
            want = (int)a->max_chats;
        }
        ncand = s_free_slots(conn, a, want, cand, err, sizeof err);
        if (ncand < 0) {
            log_warn("acquire_failed", "stage=slots reason=%s", log_quote(err, q, sizeof q));
            PQclear(PQexec(conn, "ROLLBACK"));
            return -1;
        }
        out->free_slots = ncand;
        if (ncand == 0) {
            PQclear(PQexec(conn, "ROLLBACK"));
            return 0;
        }
        limit = ncand < limit ? ncand : limit;
    }
    PGresult *sel = s_select(conn, a, limit, err, sizeof err);
    if (!sel) {
        log_warn("acquire_failed", "stage=select reason=%s", log_quote(err, q, sizeof q));
        PQclear(PQexec(conn, "ROLLBACK"));
        return -1;
    }
    out->selected = PQntuples(sel);
    cs_slots_t slots = {.slots = cand, .count = ncand};
    cs_hints_t hints[LEASEDB_BATCH_MAX];
    bool stop = false;
    for (int i = 0; i < out->selected && !stop; i++) {
        const char *chat = PQgetvalue(sel, i, 0);
        leasedb_acquired_t *got = &out->chats[out->count];
        s_outcome_t o;
        while ((o = s_take(conn, a, chat, limiter ? &slots : NULL, got, &hints[out->count])) ==
               S_RETRY) {
            out->again = true;
        }
        switch (o) {
            case S_TAKEN:
                snprintf(got->previous, sizeof got->previous, "%s", PQgetvalue(sel, i, 1));
                out->count++;
                break;
            case S_MISSED:
                out->missed++;
                break;
            case S_RETRY: /* not reached: the loop above retries */
            case S_NO_SLOT:
                /* Other workers won the remaining candidates: the rest of the batch waits for
                 * a new look at the slots. */
                out->missed += out->selected - i;
                out->again = true;
                stop = true;
                break;
            case S_BROKEN:
                PQclear(sel);
                PQclear(PQexec(conn, "ROLLBACK"));
                out->count = 0;
                return -1;
        }
    }
    PQclear(sel);
    if (out->count == 0) {
        PQclear(PQexec(conn, "ROLLBACK"));
        return 0;
    }
    if (s_commit(conn, err, sizeof err) != 0) {
        log_warn("acquire_failed", "stage=commit reason=%s", log_quote(err, q, sizeof q));
        out->count = 0;
        return -1;
    }
    for (int i = 0; i < out->count; i++) {
        chatstate_publish(a->sink, &hints[i]);
    }
    return 0;
}

/* "{a,b,...}" of the leases' chat ids or runner ids; caller frees. */
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

int leasedb_renew(PGconn *conn, const char *worker_id, const lease_t *leases, size_t n,
                  int64_t lease_stale_ms, int64_t bound_ms, bool *renewed) {
    memset(renewed, 0, n * sizeof *renewed);
    if (n == 0) {
        return 0;
    }
    char err[S_ERR_LEN];
    char q[S_ERR_LEN + 40];
    if (s_begin(conn, bound_ms, bound_ms, bound_ms, err, sizeof err) != 0) {
        log_warn("heartbeat_failed", "stage=begin reason=%s", log_quote(err, q, sizeof q));
        return -1;
    }
    char *chats = s_array(leases, n, false);
    char *runners = s_array(leases, n, true);
    char stale[24];
    snprintf(stale, sizeof stale, "%lld", (long long)lease_stale_ms);
    const char *p[] = {chats, runners, stale, worker_id};
    db_err_t e;
    /* Only rows fresh when their lock is granted are renewed: the lock is taken in slot
     * order (acquisitions claim slots in that order too, so the two never wait on each other
     * in a cycle), and FOR UPDATE re-checks freshness on the newest version, so a row an
     * acquisition deleted as stale meanwhile is skipped, never revived. */
    PGresult *res = db_query(
        conn, &e, err, sizeof err,
        "WITH mine AS (SELECT hb.chat_id, hb.runner_id FROM chat_heartbeats hb"
        " JOIN unnest($1::uuid[], $2::uuid[]) AS l(chat_id, runner_id)"
        " ON hb.chat_id = l.chat_id AND hb.runner_id = l.runner_id"
        " JOIN chats c ON c.id = l.chat_id AND c.runner_id = l.runner_id"
        " AND c.worker_id = $4::uuid"
        " WHERE hb.heartbeat_at > statement_timestamp() - $3::bigint * interval '1 millisecond'"
        " ORDER BY hb.slot, hb.chat_id FOR UPDATE OF hb)"
        " UPDATE chat_heartbeats hb SET heartbeat_at = statement_timestamp() FROM mine"
        " WHERE hb.chat_id = mine.chat_id AND hb.runner_id = mine.runner_id"
        " RETURNING hb.chat_id::text, hb.runner_id::text",
        4, p);
    free(chats);
    free(runners);
    if (!res || s_commit(conn, err, sizeof err) != 0) {
        log_warn("heartbeat_failed", "stage=renew reason=%s", log_quote(err, q, sizeof q));
        PQclear(res);
        if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
            PQclear(PQexec(conn, "ROLLBACK"));
        }
        return -1;
    }
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        for (int r = 0; r < PQntuples(res) && !renewed[i]; r++) {
            renewed[i] = !strcmp(PQgetvalue(res, r, 0), leases[i].chat_id) &&
                         !strcmp(PQgetvalue(res, r, 1), leases[i].runner_id);
        }
        count += renewed[i];
    }
    PQclear(res);
    return count;
}

int64_t leasedb_sweep(PGconn *conn, int64_t lease_stale_ms) {
    char stale[24];
    snprintf(stale, sizeof stale, "%lld", (long long)lease_stale_ms);
    const char *p[] = {stale};
    char err[S_ERR_LEN];
    db_err_t e;
    /* SKIP LOCKED: the sweep never waits, so it never joins a wait cycle with the
     * acquisitions that delete stale rows themselves. */
    PGresult *res = db_query(
        conn, &e, err, sizeof err,
        "DELETE FROM chat_heartbeats WHERE (chat_id, runner_id) IN (SELECT chat_id, runner_id"
        " FROM chat_heartbeats WHERE heartbeat_at < statement_timestamp()"
        " - $1::bigint * interval '1 millisecond' FOR UPDATE SKIP LOCKED)",
        1, p);
    if (!res) {
        char q[S_ERR_LEN + 40];
        log_warn("heartbeat_sweep_failed", "reason=%s", log_quote(err, q, sizeof q));
        return -1;
    }
    int64_t n = strtoll(PQcmdTuples(res), NULL, 10);
    PQclear(res);
    return n;
}
