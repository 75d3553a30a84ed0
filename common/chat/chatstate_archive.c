/* chatstate_archive: the auto-archive tick (ARCHITECTURE.md §3, "Families"; issue 38); see
 * chatstate.h (chatstate_auto_archive). It runs whole bundles through the public interface
 * (chatstate_join, chatstate_set_archived, chatstate_commit), as PATCH {"archived": true}
 * does, and adds only the reads and locks around them. */
#include "chatstate.h"
#include "db.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The candidate rule on the chat row c, with the cutoff in $1. Only messages count as
 * activity: a family unarchived without a new message is a candidate again. A family with a
 * chat in one of the active statuses is left alone too, since SetArchived refuses it. */
#define S_RULE                                                                                     \
    " c.parent_chat_id IS NULL AND NOT c.archived AND c.pin_order = 0"                             \
    " AND c.status NOT IN ('running', 'interrupting', 'requires_action')"                          \
    " AND c.created_at < $1::timestamptz"                                                          \
    " AND NOT EXISTS (SELECT 1 FROM chats d WHERE d.root_chat_id = c.id"                           \
    " AND d.status IN ('running', 'interrupting', 'requires_action'))"                             \
    " AND NOT EXISTS (SELECT 1 FROM chat_messages m WHERE m.chat_id = c.id AND NOT m.deleted"      \
    " AND m.created_at >= $1::timestamptz)"                                                        \
    " AND NOT EXISTS (SELECT 1 FROM chats d JOIN chat_messages m ON m.chat_id = d.id"              \
    " WHERE d.root_chat_id = c.id AND NOT m.deleted AND m.created_at >= $1::timestamptz)"

/* Fills err (rc and a message); returns -1. */
static int s_fail(cs_error_t *err, cs_rc_t rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_fail(cs_error_t *err, cs_rc_t rc, const char *fmt, ...) {
    err->rc = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* The cutoff for args->now and args->days into cutoff: 0, or -1 (CS_BAD_INPUT when PostgreSQL
 * cannot read now, CS_DB when the connection failed). */
static int s_cutoff(PGconn *conn, const cs_auto_archive_t *args, char cutoff[32], cs_error_t *err) {
    char days[DB_PARAM_INT64_LEN];
    const char *p[] = {args->now, db_param_int64(days, args->days)};
    db_err_t e = DB_OK;
    char msg[200] = "";
    PGresult *res = db_query(conn, &e, msg, sizeof msg,
                             "SELECT to_char(date_trunc('day', $1::timestamptz AT TIME ZONE 'UTC')"
                             " - make_interval(days => $2::int), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
                             2, p);
    if (!res) {
        return e == DB_ERR_QUERY ? s_fail(err, CS_BAD_INPUT, "now: %s", msg)
                                 : s_fail(err, CS_DB, "database: %s", msg);
    }
    snprintf(cutoff, 32, "%s", db_text(res, 0, 0));
    PQclear(res);
    return 0;
}

/* Runs a statement that returns one boolean (the advisory lock's): 0 with *value, or -1. */
static int s_bool(PGconn *conn, const char *sql, bool *value, cs_error_t *err) {
    char cls[DB_PARAM_INT64_LEN];
    char obj[DB_PARAM_INT64_LEN];
    const char *p[] = {db_param_int64(cls, CS_AUTO_ARCHIVE_LOCK_CLASS),
                       db_param_int64(obj, CS_AUTO_ARCHIVE_LOCK_OBJECT)};
    db_err_t e = DB_OK;
    PGresult *res = db_query(conn, &e, err->message, sizeof err->message, sql, 2, p);
    if (!res) {
        err->rc = CS_DB;
        return -1;
    }
    *value = db_bool(res, 0, 0);
    PQclear(res);
    return 0;
}

/* Logs a candidate left alone, and counts it. */
static void s_skip(const cs_auto_archive_t *args, const char *root, const char *why,
                   cs_auto_archive_result_t *out) {
    char q[300];
    out->skipped++;
    log_info("auto_archive_skipped", "chat_id=%s worker_id=%s reason=%s", root,
             args->worker_id ? args->worker_id : "-", log_quote(why, q, sizeof q));
}

/* BEGIN, the lock timeout, the root's lock, every descendant's (their count into *members),
 * and the rule again, in one round trip: each statement runs after the one before it, so the
 * rule reads with a snapshot taken once every lock was granted. 1 when the family still
 * qualifies (the transaction left open), 0 when it does not or a lock was not granted in time
 * (rolled back; *why says which), -1 when the connection failed (err). */
static int s_lock_family(PGconn *conn, const cs_auto_archive_t *args, const char *cutoff,
                         const char *root, int *members, char *why, size_t why_len,
                         cs_error_t *err) {
    char lock_ms[DB_PARAM_INT64_LEN];
    int64_t ms =
        args->lock_timeout_ms > 0 ? args->lock_timeout_ms : CS_AUTO_ARCHIVE_LOCK_TIMEOUT_MS;
    const char *pl[] = {db_param_int64(lock_ms, ms)};
    const char *pr[] = {root};
    const char *pc[] = {cutoff, root};
    PGresult *family = NULL;
    int sent = db_send(conn, "BEGIN", 0, NULL, NULL, NULL);
    sent = sent ? sent
                : db_send(conn, "SELECT set_config('lock_timeout', $1, true)", 1, pl, NULL, NULL);
    sent = sent ? sent
                : db_send(conn, "SELECT 1 FROM chats WHERE id = $1::uuid FOR UPDATE", 1, pr, NULL,
                          NULL);
    sent = sent ? sent
                : db_send(conn,
                          "SELECT id FROM chats WHERE root_chat_id = $1::uuid"
                          " ORDER BY depth, id FOR UPDATE",
                          1, pr, db_keep, &family);
    db_err_t e = DB_ERR_CONNECTION;
    char msg[200] = "could not send a statement";
    PGresult *res = sent == 0 ? db_query(conn, &e, msg, sizeof msg,
                                         "SELECT EXISTS (SELECT 1 FROM chats c"
                                         " WHERE c.id = $2::uuid AND" S_RULE ")",
                                         2, pc)
                              : NULL;
    if (sent != 0) {
        db_flush(conn, NULL, 0); /* what was sent runs; the family fails below */
    }
    *members = 1 + (family ? PQntuples(family) : 0);
    PQclear(family);
    bool qualifies = res && db_bool(res, 0, 0);
    PQclear(res);
    if (qualifies) {
        return 1;
    }
    char rb[200] = "";
    if (PQtransactionStatus(conn) != PQTRANS_IDLE &&
        db_exec(conn, rb, sizeof rb, "ROLLBACK", 0, NULL) != DB_OK) {
        return s_fail(err, CS_DB, "database: %s", rb);
    }
    if (res || e == DB_ERR_RETRYABLE) {
        snprintf(why, why_len, "%s", res ? "no longer a candidate" : msg);
        return 0;
    }
    return s_fail(err, CS_DB, "database: %s", msg);
}

/* Archives one candidate family in a transaction of its own (chatstate.h). 0 (archived or
 * skipped, counted in out), or -1 when the connection failed. */
static int s_family(PGconn *conn, const cs_settings_t *settings, const cs_auto_archive_t *args,
                    const char *cutoff, const char *root, const hint_sink_t *sink,
                    cs_auto_archive_result_t *out, cs_error_t *err) {
    int members = 0;
    char why[256] = "";
    int locked = s_lock_family(conn, args, cutoff, root, &members, why, sizeof why, err);
    if (locked <= 0) {
        if (locked == 0) {
            s_skip(args, root, why, out);
        }
        return locked;
    }
    hint_update_t after;
    chatstate_t *cs = chatstate_join(conn, settings, root, err);
    if (!cs) { /* only when nothing could be sent: the connection */
        (void)db_exec(conn, NULL, 0, "ROLLBACK", 0, NULL); /* fails as well, or ends it */
        return -1;
    }
    if (chatstate_set_archived(cs, true, err) != 0) {
        chatstate_destroy(&cs);
    } else if (chatstate_commit(&cs, sink, &after, err) == 0) {
        out->archived++;
        log_info("auto_archived",
                 "chat_id=%s worker_id=%s family_size=%d snapshot_version=%lld cutoff=%s", root,
                 args->worker_id ? args->worker_id : "-", members,
                 (long long)after.snapshot_version, cutoff);
        return 0;
    }
    /* The rule held under the locks, so a refusal here is a state the rule does not see (an
     * invalid one) or a failure worth the next tick's try. */
    if (err->rc == CS_DB) {
        return -1;
    }
    s_skip(args, root, err->message, out);
    return 0;
}

/* The tick's body, under the advisory lock. */
static int s_tick(PGconn *conn, const cs_settings_t *settings, const cs_auto_archive_t *args,
                  const hint_sink_t *sink, cs_auto_archive_result_t *out, cs_error_t *err) {
    char limit[DB_PARAM_INT64_LEN];
    const char *p[] = {out->cutoff, db_param_int64(limit, args->batch)};
    db_err_t e = DB_OK;
    PGresult *res = db_query(conn, &e, err->message, sizeof err->message,
                             "SELECT c.id::text FROM chats c WHERE" S_RULE
                             " ORDER BY c.created_at, c.id LIMIT $2::int",
                             2, p);
    if (!res) {
        err->rc = CS_DB;
        return -1;
    }
    out->candidates = PQntuples(res);
    int rc = 0;
    for (int i = 0; i < out->candidates && rc == 0; i++) {
        rc = s_family(conn, settings, args, out->cutoff, db_text(res, i, 0), sink, out, err);
    }
    PQclear(res);
    return rc;
}

int chatstate_auto_archive(PGconn *conn, const cs_settings_t *settings,
                           const cs_auto_archive_t *args, const hint_sink_t *sink,
                           cs_auto_archive_result_t *out, cs_error_t *err) {
    memset(err, 0, sizeof *err);
    memset(out, 0, sizeof *out);
    if (args->days < 1 || args->days > CS_AUTO_ARCHIVE_DAYS_MAX) {
        return s_fail(err, CS_BAD_INPUT, "days: must be 1 to %d", CS_AUTO_ARCHIVE_DAYS_MAX);
    }
    if (args->batch < 1 || args->batch > CS_AUTO_ARCHIVE_BATCH_MAX) {
        return s_fail(err, CS_BAD_INPUT, "batch: must be 1 to %d", CS_AUTO_ARCHIVE_BATCH_MAX);
    }
    if (!args->now) {
        return s_fail(err, CS_BAD_INPUT, "now: must be a timestamp");
    }
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        return s_fail(err, CS_DB, "chatstate: a transaction is open on the connection");
    }
    if (s_cutoff(conn, args, out->cutoff, err) != 0) {
        return -1;
    }
    bool held = false;
    if (s_bool(conn, "SELECT pg_try_advisory_lock($1::int, $2::int)", &held, err) != 0) {
        return -1;
    }
    if (!held) {
        out->locked_out = true;
        return 0;
    }
    int rc = s_tick(conn, settings, args, sink, out, err);
    cs_error_t uerr = {0};
    bool released = false;
    if (s_bool(conn, "SELECT pg_advisory_unlock($1::int, $2::int)", &released, &uerr) != 0 ||
        !released) {
        /* A failed connection released it with the session; a lock not held is a bug. */
        char q[240];
        log_warn("auto_archive_unlock_failed", "worker_id=%s reason=%s",
                 args->worker_id ? args->worker_id : "-",
                 log_quote(uerr.message[0] ? uerr.message : "the lock was not held", q, sizeof q));
        if (rc == 0 && uerr.message[0]) {
            *err = uerr;
            rc = -1;
        }
    }
    return rc;
}
