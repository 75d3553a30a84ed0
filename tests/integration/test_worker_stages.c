/* The worker's stage timings and turn outcomes on /metrics (issue 40, the seed's lifecycle
 * stages): after a tool turn, a turn that spawns a subagent, a turn retried after a 503, a
 * turn refused with a 400 and a prompt queued behind a paced turn, on the sim model, every stage
 * those turns pass through has observations under the right stage, scope and chat_kind (the backoff
 * once, as long as it waited, and the queued prompt's wait once), the provider's stages also under
 * the model config's name, and the outcome counter counts each closed turn once, root and subagent
 * apart, completed and error apart. A turn whose owner is stopped past its lease and taken over
 * is abandoned once by the old owner and completed once by the new one, and nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chatsetup.h"
#include "chatstate.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "testdb.h"

/* The value of the first line of text that begins with prefix and holds each of the NULL-
 * terminated substrings, or -1. */
static double s_series(const char *text, const char *prefix, ...) {
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *l = mem_printf("%.*s", (int)len, line);
        bool ok = !strncmp(l, prefix, strlen(prefix));
        va_list ap;
        va_start(ap, prefix);
        for (const char *want = va_arg(ap, const char *); ok && want;
             want = va_arg(ap, const char *)) {
            ok = strstr(l, want) != NULL;
        }
        va_end(ap);
        const char *sp = strrchr(l, ' ');
        double v = ok && sp ? strtod(sp + 1, NULL) : -1;
        free(l);
        if (ok) {
            return v;
        }
        line = end ? end + 1 : NULL;
    }
    return -1;
}

static double s_stage(const char *text, const char *stage, const char *kind) {
    char s[64], k[64];
    snprintf(s, sizeof s, "stage=\"%s\"", stage);
    snprintf(k, sizeof k, "chat_kind=\"%s\"", kind);
    return s_series(text, "chatfleet_stage_duration_seconds_count{", s, "scope=\"turn\"", k,
                    (char *)NULL);
}

static double s_outcome(const char *text, const char *outcome, const char *kind) {
    char o[64], k[64];
    snprintf(o, sizeof o, "outcome=\"%s\"", outcome);
    snprintf(k, sizeof k, "chat_kind=\"%s\"", kind);
    return s_series(text, "chatfleet_turn_outcomes_total{", o, k, (char *)NULL);
}

static void s_chat(PGconn *conn, const char *owner, const char *model, const char *text,
                   char *chat) {
    char *content = mem_printf("[{\"type\":\"text\",\"text\":\"%s\"}]", text);
    cs_message_t m = {.role = "user", .content = content};
    cs_create_t c = {
        .owner_id = owner, .model_config_id = model, .messages = &m, .message_count = 1};
    cs_error_t err;
    assert_int_equal(chatstate_create(conn, &chatsetup_settings, &c, NULL, chat, &err), 0);
    free(content);
}

/* A worker on db (no broker: its runners learn from its own tasks and the sync loop) serving
 * /metrics on port, leases stale after 3 s, logging to log. */
static pid_t s_worker(testdb_t *db, int port, const char *log) {
    char bin[512];
    snprintf(bin, sizeof bin, "%s/worker/chatfleet-worker", getenv("CHATFLEET_BUILD_DIR"));
    char *env[] = {mem_printf("CHATFLEET_DATABASE_URL=%s", testdb_url(db)),
                   mem_printf("CHATFLEET_WORKER_HTTP_LISTEN=127.0.0.1:%d", port),
                   mem_printf("CHATFLEET_BROKER_PUB=tcp://127.0.0.1:%d", proc_free_port()),
                   mem_printf("CHATFLEET_BROKER_SUB=tcp://127.0.0.1:%d", proc_free_port()),
                   mem_printf("CHATFLEET_BROKER_RELAY=tcp://127.0.0.1:%d", proc_free_port()),
                   mem_strdup("CHATFLEET_ACQUIRE_POLL_MS=200"),
                   mem_strdup("CHATFLEET_SIM_CHUNK_MS=0"),
                   mem_strdup("CHATFLEET_LEASE_STALE_MS=3000"),
                   mem_strdup("CHATFLEET_HEARTBEAT_MS=1000"),
                   NULL};
    char *argv[] = {bin, NULL};
    pid_t pid = proc_spawn(argv, env, log);
    for (int i = 0; env[i]; i++) {
        free(env[i]);
    }
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", port);
    assert_int_equal(proc_wait_http(url, 10000), 0);
    return pid;
}

/* A user and a default sim model config named name. */
static void s_owner_and_model(PGconn *conn, const char *name, char *owner, char *model) {
    ASSERT(id_uuid_new(owner) == 0);
    char *sql = mem_printf("INSERT INTO users (id, name) VALUES ('%s', 'stages')", owner);
    assert_int_equal(testdb_try(conn, sql, NULL, 0), 0);
    free(sql);
    ASSERT(id_uuid_new(model) == 0);
    sql = mem_printf("INSERT INTO model_configs (id, name, provider, model, is_default)"
                     " VALUES ('%s', '%s', 'sim', 'sim', true)",
                     model, name);
    assert_int_equal(testdb_try(conn, sql, NULL, 0), 0);
    free(sql);
}

static void test_worker_times_the_stages_of_its_turns(void **u) {
    (void)u;
    testdb_t *db = testdb_new();
    PGconn *conn = testdb_connect(db);
    int port = proc_free_port();
    pid_t pid = s_worker(db, port, "test_worker_stages.log");
    char url[128];
    char owner[ID_UUID_LEN + 1], model[ID_UUID_LEN + 1];
    s_owner_and_model(conn, "sim-stages", owner, model);
    char tool_chat[ID_UUID_LEN + 1], parent_chat[ID_UUID_LEN + 1], retry_chat[ID_UUID_LEN + 1],
        bad_chat[ID_UUID_LEN + 1];
    s_chat(conn, owner, model, "[sim:tool time] what time is it", tool_chat);
    s_chat(conn, owner, model, "[sim:spawn 1] delegate", parent_chat);
    s_chat(conn, owner, model, "[sim:fail 503] once", retry_chat); /* retried, then answers */
    s_chat(conn, owner, model, "[sim:fail 400] never", bad_chat);  /* FinishError at once */
    /* A second prompt queued behind a paced first turn: it waits in the queue until that
     * turn ends and promotes it (queue_wait, migration 0022). */
    char queued_chat[ID_UUID_LEN + 1];
    s_chat(conn, owner, model, "[sim:slow 100] one two three four five", queued_chat);
    cs_error_t qerr;
    chatstate_t *qcs = chatstate_begin(conn, &chatsetup_settings, queued_chat, &qerr);
    assert_non_null(qcs);
    cs_message_t second = {.role = "user",
                           .content = "[{\"type\":\"text\",\"text\":\"and then\"}]",
                           .created_by = owner};
    int64_t mid = 0, qid = 0;
    assert_int_equal(chatstate_send_message(qcs, &second, CS_BUSY_QUEUE, 0, &mid, &qid, &qerr), 0);
    assert_true(qid > 0); /* queued: the chat runs its first turn */
    assert_int_equal(chatstate_commit(&qcs, NULL, NULL, &qerr), 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    /* The tool chat and the retried chat complete a turn each, the queued chat two, the parent
     * two (its spawn up to its agent wait, an EnterRequiresAction that lets the chat go, and
     * its answer after the wait, on a runner of its own), the child one of its own; the
     * refused chat's turn ends in error. */
    int64_t deadline = id_now_ms() + 30000;
    proc_http_t r = {0};
    double root = 0, sub = 0, err = 0;
    while ((root < 6 || sub < 1 || err < 1) && id_now_ms() < deadline) {
        proc_http_free(&r);
        assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        root = s_outcome(r.body, "completed", "root");
        sub = s_outcome(r.body, "completed", "subagent");
        err = s_outcome(r.body, "error", "root");
        struct timespec ts = {0, 200 * 1000 * 1000}; /* the text refreshes once a second */
        nanosleep(&ts, NULL);
    }
    printf("%s", r.body);
    assert_true(root == 6);
    assert_true(sub == 1);
    assert_true(err == 1);
    assert_true(s_outcome(r.body, "error", "subagent") == 0);
    assert_true(s_outcome(r.body, "interrupted", "root") == 0);
    assert_true(s_outcome(r.body, "abandoned", "root") == 0);
    assert_true(s_outcome(r.body, "abandoned", "subagent") == 0);
    /* Both kinds of chat went through every stage of a turn; only the root chats ran a local
     * tool. A turn is at least: acquisition once, a prepare and an attempt per model call. */
    const char *kinds[] = {"root", "subagent"};
    for (int k = 0; k < 2; k++) {
        printf("chat_kind=%s acquisition=%g prepare=%g generation_step=%g ttft=%g "
               "provider_attempt=%g stream=%g commit=%g\n",
               kinds[k], s_stage(r.body, "acquisition", kinds[k]),
               s_stage(r.body, "prepare", kinds[k]), s_stage(r.body, "generation_step", kinds[k]),
               s_stage(r.body, "time_to_first_token", kinds[k]),
               s_stage(r.body, "provider_attempt", kinds[k]), s_stage(r.body, "stream", kinds[k]),
               s_stage(r.body, "commit", kinds[k]));
        assert_true(s_stage(r.body, "acquisition", kinds[k]) >= (k ? 1 : 2));
        assert_true(s_stage(r.body, "prepare", kinds[k]) >= (k ? 1 : 4));
        assert_true(s_stage(r.body, "generation_step", kinds[k]) >= (k ? 1 : 4));
        assert_true(s_stage(r.body, "time_to_first_token", kinds[k]) >= 1);
        assert_true(s_stage(r.body, "provider_attempt", kinds[k]) >= (k ? 1 : 7));
        assert_true(s_stage(r.body, "stream", kinds[k]) >= 1);
        assert_true(s_stage(r.body, "commit", kinds[k]) >= 1);
    }
    assert_true(s_stage(r.body, "tool_call", "root") >= 1);
    assert_true(s_stage(r.body, "tool_call", "subagent") == -1);
    /* One failed call was retried after a backoff (CHATFLEET_WORKER_RETRY_BASE_MS, 500 ms by
     * default); the refused one was not. Failed attempts are attempts too. */
    assert_true(s_stage(r.body, "retry_backoff", "root") == 1);
    assert_true(s_series(r.body, "chatfleet_stage_duration_seconds_sum{", "stage=\"retry_backoff\"",
                         (char *)NULL) >= 0.4);
    assert_true(s_stage(r.body, "retry_backoff", "subagent") == -1);
    /* One message waited in a queue, at least through the paced turn ahead of it (five words
     * 100 ms apart); no other prompt was queued. */
    assert_true(s_stage(r.body, "queue_wait", "root") == 1);
    assert_true(s_series(r.body, "chatfleet_stage_duration_seconds_sum{", "stage=\"queue_wait\"",
                         (char *)NULL) >= 0.3);
    assert_true(s_stage(r.body, "queue_wait", "subagent") == -1);
    /* Each new root chat's title call is background work: timed in its own scope, at least
     * the four chats whose title call answered (the refused chat's may fail too). */
    assert_true(s_series(r.body, "chatfleet_stage_duration_seconds_count{",
                         "stage=\"provider_attempt\"", "scope=\"background\"", "chat_kind=\"root\"",
                         (char *)NULL) >= 4);
    /* The provider's stages again by model config name; the others never are. */
    assert_true(s_series(r.body, "chatfleet_model_stage_duration_seconds_count{",
                         "stage=\"provider_attempt\"", "chat_kind=\"root\"", "model=\"sim-stages\"",
                         (char *)NULL) >= 4);
    assert_true(s_series(r.body, "chatfleet_model_stage_duration_seconds_count{",
                         "stage=\"time_to_first_token\"", "chat_kind=\"subagent\"",
                         "model=\"sim-stages\"", (char *)NULL) >= 1);
    assert_true(s_series(r.body, "chatfleet_model_stage_duration_seconds_count{",
                         "stage=\"commit\"", (char *)NULL) == -1);
    /* Buckets are cumulative and end at +Inf with the count. */
    double inf = s_series(r.body, "chatfleet_stage_duration_seconds_bucket{", "stage=\"commit\"",
                          "chat_kind=\"root\"", "le=\"+Inf\"", (char *)NULL);
    assert_true(inf == s_stage(r.body, "commit", "root"));
    assert_non_null(strstr(r.body, "# TYPE chatfleet_stage_duration_seconds histogram\n"));
    assert_non_null(strstr(r.body, "# TYPE chatfleet_turn_outcomes_total counter\n"));
    proc_http_free(&r);
    assert_int_equal(proc_stop(pid, 10000), 0);
    PQfinish(conn);
    testdb_destroy(&db);
}

/* Polls sql on conn until it answers want; fails the test after timeout_ms. */
static void s_wait_sql(PGconn *conn, const char *sql, const char *want, int64_t timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    char *got = NULL;
    do {
        free(got);
        got = testdb_scalar(conn, sql);
        if (got && !strcmp(got, want)) {
            free(got);
            return;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    } while (id_now_ms() < deadline);
    fail_msg("%s: want %s, got %s", sql, want, got ? got : "NULL");
}

/* The worker's /metrics once its outcome of chat_kind root reaches at least min (or after
 * timeout_ms); the caller frees it. */
static char *s_metrics_once(int port, const char *outcome, double min, int64_t timeout_ms) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    int64_t deadline = id_now_ms() + timeout_ms;
    for (;;) {
        proc_http_t r = {0};
        assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        char *text = mem_strdup(r.body);
        proc_http_free(&r);
        if (s_outcome(text, outcome, "root") >= min || id_now_ms() >= deadline) {
            return text;
        }
        free(text);
        struct timespec ts = {0, 200 * 1000 * 1000}; /* the text refreshes once a second */
        nanosleep(&ts, NULL);
    }
}

static void test_a_turn_taken_over_is_abandoned_once_by_its_old_owner(void **u) {
    (void)u;
    testdb_t *db = testdb_new();
    PGconn *conn = testdb_connect(db);
    char owner[ID_UUID_LEN + 1], model[ID_UUID_LEN + 1];
    s_owner_and_model(conn, "sim-takeover", owner, model);
    int port_a = proc_free_port();
    pid_t a = s_worker(db, port_a, "test_worker_stages_a.log");
    /* 50 chunks 100 ms apart: the owner is stopped in the middle of its stream. */
    char chat[ID_UUID_LEN + 1];
    s_chat(conn, owner, model, "[sim:slow 100] [sim:words 50] take me over", chat);
    char *q = mem_printf("SELECT (worker_id IS NOT NULL AND generation_attempt >= 1)::text"
                         " FROM chats WHERE id = '%s'",
                         chat);
    s_wait_sql(conn, q, "true", 10000);
    free(q);
    q = mem_printf("SELECT worker_id FROM chats WHERE id = '%s'", chat);
    char *old_owner = testdb_scalar(conn, q);
    free(q);
    int port_b = proc_free_port();
    pid_t b = s_worker(db, port_b, "test_worker_stages_b.log");
    assert_int_equal(kill(a, SIGSTOP), 0);
    /* The stopped owner's lease goes stale (3 s); the other worker takes the chat over. */
    q = mem_printf("SELECT (worker_id IS NOT NULL AND worker_id <> '%s')::text FROM chats"
                   " WHERE id = '%s'",
                   old_owner, chat);
    s_wait_sql(conn, q, "true", 15000);
    free(q);
    assert_int_equal(kill(a, SIGCONT), 0);
    q = mem_printf("SELECT status::text FROM chats WHERE id = '%s'", chat);
    s_wait_sql(conn, q, "waiting", 20000);
    free(q);
    /* The old owner wakes, is fenced out or cleaned up, and closes its turn: abandoned, once;
     * the new owner completes the turn it took over, once. */
    char *ma = s_metrics_once(port_a, "abandoned", 1, 15000);
    char *mb = s_metrics_once(port_b, "completed", 1, 15000);
    printf("old owner: abandoned=%g completed=%g; new owner: completed=%g abandoned=%g\n",
           s_outcome(ma, "abandoned", "root"), s_outcome(ma, "completed", "root"),
           s_outcome(mb, "completed", "root"), s_outcome(mb, "abandoned", "root"));
    const char *others[] = {"completed", "error", "interrupted"};
    assert_true(s_outcome(ma, "abandoned", "root") == 1);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        assert_true(s_outcome(ma, others[i], "root") == 0);
        assert_true(s_outcome(mb, others[i], "root") == (i == 0 ? 1 : 0));
    }
    assert_true(s_outcome(mb, "abandoned", "root") == 0);
    assert_true(s_outcome(ma, "abandoned", "subagent") == 0);
    free(ma);
    free(mb);
    free(old_owner);
    assert_int_equal(proc_stop(a, 10000), 0);
    assert_int_equal(proc_stop(b, 10000), 0);
    PQfinish(conn);
    testdb_destroy(&db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_times_the_stages_of_its_turns),
        cmocka_unit_test(test_a_turn_taken_over_is_abandoned_once_by_its_old_owner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
