/*
 * The auto-archive tick (issue 38, Must show 4; ARCHITECTURE.md §3, "Families"). First
 * chatstate_auto_archive driven directly on a fresh database per test, with a clock the test
 * chooses and families whose times it sets: the rule matrix (an old idle family archived whole;
 * pinned, running, interrupting, requires_action, recently active in a child, recently created
 * ones kept; a child never a candidate of its own; a deleted message no activity), the cutoff at
 * 00:00 UTC minus the days, the batch taken oldest first, the recheck under the family's locks
 * (a message or a pin that arrived after the candidate read: skipped), the advisory lock, and a
 * family unarchived without a message archived again. Then two real workers with the tick on and
 * their clock thirty days ahead: every old family archived exactly once (one auto_archived line
 * across both workers' logs, one snapshot_version step per member), pinned, running and
 * requires_action families kept untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "cluster.h"
#include "clusterlog.h"
#include "mem.h"
#include "testdb.h"

#define OLD    "2024-05-01 12:00:00+00" /* long before the matrix's cutoff */
#define RECENT "2024-06-05 12:00:00+00" /* after it */
#define NOW    "2024-06-10T15:00:00Z"   /* the matrix's clock: 7 days give 2024-06-03 00:00 */
#define SYSTEM "be brief"               /* a model-only system message: a waiting chat's row */

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

/* ---- The hints a tick published: one archived update per chat, counted. ---- */

#define HINTS_MAX 64
static struct {
    char chat[HINTS_MAX][ID_UUID_LEN + 1];
    int count;
} s_hints;

static void s_on_update(void *ctx, const hint_update_t *h) {
    (void)ctx;
    if (h->archived && s_hints.count < HINTS_MAX) {
        snprintf(s_hints.chat[s_hints.count++], ID_UUID_LEN + 1, "%s", h->chat_id);
    }
}

static const hint_sink_t s_sink = {.update = s_on_update};

static int s_hinted(const char *chat) {
    int n = 0;
    for (int i = 0; i < s_hints.count; i++) {
        n += strcmp(s_hints.chat[i], chat) == 0;
    }
    return n;
}

/* ---- Building families and reading them back ---- */

static void s_exec(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_exec(PGconn *conn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char err[300];
    if (testdb_try(conn, sql, err, sizeof err) != 0) {
        fail_msg("%s: %s", sql, err);
    }
    free(sql);
}

/* The chat and every message of it created at `at` (a test sets the times it reasons about). */
static void s_age(const char *chat, const char *at) {
    s_exec(s_conn, "UPDATE chats SET created_at = '%s' WHERE id = '%s'", at, chat);
    s_exec(s_conn, "UPDATE chat_messages SET created_at = '%s' WHERE chat_id = '%s'", at, chat);
}

/* The chat's newest message created at `at`. */
static void s_newest_at(const char *chat, const char *at) {
    s_exec(s_conn,
           "UPDATE chat_messages SET created_at = '%s' WHERE id ="
           " (SELECT max(id) FROM chat_messages WHERE chat_id = '%s')",
           at, chat);
}

/* A waiting chat of owner on conn (a root, or a child of parent), with a system message when
 * system, and a user message (so running, with no worker) when running. */
static void s_create_on(PGconn *conn, const char *owner, const char *parent, bool system,
                        bool running, char out[ID_UUID_LEN + 1]) {
    cs_message_t first = {.role = "user", .content = CHATSETUP_USER_MSG};
    cs_create_t c = {.owner_id = owner,
                     .system_prompt = system ? SYSTEM : NULL,
                     .messages = running ? &first : NULL,
                     .message_count = running ? 1 : 0,
                     .parent_chat_id = parent};
    cs_error_t err;
    if (chatstate_create(conn, &chatsetup_settings, &c, NULL, out, &err) != 0) {
        fail_msg("create (parent %s): %s", parent ? parent : "none", err.message);
    }
}

/* A waiting root with a system message, created (with its message) at `at`. */
static void s_root(const char *at, char out[ID_UUID_LEN + 1]) {
    s_create_on(s_conn, s_owner, NULL, true, false, out);
    s_age(out, at);
}

/* A waiting child of parent with a system message, created at `at`. */
static void s_kid(const char *parent, const char *at, char out[ID_UUID_LEN + 1]) {
    s_create_on(s_conn, s_owner, parent, true, false, out);
    s_age(out, at);
}

/* A root in the chatsetup state `state` (owned by the fake worker where the state has an
 * owner), created with its history at `at`. */
static void s_state(const char *state, const char *at, char out[ID_UUID_LEN + 1]) {
    chatsetup_t s = {state, 0, 0};
    chatsetup_build(s_conn, s_owner, &s, false, out);
    s_age(out, at);
}

static char *s_value(PGconn *conn, const char *fmt, const char *chat) {
    char *sql = mem_printf(fmt, chat);
    char *v = testdb_scalar(conn, sql);
    free(sql);
    assert_non_null(v);
    return v;
}

static bool s_archived_on(PGconn *conn, const char *chat) {
    char *v = s_value(conn, "SELECT archived FROM chats WHERE id = '%s'", chat);
    bool a = strcmp(v, "t") == 0;
    free(v);
    return a;
}

static bool s_archived(const char *chat) {
    return s_archived_on(s_conn, chat);
}

static long long s_snap_on(PGconn *conn, const char *chat) {
    char *v = s_value(conn, "SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    long long n = strtoll(v, NULL, 10);
    free(v);
    return n;
}

/* ---- Ticks ---- */

static int s_try_tick(PGconn *conn, const char *now, int days, int batch, int64_t lock_ms,
                      cs_auto_archive_result_t *r, cs_error_t *err) {
    cs_auto_archive_t a = {
        .now = now, .days = days, .batch = batch, .worker_id = "test", .lock_timeout_ms = lock_ms};
    return chatstate_auto_archive(conn, &chatsetup_settings, &a, &s_sink, r, err);
}

static cs_auto_archive_result_t s_tick(const char *now, int days, int batch) {
    cs_auto_archive_result_t r;
    cs_error_t err;
    if (s_try_tick(s_conn, now, days, batch, 0, &r, &err) != 0) {
        fail_msg("tick at %s: %s", now, err.message);
    }
    assert_false(r.locked_out);
    return r;
}

static int s_setup(void **state) {
    (void)state;
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    memset(&s_hints, 0, sizeof s_hints);
    return testdb_user_new(s_conn, "archive", s_owner);
}

static int s_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

/* ---- The rule, driven directly ---- */

static void test_the_rule_archives_old_idle_families_whole_and_keeps_the_rest(void **state) {
    (void)state;
    char idle[ID_UUID_LEN + 1], kid[ID_UUID_LEN + 1], grandkid[ID_UUID_LEN + 1];
    s_root(OLD, idle);
    s_kid(idle, OLD, kid);
    s_kid(kid, OLD, grandkid);
    char error[ID_UUID_LEN + 1], bare[ID_UUID_LEN + 1], deleted[ID_UUID_LEN + 1];
    s_state("E0", OLD, error);                              /* error is not an active status */
    s_create_on(s_conn, s_owner, NULL, false, false, bare); /* no message at all */
    s_age(bare, OLD);
    s_root(OLD, deleted); /* a recent message that was deleted is no activity */
    s_exec(s_conn,
           "UPDATE chat_messages SET created_at = '" RECENT
           "', deleted = true WHERE chat_id = '%s'",
           deleted);
    /* Kept: pinned, each active status, a child's recent message, a recent root message over an
     * old idle child, a running child, created after the cutoff. */
    char pinned[ID_UUID_LEN + 1], running[ID_UUID_LEN + 1], interrupting[ID_UUID_LEN + 1];
    char asking[ID_UUID_LEN + 1];
    s_root(OLD, pinned);
    s_exec(s_conn, "UPDATE chats SET pin_order = 1 WHERE id = '%s'", pinned);
    s_state("R0", OLD, running);
    s_state("I0", OLD, interrupting);
    s_state("A0", OLD, asking);
    char busy_kid_root[ID_UUID_LEN + 1], busy_kid[ID_UUID_LEN + 1];
    s_root(OLD, busy_kid_root);
    s_kid(busy_kid_root, OLD, busy_kid);
    s_newest_at(busy_kid, RECENT);
    char busy_root[ID_UUID_LEN + 1], old_kid[ID_UUID_LEN + 1];
    s_root(OLD, busy_root);
    s_newest_at(busy_root, RECENT);
    s_kid(busy_root, OLD, old_kid);
    char run_kid_root[ID_UUID_LEN + 1], run_kid[ID_UUID_LEN + 1];
    s_root(OLD, run_kid_root);
    s_create_on(s_conn, s_owner, run_kid_root, false, true, run_kid);
    s_age(run_kid, OLD);
    char fresh[ID_UUID_LEN + 1];
    s_create_on(s_conn, s_owner, NULL, false, false, fresh);
    s_age(fresh, RECENT);
    long long before = s_snap_on(s_conn, idle);

    cs_auto_archive_result_t r = s_tick(NOW, 7, 100);
    assert_string_equal(r.cutoff, "2024-06-03T00:00:00Z");
    assert_int_equal(r.candidates, 4); /* idle, error, bare, deleted: roots only */
    assert_int_equal(r.archived, 4);
    assert_int_equal(r.skipped, 0);
    const char *gone[] = {idle, kid, grandkid, error, bare, deleted};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
        assert_true(s_archived(gone[i]));
        assert_int_equal(s_hinted(gone[i]), 1); /* one update hint per member */
    }
    assert_int_equal(s_snap_on(s_conn, idle), before + 1);
    const char *kept[] = {pinned,    running, interrupting, asking,  busy_kid_root, busy_kid,
                          busy_root, old_kid, run_kid_root, run_kid, fresh};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        if (s_archived(kept[i])) {
            fail_msg("kept chat %zu (%s) was archived", i, kept[i]);
        }
    }
    /* The next tick finds nothing left. */
    r = s_tick(NOW, 7, 100);
    assert_int_equal(r.candidates, 0);
    assert_int_equal(r.archived, 0);
}

static void test_the_cutoff_is_midnight_utc_minus_the_days(void **state) {
    (void)state;
    char before[ID_UUID_LEN + 1], at[ID_UUID_LEN + 1];
    s_root("2024-06-02 23:59:59+00", before); /* one second before 2024-06-03 00:00 UTC */
    s_root("2024-06-03 00:00:00+00", at);     /* exactly at it: not older than the cutoff */

    /* The last instant of 2024-06-09 (UTC): the cutoff is 2024-06-02 00:00, nothing is older. */
    cs_auto_archive_result_t r = s_tick("2024-06-09T23:59:59.999Z", 7, 100);
    assert_string_equal(r.cutoff, "2024-06-02T00:00:00Z");
    assert_int_equal(r.archived, 0);
    /* 01:00 at UTC+2 is still 2024-06-09 in UTC: the day is UTC's. */
    r = s_tick("2024-06-10T01:00:00+02:00", 7, 100);
    assert_string_equal(r.cutoff, "2024-06-02T00:00:00Z");
    assert_int_equal(r.archived, 0);
    /* Midnight UTC: the cutoff moves a day, and only the chat before it goes. */
    r = s_tick("2024-06-10T00:00:00Z", 7, 100);
    assert_string_equal(r.cutoff, "2024-06-03T00:00:00Z");
    assert_int_equal(r.archived, 1);
    assert_true(s_archived(before));
    assert_false(s_archived(at));
    r = s_tick("2024-06-10T23:59:59Z", 7, 100); /* all that day, the same cutoff */
    assert_int_equal(r.archived, 0);
    assert_false(s_archived(at));
    r = s_tick("2024-06-11T00:00:00Z", 7, 100);
    assert_int_equal(r.archived, 1);
    assert_true(s_archived(at));
    /* One day back from 2024-06-04 is 2024-06-03. */
    r = s_tick("2024-06-04T12:00:00Z", 1, 100);
    assert_string_equal(r.cutoff, "2024-06-03T00:00:00Z");
}

static void test_a_tick_takes_a_batch_oldest_first(void **state) {
    (void)state;
    char a[ID_UUID_LEN + 1], b[ID_UUID_LEN + 1], c[ID_UUID_LEN + 1];
    s_root("2024-05-03 00:00:00+00", c);
    s_root("2024-05-01 00:00:00+00", a);
    s_root("2024-05-02 00:00:00+00", b);
    cs_auto_archive_result_t r = s_tick(NOW, 7, 2);
    assert_int_equal(r.candidates, 2);
    assert_int_equal(r.archived, 2);
    assert_true(s_archived(a) && s_archived(b));
    assert_false(s_archived(c));
    r = s_tick(NOW, 7, 2);
    assert_int_equal(r.candidates, 1);
    assert_true(s_archived(c));
}

static void test_bad_arguments_are_refused_naming_them(void **state) {
    (void)state;
    cs_auto_archive_result_t r;
    cs_error_t err;
    assert_int_equal(s_try_tick(s_conn, NOW, 0, 100, 0, &r, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "days"));
    assert_int_equal(s_try_tick(s_conn, NOW, 7, CS_AUTO_ARCHIVE_BATCH_MAX + 1, 0, &r, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "batch"));
    assert_int_equal(s_try_tick(s_conn, "the tenth of June", 7, 100, 0, &r, &err), -1);
    assert_int_equal(err.rc, CS_BAD_INPUT);
    assert_non_null(strstr(err.message, "now"));
    /* The connection is still good for the next tick. */
    char old[ID_UUID_LEN + 1];
    s_root(OLD, old);
    assert_int_equal(s_tick(NOW, 7, 100).archived, 1);
}

static void test_a_family_unarchived_without_a_message_is_archived_again(void **state) {
    (void)state;
    char root[ID_UUID_LEN + 1], kid[ID_UUID_LEN + 1];
    s_root(OLD, root);
    s_kid(root, OLD, kid);
    assert_int_equal(s_tick(NOW, 7, 100).archived, 1);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, root, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_set_archived(cs, false, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    assert_false(s_archived(root) || s_archived(kid));
    assert_int_equal(s_tick(NOW, 7, 100).archived, 1);
    assert_true(s_archived(root) && s_archived(kid));
}

/* ---- Concurrency: the recheck under the family's locks, the advisory lock ---- */

typedef struct {
    PGconn *conn;
    cs_auto_archive_result_t r;
    int rc;
    cs_error_t err;
} tick_job_t;

static void *s_tick_thread(void *arg) {
    tick_job_t *j = arg;
    /* A clock of today: the families built in 2024 are old, a message sent now is not. */
    char *now = testdb_scalar(j->conn, "SELECT now()::text");
    j->rc = s_try_tick(j->conn, now, 7, 100, 60000, &j->r, &j->err);
    free(now);
    return NULL;
}

static void test_a_family_that_changed_after_the_candidate_read_is_skipped(void **state) {
    (void)state;
    char talked[ID_UUID_LEN + 1], pinned[ID_UUID_LEN + 1], idle[ID_UUID_LEN + 1];
    s_state("W", "2024-05-01 00:00:00+00", talked); /* the oldest: the tick waits on it first */
    s_root("2024-05-02 00:00:00+00", pinned);
    s_root("2024-05-03 00:00:00+00", idle);
    PGconn *other = testdb_connect(s_db);
    s_exec(other, "BEGIN");
    s_exec(other, "SELECT 1 FROM chats WHERE id IN ('%s', '%s') FOR UPDATE", talked, pinned);

    tick_job_t job = {.conn = testdb_connect(s_db)};
    char pid[16];
    snprintf(pid, sizeof pid, "%d", PQbackendPID(job.conn));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, s_tick_thread, &job), 0);
    /* The tick read its candidates without locks and now waits for the first root's lock. */
    int64_t deadline = id_now_ms() + 20000;
    char *wait = NULL;
    while (id_now_ms() < deadline) {
        free(wait);
        wait = s_value(s_conn,
                       "SELECT coalesce(wait_event_type, '') FROM pg_stat_activity"
                       " WHERE pid = %s",
                       pid);
        if (strcmp(wait, "Lock") == 0) {
            break;
        }
    }
    assert_string_equal(wait, "Lock");
    free(wait);
    /* Meanwhile a message arrives in one family and the other is pinned, both committed
     * before the tick gets the locks. */
    s_exec(other, "UPDATE chats SET pin_order = 1 WHERE id = '%s'", pinned);
    cs_error_t err;
    chatstate_t *cs = chatstate_join(other, &chatsetup_settings, talked, &err);
    assert_non_null(cs);
    cs_message_t msg = {.role = "user", .content = CHATSETUP_USER_MSG};
    int64_t mid = 0;
    int64_t qid = 0;
    assert_int_equal(chatstate_send_message(cs, &msg, CS_BUSY_QUEUE, 0, &mid, &qid, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);

    assert_int_equal(pthread_join(t, NULL), 0);
    if (job.rc != 0) {
        fail_msg("tick: %s", job.err.message);
    }
    assert_int_equal(job.r.candidates, 3);
    assert_int_equal(job.r.skipped, 2);
    assert_int_equal(job.r.archived, 1);
    assert_false(s_archived(talked) || s_archived(pinned));
    assert_true(s_archived(idle));
    PQfinish(job.conn);
    PQfinish(other);
}

static void test_one_tick_at_a_time_under_the_advisory_lock(void **state) {
    (void)state;
    char old[ID_UUID_LEN + 1];
    s_root(OLD, old);
    PGconn *other = testdb_connect(s_db);
    char lock[128];
    snprintf(lock, sizeof lock, "(%d, %d)", CS_AUTO_ARCHIVE_LOCK_CLASS,
             CS_AUTO_ARCHIVE_LOCK_OBJECT);
    s_exec(other, "SELECT pg_advisory_lock%s", lock);
    cs_auto_archive_result_t r;
    cs_error_t err;
    assert_int_equal(s_try_tick(s_conn, NOW, 7, 100, 0, &r, &err), 0);
    assert_true(r.locked_out);
    assert_int_equal(r.candidates + r.archived, 0);
    assert_false(s_archived(old));
    s_exec(other, "SELECT pg_advisory_unlock%s", lock);
    assert_int_equal(s_tick(NOW, 7, 100).archived, 1);
    /* The tick let its lock go. */
    char *sql = mem_printf("SELECT pg_try_advisory_lock%s", lock);
    char *got = testdb_scalar(other, sql);
    assert_string_equal(got, "t");
    free(got);
    free(sql);
    PQfinish(other);
}

/* ---- Two workers ---- */

#define CLUSTER_OLD 24 /* old families: a root, a child, and a grandchild in every third */
#define WAIT_MS     60000

static int s_log_lines(cluster_t *c, const char *chat) {
    int n = 0;
    for (int w = 0; w < 2; w++) {
        n += clusterlog_count(cluster_log(c, CLUSTER_WORKER, w), "event=auto_archived ", chat);
    }
    return n;
}

/* The members of one family in the cluster, with their snapshot_version before the workers. */
typedef struct {
    char id[3][ID_UUID_LEN + 1];
    long long snap[3];
    int n;
} family_t;

static void s_family_snaps(PGconn *conn, family_t *f) {
    for (int i = 0; i < f->n; i++) {
        f->snap[i] = s_snap_on(conn, f->id[i]);
    }
}

static void test_two_workers_archive_every_old_family_exactly_once(void **state) {
    (void)state;
    /* The workers' clock is thirty days ahead with one day to keep: everything made below is
     * old to them. Leases go stale only after ten minutes, so the running chat's fake owner
     * keeps it for the whole test. */
    static const char *const env[] = {
        "CHATFLEET_AUTO_ARCHIVE_DAYS=1",   "CHATFLEET_AUTO_ARCHIVE_INTERVAL_MS=100",
        "CHATFLEET_AUTO_ARCHIVE_BATCH=5",  "CHATFLEET_TEST_CLOCK_OFFSET_S=2592000",
        "CHATFLEET_LEASE_STALE_MS=600000", NULL};
    cluster_opts_t o = {.name = "test_auto_archive", .gateways = 1, .workers = 2, .env = env};
    cluster_t *c = cluster_new(&o);
    /* The workers wait while the families are built, so that no tick sees half of one. */
    for (int w = 0; w < 2; w++) {
        cluster_signal(c, CLUSTER_WORKER, w, SIGTERM);
    }
    PGconn *conn = cluster_db(c);
    char *owner = cluster_sql(c, "SELECT id FROM users LIMIT 1");
    assert_non_null(owner);
    family_t old[CLUSTER_OLD];
    for (int i = 0; i < CLUSTER_OLD; i++) {
        family_t *f = &old[i];
        f->n = i % 3 == 0 ? 3 : 2;
        s_create_on(conn, owner, NULL, true, false, f->id[0]);
        for (int k = 1; k < f->n; k++) {
            s_create_on(conn, owner, f->id[k - 1], true, false, f->id[k]);
        }
        s_family_snaps(conn, f);
    }
    family_t kept[3] = {{.n = 2}, {.n = 1}, {.n = 1}};
    s_create_on(conn, owner, NULL, true, false, kept[0].id[0]);
    s_create_on(conn, owner, kept[0].id[0], true, false, kept[0].id[1]);
    s_exec(conn, "UPDATE chats SET pin_order = 1 WHERE id = '%s'", kept[0].id[0]);
    chatsetup_t running = {"R0", 0, 0};
    chatsetup_t asking = {"A0", 0, 0};
    chatsetup_build(conn, owner, &running, false, kept[1].id[0]);
    chatsetup_build(conn, owner, &asking, false, kept[2].id[0]);
    for (int i = 0; i < 3; i++) {
        s_family_snaps(conn, &kept[i]);
    }
    int members = 0;
    for (int i = 0; i < CLUSTER_OLD; i++) {
        members += old[i].n;
    }

    for (int w = 0; w < 2; w++) {
        clusterlog_worker_start(c, w);
    }
    char want[16];
    snprintf(want, sizeof want, "%d", members);
    clusterlog_expect(c, "SELECT count(*) FROM chats WHERE archived", want, WAIT_MS);

    int by[2] = {0, 0};
    for (int i = 0; i < CLUSTER_OLD; i++) {
        const family_t *f = &old[i];
        assert_int_equal(s_log_lines(c, f->id[0]), 1);
        for (int k = 0; k < f->n; k++) {
            assert_true(s_archived_on(conn, f->id[k]));
            assert_int_equal(s_snap_on(conn, f->id[k]), f->snap[k] + 1);
        }
        for (int w = 0; w < 2; w++) {
            by[w] += clusterlog_count(cluster_log(c, CLUSTER_WORKER, w), "event=auto_archived ",
                                      f->id[0]);
        }
    }
    print_message("families archived by worker 0: %d, by worker 1: %d\n", by[0], by[1]);
    /* Unarchived without a message, a family is archived again on a later tick: the ticks went
     * on, and still no other family was archived a second time. */
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(conn, &chatsetup_settings, old[0].id[0], &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_set_archived(cs, false, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);
    char *sql = mem_printf("SELECT archived FROM chats WHERE id = '%s'", old[0].id[0]);
    clusterlog_expect(c, sql, "t", WAIT_MS);
    free(sql);
    assert_int_equal(s_log_lines(c, old[0].id[0]), 2);
    for (int i = 1; i < CLUSTER_OLD; i++) {
        assert_int_equal(s_log_lines(c, old[i].id[0]), 1);
    }
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < kept[i].n; k++) {
            assert_false(s_archived_on(conn, kept[i].id[k]));
            assert_int_equal(s_snap_on(conn, kept[i].id[k]), kept[i].snap[k]);
        }
    }
    free(owner);
    assert_int_equal(cluster_destroy(&c), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_the_rule_archives_old_idle_families_whole_and_keeps_the_rest, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_the_cutoff_is_midnight_utc_minus_the_days, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_a_tick_takes_a_batch_oldest_first, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments_are_refused_naming_them, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_family_unarchived_without_a_message_is_archived_again, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_family_that_changed_after_the_candidate_read_is_skipped, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_one_tick_at_a_time_under_the_advisory_lock, s_setup,
                                        s_teardown),
        cmocka_unit_test(test_two_workers_archive_every_old_family_exactly_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
