/* leasedb: see leasedb.h. */
#include "leasedb.h"
#include "chatstate.h"
#include "db.h"
#include "log.h"
#include "mem.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_ERR_LEN 200

/* Sends BEGIN and the transaction-local bounds ahead (ARCHITECTURE.md §4.4): the caller's
 * next db_query runs them in its round trip, and reports their failure as its own. A bound of
 * 0 is left as the session has it. The commit does not wait for its WAL flush (§6.2, "Lease
 * commits"): an acquisition or renewal lost to a database crash leaves a lease older than the
 * worker believes, which the fences in the database already handle. The transaction's
 * statements run on the plan their connection made once (§6.2, "Plans made once"). 0, or -1
 * when they could not be sent. */
static int s_send_begin(PGconn *conn, int64_t lock_ms, int64_t statement_ms, int64_t idle_ms) {
    char lock[DB_PARAM_INT64_LEN];
    char idle[DB_PARAM_INT64_LEN];
    char stmt[DB_PARAM_INT64_LEN];
    const char *p[] = {lock_ms > 0 ? db_param_int64(lock, lock_ms) : NULL,
                       idle_ms > 0 ? db_param_int64(idle, idle_ms) : NULL,
                       statement_ms > 0 ? db_param_int64(stmt, statement_ms) : NULL};
    if (db_send(conn, "BEGIN", 0, NULL, NULL, NULL) != 0) {
        return -1;
    }
    return db_send(
        conn,
        "SELECT set_config('lock_timeout', coalesce($1, current_setting('lock_timeout')), true),"
        " set_config('idle_in_transaction_session_timeout',"
        " coalesce($2, current_setting('idle_in_transaction_session_timeout')), true),"
        " set_config('statement_timeout', coalesce($3, current_setting('statement_timeout')),"
        " true), set_config('synchronous_commit', 'off', true),"
        " set_config('plan_cache_mode', 'force_generic_plan', true)",
        3, p, NULL, NULL);
}

static void s_error(PGconn *conn, const PGresult *res, char *err, int errlen) {
    snprintf(err, (size_t)errlen, "%s",
             res && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
                                                 : PQerrorMessage(conn));
}

/* Leaves no transaction open on conn (after a failure). */
static void s_rollback(PGconn *conn) {
    db_flush(conn, NULL, 0);
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        PQclear(PQexec(conn, "ROLLBACK"));
    }
}

/* COMMIT, with whatever was sent ahead, and 0 only when it committed: COMMIT of a failed
 * transaction "succeeds" as a ROLLBACK. Nothing is left open either way. */
static int s_commit(PGconn *conn, char *err, int errlen) {
    db_err_t e;
    PGresult *res = db_query(conn, &e, err, errlen, "COMMIT", 0, NULL);
    int rc = res && !strcmp(PQcmdStatus(res), "COMMIT") ? 0 : -1;
    if (rc != 0 && res) {
        snprintf(err, (size_t)errlen, "transaction failed before COMMIT");
    }
    PQclear(res);
    if (rc != 0) {
        s_rollback(conn);
    }
    return rc;
}

/* The batch's candidates as found by s_open. */
typedef struct {
    int32_t slots[2 * LEASEDB_BATCH_MAX]; /* free limiter slots, ascending */
    bool vacant[2 * LEASEDB_BATCH_MAX];   /* no heartbeat row held the slot at all */
    int nslots;                           /* -1 without the limiter */
    PGresult *res;                        /* rows [first, first + nchats) are the chats: */
    int first;                            /* (kind, ord, id, previous worker or ""), oldest */
    int nchats;                           /* first */
} s_found_t;

/* The pool's kind filter on the chats of alias A (leasedb_pool_t, the statement's parameter
 * KIND): any chat, roots only or subagents only. */
#define S_POOL_SQL(A, KIND)                                                                        \
    " AND (" KIND "::int = 0 OR (" A ".parent_chat_id IS NULL) = (" KIND "::int = 1))"

/* Since when a heartbeat row is fresh, for the statement's stale bound STALE. */
#define S_FRESH_SQL(STALE) "statement_timestamp() - " STALE "::bigint * interval '1 millisecond'"

/* Runnable chats of alias A without any owner, in the pool: the predicate of the partial index
 * chats_unowned_by_owner (0020), repeated so that the planner may use it, and the pool's. */
#define S_UNOWNED_PRED(A, KIND)                                                                    \
    A ".archived = false AND " A ".status IN ('running', 'interrupting', 'requires_action')"       \
      " AND " A ".worker_id IS NULL AND NOT " A ".waiting_on_agents" S_POOL_SQL(A, KIND)

/* Every candidate statement below takes the parameters STALE (the stale bound), LIMIT (the most
 * rows), KIND (the pool), CAP (CHATFLEET_WORKER_USER_MAX_CHATS; 0: none) and START (a random
 * owner id, where the quick pass's walk over owners begins), so that their shapes stay alike,
 * and returns (id, the previous worker or "", owner, rk1, rk2), locked FOR UPDATE SKIP LOCKED,
 * taken in (rk1, rk2, id) order. */

/* The full pass's candidates: runnable chats whose owner's lease is stale or gone (a takeover),
 * oldest first, through chats_owned_runnable_by_age (0020); chats without any owner are the
 * quick pass's, which runs first in every pass. CAP and START are unused. */
#define S_CHATS_SQL(STALE, LIMIT, KIND, CAP, START)                                                \
    "SELECT c.id, c.worker_id::text AS prev, c.owner_id, 0::float8 AS rk1, c.updated_at AS rk2"    \
    " FROM chats c WHERE c.archived = false"                                                       \
    " AND c.status IN ('running', 'interrupting', 'requires_action') AND c.worker_id IS NOT NULL"  \
    " AND NOT c.waiting_on_agents AND (c.runner_id IS NULL OR NOT EXISTS (SELECT 1 FROM"           \
    " chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id"                      \
    " AND h.heartbeat_at > " S_FRESH_SQL(STALE) "))" S_POOL_SQL(                                   \
        "c", KIND) " AND " CAP "::bigint IS NOT NULL AND " START                                   \
                   "::uuid IS NOT NULL ORDER BY c.updated_at, c.id LIMIT " LIMIT                   \
                   " FOR UPDATE OF c SKIP LOCKED"

/* How many owners one quick pass looks at, at most, and how many of an owner's fresh leases
 * it counts for its rank (past that, owners rank alike). */
#define S_OWNERS_MAX "64"
#define S_HELD_MAX   "256"

/* The lowest owner that has a chat the quick pass could take, under the further condition COND
 * on x.owner_id: one probe of chats_unowned_by_owner. */
#define S_NEXT_OWNER_SQL(KIND, COND)                                                               \
    "(SELECT x.owner_id FROM chats x WHERE " S_UNOWNED_PRED("x", KIND) COND                        \
        " ORDER BY x.owner_id LIMIT 1)"

/* The quick pass's candidates (ARCHITECTURE.md §6.2, "Fair share"): runnable chats without any
 * owner, fairly across their owners. It walks up to S_OWNERS_MAX owners that have such chats,
 * from START upwards and then from the lowest, one index probe each; counts each one's fresh
 * leases (held) and reads its weight w; takes each one's oldest chats, at most LIMIT and, with
 * CAP, at most CAP x w - held; and ranks an owner's j-th chat (from 1) by (held + j) / w, so
 * that free slots go to the owners holding the fewest per weight, the oldest chat first among
 * equals. Laid out by hand, a clause a line. */
// clang-format off
#define S_FAIR_SQL(STALE, LIMIT, KIND, CAP, START) \
    "WITH RECURSIVE up(o, n) AS (SELECT " \
    S_NEXT_OWNER_SQL(KIND, " AND x.owner_id >= " START "::uuid") ", 1" \
    " UNION ALL SELECT " S_NEXT_OWNER_SQL(KIND, " AND x.owner_id > up.o") ", up.n + 1" \
    " FROM up WHERE up.o IS NOT NULL AND up.n < " S_OWNERS_MAX ")," \
    " low(o, n) AS (SELECT " \
    S_NEXT_OWNER_SQL(KIND, " AND x.owner_id < " START "::uuid") ", 1" \
    " UNION ALL SELECT " \
    S_NEXT_OWNER_SQL(KIND, " AND x.owner_id > low.o AND x.owner_id < " START "::uuid") \
    ", low.n + 1 FROM low WHERE low.o IS NOT NULL AND low.n < " S_OWNERS_MAX ")," \
    " owners AS MATERIALIZED (SELECT z.o FROM (SELECT o, n FROM up" \
    " UNION ALL SELECT o, n + " S_OWNERS_MAX " FROM low) z" \
    " WHERE z.o IS NOT NULL ORDER BY z.n LIMIT " S_OWNERS_MAX ")," \
    " ranked AS MATERIALIZED (SELECT y.id, (h.held + y.j)::float8 / w.w AS rk1" \
    " FROM owners ow" \
    " CROSS JOIN LATERAL (SELECT count(*) AS held FROM (SELECT 1 FROM chat_heartbeats h" \
    " WHERE h.owner_id = ow.o AND h.heartbeat_at > " S_FRESH_SQL(STALE) \
    " LIMIT " S_HELD_MAX ") q) h" \
    " CROSS JOIN LATERAL (SELECT coalesce((SELECT u.chat_weight FROM users u" \
    " WHERE u.id = ow.o), 1) AS w) w" \
    " CROSS JOIN LATERAL (SELECT x.id, row_number() OVER (ORDER BY x.updated_at, x.id) AS j" \
    " FROM (SELECT x.id, x.updated_at FROM chats x WHERE " S_UNOWNED_PRED("x", KIND) \
    " AND x.owner_id = ow.o ORDER BY x.updated_at, x.id LIMIT greatest(0, CASE WHEN " CAP \
    "::bigint > 0 THEN least(" LIMIT ", " CAP "::bigint * w.w - h.held) ELSE " LIMIT " END))" \
    " x) y)" \
    " SELECT c.id, '' AS prev, c.owner_id, r.rk1, c.updated_at AS rk2 FROM chats c" \
    " JOIN ranked r ON r.id = c.id WHERE " S_UNOWNED_PRED("c", KIND) \
    " ORDER BY r.rk1, c.updated_at, c.id LIMIT " LIMIT " FOR UPDATE OF c SKIP LOCKED"
// clang-format on

/* The title pass's candidates (ARCHITECTURE.md §7.8): idle, unarchived chats with a title
 * request and without a fresh lease, oldest first, through the partial index
 * chats_title_requests (0015); the owner serves the request, then lets the chat go. CAP and
 * START are unused. */
#define S_TITLES_SQL(STALE, LIMIT, KIND, CAP, START)                                               \
    "SELECT c.id, coalesce(c.worker_id::text, '') AS prev, c.owner_id, 0::float8 AS rk1,"          \
    " c.updated_at AS rk2 FROM chats c"                                                            \
    " WHERE c.title_requested_at IS NOT NULL AND c.archived = false"                               \
    " AND c.status IN ('waiting', 'error') AND NOT c.waiting_on_agents"                            \
    " AND (c.worker_id IS NULL OR c.runner_id IS NULL OR (SELECT true FROM chat_heartbeats h"      \
    " WHERE h.chat_id = c.id AND h.runner_id = c.runner_id AND h.heartbeat_at > " S_FRESH_SQL(     \
        STALE) " LIMIT 1) IS NULL)" S_POOL_SQL("c", KIND) " AND " CAP                              \
                                                          "::bigint IS NOT NULL AND " START        \
                                                          "::uuid IS NOT NULL ORDER BY "           \
                                                          "c.updated_at, c.id LIMIT " LIMIT        \
                                                          " FOR UPDATE OF c SKIP LOCKED"

/* The candidates a pass may take, with CAP on: those whose owner's advisory lock of class CLASS
 * this transaction holds or gets without waiting. Acquire's share check (chatstate_worker.c)
 * then counts the owner's fresh leases in a later statement, after any other acquisition that
 * held the lock has committed: two acquisitions never count the same owner at once. */
#define S_OWNER_LOCKED_SQL(CAP, CLASS)                                                             \
    " WHERE " CAP "::bigint = 0 OR pg_try_advisory_xact_lock(" CLASS                               \
    "::int, hashtext(c.owner_id::text))"

/* With the limiter: up to $5 slots of the pool's $7..$7+$2-1 not held by a fresh heartbeat
 * row, scanned from $1 and wrapping around, each claimed by an advisory lock of class $4 taken
 * without waiting (the CASE takes it only after the probe found the slot free: the planner runs the
 * cheaper filter first, which would lock every held slot it passes); then up to min($6, slots
 * found) chats of CHATS (cap $9, start $10, owner lock class $11). Kind 0 rows are the slots
 * (ascending), kind 1 the chats (in CHATS' order). Whether a slot is held, and whether freshly,
 * is one index probe per slot (scalar subqueries, never a hash of every heartbeat row:
 * ARCHITECTURE.md §6.2, "Probes, not hashes"). */
#define S_SCAN_SQL(CHATS)                                                                          \
    "WITH s AS MATERIALIZED (SELECT g.s, (SELECT true FROM chat_heartbeats h"                      \
    " WHERE h.slot = g.s LIMIT 1) IS NOT NULL AS held FROM (SELECT generate_series($1::int,"       \
    " $7::int + $2::int - 1) UNION ALL SELECT generate_series($7::int, $1::int - 1)) AS g(s)"      \
    " WHERE CASE WHEN (SELECT true FROM chat_heartbeats h WHERE h.slot = g.s AND h.heartbeat_at >" \
    " statement_timestamp() - $3::bigint * interval '1 millisecond' LIMIT 1) IS NULL"              \
    " THEN pg_try_advisory_xact_lock($4::int, g.s) ELSE false END LIMIT $5::int)"                  \
    " SELECT 0 AS kind, s.s AS ord, s.s::text, s.held::text FROM s UNION ALL"                      \
    " SELECT 1, row_number() OVER (ORDER BY c.rk1, c.rk2, c.id), c.id::text, c.prev FROM "         \
    "(" CHATS("$3", "least($6::int, (SELECT count(*) FROM s))", "$8", "$9",                        \
              "$10") ") c" S_OWNER_LOCKED_SQL("$9", "$11") " ORDER BY 1, 2"

/* Without the limiter: up to $2 chats of CHATS in pool $3 (cap $4, start $5, owner lock class
 * $6), as kind 1 rows. */
#define S_SCAN_FREE_SQL(CHATS)                                                                     \
    "SELECT 1 AS kind, 0, c.id::text, c.prev FROM (" CHATS(                                        \
        "$1", "$2::int", "$3", "$4",                                                               \
        "$5") ") c" S_OWNER_LOCKED_SQL("$4", "$6") " ORDER BY c.rk1, c.rk2, c.id"

/* The scans by pass (full, quick, titles: s_kind) and limiter ([free]). */
static const char *const s_scan_sql[3][2] = {
    {S_SCAN_SQL(S_CHATS_SQL), S_SCAN_FREE_SQL(S_CHATS_SQL)},
    {S_SCAN_SQL(S_FAIR_SQL), S_SCAN_FREE_SQL(S_FAIR_SQL)},
    {S_SCAN_SQL(S_TITLES_SQL), S_SCAN_FREE_SQL(S_TITLES_SQL)},
};

/* The row of s_scan_sql for a pass. */
static int s_kind(const leasedb_acquire_args_t *a) {
    return a->titles ? 2 : a->quick ? 1 : 0;
}

/* Opens the acquisition transaction and finds its candidates in one round trip of prepared
 * statements (ARCHITECTURE.md §6.2 steps 1-3): BEGIN with the bounds; with the limiter, up to
 * twice the batch in slots not held by a fresh heartbeat row, as of now, scanned from a random
 * start (so that workers looking at once mostly pick different slots, and a scan stops early
 * while free slots are plenty), each also this transaction's by an advisory lock taken without
 * waiting (so that concurrent acquisitions skip each other's candidates instead of waiting on
 * each other's uncommitted inserts in the slot index, which still decides); then up to
 * min(batch, slots) chats. 0 with the transaction open, or -1 with it rolled back (err
 * filled). */
static int s_open(PGconn *conn, const leasedb_acquire_args_t *a, int64_t idle, s_found_t *f,
                  char *err, int errlen) {
    memset(f, 0, sizeof *f);
    f->nslots = -1;
    char start[DB_PARAM_INT64_LEN];
    char max[DB_PARAM_INT64_LEN];
    char stale_buf[DB_PARAM_INT64_LEN];
    char first[DB_PARAM_INT64_LEN];
    char kind[DB_PARAM_INT64_LEN];
    char lockclass[24];
    char ownerclass[24];
    char want[24];
    char batch[24];
    char cap[DB_PARAM_INT64_LEN];
    char from[ID_UUID_LEN + 1];
    const char *stale = db_param_int64(stale_buf, a->lease_stale_ms);
    snprintf(batch, sizeof batch, "%d", a->batch);
    snprintf(ownerclass, sizeof ownerclass, "%d", LEASEDB_OWNER_LOCK_CLASS);
    db_param_int64(cap, a->user_max_chats);
    /* Where the quick pass's walk over owners begins: at random, so that past
     * S_OWNERS_MAX owners with chats waiting, each gets its turn. */
    ASSERT(id_uuid_new(from) == 0);
    db_err_t e;
    PGresult *res = NULL;
    int sent = s_send_begin(
        conn, a->lock_timeout_ms > 0 ? a->lock_timeout_ms : LEASEDB_LOCK_TIMEOUT_MS, 0, idle);
    if (sent == 0 && a->max_chats > 0) {
        uint32_t r = 0;
        if (id_random(&r, sizeof r) != 0) {
            r = (uint32_t)id_now_ms();
        }
        int w = 2 * a->batch;
        if ((int64_t)w > a->max_chats) {
            w = (int)a->max_chats;
        }
        snprintf(lockclass, sizeof lockclass, "%d", LEASEDB_SLOT_LOCK_CLASS);
        snprintf(want, sizeof want, "%d", w);
        int64_t lo = a->first_slot > 0 ? a->first_slot : 1;
        const char *p[] = {db_param_int64(start, lo + (int64_t)(r % (uint64_t)a->max_chats)),
                           db_param_int64(max, a->max_chats),
                           stale,
                           lockclass,
                           want,
                           batch,
                           db_param_int64(first, lo),
                           db_param_int64(kind, a->pool),
                           cap,
                           from,
                           ownerclass};
        res = db_query(conn, &e, err, errlen, s_scan_sql[s_kind(a)][0], 11, p);
    } else if (sent == 0) {
        const char *p[] = {stale, batch, db_param_int64(kind, a->pool), cap, from, ownerclass};
        res = db_query(conn, &e, err, errlen, s_scan_sql[s_kind(a)][1], 6, p);
    } else {
        s_error(conn, NULL, err, errlen);
    }
    if (!res) {
        s_rollback(conn);
        return -1;
    }
    f->nslots = a->max_chats > 0 ? 0 : -1;
    int n = PQntuples(res);
    int first_chat = n;
    for (int i = 0; i < n; i++) {
        if (!strcmp(PQgetvalue(res, i, 0), "1")) {
            first_chat = i;
            break;
        }
        if (f->nslots < 2 * LEASEDB_BATCH_MAX) {
            f->slots[f->nslots] = (int32_t)strtol(PQgetvalue(res, i, 2), NULL, 10);
            f->vacant[f->nslots] = !strcmp(PQgetvalue(res, i, 3), "false");
            f->nslots++;
        }
    }
    f->res = res;
    f->nchats = n - first_chat;
    f->first = first_chat;
    return 0;
}

/* Why one chat was not taken, for the loop below. */
typedef enum {
    S_TAKEN,
    S_MISSED, /* this chat only: go on with the next */
    S_RETRY,  /* a slot's wait ran out: this chat again, with the next candidates */
    S_NO_SLOT,
    S_BROKEN, /* the transaction or the connection failed */
} s_outcome_t;

/* Acquire of one chat. Nested (a savepoint of the batch's transaction), or alone: the only
 * chat of its pass, whose bundle joins the transaction and commits it (or rolls it back),
 * which saves the savepoint's round trips; its hints are then published already. */
static s_outcome_t s_take(PGconn *conn, const leasedb_acquire_args_t *a, const char *chat,
                          bool alone, cs_slots_t *slots, leasedb_acquired_t *got,
                          cs_hints_t *hints) {
    if (slots && slots->next >= slots->count) {
        return S_NO_SLOT;
    }
    char runner[ID_UUID_LEN + 1];
    ASSERT(id_uuid_new(runner) == 0);
    int tried = slots ? slots->next : 0;
    cs_error_t cerr;
    /* Acquire never enters requires_action: no deadline is needed. */
    const cs_settings_t settings = {.lease_stale_ms = a->lease_stale_ms,
                                    .user_max_chats = a->user_max_chats};
    chatstate_t *cs = alone ? chatstate_join(conn, &settings, chat, &cerr)
                            : chatstate_nest(conn, &settings, chat, &cerr);
    int rc = cs ? chatstate_acquire_slot(cs, a->worker_id, runner, slots, &cerr) : -1;
    if (rc == 0 && alone) {
        rc = chatstate_commit(&cs, a->sink, &hints->update, &cerr);
    } else if (rc == 0) {
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
    if (!db_usable(conn) || (!alone && PQtransactionStatus(conn) != PQTRANS_INTRANS)) {
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
        /* Alone, the transaction is over: the next pass tries again. */
        return slots->next < slots->count && !alone ? S_RETRY : S_NO_SLOT;
    }
    if (slot_tried && cerr.rc == CS_CONFLICT && slots->next >= slots->count) {
        return S_NO_SLOT;
    }
    return S_MISSED;
}

/* Takes the found chats one by one; the number taken, or -1 when the transaction broke. */
static int s_take_all(PGconn *conn, const leasedb_acquire_args_t *a, const s_found_t *f,
                      cs_slots_t *slots, cs_hints_t *hints, leasedb_batch_t *out) {
    bool alone = out->selected == 1;
    for (int i = 0; i < out->selected; i++) {
        const char *chat = PQgetvalue(f->res, f->first + i, 2);
        leasedb_acquired_t *got = &out->chats[out->count];
        s_outcome_t o;
        while ((o = s_take(conn, a, chat, alone, slots, got, &hints[out->count])) == S_RETRY) {
            out->again = true;
        }
        switch (o) {
            case S_TAKEN:
                snprintf(got->previous, sizeof got->previous, "%s",
                         PQgetvalue(f->res, f->first + i, 3));
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
                return out->count;
            case S_BROKEN:
                out->count = 0;
                return -1;
        }
    }
    return out->count;
}

/* Whether any idle chat has a title request: one probe of chats_title_requests, so that a title
 * pass with nothing to take (the usual case) claims no slots. 1, 0, or -1 (logged). */
static int s_titles_pending(PGconn *conn) {
    char err[S_ERR_LEN];
    db_err_t e;
    PGresult *res = db_query(conn, &e, err, sizeof err,
                             "SELECT 1 FROM chats WHERE title_requested_at IS NOT NULL"
                             " AND archived = false AND status IN ('waiting', 'error') LIMIT 1",
                             0, NULL);
    if (!res) {
        char q[S_ERR_LEN + 40];
        log_warn("acquire_failed", "stage=titles reason=%s", log_quote(err, q, sizeof q));
        return -1;
    }
    int n = PQntuples(res);
    PQclear(res);
    return n > 0;
}

int leasedb_acquire(PGconn *conn, const leasedb_acquire_args_t *a, leasedb_batch_t *out) {
    memset(out, 0, sizeof *out);
    out->free_slots = -1;
    ASSERT(a->batch >= 1 && a->batch <= LEASEDB_BATCH_MAX && a->lease_stale_ms > 0);
    char err[S_ERR_LEN];
    char q[S_ERR_LEN + 40];
    int pending = a->titles ? s_titles_pending(conn) : 1;
    if (pending <= 0) {
        return pending;
    }
    int64_t idle = a->idle_ms > 0 ? a->idle_ms : a->lease_stale_ms / 3;
    s_found_t f;
    if (s_open(conn, a, idle > 0 ? idle : 1, &f, err, sizeof err) != 0) {
        log_warn("acquire_failed", "stage=begin reason=%s", log_quote(err, q, sizeof q));
        return -1;
    }
    out->free_slots = f.nslots;
    out->selected = f.nchats;
    if (f.nslots >= 0 && f.nchats > f.nslots) {
        out->selected = f.nslots; /* the statement's limit already says so */
    }
    /* Twice the batch in candidates: a slot another worker claims first is replaced. */
    cs_slots_t slots = {.slots = f.slots, .vacant = f.vacant, .count = f.nslots};
    cs_hints_t hints[LEASEDB_BATCH_MAX];
    bool alone = out->selected == 1;
    int taken =
        out->selected > 0 ? s_take_all(conn, a, &f, f.nslots >= 0 ? &slots : NULL, hints, out) : 0;
    PQclear(f.res);
    if (taken < 0 || (alone && taken == 0)) {
        /* Broken, or the lone chat's bundle has ended the transaction already. */
        s_rollback(conn);
        return taken < 0 ? -1 : 0;
    }
    if (alone) {
        return 0; /* committed, and its hints published, by its bundle */
    }
    if (taken == 0) {
        s_rollback(conn);
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
    if (s_send_begin(conn, bound_ms, bound_ms, bound_ms) != 0) {
        s_error(conn, NULL, err, sizeof err);
        log_warn("heartbeat_failed", "stage=begin reason=%s", log_quote(err, q, sizeof q));
        s_rollback(conn);
        return -1;
    }
    char *chats = s_array(leases, n, false);
    char *runners = s_array(leases, n, true);
    char stale[DB_PARAM_INT64_LEN];
    const char *p[] = {chats, runners, db_param_int64(stale, lease_stale_ms), worker_id};
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
        s_rollback(conn);
        return -1;
    }
    /* The renewed rows, by "chat_id/runner_id": matched in one pass, not a scan per lease
     * (a worker renews thousands at once). */
    zhashx_t *rows = zhashx_new();
    char key[LEASESET_KEY_LEN];
    for (int r = 0; r < PQntuples(res); r++) {
        leaseset_key(PQgetvalue(res, r, 0), PQgetvalue(res, r, 1), key);
        zhashx_insert(rows, key, (void *)1);
    }
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        leaseset_key(leases[i].chat_id, leases[i].runner_id, key);
        renewed[i] = zhashx_lookup(rows, key) != NULL;
        count += renewed[i];
    }
    zhashx_destroy(&rows);
    PQclear(res);
    return count;
}

int64_t leasedb_sweep(PGconn *conn, int64_t lease_stale_ms) {
    char stale[DB_PARAM_INT64_LEN];
    const char *p[] = {db_param_int64(stale, lease_stale_ms)};
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
