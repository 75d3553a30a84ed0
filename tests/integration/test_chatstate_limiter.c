/*
 * The concurrency limiter without a lock (ARCHITECTURE.md §6.1, §6.2): a chat holds one of the
 * slots 1..max_chats through its fresh heartbeat row, and the unique index on the slot decides
 * between concurrent claims. Two acquirers on their own connections, racing for many rounds
 * with renewals, releases and deaths, never hold more than max_chats fresh leases together; a
 * stale holder's slot goes to another chat; a renewal racing an acquisition that would steal
 * its slot keeps it when it locks the row first, and is never revived when the steal came
 * first; and a session stopped inside its transaction, holding a chat's row lock and a slot
 * claim, costs another acquirer at most one lock timeout, not its progress. Every interleaving
 * is forced with real locks and observed in pg_stat_activity, never with a sleep. Whether a
 * chat or a slot has a fresh lease is an index probe in the plans the statements keep.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chatstate.h"
#include "id.h"
#include "leasedb.h"
#include "log.h"
#include "mem.h"
#include "testdb.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_USER_MSG       "[{\"type\":\"text\",\"text\":\"hello\"}]"
#define S_STALE_MS       5000  /* chatstate's and the acquirers' stale threshold */
#define S_LATE_STALE_MS  60000 /* a renewer that still sees a 10 s old row as fresh */
#define S_RA_DEADLINE_MS 60000

static const cs_settings_t s_settings = {.lease_stale_ms = S_STALE_MS,
                                         .requires_action_deadline_ms = S_RA_DEADLINE_MS};
#define S_WAIT_MS 10000 /* how long a forced interleaving may take to show up */

/* The race. */
#define S_RACE_MAX_CHATS 6
#define S_RACE_CHATS     40
#define S_RACE_ROUNDS    300

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

static int s_setup(void **state) {
    (void)state;
    log_init("test_chatstate_limiter", "warn");
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    return testdb_user_new(s_conn, "limiter", s_owner);
}

static int s_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    s_conn = NULL;
    testdb_destroy(&s_db);
    return 0;
}

/* A new running chat without an owner: runnable, needs an owner. */
static void s_chat(char chat[ID_UUID_LEN + 1]) {
    cs_message_t m = {.role = "user", .content = S_USER_MSG};
    cs_create_t c = {.owner_id = s_owner, .messages = &m, .message_count = 1};
    cs_error_t err;
    if (chatstate_create(s_conn, &s_settings, &c, NULL, chat, &err) != 0) {
        fail_msg("create: %s", err.message);
    }
}

static leasedb_acquire_args_t s_args(const char *worker, int64_t max_chats, int batch) {
    leasedb_acquire_args_t a = {.worker_id = worker,
                                .max_chats = max_chats,
                                .lease_stale_ms = S_STALE_MS,
                                .batch = batch,
                                .quick = true};
    return a;
}

/* The owner's FinishTurn: the chat waits, still owned, its lease still held. */
static void s_finish_turn(const char *chat) {
    char *sql = mem_printf("SELECT worker_id || ' ' || runner_id || ' ' || history_version"
                           " || ' ' || generation_attempt FROM chats WHERE id = '%s'",
                           chat);
    char *row = testdb_scalar(s_conn, sql);
    free(sql);
    cs_fence_t f = {.status = "running"};
    long long hv = -1;
    long long ga = -1;
    assert_non_null(row);
    assert_int_equal(sscanf(row, "%36s %36s %lld %lld", f.worker_id, f.runner_id, &hv, &ga), 4);
    free(row);
    f.history_version = hv;
    f.generation_attempt = ga;
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(s_conn, &s_settings, chat, &err);
    assert_non_null(cs);
    if (chatstate_finish_turn(cs, &f, NULL, 0, &err) != 0 ||
        chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        chatstate_destroy(&cs);
        fail_msg("finish turn: %s", err.message);
    }
}

/* Waits until backend pid waits on a lock; fails the test after S_WAIT_MS. */
static void s_wait_lock(int pid) {
    int64_t deadline = id_now_ms() + S_WAIT_MS;
    for (;;) {
        char *sql = mem_printf("SELECT coalesce(wait_event_type, '') FROM pg_stat_activity"
                               " WHERE pid = %d",
                               pid);
        char *w = testdb_scalar(s_conn, sql);
        free(sql);
        bool waiting = w && !strcmp(w, "Lock");
        free(w);
        if (waiting) {
            return;
        }
        if (id_now_ms() > deadline) {
            fail_msg("backend %d never waited on a lock", pid);
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* --- Two acquirers racing. --- */

typedef struct {
    char worker[ID_UUID_LEN + 1];
    unsigned seed;
    pthread_barrier_t *start;
    lease_t held[S_RACE_CHATS];
    size_t nheld;
    /* Results, read after join. */
    int acquired;
    int takeovers;
    int refused;
    int lost; /* leases found not renewed */
    int abandoned;
    int died;
    char error[320];
} racer_t;

typedef struct {
    atomic_bool stop;
    int samples;
    int64_t max_held;
    int violations;
    char error[320];
} monitor_t;

static void s_forget(racer_t *r, size_t i) {
    r->held[i] = r->held[--r->nheld];
}

/* Releases lease i with Abandon: its row and its slot go at once. */
static void s_abandon(racer_t *r, PGconn *conn, size_t i) {
    cs_fence_t f = {.status = NULL, .history_version = -1, .generation_attempt = -1};
    snprintf(f.worker_id, sizeof f.worker_id, "%s", r->worker);
    snprintf(f.runner_id, sizeof f.runner_id, "%s", r->held[i].runner_id);
    cs_error_t err;
    chatstate_t *cs = chatstate_begin(conn, &s_settings, r->held[i].chat_id, &err);
    int rc = cs ? chatstate_abandon(cs, &f, &err) : -1;
    if (rc == 0) {
        rc = chatstate_commit(&cs, NULL, NULL, &err);
    }
    chatstate_destroy(&cs);
    /* Fenced means another racer took the chat over a stale lease: nothing to release. */
    if (rc != 0 && err.rc != CS_FENCED && err.rc != CS_RETRY) {
        snprintf(r->error, sizeof r->error, "abandon: rc=%d %s", err.rc, err.message);
    }
    r->abandoned++;
    s_forget(r, i);
}

/* Lease i's worker "dies": its heartbeat stops and goes stale; the slot is free for whoever
 * deletes that row, and the chat for a takeover. */
static void s_die(racer_t *r, PGconn *conn, size_t i) {
    char *sql = mem_printf("UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour'"
                           " WHERE chat_id = '%s' AND runner_id = '%s'",
                           r->held[i].chat_id, r->held[i].runner_id);
    if (testdb_try(conn, sql, r->error, sizeof r->error) == 0) {
        r->died++;
    }
    free(sql);
    s_forget(r, i);
}

static void *s_racer(void *arg) {
    racer_t *r = arg;
    PGconn *conn = testdb_connect(s_db);
    pthread_barrier_wait(r->start);
    for (int round = 0; round < S_RACE_ROUNDS && !r->error[0]; round++) {
        leasedb_acquire_args_t a = s_args(r->worker, S_RACE_MAX_CHATS, 1 + rand_r(&r->seed) % 8);
        a.quick = rand_r(&r->seed) % 2 == 0; /* the full pass takes stale leases over */
        leasedb_batch_t b;
        if (leasedb_acquire(conn, &a, &b) != 0) {
            snprintf(r->error, sizeof r->error, "round %d: the acquisition failed", round);
            break;
        }
        r->refused += b.free_slots == 0;
        for (int i = 0; i < b.count; i++) {
            ASSERT(r->nheld < S_RACE_CHATS);
            if (b.chats[i].slot < 1 || b.chats[i].slot > S_RACE_MAX_CHATS) {
                snprintf(r->error, sizeof r->error, "slot %d out of range", (int)b.chats[i].slot);
            }
            snprintf(r->held[r->nheld].chat_id, sizeof r->held[r->nheld].chat_id, "%s",
                     b.chats[i].chat_id);
            snprintf(r->held[r->nheld].runner_id, sizeof r->held[r->nheld].runner_id, "%s",
                     b.chats[i].runner_id);
            r->nheld++;
            r->acquired++;
            r->takeovers += b.chats[i].previous[0] != '\0';
        }
        bool renewed[S_RACE_CHATS];
        int n =
            leasedb_renew(conn, r->worker, r->held, r->nheld, S_STALE_MS, S_STALE_MS / 3, renewed);
        if (n < 0) {
            snprintf(r->error, sizeof r->error, "round %d: the renewal failed", round);
            break;
        }
        for (size_t i = r->nheld; i-- > 0;) {
            if (!renewed[i]) {
                r->lost++;
                s_forget(r, i);
            }
        }
        if (r->nheld > 0) {
            int dice = rand_r(&r->seed) % 6;
            size_t i = (size_t)rand_r(&r->seed) % r->nheld;
            if (dice < 2) {
                s_abandon(r, conn, i);
            } else if (dice == 2) {
                s_die(r, conn, i);
            }
        }
    }
    PQfinish(conn);
    return NULL;
}

/* Samples, each in one snapshot: the chats held by fresh leases (the limiter's own
 * definition: a fresh heartbeat row of the chat's current runner), fresh rows without a slot
 * in 1..max, and slots held twice. */
static void *s_monitor(void *arg) {
    monitor_t *m = arg;
    PGconn *conn = testdb_connect(s_db);
    char *sql = mem_printf(
        "SELECT (SELECT count(*) FROM chat_heartbeats h JOIN chats c ON c.id = h.chat_id"
        " AND c.runner_id = h.runner_id AND c.worker_id IS NOT NULL"
        " WHERE h.heartbeat_at > statement_timestamp() - interval '%d milliseconds'),"
        " (SELECT count(*) FROM chat_heartbeats WHERE heartbeat_at > statement_timestamp()"
        " - interval '%d milliseconds' AND (slot IS NULL OR slot NOT BETWEEN 1 AND %d)),"
        " (SELECT count(*) FROM (SELECT slot FROM chat_heartbeats WHERE slot IS NOT NULL"
        " GROUP BY slot HAVING count(*) > 1) d)",
        S_STALE_MS, S_STALE_MS, S_RACE_MAX_CHATS);
    while (!atomic_load(&m->stop)) {
        PGresult *res = PQexec(conn, sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(m->error, sizeof m->error, "monitor: %s", PQresultErrorMessage(res));
            PQclear(res);
            break;
        }
        int64_t held = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        int64_t unslotted = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        int64_t twice = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        PQclear(res);
        m->samples++;
        m->max_held = held > m->max_held ? held : m->max_held;
        if (held > S_RACE_MAX_CHATS || unslotted > 0 || twice > 0) {
            m->violations++;
            snprintf(m->error, sizeof m->error,
                     "sample %d: %lld chats held (max %d), %lld fresh rows without a valid slot,"
                     " %lld slots held twice",
                     m->samples, (long long)held, S_RACE_MAX_CHATS, (long long)unslotted,
                     (long long)twice);
        }
    }
    free(sql);
    PQfinish(conn);
    return NULL;
}

static void test_two_acquirers_never_hold_more_than_max_chats_or_one_slot_twice(void **state) {
    (void)state;
    for (int i = 0; i < S_RACE_CHATS; i++) {
        char chat[ID_UUID_LEN + 1];
        s_chat(chat);
    }
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    racer_t *racers = mem_calloc(2, sizeof *racers);
    monitor_t mon = {.stop = false};
    unsigned seed = (unsigned)id_now_ms();
    pthread_t threads[2];
    pthread_t monitor;
    assert_int_equal(pthread_create(&monitor, NULL, s_monitor, &mon), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(id_uuid_new(racers[i].worker), 0);
        racers[i].seed = seed + (unsigned)i;
        racers[i].start = &start;
        assert_int_equal(pthread_create(&threads[i], NULL, s_racer, &racers[i]), 0);
    }
    int64_t t0 = id_now_ms();
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    }
    int64_t ms = id_now_ms() - t0;
    atomic_store(&mon.stop, true);
    assert_int_equal(pthread_join(monitor, NULL), 0);
    pthread_barrier_destroy(&start);

    int acquired = 0;
    int takeovers = 0;
    for (int i = 0; i < 2; i++) {
        racer_t *r = &racers[i];
        if (r->error[0]) {
            fail_msg("racer %d (seed %u): %s", i, seed + (unsigned)i, r->error);
        }
        printf("limiter race: racer %d acquired %d (%d takeovers of a stale lease), refused %d "
               "times, released %d, died %d, lost %d renewals, holds %zu\n",
               i, r->acquired, r->takeovers, r->refused, r->abandoned, r->died, r->lost, r->nheld);
        acquired += r->acquired;
        takeovers += r->takeovers;
        /* Both made progress: neither waited the other out. */
        assert_true(r->acquired > 0);
    }
    printf("limiter race: %d rounds each in %lld ms, %d acquisitions; %d samples, at most %lld of "
           "%d chats held at once, %d violations (seed %u)\n",
           S_RACE_ROUNDS, (long long)ms, acquired, mon.samples, (long long)mon.max_held,
           S_RACE_MAX_CHATS, mon.violations, seed);
    if (mon.error[0] && mon.violations > 0) {
        fail_msg("%s", mon.error);
    }
    assert_int_equal(mon.violations, 0);
    assert_true(mon.samples > 0);
    /* The limiter was full at times, and stale slots were reused by takeovers. */
    assert_true(racers[0].refused + racers[1].refused > 0);
    assert_true(takeovers > 0);
    /* What the racers still hold, renewed now, fits the limit too. */
    int still = 0;
    for (int i = 0; i < 2; i++) {
        bool renewed[S_RACE_CHATS];
        int n = leasedb_renew(s_conn, racers[i].worker, racers[i].held, racers[i].nheld, S_STALE_MS,
                              S_STALE_MS / 3, renewed);
        assert_true(n >= 0);
        still += n;
    }
    assert_true(still <= S_RACE_MAX_CHATS);
    free(racers);
}

/* --- The subagent pool (ARCHITECTURE.md §6.2, "Pools"). --- */

/* A new running subagent chat of parent, without an owner. */
static void s_child(const char *parent, char chat[ID_UUID_LEN + 1]) {
    cs_message_t m = {.role = "user", .content = S_USER_MSG};
    cs_create_t c = {
        .owner_id = s_owner, .messages = &m, .message_count = 1, .parent_chat_id = parent};
    cs_error_t err;
    if (chatstate_create(s_conn, &s_settings, &c, NULL, chat, &err) != 0) {
        fail_msg("create child: %s", err.message);
    }
}

static void test_subagents_and_roots_take_slots_of_their_own_pools_only(void **state) {
    (void)state;
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    char root[ID_UUID_LEN + 1];
    char root2[ID_UUID_LEN + 1];
    char kids[3][ID_UUID_LEN + 1];
    s_chat(root);
    for (int i = 0; i < 3; i++) {
        s_child(root, kids[i]);
    }
    s_chat(root2);
    /* Roots: slot 1 only. The one free slot goes to the oldest root, never to a child. */
    leasedb_acquire_args_t roots = s_args(w, 1, 8);
    roots.pool = LEASEDB_POOL_ROOTS;
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &roots, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, root);
    assert_int_equal(got.chats[0].slot, 1);
    /* Subagents: slots 2..3, taken by the two oldest children; the roots' pool is full. */
    leasedb_acquire_args_t subs = s_args(w, 2, 8);
    subs.first_slot = 2;
    subs.pool = LEASEDB_POOL_SUBAGENTS;
    assert_int_equal(leasedb_acquire(s_conn, &subs, &got), 0);
    assert_int_equal(got.count, 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(got.chats[i].chat_id, kids[i]);
        assert_true(got.chats[i].slot == 2 || got.chats[i].slot == 3);
    }
    assert_int_not_equal(got.chats[0].slot, got.chats[1].slot);
    /* Both pools are full now: the third child and the second root wait, each for its own. */
    assert_int_equal(leasedb_acquire(s_conn, &subs, &got), 0);
    assert_int_equal(got.free_slots, 0);
    assert_int_equal(got.count, 0);
    assert_int_equal(leasedb_acquire(s_conn, &roots, &got), 0);
    assert_int_equal(got.free_slots, 0);
    /* A child's turn ends and its slot goes stale: the waiting child takes it, not the root. */
    s_finish_turn(kids[0]);
    testdb_execf(s_conn,
                 "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour'"
                 " WHERE chat_id = '%s'",
                 kids[0]);
    assert_int_equal(leasedb_acquire(s_conn, &subs, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, kids[2]);
    assert_int_equal(testdb_intf(s_conn,
                                 "SELECT count(*) FROM chats WHERE id = '%s' AND worker_id IS"
                                 " NULL",
                                 root2),
                     1);
}

/* --- A stale holder's slot. --- */

static void test_a_stale_holders_slot_goes_to_another_chat(void **state) {
    (void)state;
    char a[ID_UUID_LEN + 1];
    char b[ID_UUID_LEN + 1];
    char w1[ID_UUID_LEN + 1];
    char w2[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w1), 0);
    assert_int_equal(id_uuid_new(w2), 0);
    s_chat(a);
    leasedb_acquire_args_t args = s_args(w1, 1, 4);
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, a);
    assert_int_equal(got.chats[0].slot, 1);
    /* A's turn ends; its owner keeps the lease, and with it the only slot. */
    s_finish_turn(a);
    s_chat(b);
    args = s_args(w2, 1, 4);
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.free_slots, 0);
    assert_int_equal(got.count, 0);
    /* A's worker stops heartbeating: its row goes stale and its slot is free. */
    testdb_execf(s_conn,
                 "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour'"
                 " WHERE chat_id = '%s'",
                 a);
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.free_slots, 1);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, b);
    assert_int_equal(got.chats[0].slot, 1);
    /* The stale row made way: one row holds slot 1, B's. */
    assert_int_equal(
        testdb_intf(s_conn, "SELECT count(*) FROM chat_heartbeats WHERE chat_id = '%s'", a), 0);
    char *sql = mem_printf("SELECT chat_id::text FROM chat_heartbeats WHERE slot = 1");
    char *holder = testdb_scalar(s_conn, sql);
    free(sql);
    assert_non_null(holder);
    assert_string_equal(holder, b);
    free(holder);
    printf("stale slot: slot 1 refused while A's lease was fresh, given to B once it was stale\n");
}

/* --- Renewal against a steal. --- */

typedef struct {
    const char *worker;
    atomic_int pid;
    /* Acquisition. */
    leasedb_acquire_args_t args;
    leasedb_batch_t batch;
    /* Renewal. */
    lease_t leases[2];
    size_t nleases;
    bool renewed[2];
    int rc;
} actor_t;

static void *s_acquire_thread(void *arg) {
    actor_t *t = arg;
    PGconn *conn = testdb_connect(s_db);
    atomic_store(&t->pid, PQbackendPID(conn));
    t->rc = leasedb_acquire(conn, &t->args, &t->batch);
    PQfinish(conn);
    return NULL;
}

static void *s_renew_thread(void *arg) {
    actor_t *t = arg;
    PGconn *conn = testdb_connect(s_db);
    atomic_store(&t->pid, PQbackendPID(conn));
    t->rc = leasedb_renew(conn, t->worker, t->leases, t->nleases, S_LATE_STALE_MS, S_WAIT_MS,
                          t->renewed);
    PQfinish(conn);
    return NULL;
}

static int s_pid_of(actor_t *t) {
    int64_t deadline = id_now_ms() + S_WAIT_MS;
    while (atomic_load(&t->pid) == 0) {
        if (id_now_ms() > deadline) {
            fail_msg("the thread never connected");
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&t->pid);
}

static void s_lease_of(const char *chat, lease_t *l) {
    char *sql = mem_printf("SELECT runner_id::text FROM chats WHERE id = '%s'", chat);
    char *runner = testdb_scalar(s_conn, sql);
    free(sql);
    assert_non_null(runner);
    snprintf(l->chat_id, sizeof l->chat_id, "%s", chat);
    snprintf(l->runner_id, sizeof l->runner_id, "%s", runner);
    free(runner);
}

/* The renewal locks A's row (slot 1) first and is held up on the next row, E's (slot 2),
 * which a third session has locked. Meanwhile an acquisition that sees A's row as stale
 * (the renewal has not written yet) tries to take slot 1 for B and waits for the renewal's
 * lock. Once the renewal commits, the acquisition re-checks the row, finds it fresh, leaves
 * it, and cannot claim the slot: A keeps slot 1, B stays unowned. */
static void test_a_renewed_lease_keeps_its_slot_while_an_acquirer_tries_to_steal_it(void **st) {
    (void)st;
    char w1[ID_UUID_LEN + 1];
    char w2[ID_UUID_LEN + 1];
    char a[ID_UUID_LEN + 1];
    char e[ID_UUID_LEN + 1];
    char b[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w1), 0);
    assert_int_equal(id_uuid_new(w2), 0);
    s_chat(a);
    s_chat(e);
    leasedb_acquire_args_t args = s_args(w1, 2, 2);
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 2);
    s_finish_turn(a);
    s_finish_turn(e);
    s_chat(b);
    /* A's slot must be 1 and E's 2 for the lock order below. */
    testdb_execf(s_conn, "UPDATE chat_heartbeats SET slot = slot + 10");
    testdb_execf(s_conn, "UPDATE chat_heartbeats SET slot = 1 WHERE chat_id = '%s'", a);
    testdb_execf(s_conn, "UPDATE chat_heartbeats SET slot = 2 WHERE chat_id = '%s'", e);
    /* A's row is 10 s old: stale for the acquisition (5 s), fresh for this renewer (60 s). */
    testdb_execf(s_conn,
                 "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '10 seconds'"
                 " WHERE chat_id = '%s'",
                 a);

    PGconn *blocker = testdb_connect(s_db);
    testdb_execf(blocker, "BEGIN");
    testdb_execf(blocker, "SELECT 1 FROM chat_heartbeats WHERE chat_id = '%s' FOR UPDATE", e);
    actor_t renew = {.worker = w1, .nleases = 2};
    s_lease_of(a, &renew.leases[0]);
    s_lease_of(e, &renew.leases[1]);
    pthread_t rt;
    assert_int_equal(pthread_create(&rt, NULL, s_renew_thread, &renew), 0);
    s_wait_lock(s_pid_of(&renew)); /* holds A's row, waits for E's */

    actor_t steal = {.args = s_args(w2, 2, 4)};
    steal.args.lock_timeout_ms = S_WAIT_MS;
    pthread_t at;
    assert_int_equal(pthread_create(&at, NULL, s_acquire_thread, &steal), 0);
    s_wait_lock(s_pid_of(&steal)); /* wants A's row */

    testdb_execf(blocker, "COMMIT");
    assert_int_equal(pthread_join(rt, NULL), 0);
    assert_int_equal(pthread_join(at, NULL), 0);
    PQfinish(blocker);

    assert_int_equal(renew.rc, 2);
    assert_true(renew.renewed[0] && renew.renewed[1]);
    assert_int_equal(steal.rc, 0);
    assert_int_equal(steal.batch.free_slots, 1);
    assert_int_equal(steal.batch.selected, 1);
    assert_int_equal(steal.batch.count, 0);
    assert_int_equal(steal.batch.missed, 1);
    assert_int_equal(
        testdb_intf(s_conn,
                    "SELECT count(*) FROM chat_heartbeats WHERE chat_id = '%s' AND slot = 1"
                    " AND heartbeat_at > now() - interval '5 seconds'",
                    a),
        1);
    assert_int_equal(
        testdb_intf(s_conn, "SELECT count(*) FROM chat_heartbeats WHERE chat_id = '%s'", b), 0);
    assert_int_equal(
        testdb_intf(s_conn, "SELECT count(*) FROM chats WHERE id = '%s' AND worker_id IS NULL", b),
        1);
    printf("renewal first: A renewed and kept slot 1; the acquisition that waited for it took "
           "nothing\n");
}

/* The other order: an acquisition deletes A's stale row for slot 1 and is held up on its
 * next claim (slot 2, which a third session claimed without committing). A renewal that
 * still sees A's row as fresh waits for the acquisition's lock; once the acquisition
 * commits, the row is gone and the renewal renews nothing: a stale lease is never revived. */
static void test_a_lease_taken_as_stale_is_not_revived_by_a_late_renewal(void **st) {
    (void)st;
    char w1[ID_UUID_LEN + 1];
    char w2[ID_UUID_LEN + 1];
    char a[ID_UUID_LEN + 1];
    char b[ID_UUID_LEN + 1];
    char c[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w1), 0);
    assert_int_equal(id_uuid_new(w2), 0);
    s_chat(a);
    leasedb_acquire_args_t args = s_args(w1, 2, 1);
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 1);
    s_finish_turn(a);
    testdb_execf(s_conn, "UPDATE chat_heartbeats SET slot = 1 WHERE chat_id = '%s'", a);
    testdb_execf(s_conn,
                 "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '10 seconds'"
                 " WHERE chat_id = '%s'",
                 a);
    s_chat(b);
    s_chat(c);

    /* Slot 2 claimed by a transaction that has not ended. */
    PGconn *claimer = testdb_connect(s_db);
    testdb_execf(claimer, "BEGIN");
    testdb_execf(claimer,
                 "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at, slot)"
                 " VALUES ('%s', gen_random_uuid(), now(), 2)",
                 a);
    actor_t steal = {.args = s_args(w2, 2, 4)};
    steal.args.lock_timeout_ms = S_WAIT_MS;
    pthread_t at;
    assert_int_equal(pthread_create(&at, NULL, s_acquire_thread, &steal), 0);
    s_wait_lock(s_pid_of(&steal)); /* B holds slot 1 (A's row deleted); C waits for slot 2 */

    actor_t renew = {.worker = w1, .nleases = 1};
    s_lease_of(a, &renew.leases[0]);
    pthread_t rt;
    assert_int_equal(pthread_create(&rt, NULL, s_renew_thread, &renew), 0);
    s_wait_lock(s_pid_of(&renew)); /* waits for the acquisition's delete of A's row */

    testdb_execf(claimer, "ROLLBACK");
    assert_int_equal(pthread_join(at, NULL), 0);
    assert_int_equal(pthread_join(rt, NULL), 0);
    PQfinish(claimer);

    assert_int_equal(steal.rc, 0);
    assert_int_equal(steal.batch.count, 2);
    assert_string_equal(steal.batch.chats[0].chat_id, b);
    assert_int_equal(steal.batch.chats[0].slot, 1);
    assert_string_equal(steal.batch.chats[1].chat_id, c);
    assert_int_equal(steal.batch.chats[1].slot, 2);
    assert_int_equal(renew.rc, 0);
    assert_false(renew.renewed[0]);
    assert_int_equal(
        testdb_intf(s_conn, "SELECT count(*) FROM chat_heartbeats WHERE chat_id = '%s'", a), 0);
    printf("steal first: B took A's stale slot 1; the late renewal found no row and revived "
           "nothing\n");
}

/* --- A stopped session. --- */

/* A session stopped inside its transaction, as a SIGSTOPped worker's acquirer would be: it
 * holds C1's row lock and an uncommitted claim of slot 2. Another acquirer skips C1, takes
 * slot 1, waits one lock timeout on slot 2, takes slot 3 instead, and commits; the stopped
 * session's own idle_in_transaction_session_timeout then ends it, and its chat and slot are
 * taken at the next look. */
static void test_a_session_stopped_in_its_transaction_does_not_block_an_acquirer(void **st) {
    (void)st;
    char chats[4][ID_UUID_LEN + 1];
    for (int i = 0; i < 4; i++) {
        s_chat(chats[i]);
    }
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    PGconn *stopped = testdb_connect(s_db);
    int stopped_pid = PQbackendPID(stopped);
    testdb_execf(stopped, "BEGIN");
    testdb_execf(stopped, "SELECT set_config('idle_in_transaction_session_timeout', '1500', true)");
    testdb_execf(stopped, "SELECT 1 FROM chats WHERE id = '%s' FOR UPDATE", chats[0]);
    testdb_execf(stopped,
                 "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at, slot)"
                 " VALUES ('%s', gen_random_uuid(), now(), 2)",
                 chats[0]);

    leasedb_acquire_args_t args = s_args(w, 3, 8);
    leasedb_batch_t got;
    int64_t t0 = id_now_ms();
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    int64_t first = id_now_ms() - t0;
    assert_int_equal(got.count, 2);
    assert_string_equal(got.chats[0].chat_id, chats[1]);
    assert_int_equal(got.chats[0].slot, 1);
    assert_string_equal(got.chats[1].chat_id, chats[2]);
    assert_int_equal(got.chats[1].slot, 3);
    assert_true(got.again);
    /* One lock timeout, not the stopped session's lifetime. */
    assert_true(first < 3 * LEASEDB_LOCK_TIMEOUT_MS);

    /* The server ends the stopped session; its lock and its claim go with it. */
    int64_t deadline = id_now_ms() + S_WAIT_MS;
    while (testdb_intf(s_conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %d",
                       stopped_pid) > 0) {
        if (id_now_ms() > deadline) {
            fail_msg("the stopped session was never ended");
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int64_t ended = id_now_ms() - t0;
    assert_int_not_equal(testdb_try(stopped, "SELECT 1", NULL, 0), 0);
    PQfinish(stopped);
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, chats[0]);
    assert_int_equal(got.chats[0].slot, 2);
    /* Three chats hold the three slots: the fourth waits. */
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.free_slots, 0);
    assert_int_equal(got.count, 0);
    printf("stopped session: the other acquirer took 2 chats in %lld ms (one lock timeout); the "
           "stopped session was ended after %lld ms and its chat taken with slot 2\n",
           (long long)first, (long long)ended);
}

/* --- Quick and full passes (ARCHITECTURE.md §6.2). --- */

/* With max_chats (0: no limiter): a quick pass takes a new chat and leaves a stale lease
 * alone, however old; the full pass then takes the stale one over. */
static void s_quick_then_full(int64_t max_chats) {
    char a[ID_UUID_LEN + 1];
    char b[ID_UUID_LEN + 1];
    char w1[ID_UUID_LEN + 1];
    char w2[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w1), 0);
    assert_int_equal(id_uuid_new(w2), 0);
    s_chat(a);
    leasedb_acquire_args_t args = s_args(w1, max_chats, 4);
    args.quick = true;
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, a);
    /* A's worker stops heartbeating; B is created after. */
    testdb_execf(s_conn,
                 "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '1 hour'"
                 " WHERE chat_id = '%s'",
                 a);
    s_chat(b);
    args = s_args(w2, max_chats, 4);
    args.quick = true;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, b);
    assert_string_equal(got.chats[0].previous, "");
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 0);
    args.quick = false;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, a);
    assert_string_equal(got.chats[0].previous, w1);
    assert_int_equal(
        testdb_intf(s_conn,
                    "SELECT count(*) FROM chats WHERE worker_id = '%s' AND id IN ('%s', '%s')", w2,
                    a, b),
        2);
}

static void
test_a_quick_pass_takes_new_chats_and_leaves_stale_leases_to_the_full_pass(void **state) {
    (void)state;
    s_quick_then_full(8);
}

static void test_without_the_limiter_too(void **state) {
    (void)state;
    s_quick_then_full(0);
}

/* A renewal reports each lease it was given: renewed when the worker still holds it, not
 * when the runner named is not the chat's; its rows come back in lock order, not in the
 * order given, so each is matched by chat and runner. */
static void test_a_renewal_reports_each_lease_by_chat_and_runner(void **state) {
    (void)state;
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    enum { S_N = 6 };
    char chats[S_N][ID_UUID_LEN + 1];
    for (int i = 0; i < S_N; i++) {
        s_chat(chats[i]);
    }
    leasedb_acquire_args_t args = s_args(w, 0, S_N);
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
    assert_int_equal(got.count, S_N);
    /* Given newest first; the second and fifth name a runner that is not the chat's. */
    lease_t leases[S_N];
    for (int i = 0; i < S_N; i++) {
        s_lease_of(chats[S_N - 1 - i], &leases[i]);
    }
    assert_int_equal(id_uuid_new(leases[1].runner_id), 0);
    assert_int_equal(id_uuid_new(leases[4].runner_id), 0);
    bool renewed[S_N];
    assert_int_equal(leasedb_renew(s_conn, w, leases, S_N, S_STALE_MS, S_STALE_MS / 3, renewed),
                     S_N - 2);
    for (int i = 0; i < S_N; i++) {
        assert_int_equal(renewed[i], i != 1 && i != 4);
    }
}

/* The plan the connection would run for its prepared statement whose text starts with
 * prefix, with args (a parenthesized list of literals); fails when there is none. */
static char *s_plan_of(const char *prefix, const char *args) {
    char *sql =
        mem_printf("SELECT name FROM pg_prepared_statements WHERE statement LIKE '%s%%'", prefix);
    char *name = testdb_scalar(s_conn, sql);
    free(sql);
    if (!name) {
        fail_msg("no prepared statement starts with %s", prefix);
    }
    sql = mem_printf("EXPLAIN EXECUTE %s%s", name, args);
    free(name);
    PGresult *res = PQexec(s_conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fail_msg("%s: %s", sql, PQresultErrorMessage(res));
    }
    free(sql);
    char *plan = mem_strdup("");
    for (int i = 0; i < PQntuples(res); i++) {
        char *more = mem_printf("%s%s\n", plan, PQgetvalue(res, i, 0));
        free(plan);
        plan = more;
    }
    PQclear(res);
    return plan;
}

/* Whether one chat or one slot holds a fresh lease is an index probe, however empty
 * chat_heartbeats looked when the statement was planned (ARCHITECTURE.md §6.2, "Probes, not
 * hashes"): never a hash of every heartbeat row, never a scan of the table, which holds a
 * row per turn in flight. The plans are those of the statements a worker's acquisitions
 * prepared, after enough runs to cache them. */
static void test_a_lease_question_is_an_index_probe_whatever_the_table_looked_like(void **st) {
    (void)st;
    testdb_execf(s_conn, "VACUUM ANALYZE chat_heartbeats");
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    char chat[ID_UUID_LEN + 1];
    for (int i = 0; i < 8; i++) {
        s_chat(chat);
        leasedb_acquire_args_t args = s_args(w, 100, 1);
        args.quick = true;
        leasedb_batch_t got;
        assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
        assert_int_equal(got.count, 1);
    }
    char *args = mem_printf("('%s')", chat);
    char *load = s_plan_of("SELECT status, archived", args);
    free(args);
    args = mem_printf("('%s', '%s', '%s', 5000, 2)", chat, w, w);
    char *own = s_plan_of("WITH share AS", args);
    free(args);
    char *scan =
        s_plan_of("WITH s AS MATERIALIZED%WITH RECURSIVE up",
                  "(1, 100, 5000, 1, 8, 4, 1, 0, 2, '00000000-0000-0000-0000-000000000000', 1)");
    const char *plans[] = {load, own, scan};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        if (strstr(plans[i], "Seq Scan on chat_heartbeats") || strstr(plans[i], "hashed") ||
            strstr(plans[i], "Hash Anti Join") || !strstr(plans[i], "chat_heartbeats_")) {
            fail_msg("a lease question is not an index probe:\n%s", plans[i]);
        }
        free((char *)plans[i]);
    }
}

/* The lease statements (the acquisition scans, the renewal) are planned once per connection,
 * not again for every pass: a custom plan of the scan cost more to make than to run (0.3-0.5 ms
 * against 0.2 ms), on the path from a user's message to its turn's start (ARCHITECTURE.md §6.2,
 * "Plans made once"). */
static void test_a_lease_statement_is_planned_once_per_connection(void **st) {
    (void)st;
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    lease_t held[8];
    for (int i = 0; i < 8; i++) {
        char chat[ID_UUID_LEN + 1];
        s_chat(chat);
        leasedb_acquire_args_t args = s_args(w, 100, 1);
        leasedb_batch_t got;
        assert_int_equal(leasedb_acquire(s_conn, &args, &got), 0);
        assert_int_equal(got.count, 1);
        args.quick = false; /* a full pass, with nothing stale to take */
        leasedb_batch_t none;
        assert_int_equal(leasedb_acquire(s_conn, &args, &none), 0);
        assert_int_equal(none.count, 0);
        snprintf(held[i].chat_id, sizeof held[i].chat_id, "%s", got.chats[0].chat_id);
        snprintf(held[i].runner_id, sizeof held[i].runner_id, "%s", got.chats[0].runner_id);
        bool renewed[8];
        assert_int_equal(
            leasedb_renew(s_conn, w, held, (size_t)i + 1, S_STALE_MS, S_STALE_MS / 3, renewed),
            i + 1);
    }
    /* Two scans (quick, full) and the renewal: 3 statements, 24 runs, none planned anew. */
    char *plans = testdb_scalar(
        s_conn, "SELECT count(*) || ' ' || sum(custom_plans) || ' ' || sum(generic_plans)"
                " FROM pg_prepared_statements WHERE statement LIKE 'WITH s AS MATERIALIZED%'"
                " OR statement LIKE 'WITH mine AS%'");
    assert_non_null(plans);
    assert_string_equal(plans, "3 0 24");
    free(plans);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_two_acquirers_never_hold_more_than_max_chats_or_one_slot_twice, s_setup,
            s_teardown),
        cmocka_unit_test_setup_teardown(test_subagents_and_roots_take_slots_of_their_own_pools_only,
                                        s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_a_stale_holders_slot_goes_to_another_chat, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_renewed_lease_keeps_its_slot_while_an_acquirer_tries_to_steal_it, s_setup,
            s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_lease_taken_as_stale_is_not_revived_by_a_late_renewal, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_session_stopped_in_its_transaction_does_not_block_an_acquirer, s_setup,
            s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_quick_pass_takes_new_chats_and_leaves_stale_leases_to_the_full_pass, s_setup,
            s_teardown),
        cmocka_unit_test_setup_teardown(test_without_the_limiter_too, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_a_renewal_reports_each_lease_by_chat_and_runner,
                                        s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(
            test_a_lease_question_is_an_index_probe_whatever_the_table_looked_like, s_setup,
            s_teardown),
        cmocka_unit_test_setup_teardown(test_a_lease_statement_is_planned_once_per_connection,
                                        s_setup, s_teardown),
    };
    return cmocka_run_group_tests_name("chatstate_limiter", tests, NULL, NULL);
}
