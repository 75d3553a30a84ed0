/*
 * Failover under load (issue 39): a cluster (two gateways, two workers, a broker) on a Patroni
 * pair with a synchronous standby (deploy/pgha), every process given the multi-host URL. Client
 * threads keep sending turns, every third a structured request, and a probe creates a chat
 * every 100 ms; the primary's postmaster is killed with kill -9 three times (Patroni promotes
 * the standby; the old primary rejoins with pg_rewind before the next kill). Then: every write
 * acknowledged with a 2xx is in the database exactly once, no user turn has two answers, every
 * acknowledged structured request has exactly one receipt, and no process exited. The last
 * line: "failover: acknowledged N, lost L, answered twice D, recovery p50 X ms max Y ms", the
 * recovery of a failover being the time from the kill to the probe's first acknowledged create
 * sent after it. CHATFLEET_HA_FAILOVERS (default 3) and CHATFLEET_HA_CLIENTS (default 6) size it;
 * CHATFLEET_HA_FAULT=host kills the primary's Patroni with its postmaster (a lost host: the
 * failover waits for the leader key's ttl) and starts it again once the other is primary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"

#define S_CLIENTS_MAX  16
#define S_FAILOVERS    3
#define S_CLIENTS      6
#define S_SENT_MAX     20000
#define S_PROBE_MS     100    /* the probe's create interval */
#define S_RECOVERY_MAX 120000 /* a failover not recovered by then fails the run */
#define S_TURN_MAX_MS  120000 /* a client gives up waiting for its turn's end */
#define S_SETTLE_MS    3000   /* steady load between a rejoin and the next kill */

/* The city schema: the sim submits a valid instance (worker/README.md, "The sim provider"). */
#define S_FORMAT                                                                                   \
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"city\",\"schema\":{\"type\":"           \
    "\"object\","                                                                                  \
    "\"properties\":{\"city\":{\"type\":\"string\"},\"population\":{\"type\":\"integer\"}},"       \
    "\"required\":[\"city\",\"population\"],\"additionalProperties\":false}}}"

/* One acknowledged write: a send (tag, its chat, the request UUID of a structured one) or a
 * probe's create (its chat only). */
typedef struct {
    char chat[ID_UUID_LEN + 1];
    int tag; /* -1: a probe's create */
    char rid[ID_UUID_LEN + 1];
} acked_t;

typedef struct {
    cluster_t *cluster;
    pthread_mutex_t lock;
    acked_t acked[S_SENT_MAX];
    int nacked;
    int refused;                  /* sends and creates answered with no 2xx or no answer */
    atomic_int tags;              /* the next send's tag */
    atomic_bool stop;             /* the clients stop sending */
    _Atomic int64_t kill_at;      /* the latest kill (id_now_ms), 0 before the first */
    _Atomic int64_t recovered_at; /* the probe's first acknowledged create sent after it */
} run_t;

static void s_sleep_ms(int64_t ms) {
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* cmocka's asserts may not run on the client threads: a broken expectation there aborts. */
#define S_CHECK(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "failover: %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void s_ack(run_t *r, const char *chat, int tag, const char *rid) {
    pthread_mutex_lock(&r->lock);
    S_CHECK(r->nacked < S_SENT_MAX);
    acked_t *a = &r->acked[r->nacked++];
    snprintf(a->chat, sizeof a->chat, "%s", chat);
    a->tag = tag;
    snprintf(a->rid, sizeof a->rid, "%s", rid ? rid : "");
    pthread_mutex_unlock(&r->lock);
}

static void s_refused(run_t *r) {
    pthread_mutex_lock(&r->lock);
    r->refused++;
    pthread_mutex_unlock(&r->lock);
}

/* POSTs body to path on gateway gw: the 2xx answer's JSON, or NULL (counted as refused). */
static json_t *s_post(run_t *r, int gw, const char *path, const char *body) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", cluster_url(r->cluster, gw), path);
    proc_http_t h = {0};
    json_t *out = NULL;
    if (proc_http("POST", url, cluster_token(r->cluster), body, &h) == 0 && h.status / 100 == 2) {
        out = json_loads(h.body, 0, NULL);
        S_CHECK(out != NULL); /* a 2xx carries its JSON */
    } else {
        s_refused(r);
    }
    proc_http_free(&h);
    return out;
}

/* The chat's status from gateway gw, or "" while it cannot say (an outage). */
static void s_status(run_t *r, int gw, const char *chat, char *out, size_t len) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s", cluster_url(r->cluster, gw), chat);
    proc_http_t h = {0};
    out[0] = '\0';
    if (proc_http("GET", url, cluster_token(r->cluster), NULL, &h) == 0 && h.status == 200) {
        json_t *c = json_loads(h.body, 0, NULL);
        const char *s = json_string_value(json_object_get(c, "status"));
        snprintf(out, len, "%s", s ? s : "");
        json_decref(c);
    }
    proc_http_free(&h);
}

/* A new chat without a message (the probe's write); its id, or "" when not acknowledged. */
static void s_create(run_t *r, int gw, char chat[ID_UUID_LEN + 1]) {
    json_t *c = s_post(r, gw, "/api/v2/chats", "{\"title\":\"probe\",\"content\":[]}");
    const char *id = json_string_value(json_object_get(c, "id"));
    snprintf(chat, ID_UUID_LEN + 1, "%s", id ? id : "");
    json_decref(c);
}

typedef struct {
    run_t *run;
    int index;
} client_t;

/* Sends turn after turn on a chat of its own, alternating gateways, and waits for each
 * acknowledged turn to end before the next; every third is a structured request. */
static void *s_client(void *arg) {
    client_t *cl = arg;
    run_t *r = cl->run;
    char chat[ID_UUID_LEN + 1] = "";
    int64_t give_up = id_now_ms() + S_RECOVERY_MAX; /* the cluster is up: a create gets in */
    for (s_create(r, cl->index % 2, chat); !chat[0]; s_create(r, cl->index % 2, chat)) {
        S_CHECK(id_now_ms() < give_up);
        s_sleep_ms(100);
    }
    char path[128];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    for (int n = 0; !atomic_load(&r->stop); n++) {
        int gw = n % 2;
        int tag = atomic_fetch_add(&r->tags, 1);
        bool structured = n % 3 == 2;
        char text[96];
        snprintf(text, sizeof text, "[sim:slow 40] [sim:words 6] hatag-%06d", tag);
        json_t *body = json_pack("{s:[{s:s,s:s}]}", "content", "type", "text", "text", text);
        S_CHECK(body != NULL);
        if (structured) {
            json_object_set_new(body, "response_format", json_loads(S_FORMAT, 0, NULL));
        }
        char *b = json_dumps(body, JSON_COMPACT);
        S_CHECK(b != NULL);
        json_decref(body);
        json_t *resp = s_post(r, gw, path, b);
        free(b);
        if (!resp) {
            s_sleep_ms(100);
            continue;
        }
        json_t *m = json_object_get(resp, "message");
        if (!m) {
            m = json_object_get(resp, "queued_message");
        }
        s_ack(r, chat, tag, json_string_value(json_object_get(m, "structured_output_request_id")));
        json_decref(resp);
        int64_t until = id_now_ms() + S_TURN_MAX_MS;
        char st[32] = "";
        while (strcmp(st, "waiting") != 0 && strcmp(st, "error") != 0 && id_now_ms() < until) {
            s_sleep_ms(50);
            s_status(r, gw, chat, st, sizeof st);
        }
    }
    return NULL;
}

/* Creates a chat every S_PROBE_MS and marks the first acknowledged create sent after the
 * latest kill as that failover's recovery. */
static void *s_probe(void *arg) {
    run_t *r = arg;
    for (int n = 0; !atomic_load(&r->stop); n++) {
        int64_t sent = id_now_ms();
        char chat[ID_UUID_LEN + 1];
        s_create(r, n % 2, chat);
        if (chat[0]) {
            s_ack(r, chat, -1, NULL);
            int64_t kill = atomic_load(&r->kill_at);
            if (kill && sent >= kill && !atomic_load(&r->recovered_at)) {
                atomic_store(&r->recovered_at, id_now_ms());
            }
        }
        s_sleep_ms(sent + S_PROBE_MS - id_now_ms());
    }
    return NULL;
}

static int s_env_int(const char *name, int fallback, int max) {
    const char *v = getenv(name);
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : fallback;
    if (v && (end == v || *end != '\0')) {
        fail_msg("%s=%s is not a whole number", name, v);
    }
    return n >= 1 && n <= max ? (int)n : fallback;
}

static int s_cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The count sql (which it frees) answers on the harness's connection. */
static long s_count(cluster_t *c, char *sql) {
    char *v = cluster_sql(c, "%s", sql);
    assert_non_null(v);
    char *end = NULL;
    long n = strtol(v, &end, 10);
    assert_true(end != v && *end == '\0' && n >= 0);
    free(v);
    free(sql);
    return n;
}

/* The acknowledged writes missing from the database, each named. */
static int s_lost(run_t *r) {
    int lost = 0;
    for (int i = 0; i < r->nacked; i++) {
        const acked_t *a = &r->acked[i];
        long n =
            s_count(r->cluster,
                    a->tag < 0 ? mem_printf("SELECT count(*) FROM chats WHERE id = '%s'", a->chat)
                               : mem_printf("SELECT count(*) FROM chat_messages WHERE chat_id ="
                                            " '%s' AND role = 'user' AND NOT deleted AND"
                                            " content::text LIKE '%%hatag-%06d%%'",
                                            a->chat, a->tag));
        if (n != 1) {
            printf("failover: acknowledged %s tag %d found %ld times\n", a->chat, a->tag, n);
            lost++;
        }
        if (a->rid[0] &&
            s_count(r->cluster,
                    mem_printf("SELECT count(*) FROM chat_messages WHERE structured_output ->>"
                               " 'type' = 'structured-output-outcome' AND"
                               " structured_output_request_id = '%s'",
                               a->rid)) != 1) {
            printf("failover: request %s has no single receipt\n", a->rid);
            lost++;
        }
    }
    return lost;
}

/* User turns with two final answers (the chaos run's definition, tests/chaos/ledger.c). */
static long s_answered_twice(cluster_t *c) {
    return s_count(
        c,
        mem_printf(
            "%s",
            "WITH r AS (SELECT id, chat_id, role, content, structured_output, max(id) FILTER (WHERE"
            " role = 'user') OVER (PARTITION BY chat_id ORDER BY id) AS turn FROM chat_messages"
            " WHERE NOT deleted) SELECT count(*) FROM (SELECT 1 FROM r WHERE role = 'assistant' AND"
            " NOT content::jsonb @> '[{\"type\":\"tool-call\"}]'"
            " AND (structured_output ->> 'type') IS"
            " DISTINCT FROM 'structured-output-outcome' GROUP BY chat_id, turn HAVING count(*) > 1)"
            " d"));
}

/* Failover f + 1: kills the primary (its postmaster, or with host_lost its Patroni too), waits
 * for the new primary, the probe's recovery and the old primary's rejoin, and prints them. The
 * recovery in milliseconds. */
static int64_t s_failover(run_t *r, int f, bool host_lost) {
    char member[16];
    atomic_store(&r->kill_at, 0); /* the probe reads kill_at, then recovered_at */
    atomic_store(&r->recovered_at, 0);
    assert_int_equal(cluster_pg_failover(r->cluster, host_lost, member), 0);
    int64_t killed_at = id_now_ms(); /* the script returns right after the kill */
    atomic_store(&r->kill_at, killed_at);
    /* Patroni's API names the new primary (polled: up to about half a second late), then
     * the probe's writes are acknowledged again: the difference is chatfleet's share. */
    char leader[16];
    int64_t named = cluster_pg_promoted(r->cluster, member, S_RECOVERY_MAX, leader);
    assert_true(named >= 0);
    while (!atomic_load(&r->recovered_at) && id_now_ms() - killed_at < S_RECOVERY_MAX) {
        s_sleep_ms(20);
    }
    assert_true(atomic_load(&r->recovered_at) != 0);
    int64_t recovery = atomic_load(&r->recovered_at) - killed_at;
    /* Then the killed member streams from the new primary again. */
    assert_true(!host_lost || cluster_pg_revive(r->cluster, member) == 0);
    int64_t rejoined = cluster_pg_ha_wait(r->cluster, 180);
    assert_true(rejoined >= 0);
    printf("failover %d: killed %s's %s; Patroni named %s primary after %lld ms, writes"
           " acknowledged again after %lld ms, %s its synchronous standby %lld ms later\n",
           f + 1, member, host_lost ? "Patroni and postmaster" : "postmaster", leader,
           (long long)named, (long long)recovery, member, (long long)rejoined);
    fflush(stdout);
    return recovery;
}

static void test_failover_under_load_loses_nothing(void **state) {
    (void)state;
    int failovers = s_env_int("CHATFLEET_HA_FAILOVERS", S_FAILOVERS, 20);
    int clients = s_env_int("CHATFLEET_HA_CLIENTS", S_CLIENTS, S_CLIENTS_MAX);
    const char *fault = getenv("CHATFLEET_HA_FAULT");
    bool host_lost = fault && !strcmp(fault, "host");
    run_t *r = mem_calloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    r->cluster = cluster_new(&(cluster_opts_t){
        .name = "test_failover", .gateways = 2, .workers = 2, .private_pg = 1, .pg_ha = 1});
    pthread_t threads[S_CLIENTS_MAX + 1];
    client_t cls[S_CLIENTS_MAX];
    for (int i = 0; i < clients; i++) {
        cls[i] = (client_t){r, i};
        assert_int_equal(pthread_create(&threads[i], NULL, s_client, &cls[i]), 0);
    }
    assert_int_equal(pthread_create(&threads[clients], NULL, s_probe, r), 0);
    s_sleep_ms(S_SETTLE_MS);
    int64_t recovery[20];
    for (int f = 0; f < failovers; f++) {
        recovery[f] = s_failover(r, f, host_lost);
        s_sleep_ms(S_SETTLE_MS);
    }
    atomic_store(&r->stop, true);
    for (int i = 0; i <= clients; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    }
    /* Every process lived through it (the harness restarts none): not one has exited. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(waitpid(cluster_pid(r->cluster, CLUSTER_GATEWAY, i), NULL, WNOHANG), 0);
        assert_int_equal(waitpid(cluster_pid(r->cluster, CLUSTER_WORKER, i), NULL, WNOHANG), 0);
    }
    assert_int_equal(waitpid(cluster_pid(r->cluster, CLUSTER_BROKER, 0), NULL, WNOHANG), 0);
    assert_true(cluster_wait(r->cluster,
                             "SELECT count(*) FROM chats WHERE status IN ('running',"
                             " 'interrupting', 'requires_action') OR EXISTS (SELECT 1 FROM"
                             " chat_queued_messages)",
                             "0", S_TURN_MAX_MS) >= 0);
    int lost = s_lost(r);
    long twice = s_answered_twice(r->cluster);
    qsort(recovery, (size_t)failovers, sizeof recovery[0], s_cmp64);
    printf("failover: %d failovers, %d writes refused or unanswered during them\n", failovers,
           r->refused);
    printf("failover: acknowledged %d, lost %d, answered twice %ld, recovery p50 %lld ms max %lld"
           " ms\n",
           r->nacked, lost, twice, (long long)recovery[failovers / 2],
           (long long)recovery[failovers - 1]);
    assert_int_equal(lost, 0);
    assert_int_equal(twice, 0);
    assert_true(r->nacked > 0);
    assert_int_equal(cluster_destroy(&r->cluster), 0);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failover_under_load_loses_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
