/*
 * Bundles racing on one chat serialize (ARCHITECTURE.md §4.4: the row lock, then
 * snapshot_version + 1). Four threads, one connection
 * each, apply bundles to the same chat at once: the HTTP side queues and deletes queued
 * messages, the owning worker commits steps and records attempts and retry state. Afterwards
 * no update is lost (queue rows = inserts - deletes, one assistant row per step, with the
 * step's revision), every committed bundle got its own snapshot_version, each thread saw them
 * strictly increasing, and the final snapshot_version is the initial one plus the number of
 * committed bundles (rolled-back bundles count zero).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "id.h"
#include "log.h"
#include "mem.h"
#include "testdb.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RACERS         4
#define BUNDLES        50  /* committed bundles per racer */
#define ROLLBACK_EVERY 10  /* every n-th bundle of the queueing racer is rolled back */
#define RETRY_MAX      100 /* CS_RETRY attempts per bundle before the racer gives up */
#define WORKER         "11111111-1111-4111-8111-111111111111"
#define RUNNER         "22222222-2222-4222-8222-222222222222"
#define USER_MSG       "[{\"type\":\"text\",\"text\":\"queued\"}]"
#define STEP_MSG       "[{\"type\":\"text\",\"text\":\"step\"}]"

typedef enum { R_QUEUE = 0, R_DELETE, R_STEP, R_ATTEMPT } role_t;

typedef struct {
    role_t role;
    const testdb_t *db;
    const char *chat;
    pthread_barrier_t *start;
    /* Results, read by the main thread after join. */
    int64_t snaps[BUNDLES]; /* after.snapshot_version of each committed bundle, in order */
    int committed;
    int rolled_back;
    int inserts;
    int deletes;
    int steps;
    int64_t step_snaps[BUNDLES];
    int64_t last_queue_snap; /* the latest committed bundle that changed the queue */
    int retries;
    char error[320]; /* "" unless the racer failed; fits err.message and a prefix */
} racer_t;

static testdb_t *s_db;
static PGconn *s_conn;
static char s_owner[ID_UUID_LEN + 1];

static int64_t s_parse(const char *text) {
    if (!text) {
        return -1;
    }
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' ? (int64_t)v : -1;
}

static int64_t s_int(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int64_t s_int(PGconn *conn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = mem_vprintf(fmt, ap);
    va_end(ap);
    char *text = testdb_scalar(conn, sql);
    int64_t v = s_parse(text);
    free(text);
    free(sql);
    return v;
}

/* The owner's fence as of now; called inside the bundle, so it is read under the row lock. */
static void s_fence(PGconn *conn, const char *chat, cs_fence_t *f, char status[32]) {
    char *sql = mem_printf("SELECT status || ' ' || history_version || ' ' || generation_attempt"
                           " FROM chats WHERE id = '%s'",
                           chat);
    char *row = testdb_scalar(conn, sql);
    long long hv = -1;
    long long ga = -1;
    if (!row || sscanf(row, "%31s %lld %lld", status, &hv, &ga) != 3) {
        snprintf(status, 32, "?");
    }
    memset(f, 0, sizeof *f);
    snprintf(f->worker_id, sizeof f->worker_id, "%s", WORKER);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", RUNNER);
    f->status = status;
    f->history_version = hv;
    f->generation_attempt = ga;
    free(row);
    free(sql);
}

typedef enum { B_QUEUED, B_DELETED, B_STEP, B_OTHER } bundle_kind_t;

/* One bundle for this racer. Returns 0 and fills *kind, or -1 with err filled. */
static int s_apply(racer_t *r, PGconn *conn, chatstate_t *cs, int n, bundle_kind_t *kind,
                   cs_error_t *err) {
    cs_message_t user = {.role = "user", .content = USER_MSG};
    cs_message_t step = {.role = "assistant", .content = STEP_MSG};
    int64_t mid = 0;
    int64_t qid = 0;
    cs_fence_t f;
    char status[32];
    if (r->role == R_DELETE) {
        /* Read under the row lock: the head cannot vanish before we delete it. */
        int64_t head =
            s_int(conn, "SELECT min(id) FROM chat_queued_messages WHERE chat_id = '%s'", r->chat);
        if (head > 0) {
            *kind = B_DELETED;
            return chatstate_delete_queued(cs, head, err);
        }
        /* Nothing to delete: queue one instead. */
    }
    switch (r->role) {
        case R_DELETE:
        case R_QUEUE:
            *kind = B_QUEUED;
            return chatstate_send_message(cs, &user, CS_BUSY_QUEUE, 0, &mid, &qid, err);
        case R_STEP:
            *kind = B_STEP;
            s_fence(conn, r->chat, &f, status);
            return chatstate_commit_step(cs, &f, &step, 1, err);
        case R_ATTEMPT:
            *kind = B_OTHER;
            s_fence(conn, r->chat, &f, status);
            if (n % 2 == 0) {
                int64_t attempt = 0;
                return chatstate_record_generation_attempt(cs, &f, &attempt, err);
            }
            return chatstate_record_retry_state(cs, &f, "{\"retry_in_ms\":100}", err);
    }
    return -1;
}

static void *s_racer(void *arg) {
    racer_t *r = arg;
    PGconn *conn = testdb_connect(r->db);
    pthread_barrier_wait(r->start);
    int attempt_no = 0;
    while (r->committed < BUNDLES && !r->error[0]) {
        cs_error_t err;
        memset(&err, 0, sizeof err);
        chatstate_t *cs = chatstate_begin(conn, &chatsetup_settings, r->chat, &err);
        bundle_kind_t kind = B_OTHER;
        int rc = cs ? s_apply(r, conn, cs, r->committed, &kind, &err) : -1;
        bool rollback = rc == 0 && r->role == R_QUEUE && ++attempt_no % ROLLBACK_EVERY == 0;
        if (rollback) {
            chatstate_destroy(&cs);
            r->rolled_back++;
            continue;
        }
        hint_update_t after;
        if (rc == 0) {
            rc = chatstate_commit(&cs, NULL, &after, &err);
        } else {
            chatstate_destroy(&cs);
        }
        if (rc != 0) {
            if (err.rc == CS_RETRY && r->retries < RETRY_MAX * BUNDLES) {
                r->retries++;
                continue;
            }
            snprintf(r->error, sizeof r->error, "racer %d bundle %d: rc=%d %s", (int)r->role,
                     r->committed, err.rc, err.message);
            break;
        }
        r->snaps[r->committed++] = after.snapshot_version;
        switch (kind) {
            case B_QUEUED:
                r->inserts++;
                r->last_queue_snap = after.snapshot_version;
                break;
            case B_DELETED:
                r->deletes++;
                r->last_queue_snap = after.snapshot_version;
                break;
            case B_STEP:
                r->step_snaps[r->steps++] = after.snapshot_version;
                break;
            case B_OTHER:
                break;
        }
    }
    PQfinish(conn);
    return NULL;
}

static int s_cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int s_group_setup(void **state) {
    (void)state;
    log_init("test_chatstate_race", "warn");
    s_db = testdb_new();
    s_conn = testdb_connect(s_db);
    return testdb_user_new(s_conn, "race-owner", s_owner);
}

static int s_group_teardown(void **state) {
    (void)state;
    PQfinish(s_conn);
    testdb_destroy(&s_db);
    return 0;
}

static void test_racing_bundles_on_one_chat_serialize_without_lost_updates(void **state) {
    (void)state;
    char chat[ID_UUID_LEN + 1];
    cs_message_t m = {.role = "user", .content = USER_MSG};
    cs_create_t c = {.owner_id = s_owner, .messages = &m, .message_count = 1};
    cs_error_t err;
    assert_int_equal(chatstate_create(s_conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    chatstate_t *cs = chatstate_begin(s_conn, &chatsetup_settings, chat, &err);
    assert_non_null(cs);
    assert_int_equal(chatstate_acquire(cs, WORKER, RUNNER, &err), 0);
    assert_int_equal(chatstate_commit(&cs, NULL, NULL, &err), 0);

    int64_t initial = s_int(s_conn, "SELECT snapshot_version FROM chats WHERE id = '%s'", chat);
    int64_t messages0 =
        s_int(s_conn, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);
    assert_true(initial > 0);

    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, RACERS), 0);
    racer_t *racers = mem_calloc(RACERS, sizeof *racers);
    pthread_t threads[RACERS];
    for (int i = 0; i < RACERS; i++) {
        racers[i].role = (role_t)i;
        racers[i].db = s_db;
        racers[i].chat = chat;
        racers[i].start = &start;
        assert_int_equal(pthread_create(&threads[i], NULL, s_racer, &racers[i]), 0);
    }
    for (int i = 0; i < RACERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    }
    pthread_barrier_destroy(&start);

    int64_t all[RACERS * BUNDLES];
    int total = 0;
    int inserts = 0;
    int deletes = 0;
    int steps = 0;
    int rolled_back = 0;
    int retries = 0;
    int64_t last_queue = 0;
    int64_t step_snaps[RACERS * BUNDLES];
    for (int i = 0; i < RACERS; i++) {
        racer_t *r = &racers[i];
        if (r->error[0]) {
            fail_msg("%s", r->error);
        }
        assert_int_equal(r->committed, BUNDLES);
        /* Each thread observes its own commits in strictly increasing order. */
        for (int j = 1; j < r->committed; j++) {
            if (r->snaps[j] <= r->snaps[j - 1]) {
                fail_msg("racer %d: snapshot_version %lld after %lld", i, (long long)r->snaps[j],
                         (long long)r->snaps[j - 1]);
            }
        }
        memcpy(all + total, r->snaps, (size_t)r->committed * sizeof *all);
        total += r->committed;
        memcpy(step_snaps + steps, r->step_snaps, (size_t)r->steps * sizeof *step_snaps);
        inserts += r->inserts;
        deletes += r->deletes;
        steps += r->steps;
        rolled_back += r->rolled_back;
        retries += r->retries;
        if (r->last_queue_snap > last_queue) {
            last_queue = r->last_queue_snap;
        }
    }

    /* How often consecutive snapshots came from different racers: evidence that the bundles
     * really interleaved (printed, not asserted: the scheduler owes us nothing). */
    int switches = 0;
    for (int64_t v = initial + 1; v < initial + total; v++) {
        int a = -1;
        int b = -1;
        for (int i = 0; i < RACERS; i++) {
            for (int j = 0; j < racers[i].committed; j++) {
                a = racers[i].snaps[j] == v ? i : a;
                b = racers[i].snaps[j] == v + 1 ? i : b;
            }
        }
        switches += a != b;
    }

    /* Every committed bundle has its own snapshot_version, and together they are exactly
     * initial+1 .. initial+total: each bundle advanced it by one, rollbacks by zero. */
    qsort(all, (size_t)total, sizeof *all, s_cmp64);
    for (int j = 0; j < total; j++) {
        if (all[j] != initial + 1 + j) {
            fail_msg("committed snapshot_version #%d is %lld, expected %lld", j, (long long)all[j],
                     (long long)(initial + 1 + j));
        }
    }
    assert_int_equal(s_int(s_conn, "SELECT snapshot_version FROM chats WHERE id = '%s'", chat),
                     initial + total);

    /* No lost update in the queue, in history or in the versions the triggers keep. */
    assert_true(deletes > 0);
    assert_true(rolled_back > 0);
    assert_int_equal(
        s_int(s_conn, "SELECT count(*) FROM chat_queued_messages WHERE chat_id = '%s'", chat),
        inserts - deletes);
    assert_int_equal(s_int(s_conn, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat),
                     messages0 + steps);
    assert_int_equal(s_int(s_conn, "SELECT queue_version FROM chats WHERE id = '%s'", chat),
                     last_queue);
    qsort(step_snaps, (size_t)steps, sizeof *step_snaps, s_cmp64);
    assert_int_equal(s_int(s_conn, "SELECT history_version FROM chats WHERE id = '%s'", chat),
                     step_snaps[steps - 1]);
    char *sql = mem_printf("SELECT revision FROM chat_messages WHERE chat_id = '%s'"
                           " AND role = 'assistant' ORDER BY revision",
                           chat);
    PGresult *res = PQexec(s_conn, sql);
    free(sql);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), steps);
    for (int j = 0; j < steps; j++) {
        assert_int_equal(s_parse(PQgetvalue(res, j, 0)), step_snaps[j]);
    }
    PQclear(res);

    printf("race: %d racers, %d committed bundles (%d queued, %d deleted, %d steps), %d rolled "
           "back, %d retried, %d racer switches; snapshot_version %lld -> %lld\n",
           RACERS, total, inserts, deletes, steps, rolled_back, retries, switches,
           (long long)initial, (long long)(initial + total));
    free(racers);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_racing_bundles_on_one_chat_serialize_without_lost_updates),
    };
    return cmocka_run_group_tests_name("chatstate_race", tests, s_group_setup, s_group_teardown);
}
