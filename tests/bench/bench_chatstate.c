/*
 * bench_chatstate: transitions per second of the fenced state machine on a real PostgreSQL,
 * for the cycle a simple turn costs: SendMessage (W -> R0), Acquire, CommitStep, then
 * FinishTurn with Abandon (the worker releases the idle chat, or the next cycle's Acquire
 * would meet its own fresh lease). Four bundles and five transitions per cycle.
 *
 *   bench_chatstate URL [SECONDS]
 *
 * URL names an empty database; the bench migrates it. Two workloads run SECONDS each (default
 * 10): one chat from one connection, and 64 chats from 4 connections (threads, 16 chats
 * each). Progress goes to stderr once a second; the figures go to stdout, one
 * "RESULT name=value ..." line per workload, which tests/bench/chatstate-vs-pgbench reads.
 * Exits 1 when a bundle fails (a benchmark of a broken machine is no benchmark).
 */
#include "chatstate.h"
#include "db.h"
#include "id.h"
#include "log.h"
#include "mem.h"
#include "migration.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_SECONDS_DEFAULT 10
#define BENCH_SECONDS_MAX     3600
#define MANY_CHATS            64
#define MANY_THREADS          4
#define BUNDLES_PER_CYCLE     4
#define TRANSITIONS_PER_CYCLE 5
#define PROGRESS_MS           1000
#define USER_MSG              "[{\"type\":\"text\",\"text\":\"bench question\"}]"
#define STEP_MSG              "[{\"type\":\"text\",\"text\":\"bench answer\"}]"

/* The bundles' settings: CHATFLEET_LEASE_STALE_MS and CHATFLEET_REQUIRES_ACTION_DEADLINE_MS at
 * their defaults. */
static const cs_settings_t s_settings = {.lease_stale_ms = 30000,
                                         .requires_action_deadline_ms = 5 * 60 * 1000};

typedef struct {
    const char *url;
    const char *owner;
    char (*chats)[ID_UUID_LEN + 1];
    int chat_count;
    int64_t deadline_ms;
    atomic_llong cycles;
    atomic_bool failed;
    char worker[ID_UUID_LEN + 1];
    char error[400]; /* bounded: a prefix plus cs_error_t.message */
} worker_t;

static int s_fail(worker_t *w, const char *what, const cs_error_t *err) {
    snprintf(w->error, sizeof w->error, "%s: rc=%d %s", what, err->rc, err->message);
    atomic_store(&w->failed, true);
    return -1;
}

/* The fence the worker's task holds: read in the bundle, so under the row lock, as the real
 * worker re-checks its own captured values there. */
static int s_fence(PGconn *conn, const char *chat, const char *worker, const char *runner,
                   cs_fence_t *f) {
    const char *p[] = {chat};
    db_err_t e;
    char msg[200];
    PGresult *res =
        db_query(conn, &e, msg, sizeof msg,
                 "SELECT history_version, generation_attempt FROM chats WHERE id = $1", 1, p);
    if (!res) {
        fprintf(stderr, "bench: fence read failed: %s\n", msg);
        return -1;
    }
    memset(f, 0, sizeof *f);
    snprintf(f->worker_id, sizeof f->worker_id, "%s", worker);
    snprintf(f->runner_id, sizeof f->runner_id, "%s", runner);
    f->status = "running";
    f->history_version = db_int64(res, 0, 0);
    f->generation_attempt = db_int64(res, 0, 1);
    PQclear(res);
    return 0;
}

/* One cycle on one chat in W: four bundles. */
static int s_cycle(worker_t *w, PGconn *conn, const char *chat) {
    cs_error_t err;
    char runner[ID_UUID_LEN + 1];
    if (id_uuid_new(runner) != 0) {
        snprintf(w->error, sizeof w->error, "no randomness");
        return -1;
    }
    cs_message_t user = {.role = "user", .content = USER_MSG, .created_by = w->owner};
    cs_message_t step = {.role = "assistant", .content = STEP_MSG};
    int64_t mid = 0;
    int64_t qid = 0;
    cs_fence_t f;

    chatstate_t *cs = chatstate_begin(conn, &s_settings, chat, &err);
    if (!cs || chatstate_send_message(cs, &user, CS_BUSY_QUEUE, 0, &mid, &qid, &err) != 0 ||
        chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        chatstate_destroy(&cs);
        return s_fail(w, "SendMessage", &err);
    }
    cs = chatstate_begin(conn, &s_settings, chat, &err);
    if (!cs || chatstate_acquire(cs, w->worker, runner, &err) != 0 ||
        chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        chatstate_destroy(&cs);
        return s_fail(w, "Acquire", &err);
    }
    cs = chatstate_begin(conn, &s_settings, chat, &err);
    if (!cs || s_fence(conn, chat, w->worker, runner, &f) != 0 ||
        chatstate_commit_step(cs, &f, &step, 1, &err) != 0 ||
        chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        chatstate_destroy(&cs);
        return s_fail(w, "CommitStep", &err);
    }
    cs = chatstate_begin(conn, &s_settings, chat, &err);
    if (!cs || s_fence(conn, chat, w->worker, runner, &f) != 0 ||
        chatstate_finish_turn(cs, &f, NULL, 0, &err) != 0 || chatstate_abandon(cs, &f, &err) != 0 ||
        chatstate_commit(&cs, NULL, NULL, &err) != 0) {
        chatstate_destroy(&cs);
        return s_fail(w, "FinishTurn+Abandon", &err);
    }
    return 0;
}

static void *s_worker_main(void *arg) {
    worker_t *w = arg;
    PGconn *conn = db_connect(w->url, "bench_chatstate");
    if (!conn) {
        snprintf(w->error, sizeof w->error, "cannot connect");
        atomic_store(&w->failed, true);
        return NULL;
    }
    for (int64_t n = 0; id_now_ms() < w->deadline_ms; n++) {
        if (s_cycle(w, conn, w->chats[n % w->chat_count]) != 0) {
            break;
        }
        atomic_fetch_add(&w->cycles, 1);
    }
    PQfinish(conn);
    return NULL;
}

/* Creates count chats in W (one system prompt, no user message). */
static int s_create_chats(PGconn *conn, const char *owner, char (*chats)[ID_UUID_LEN + 1],
                          int count) {
    for (int i = 0; i < count; i++) {
        cs_create_t c = {.owner_id = owner, .system_prompt = "You are a benchmark."};
        cs_error_t err;
        if (chatstate_create(conn, &s_settings, &c, NULL, chats[i], &err) != 0) {
            fprintf(stderr, "bench: create failed: %s\n", err.message);
            return -1;
        }
    }
    return 0;
}

static void s_sleep_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Runs one workload: threads x chats_per_thread, for seconds. Returns cycles or -1. */
static int64_t s_run(const char *name, const char *url, PGconn *admin, const char *owner,
                     int threads, int chats_per_thread, int seconds) {
    worker_t *ws = mem_calloc((size_t)threads, sizeof *ws);
    pthread_t *ts = mem_calloc((size_t)threads, sizeof *ts);
    int rc = 0;
    for (int i = 0; i < threads && rc == 0; i++) {
        worker_t *w = &ws[i];
        w->url = url;
        w->owner = owner;
        w->chat_count = chats_per_thread;
        w->chats = mem_calloc((size_t)chats_per_thread, sizeof *w->chats);
        atomic_init(&w->cycles, 0);
        atomic_init(&w->failed, false);
        rc = id_uuid_new(w->worker) | s_create_chats(admin, owner, w->chats, chats_per_thread);
    }
    if (rc != 0) {
        fprintf(stderr, "bench: %s: setup failed\n", name);
        return -1;
    }
    int64_t start = id_now_ms();
    int64_t deadline = start + (int64_t)seconds * 1000;
    for (int i = 0; i < threads; i++) {
        ws[i].deadline_ms = deadline;
        if (pthread_create(&ts[i], NULL, s_worker_main, &ws[i]) != 0) {
            fprintf(stderr, "bench: pthread_create failed\n");
            abort();
        }
    }
    /* Progress, paced by the clock (this waits for time itself, not for a condition). */
    while (id_now_ms() < deadline) {
        s_sleep_ms(PROGRESS_MS);
        long long total = 0;
        bool failed = false;
        for (int i = 0; i < threads; i++) {
            total += atomic_load(&ws[i].cycles);
            failed |= atomic_load(&ws[i].failed);
        }
        double el = (double)(id_now_ms() - start) / 1000.0;
        fprintf(stderr, "bench: %s: %5.1fs %lld cycles (%.0f transitions/s)\n", name, el, total,
                el > 0 ? (double)total * TRANSITIONS_PER_CYCLE / el : 0.0);
        if (failed) {
            break;
        }
    }
    int64_t cycles = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ts[i], NULL);
        if (ws[i].error[0]) {
            fprintf(stderr, "bench: %s: thread %d: %s\n", name, i, ws[i].error);
            rc = -1;
        }
        cycles += atomic_load(&ws[i].cycles);
        free(ws[i].chats);
    }
    double elapsed = (double)(id_now_ms() - start) / 1000.0;
    free(ws);
    free(ts);
    if (rc != 0) {
        return -1;
    }
    printf("RESULT workload=%s connections=%d chats=%d seconds=%.2f cycles=%lld"
           " transitions_per_s=%.1f bundles_per_s=%.1f\n",
           name, threads, threads * chats_per_thread, elapsed, (long long)cycles,
           (double)cycles * TRANSITIONS_PER_CYCLE / elapsed,
           (double)cycles * BUNDLES_PER_CYCLE / elapsed);
    fflush(stdout);
    return cycles;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: bench_chatstate URL [SECONDS]\n");
        return 2;
    }
    long seconds = BENCH_SECONDS_DEFAULT;
    if (argc == 3) {
        char *end = NULL;
        errno = 0;
        seconds = strtol(argv[2], &end, 10);
        if (errno != 0 || end == argv[2] || *end != '\0' || seconds < 1 ||
            seconds > BENCH_SECONDS_MAX) {
            fprintf(stderr, "bench: SECONDS must be 1..%d\n", BENCH_SECONDS_MAX);
            return 2;
        }
    }
    log_init("bench_chatstate", "warn");
    const char *url = argv[1];
    PGconn *admin = db_connect(url, "bench_chatstate");
    if (!admin) {
        return 1;
    }
    if (migration_apply(admin) < 0) {
        PQfinish(admin);
        return 1;
    }
    char owner[ID_UUID_LEN + 1];
    char name[48];
    if (id_uuid_new(owner) != 0) {
        PQfinish(admin);
        return 1;
    }
    snprintf(name, sizeof name, "bench-%.8s", owner);
    char err[200];
    const char *p[] = {owner, name};
    if (db_exec(admin, err, sizeof err, "INSERT INTO users (id, name) VALUES ($1, $2)", 2, p) !=
        DB_OK) {
        fprintf(stderr, "bench: cannot create the owner: %s\n", err);
        PQfinish(admin);
        return 1;
    }
    fprintf(stderr,
            "bench: %ld s per workload; cycle = Send + Acquire + CommitStep +"
            " FinishTurn/Abandon (%d bundles, %d transitions)\n",
            seconds, BUNDLES_PER_CYCLE, TRANSITIONS_PER_CYCLE);
    int rc = 0;
    if (s_run("one_chat", url, admin, owner, 1, 1, (int)seconds) < 0 ||
        s_run("64_chats", url, admin, owner, MANY_THREADS, MANY_CHATS / MANY_THREADS,
              (int)seconds) < 0) {
        rc = 1;
    }
    PQfinish(admin);
    return rc;
}
