/*
 * The fair share of the limiter across users (ARCHITECTURE.md §6.2, "Fair share"): a quick pass
 * hands free slots to the users holding the fewest fresh leases per unit of weight, the oldest
 * chat first among equals; with a cap (CHATFLEET_WORKER_USER_MAX_CHATS = K) a user holds at
 * most K x weight fresh leases, its subagents' included, and two acquirers racing on their own
 * connections never take a user past it. Real PostgreSQL, the worker's own lease statements.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_USER_MSG "[{\"type\":\"text\",\"text\":\"hello\"}]"
#define S_STALE_MS 5000

static const cs_settings_t s_settings = {.lease_stale_ms = S_STALE_MS};

static testdb_t *s_db;
static PGconn *s_conn;

/* Every test starts from no runnable chat and no lease. */
static int s_clean(void **state) {
    (void)state;
    testdb_execf(s_conn, "DELETE FROM chat_heartbeats");
    testdb_execf(s_conn, "UPDATE chats SET archived = true WHERE NOT archived");
    testdb_execf(s_conn, "UPDATE users SET chat_weight = 1");
    return 0;
}

static int s_setup(void **state) {
    (void)state;
    log_init("test_fair_share", "warn");
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    s_conn = NULL;
    testdb_destroy(&s_db);
    return 0;
}

static void s_user(const char *name, char id[ID_UUID_LEN + 1]) {
    char *unique = mem_printf("%s-%lld", name, (long long)id_now_ms());
    assert_int_equal(testdb_user_new(s_conn, unique, id), 0);
    free(unique);
}

/* A new running chat of owner without a worker (a subagent of parent when given). */
static void s_chat(const char *owner, const char *parent, char chat[ID_UUID_LEN + 1]) {
    cs_message_t m = {.role = "user", .content = S_USER_MSG};
    cs_create_t c = {
        .owner_id = owner, .messages = &m, .message_count = 1, .parent_chat_id = parent};
    cs_error_t err;
    if (chatstate_create(s_conn, &s_settings, &c, NULL, chat, &err) != 0) {
        fail_msg("create: %s", err.message);
    }
}

static leasedb_acquire_args_t s_args(const char *worker, int64_t max_chats, int batch,
                                     int64_t cap) {
    leasedb_acquire_args_t a = {.worker_id = worker,
                                .max_chats = max_chats,
                                .lease_stale_ms = S_STALE_MS,
                                .batch = batch,
                                .user_max_chats = cap,
                                .quick = true};
    return a;
}

/* Fresh leases of owner's chats, by the chats' owner (not the heartbeat rows' column). */
static int64_t s_held(const char *owner) {
    return testdb_intf(s_conn,
                       "SELECT count(*) FROM chat_heartbeats h JOIN chats c ON c.id = h.chat_id"
                       " WHERE c.owner_id = '%s' AND h.heartbeat_at > now() - interval '5 seconds'",
                       owner);
}

static bool s_taken(const leasedb_batch_t *b, const char *chat) {
    for (int i = 0; i < b->count; i++) {
        if (!strcmp(b->chats[i].chat_id, chat)) {
            return true;
        }
    }
    return false;
}

/* The hog's five chats are older than the others' one each, and three slots are free: the
 * pass takes the hog's oldest and one of each other user's, not the hog's three oldest. */
static void test_free_slots_go_to_the_users_holding_fewest(void **state) {
    (void)state;
    char hog[ID_UUID_LEN + 1], b[ID_UUID_LEN + 1], c[ID_UUID_LEN + 1];
    s_user("hog", hog);
    s_user("b", b);
    s_user("c", c);
    char hogs[5][ID_UUID_LEN + 1], cb[ID_UUID_LEN + 1], cc[ID_UUID_LEN + 1];
    for (int i = 0; i < 5; i++) {
        s_chat(hog, NULL, hogs[i]);
    }
    s_chat(b, NULL, cb);
    s_chat(c, NULL, cc);
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    leasedb_acquire_args_t a = s_args(w, 3, 8, 0);
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
    assert_int_equal(got.count, 3);
    assert_true(s_taken(&got, hogs[0]));
    assert_true(s_taken(&got, cb));
    assert_true(s_taken(&got, cc));
    /* The hog's first lease goes; the free slot is the hog's again (it now holds 0). */
    testdb_execf(s_conn, "DELETE FROM chat_heartbeats WHERE chat_id = '%s'", hogs[0]);
    testdb_execf(s_conn, "UPDATE chats SET archived = true WHERE id = '%s'", hogs[0]);
    assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, hogs[1]);
}

/* Without a cap a lone user takes every free slot: the share only orders, it never idles. */
static void test_a_lone_user_takes_every_free_slot(void **state) {
    (void)state;
    char hog[ID_UUID_LEN + 1];
    s_user("lone", hog);
    char chat[ID_UUID_LEN + 1];
    for (int i = 0; i < 6; i++) {
        s_chat(hog, NULL, chat);
    }
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    leasedb_acquire_args_t a = s_args(w, 0, 8, 0);
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
    assert_int_equal(got.count, 6);
    assert_int_equal(s_held(hog), 6);
    /* The heartbeat rows name their owner. */
    assert_int_equal(testdb_intf(s_conn,
                                 "SELECT count(*) FROM chat_heartbeats h JOIN chats c ON c.id = "
                                 "h.chat_id WHERE h.owner_id = c.owner_id AND c.owner_id = '%s'",
                                 hog),
                     6);
}

/* With K = 2, a user holds two fresh leases per unit of weight, whatever the passes and the
 * free slots; another user's chat is taken in the same pass; weight 2 doubles the share. */
static void test_a_user_at_its_share_is_passed_over(void **state) {
    (void)state;
    char hog[ID_UUID_LEN + 1], b[ID_UUID_LEN + 1];
    s_user("capped", hog);
    s_user("other", b);
    char chat[ID_UUID_LEN + 1], cb[ID_UUID_LEN + 1];
    for (int i = 0; i < 6; i++) {
        s_chat(hog, NULL, chat);
    }
    s_chat(b, NULL, cb);
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    for (int limiter = 0; limiter <= 100; limiter += 100) {
        s_clean(NULL);
        testdb_execf(s_conn,
                     "UPDATE chats SET archived = false, worker_id = NULL, runner_id = NULL"
                     " WHERE owner_id IN ('%s', '%s')",
                     hog, b);
        leasedb_acquire_args_t a = s_args(w, limiter, 8, 2);
        leasedb_batch_t got;
        assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
        assert_int_equal(got.count, 3);
        assert_true(s_taken(&got, cb));
        assert_int_equal(s_held(hog), 2);
        assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
        assert_int_equal(got.count, 0);
        leasedb_acquire_args_t uncapped = a;
        uncapped.user_max_chats = 0;
        testdb_execf(s_conn, "UPDATE users SET chat_weight = 2 WHERE id = '%s'", hog);
        assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
        assert_int_equal(got.count, 2);
        assert_int_equal(s_held(hog), 4);
        assert_int_equal(leasedb_acquire(s_conn, &a, &got), 0);
        assert_int_equal(got.count, 0);
        assert_int_equal(leasedb_acquire(s_conn, &uncapped, &got), 0);
        assert_int_equal(got.count, 2);
        assert_int_equal(s_held(hog), 6);
    }
}

/* A subagent's lease counts against its root's owner: with K = 2, a root and its child fill
 * the owner's share, and the owner's second root waits. */
static void test_a_subagent_family_counts_against_its_roots_owner(void **state) {
    (void)state;
    char owner[ID_UUID_LEN + 1];
    s_user("family", owner);
    char root[ID_UUID_LEN + 1], child[ID_UUID_LEN + 1], root2[ID_UUID_LEN + 1];
    s_chat(owner, NULL, root);
    s_chat(owner, root, child);
    s_chat(owner, NULL, root2);
    char w[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(w), 0);
    /* Two pools, as with CHATFLEET_WORKER_MAX_SUBAGENTS: the share spans them. */
    leasedb_acquire_args_t roots = s_args(w, 10, 1, 2);
    roots.pool = LEASEDB_POOL_ROOTS;
    leasedb_acquire_args_t kids = s_args(w, 10, 8, 2);
    kids.pool = LEASEDB_POOL_SUBAGENTS;
    kids.first_slot = 11;
    leasedb_batch_t got;
    assert_int_equal(leasedb_acquire(s_conn, &roots, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, root);
    assert_int_equal(leasedb_acquire(s_conn, &kids, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, child);
    assert_int_equal(testdb_intf(s_conn,
                                 "SELECT count(*) FROM chat_heartbeats WHERE chat_id = '%s'"
                                 " AND owner_id = '%s'",
                                 child, owner),
                     1);
    roots.batch = 8;
    assert_int_equal(leasedb_acquire(s_conn, &roots, &got), 0);
    assert_int_equal(got.count, 0);
    assert_int_equal(s_held(owner), 2);
    /* The child's turn ends and lets go: the second root is taken. */
    testdb_execf(s_conn, "DELETE FROM chat_heartbeats WHERE chat_id = '%s'", child);
    testdb_execf(s_conn,
                 "UPDATE chats SET status = 'waiting', worker_id = NULL, runner_id = NULL"
                 " WHERE id = '%s'",
                 child);
    assert_int_equal(leasedb_acquire(s_conn, &roots, &got), 0);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.chats[0].chat_id, root2);
}

/* --- Two acquirers at once. --- */

#define S_RACE_CAP    3
#define S_RACE_CHATS  6 /* new ones, and as many held by a dead worker's stale leases */
#define S_RACE_ROUNDS 40

typedef struct {
    PGconn *conn;
    char worker[ID_UUID_LEN + 1];
    bool quick;
    pthread_barrier_t *start;
    int taken;
    int failed;
} s_racer_t;

static void *s_race(void *arg) {
    s_racer_t *r = arg;
    leasedb_acquire_args_t a = s_args(r->worker, 100, 8, S_RACE_CAP);
    a.quick = r->quick;
    pthread_barrier_wait(r->start);
    /* Until three passes in a row take nothing: a pass may find the hog's chats locked by the
     * other's transaction, and then takes nothing that time. */
    for (int idle = 0, pass = 0; idle < 3 && pass < 50; pass++) {
        leasedb_batch_t got;
        if (leasedb_acquire(r->conn, &a, &got) != 0) {
            r->failed++;
            continue;
        }
        r->taken += got.count;
        idle = got.count > 0 ? 0 : idle + 1;
    }
    return NULL;
}

/* A quick pass (the hog's new chats) and a full one (its chats whose worker died) run at once,
 * round after round: together they never take the hog past K. Each pass's own scan sees at
 * most K to take; without the owner's lock both would count the hog's leases while neither
 * had committed, and each would take K. */
static void test_two_acquirers_never_take_a_user_past_its_share(void **state) {
    (void)state;
    char hog[ID_UUID_LEN + 1], dead[ID_UUID_LEN + 1];
    s_user("racer", hog);
    assert_int_equal(id_uuid_new(dead), 0);
    char ids[2 * S_RACE_CHATS][ID_UUID_LEN + 1];
    for (int i = 0; i < 2 * S_RACE_CHATS; i++) {
        s_chat(hog, NULL, ids[i]);
    }
    s_racer_t racers[2];
    pthread_barrier_t start;
    int over = 0;
    for (int round = 0; round < S_RACE_ROUNDS; round++) {
        assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
        testdb_execf(s_conn, "DELETE FROM chat_heartbeats");
        testdb_execf(s_conn,
                     "UPDATE chats SET worker_id = NULL, runner_id = NULL WHERE owner_id = '%s'",
                     hog);
        for (int i = 0; i < S_RACE_CHATS; i++) {
            testdb_execf(s_conn,
                         "WITH r AS (SELECT gen_random_uuid() AS id), o AS (UPDATE chats"
                         " SET worker_id = '%s', runner_id = (SELECT id FROM r) WHERE id = '%s')"
                         " INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at, owner_id)"
                         " SELECT '%s', id, now() - interval '1 hour', '%s' FROM r",
                         dead, ids[S_RACE_CHATS + i], ids[S_RACE_CHATS + i], hog);
        }
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            racers[i] = (s_racer_t){.conn = testdb_connect(s_db), .quick = i == 0, .start = &start};
            assert_int_equal(id_uuid_new(racers[i].worker), 0);
            assert_int_equal(pthread_create(&t[i], NULL, s_race, &racers[i]), 0);
        }
        for (int i = 0; i < 2; i++) {
            assert_int_equal(pthread_join(t[i], NULL), 0);
            PQfinish(racers[i].conn);
        }
        assert_int_equal(pthread_barrier_destroy(&start), 0);
        assert_int_equal(racers[0].failed + racers[1].failed, 0);
        int64_t held = s_held(hog);
        over += held > S_RACE_CAP;
        if (held != S_RACE_CAP || racers[0].taken + racers[1].taken != S_RACE_CAP) {
            fail_msg("round %d: quick took %d, full took %d, the hog holds %lld (K %d)", round,
                     racers[0].taken, racers[1].taken, (long long)held, S_RACE_CAP);
        }
    }
    assert_int_equal(over, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_free_slots_go_to_the_users_holding_fewest, s_clean),
        cmocka_unit_test_setup(test_a_lone_user_takes_every_free_slot, s_clean),
        cmocka_unit_test_setup(test_a_user_at_its_share_is_passed_over, s_clean),
        cmocka_unit_test_setup(test_a_subagent_family_counts_against_its_roots_owner, s_clean),
        cmocka_unit_test_setup(test_two_acquirers_never_take_a_user_past_its_share, s_clean),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
