/* chaos: the seeded workload, the fault schedule and the run; see chaos.h and README.md. */
#include "chaos.h"
#include "cluster.h"
#include "hookcheck.h"
#include "id.h"
#include "ledger.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHAOS_GATEWAYS       2
#define CHAOS_WORKERS        3
#define CHAOS_FAULTS_MAX     256
#define CHAOS_FAULT_GAP_MS   3000 /* mean time between faults */
#define CHAOS_PG_PORTS_MAX   3    /* members of a pg_ha PostgreSQL (deploy/pgha: 2 or 3) */
#define CHAOS_QUIESCE_MS     90000
#define CHAOS_STREAM_WAIT_MS 20000
#define CHAOS_PROGRESS_MS    5000
#define CHAOS_STREAM_DEAD_MS 3000 /* no event at all this long after opening: reconnect */
#define CHAOS_RECENT_MAX     16   /* user messages and queued ids a client remembers */
#define CHAOS_LEASE_STALE_MS 2000 /* CHATFLEET_LEASE_STALE_MS of every worker */
/* CHATFLEET_WORKER_DB_CONNS of every worker: below the default 8, so that the slow phase's
 * jobs (three job threads a worker) queue for connections while hundreds of turns are in
 * flight and every takeover's reads and bundles compete for them. */
#define CHAOS_WORKER_DB_CONNS 6
#define CHAOS_SAMPLE_MS       100  /* the connection and in-flight sampler's period */
#define CHAOS_SLOW_SECONDS    12   /* the slow phase's faults run this long by default */
#define CHAOS_SLOW_GAP_MS     2000 /* mean time between the slow phase's worker faults */
#define CHAOS_SLOW_PACE_MS    600  /* [sim:slow]: the pace of a slow reply's chunks */
#define CHAOS_SLOW_WORDS      16   /* [sim:words]: with the echo 21 chunks, 12.6 s a reply */
#define CHAOS_SLOW_STRUCTURED 4    /* every 4th slow turn is a structured request */
#define CHAOS_SLOW_CREATORS   8    /* client threads creating the slow chats */
#define CHAOS_CHILD_WORDS     11   /* a child's [sim:words]: 2 to 12 */
#define CHAOS_WAIT_ALL_MAX    8    /* [sim:wait-all] only while the chat has this many children */
/* CHATFLEET_SUBAGENT_MAX_CHILDREN of every worker: above the default 16, so that a long run's
 * subagent turns keep spawning (README.md, "Workload"). */
#define CHAOS_SUBAGENT_MAX_CHILDREN 256
#define CHAOS_STR_(x)               #x
#define CHAOS_STR(x)                CHAOS_STR_(x)

/* The response formats structured sends use (ledger_call_t.schema indexes them). */
static const char *const s_formats[] = {
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"city\",\"schema\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":3},\"population\":{\"type\":"
    "\"integer\",\"minimum\":1}},\"required\":[\"city\",\"population\"],"
    "\"additionalProperties\":false}}}",
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"nums\",\"schema\":{\"type\":\"array\","
    "\"items\":{\"type\":\"number\",\"maximum\":10},\"minItems\":2,\"uniqueItems\":true}}}",
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"day\",\"schema\":{\"type\":\"string\","
    "\"format\":\"date\"}}}",
};
#define CHAOS_NFORMATS ((int)(sizeof s_formats / sizeof s_formats[0]))

/* Scripted model behaviour of structured turns (worker/README.md, "The sim provider"). */
static const char *const s_scripts[] = {
    "",
    "[sim:schema-wrong 1]",
    "[sim:schema-wrong 3]",
    "[sim:schema-text 1]",
    "[sim:schema-siblings]",
    "[sim:schema-double]",
    "[sim:schema-refuse]",
    "[sim:tool time]",
};
#define CHAOS_NSCRIPTS ((int)(sizeof s_scripts / sizeof s_scripts[0]))

typedef enum {
    FAULT_WORKER_KILL = 0,
    FAULT_WORKER_STOP,
    FAULT_BROKER_KILL,
    FAULT_PG_RESTART,
    FAULT_GATEWAY_KILL,
    FAULT_PG_FAILOVER, /* with pg_ha, in FAULT_PG_RESTART's place */
    FAULT_KINDS
} fault_kind_t;

static const char *const s_fault_names[FAULT_KINDS] = {"worker kill -9",  "worker SIGSTOP",
                                                       "broker kill -9",  "postgres fast restart",
                                                       "gateway kill -9", "pg_failover"};

typedef struct {
    int64_t at_ms; /* from the start of the workload */
    fault_kind_t kind;
    int target;
    int hold_ms; /* how long the process stays down or stopped */
} fault_t;

struct run;

/* A fault schedule and the thread that applies it, one fault at a time. */
typedef struct {
    struct run *run;
    const char *name;
    fault_t faults[CHAOS_FAULTS_MAX];
    int n;
    atomic_int done;
    int64_t t0; /* the origin of the faults' at_ms */
} schedule_t;

typedef struct run {
    chaos_config_t cfg;
    cluster_t *cluster;
    ledger_t *ledger;
    schedule_t main;  /* the seeded workload's */
    schedule_t slow;  /* the slow phase's: worker faults only */
    atomic_int phase; /* ledger_phase_t, for the sampler */
    atomic_bool sampling;
    pthread_t sampler;
    int pg_ports[CHAOS_PG_PORTS_MAX]; /* the database's ports (a pg_ha URL names several) */
    int npg_ports;
    pthread_mutex_t sample_lock;
    ledger_sample_t last; /* the sampler's last sample that reached the database */
    atomic_int gw_up[CHAOS_GATEWAYS];
    atomic_int tags;
    atomic_bool drain; /* no new actions: only answer the model's questions */
    atomic_bool stop;
    int64_t t0;
    int worker_starts[CHAOS_WORKERS];
    pthread_mutex_t stream_lock; /* stream reconnects: the fault thread and the clients */
} run_t;

typedef struct {
    run_t *run;
    int chat;
    unsigned rng;
    int gw;
    bool wrote;
    int64_t mids[CHAOS_RECENT_MAX]; /* accepted user message ids, for edits */
    int mid_schema[CHAOS_RECENT_MAX];
    int nmids;
    int64_t qids[CHAOS_RECENT_MAX]; /* queued ids, for queue deletions */
    int nqids;
    bool answer_failed; /* the last answer was rejected: ask REST for the pending calls */
    int children;       /* children the chat's accepted subagent turns asked for */
} client_t;

static unsigned s_rand(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return (*state >> 16) & 0x7fff;
}

static void s_sleep_ms(int64_t ms) {
    if (ms <= 0) {
        return;
    }
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL); /* pacing of the workload and the schedule, not a condition wait */
}

chaos_config_t chaos_config_from_env(int seconds, int chats, int slow_turns, const char *name) {
    chaos_config_t c = {.seed = (unsigned)(id_now_ms() % 1000000),
                        .seconds = seconds,
                        .chats = chats,
                        .slow_turns = slow_turns,
                        .slow_seconds = CHAOS_SLOW_SECONDS,
                        .name = name};
    const char *v = getenv("CHATFLEET_CHAOS_SEED");
    if (v && *v) {
        c.seed = (unsigned)strtoul(v, NULL, 10);
    }
    v = getenv("CHATFLEET_CHAOS_SECONDS");
    if (v && *v) {
        long s = strtol(v, NULL, 10);
        c.seconds = s > 0 && s < 86400 ? (int)s : seconds;
    }
    v = getenv("CHATFLEET_CHAOS_CHATS");
    if (v && *v) {
        long n = strtol(v, NULL, 10);
        c.chats = n > 0 && n <= LEDGER_CHATS_MAX ? (int)n : chats;
    }
    v = getenv("CHATFLEET_CHAOS_SLOW_TURNS");
    if (v && *v) {
        long n = strtol(v, NULL, 10);
        c.slow_turns = n >= 0 && n <= LEDGER_SLOW_MAX ? (int)n : slow_turns;
    }
    v = getenv("CHATFLEET_CHAOS_SLOW_SECONDS");
    if (v && *v) {
        long s = strtol(v, NULL, 10);
        c.slow_seconds = s >= 4 && s < 86400 ? (int)s : c.slow_seconds;
    }
    v = getenv("CHATFLEET_CHAOS_MCP");
    c.mcp = v && !strcmp(v, "1");
    v = getenv("CHATFLEET_CHAOS_HOOKS");
    c.hooks = v && !strcmp(v, "1");
    v = getenv("CHATFLEET_CHAOS_PGHA");
    c.pg_ha = v && !strcmp(v, "1");
    return c;
}

/* --- The fault schedules. --- */

/* Draws the target and hold of fault f (its kind already set) from rng. */
static void s_fault_draw(fault_t *f, unsigned *rng) {
    switch (f->kind) {
        case FAULT_WORKER_KILL:
            f->target = (int)(s_rand(rng) % CHAOS_WORKERS);
            f->hold_ms = 200 + (int)(s_rand(rng) % 1500);
            break;
        case FAULT_WORKER_STOP: /* sometimes past the 2000 ms lease: the fence must reject */
            f->target = (int)(s_rand(rng) % CHAOS_WORKERS);
            f->hold_ms = 500 + (int)(s_rand(rng) % 3500);
            break;
        case FAULT_BROKER_KILL:
            f->hold_ms = 200 + (int)(s_rand(rng) % 1500);
            break;
        case FAULT_PG_RESTART:
        case FAULT_PG_FAILOVER:
            break;
        case FAULT_GATEWAY_KILL:
            f->target = (int)(s_rand(rng) % CHAOS_GATEWAYS);
            f->hold_ms = 300 + (int)(s_rand(rng) % 1500);
            break;
        default:
            ASSERT(0);
    }
}

/* Draws n faults into sc, at first_ms to span_ms: each of the first `kinds` fault kinds at
 * least once, the rest at random among them, in a seeded order. */
static void s_schedule_draw(schedule_t *sc, unsigned rng, int n, int kinds, int64_t first_ms,
                            int64_t span_ms) {
    n = n < kinds ? kinds : n > CHAOS_FAULTS_MAX ? CHAOS_FAULTS_MAX : n;
    for (int i = 0; i < n; i++) {
        fault_t *f = &sc->faults[i];
        f->kind = i < kinds ? (fault_kind_t)i : (fault_kind_t)(s_rand(&rng) % (unsigned)kinds);
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(s_rand(&rng) % (unsigned)(i + 1));
        fault_kind_t k = sc->faults[i].kind;
        sc->faults[i].kind = sc->faults[j].kind;
        sc->faults[j].kind = k;
    }
    for (int i = 0; i < n; i++) {
        fault_t *f = &sc->faults[i];
        f->at_ms = first_ms + (span_ms - first_ms) * i / n + (int64_t)(s_rand(&rng) % 1000);
        s_fault_draw(f, &rng);
    }
    sc->n = n;
}

static void s_schedule_print(const schedule_t *sc) {
    for (int i = 0; i < sc->n; i++) {
        const fault_t *f = &sc->faults[i];
        printf("chaos:   %s%5.1fs %-22s target %d hold %d ms\n", sc->name,
               (double)f->at_ms / 1000.0, s_fault_names[f->kind], f->target, f->hold_ms);
    }
}

static void s_schedule(run_t *r) {
    int64_t span = (int64_t)r->cfg.seconds * 1000 - 4000; /* the last faults heal in time */
    r->main.run = r;
    r->main.name = "t=";
    s_schedule_draw(&r->main, r->cfg.seed ^ 0x5eedu, (int)(span / CHAOS_FAULT_GAP_MS),
                    FAULT_GATEWAY_KILL + 1, 1500, span);
    for (int i = 0; r->cfg.pg_ha && i < r->main.n; i++) {
        if (r->main.faults[i].kind == FAULT_PG_RESTART) { /* Patroni runs that PostgreSQL */
            r->main.faults[i].kind = FAULT_PG_FAILOVER;
        }
    }
    printf("chaos: seed %u, %d s, %d chats, %d faults (CHATFLEET_CHAOS_SEED=%u reproduces this"
           " schedule):\n",
           r->cfg.seed, r->cfg.seconds, r->cfg.chats, r->main.n, r->cfg.seed);
    s_schedule_print(&r->main);
    /* The slow phase's: worker kill -9 and SIGSTOP only (the first two kinds), from its start
     * on. */
    r->slow.run = r;
    r->slow.name = "slow+";
    if (r->cfg.slow_turns > 0) {
        int64_t slow_span = (int64_t)r->cfg.slow_seconds * 1000;
        s_schedule_draw(&r->slow, r->cfg.seed ^ 0x510du, (int)(slow_span / CHAOS_SLOW_GAP_MS),
                        FAULT_WORKER_STOP + 1, 500, slow_span - 1000);
        printf("chaos: slow phase: %d chats with one slow turn each, %d worker faults over %d s"
               " from the end of their creation (the same seed):\n",
               r->cfg.slow_turns, r->slow.n, r->cfg.slow_seconds);
        s_schedule_print(&r->slow);
    }
}

/* --- Streams. --- */

static void s_stream_open(run_t *r, int chat, int gw, int64_t after) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(r->cluster, gw),
             ledger_chat_id(r->ledger, chat));
    sse_t *sse = sse_open(url, cluster_token(r->cluster), after);
    ASSERT(sse);
    ledger_stream_add(r->ledger, chat, gw, after, &sse);
}

/* Every stream on the dead gateway resumes on the other with its Last-Event-ID. */
static void s_streams_failover(run_t *r, int dead) {
    pthread_mutex_lock(&r->stream_lock);
    int moved = 0;
    for (int c = 0; c < r->cfg.chats; c++) {
        if (ledger_stream_gateway(r->ledger, c) == dead) {
            s_stream_open(r, c, 1 - dead, ledger_stream_last_id(r->ledger, c));
            moved++;
        }
    }
    pthread_mutex_unlock(&r->stream_lock);
    printf("chaos: t=%5.1fs %d streams resumed on gateway %d\n",
           (double)(id_now_ms() - r->t0) / 1000.0, moved, 1 - dead);
}

/* --- Faults. --- */

/* The ports of url's hosts (postgresql://user@HOST:PORT[,HOST:PORT...]/db...) into r. */
static void s_pg_ports(run_t *r, const char *url) {
    const char *p = strchr(url, '@');
    const char *end = p ? strchr(p, '/') : NULL;
    ASSERT(p && end);
    r->npg_ports = 0;
    for (const char *colon = strchr(p, ':');
         colon && colon < end && r->npg_ports < CHAOS_PG_PORTS_MAX;
         colon = strchr(colon + 1, ':')) {
        r->pg_ports[r->npg_ports++] = (int)strtol(colon + 1, NULL, 10);
    }
    ASSERT(r->npg_ports > 0 && r->pg_ports[0] > 0);
}

/* kill -9 of the primary's postmaster; returns once Patroni has promoted the standby and the
 * old primary streams from it again (the next fault finds two members). */
static void s_failover(run_t *r) {
    char killed[16];
    char leader[16];
    ASSERT(cluster_pg_failover(r->cluster, false, killed) == 0);
    int64_t promoted = cluster_pg_promoted(r->cluster, killed, 120000, leader);
    ASSERT(promoted >= 0);
    int64_t rejoined = cluster_pg_ha_wait(r->cluster, 180);
    ASSERT(rejoined >= 0);
    printf("chaos: t=%5.1fs postgres failed over from %s to %s (Patroni named it after %lld ms),"
           " %s its synchronous standby %lld ms later\n",
           (double)(id_now_ms() - r->t0) / 1000.0, killed, leader, (long long)promoted, killed,
           (long long)rejoined);
}

static void s_apply(run_t *r, const fault_t *f) {
    cluster_t *c = r->cluster;
    double t = (double)(id_now_ms() - r->t0) / 1000.0;
    pthread_mutex_lock(&r->sample_lock);
    ledger_sample_t last = r->last;
    pthread_mutex_unlock(&r->sample_lock);
    printf("chaos: t=%5.1fs fault: %s target %d hold %d ms (%d chats running, %d turns in"
           " flight)\n",
           t, s_fault_names[f->kind], f->target, f->hold_ms, last.running, last.in_flight);
    switch (f->kind) {
        case FAULT_WORKER_KILL:
            cluster_signal(c, CLUSTER_WORKER, f->target, SIGKILL);
            s_sleep_ms(f->hold_ms);
            cluster_start(c, CLUSTER_WORKER, f->target);
            r->worker_starts[f->target]++;
            break;
        case FAULT_WORKER_STOP:
            cluster_signal(c, CLUSTER_WORKER, f->target, SIGSTOP);
            s_sleep_ms(f->hold_ms);
            cluster_signal(c, CLUSTER_WORKER, f->target, SIGCONT);
            break;
        case FAULT_BROKER_KILL:
            cluster_signal(c, CLUSTER_BROKER, 0, SIGKILL);
            s_sleep_ms(f->hold_ms);
            cluster_start(c, CLUSTER_BROKER, 0);
            break;
        case FAULT_PG_RESTART: {
            int64_t ms = cluster_pg_restart(c);
            printf("chaos: t=%5.1fs postgres restarted in %lld ms\n",
                   (double)(id_now_ms() - r->t0) / 1000.0, (long long)ms);
            ASSERT(ms >= 0);
            break;
        }
        case FAULT_PG_FAILOVER:
            s_failover(r);
            break;
        case FAULT_GATEWAY_KILL:
            atomic_store(&r->gw_up[f->target], 0);
            cluster_signal(c, CLUSTER_GATEWAY, f->target, SIGKILL);
            s_streams_failover(r, f->target);
            s_sleep_ms(f->hold_ms);
            cluster_start(c, CLUSTER_GATEWAY, f->target);
            atomic_store(&r->gw_up[f->target], 1);
            break;
        default:
            ASSERT(0);
    }
}

static void *s_fault_thread(void *arg) {
    schedule_t *sc = arg;
    for (int i = 0; i < sc->n; i++) {
        s_sleep_ms(sc->t0 + sc->faults[i].at_ms - id_now_ms());
        s_apply(sc->run, &sc->faults[i]);
        atomic_fetch_add(&sc->done, 1);
    }
    return NULL;
}

/* --- Clients. --- */

static int s_pick_gateway(client_t *cl) {
    run_t *r = cl->run;
    if (!atomic_load(&r->gw_up[cl->gw])) {
        cl->gw = 1 - cl->gw;
    }
    return cl->gw;
}

/* One HTTP call on the client's gateway; the parsed body (a new reference, or NULL) and the
 * status (-1 when no response arrived, which also moves the client to the other gateway). */
static json_t *s_call(client_t *cl, const char *method, const char *path, const char *body,
                      long *status) {
    char url[512];
    snprintf(url, sizeof url, "%s%s", cluster_url(cl->run->cluster, s_pick_gateway(cl)), path);
    proc_http_t h = {0};
    json_t *out = NULL;
    if (proc_http(method, url, cluster_token(cl->run->cluster), body, &h) != 0) {
        *status = -1;
        cl->gw = 1 - cl->gw;
    } else {
        *status = h.status;
        out = h.body && h.body[0] ? json_loads(h.body, 0, NULL) : NULL;
    }
    proc_http_free(&h);
    return out;
}

static bool s_ok(long status) {
    return status >= 200 && status < 300;
}

static void s_remember(client_t *cl, int64_t mid, int schema) {
    if (cl->nmids == CHAOS_RECENT_MAX) {
        memmove(cl->mids, cl->mids + 1, (CHAOS_RECENT_MAX - 1) * sizeof *cl->mids);
        memmove(cl->mid_schema, cl->mid_schema + 1, (CHAOS_RECENT_MAX - 1) * sizeof(int));
        cl->nmids--;
    }
    cl->mids[cl->nmids] = mid;
    cl->mid_schema[cl->nmids] = schema;
    cl->nmids++;
}

/* Fills call from a send or edit response: the inserted message, the queued one, the request
 * UUID. */
static void s_read_send(client_t *cl, json_t *resp, ledger_call_t *call) {
    json_t *m = json_object_get(resp, "message");
    json_t *q = json_object_get(resp, "queued_message");
    if (m) {
        call->message_id = json_integer_value(json_object_get(m, "id"));
        const char *rid = json_string_value(json_object_get(m, "structured_output_request_id"));
        snprintf(call->rid, sizeof call->rid, "%s", rid ? rid : "");
        s_remember(cl, call->message_id, call->schema);
    }
    if (q) {
        call->queued_id = json_integer_value(json_object_get(q, "id"));
        const char *rid = json_string_value(json_object_get(q, "structured_output_request_id"));
        if (rid) {
            snprintf(call->rid, sizeof call->rid, "%s", rid);
        }
        if (cl->nqids < CHAOS_RECENT_MAX) {
            cl->qids[cl->nqids++] = call->queued_id;
        }
    }
    if (!call->rid[0]) {
        call->schema = -1;
    }
}

/* Sends a tagged message with directive; schema >= 0 makes it a structured request, agents > 0
 * says it is a subagent turn asking for that many children. */
static void s_send(client_t *cl, ledger_op_t op, const char *directive, int schema, int agents) {
    run_t *r = cl->run;
    int tag = atomic_fetch_add(&r->tags, 1);
    char text[256];
    snprintf(text, sizeof text, "%s [sim:slow 10] " LEDGER_TAG_PREFIX "%06d from chat %d",
             directive, tag, cl->chat);
    json_t *body = json_pack("{s:[{s:s,s:s}]}", "content", "type", "text", "text", text);
    if (op == LEDGER_SEND_INTERRUPT) {
        json_object_set_new(body, "busy_behavior", json_string("interrupt"));
    }
    if (schema >= 0) {
        json_object_set_new(body, "response_format", json_loads(s_formats[schema], 0, NULL));
    }
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", ledger_chat_id(r->ledger, cl->chat));
    ledger_call_t call = {
        .op = op, .chat = cl->chat, .tag = tag, .schema = schema, .agents = agents};
    json_t *resp = s_call(cl, "POST", path, b, &call.status);
    free(b);
    if (s_ok(call.status)) {
        s_read_send(cl, resp, &call);
        cl->wrote = true;
        cl->children += agents;
    }
    json_decref(resp);
    ledger_add(r->ledger, &call);
}

static void s_edit(client_t *cl) {
    if (cl->nmids == 0) {
        return;
    }
    run_t *r = cl->run;
    int k = cl->nmids - 1 - (int)(s_rand(&cl->rng) % (unsigned)(cl->nmids < 3 ? cl->nmids : 3));
    int64_t target = cl->mids[k];
    int schema = cl->mid_schema[k];
    int tag = atomic_fetch_add(&r->tags, 1);
    char text[160];
    snprintf(text, sizeof text, "[sim:slow 10] " LEDGER_TAG_PREFIX "%06d edit of %lld", tag,
             (long long)target);
    json_t *body = json_pack("{s:[{s:s,s:s}]}", "content", "type", "text", "text", text);
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char path[200];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages/%lld",
             ledger_chat_id(r->ledger, cl->chat), (long long)target);
    ledger_call_t call = {
        .op = LEDGER_EDIT, .chat = cl->chat, .tag = tag, .target = target, .schema = schema};
    json_t *resp = s_call(cl, "PATCH", path, b, &call.status);
    free(b);
    if (s_ok(call.status)) {
        s_read_send(cl, resp, &call);
        call.deleted = json_incref(json_object_get(resp, "deleted_message_ids"));
        cl->wrote = true;
        /* The edited message and everything after it are gone. */
        int keep = 0;
        for (int i = 0; i < cl->nmids; i++) {
            if (cl->mids[i] < target || cl->mids[i] == call.message_id) {
                cl->mids[keep] = cl->mids[i];
                cl->mid_schema[keep++] = cl->mid_schema[i];
            }
        }
        cl->nmids = keep;
    }
    json_decref(resp);
    ledger_add(r->ledger, &call);
}

static void s_queue_delete(client_t *cl) {
    if (cl->nqids == 0) {
        return;
    }
    run_t *r = cl->run;
    int64_t qid = cl->qids[--cl->nqids];
    char path[200];
    snprintf(path, sizeof path, "/api/v2/chats/%s/queue/%lld", ledger_chat_id(r->ledger, cl->chat),
             (long long)qid);
    ledger_call_t call = {.op = LEDGER_QUEUE_DELETE, .chat = cl->chat, .tag = -1, .target = qid};
    json_decref(s_call(cl, "DELETE", path, NULL, &call.status));
    cl->wrote |= s_ok(call.status);
    ledger_add(r->ledger, &call);
}

/* POST /compact: 200 from waiting or error (a worker then summarizes), 409 when the chat is
 * busy or has nothing to compact. */
static void s_compact(client_t *cl) {
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/compact",
             ledger_chat_id(cl->run->ledger, cl->chat));
    ledger_call_t call = {.op = LEDGER_COMPACT, .chat = cl->chat, .tag = -1};
    json_decref(s_call(cl, "POST", path, "{}", &call.status));
    cl->wrote |= s_ok(call.status);
    ledger_add(cl->run->ledger, &call);
}

static void s_interrupt(client_t *cl) {
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/interrupt",
             ledger_chat_id(cl->run->ledger, cl->chat));
    ledger_call_t call = {.op = LEDGER_INTERRUPT, .chat = cl->chat, .tag = -1};
    json_decref(s_call(cl, "POST", path, "{}", &call.status));
    ledger_add(cl->run->ledger, &call);
}

/* The calls of the client's dynamic tool ask pending after the latest user row, from GET
 * /messages (a new reference): the fallback when the stream's latest action_required is stale
 * or was never seen. Other pending calls are the worker's to run (a subagent tool's between
 * two steps, a wait_agent's until the resumption), never the client's to answer. */
static json_t *s_pending_rest(client_t *cl) {
    char path[200];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages?limit=200",
             ledger_chat_id(cl->run->ledger, cl->chat));
    long status;
    json_t *list = s_call(cl, "GET", path, NULL, &status);
    json_t *rows = json_object_get(list, "messages");
    int64_t last_user = 0;
    size_t i;
    json_t *m;
    json_array_foreach(rows, i, m) {
        int64_t id = json_integer_value(json_object_get(m, "id"));
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "user") && id > last_user) {
            last_user = id;
        }
    }
    json_t *calls = json_array();
    json_t *answered = json_object();
    json_array_foreach(rows, i, m) {
        size_t k;
        json_t *part;
        json_array_foreach(json_object_get(m, "content"), k, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            const char *call = json_string_value(json_object_get(part, "tool_call_id"));
            if (type && call && !strcmp(type, "tool-result")) {
                json_object_set_new(answered, call, json_true());
            }
        }
    }
    json_array_foreach(rows, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "assistant") != 0 ||
            json_integer_value(json_object_get(m, "id")) < last_user) {
            continue;
        }
        size_t k;
        json_t *part;
        json_array_foreach(json_object_get(m, "content"), k, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            const char *call = json_string_value(json_object_get(part, "tool_call_id"));
            const char *name = json_string_value(json_object_get(part, "tool_name"));
            if (type && call && !strcmp(type, "tool-call") && name && !strcmp(name, "ask") &&
                !json_object_get(answered, call)) {
                json_array_append_new(calls, json_pack("{s:s}", "tool_call_id", call));
            }
        }
    }
    json_decref(answered);
    json_decref(list);
    return calls;
}

/* Answers the latest action_required the stream showed; after a rejected answer, the calls
 * that GET /messages shows pending. */
static void s_answer(client_t *cl) {
    json_t *calls =
        cl->answer_failed ? s_pending_rest(cl) : ledger_stream_action(cl->run->ledger, cl->chat);
    if (!calls || json_array_size(calls) == 0) {
        json_decref(calls);
        cl->answer_failed = !cl->answer_failed;
        return;
    }
    json_t *results = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_array_append_new(results,
                              json_pack("{s:O,s:s}", "tool_call_id",
                                        json_object_get(c, "tool_call_id"), "output", "42"));
    }
    json_decref(calls);
    json_t *body = json_pack("{s:o}", "results", results); /* steals results */
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s/tool-results",
             ledger_chat_id(cl->run->ledger, cl->chat));
    ledger_call_t call = {.op = LEDGER_TOOL_RESULTS, .chat = cl->chat, .tag = -1};
    json_decref(s_call(cl, "POST", path, b, &call.status));
    free(b);
    cl->answer_failed = !s_ok(call.status);
    ledger_add(cl->run->ledger, &call);
}

/* GET /chats/{id}: records the snapshot_version; returns the status ("" when unknown) and
 * whether the chat sits in an agent wait (requires_action for its children, not its client:
 * ARCHITECTURE.md §3, "Agent waits"). */
static void s_observe(client_t *cl, char *status, size_t cap, bool *agent_wait) {
    char path[160];
    snprintf(path, sizeof path, "/api/v2/chats/%s", ledger_chat_id(cl->run->ledger, cl->chat));
    ledger_call_t call = {.op = LEDGER_GET, .chat = cl->chat, .tag = -1};
    json_t *chat = s_call(cl, "GET", path, NULL, &call.status);
    status[0] = '\0';
    *agent_wait = false;
    if (call.status == 200 && chat) {
        *agent_wait = json_is_true(json_object_get(chat, "waiting_on_agents"));
        call.agent_wait = *agent_wait;
        ledger_snapshot(cl->run->ledger, cl->chat,
                        json_integer_value(json_object_get(chat, "snapshot_version")), cl->wrote);
        cl->wrote = false;
        const char *s = json_string_value(json_object_get(chat, "status"));
        snprintf(status, cap, "%s", s ? s : "");
    }
    json_decref(chat);
    ledger_add(cl->run->ledger, &call);
}

/* A subagent turn (worker/README.md, "The sim provider"): 1 to 3 children, each answering with
 * a short slow reply; sometimes a structured answer, a grandchild of its own (a nested agent
 * wait), a message_agent, list_agents or interrupt_agent before the wait, or a wait for every
 * child of the chat (only while it has few: its result, echoed word by word in the parent's
 * reply, grows with each child). */
static void s_subagents(client_t *cl) {
    static const char *const verbs[] = {"[sim:agents message]", "[sim:agents message]",
                                        "[sim:agents list]", "[sim:agents interrupt]"};
    unsigned *rng = &cl->rng;
    int k = 1 + (int)(s_rand(rng) % 3);
    int words = 2 + (int)(s_rand(rng) % CHAOS_CHILD_WORDS);
    bool schema = s_rand(rng) % 5 == 0;
    bool nested = s_rand(rng) % 6 == 0;
    unsigned verb = s_rand(rng) % 10; /* 0..3: one of verbs; else none */
    bool wait_all = s_rand(rng) % 8 == 0 && cl->children <= CHAOS_WAIT_ALL_MAX;
    char d[200];
    snprintf(d, sizeof d, "[sim:spawn %d][sim:child slow 10][sim:child words %d]%s%s%s%s", k, words,
             schema ? "[sim:child-schema]" : "", nested ? "[sim:child spawn 1]" : "",
             verb < 4 ? verbs[verb] : "", wait_all ? "[sim:wait-all]" : "");
    s_send(cl, LEDGER_SEND, d, -1, k);
}

static void s_act(client_t *cl) {
    unsigned roll = s_rand(&cl->rng) % 100;
    if (roll < 20) {
        s_send(cl, LEDGER_SEND, "", -1, 0);
    } else if (roll < 30) {
        /* With an MCP server, half the tool turns call its tool (an MCP step, §7.9). */
        bool mcp = cl->run->cfg.mcp && s_rand(&cl->rng) % 2;
        s_send(cl, LEDGER_SEND, mcp ? "[sim:tool mcp__chaos__t1]" : "[sim:tool time]", -1, 0);
    } else if (roll < 38) {
        s_send(cl, LEDGER_SEND, "[sim:dynamic ask]", -1, 0);
    } else if (roll < 54) {
        s_send(cl, LEDGER_SEND, s_scripts[s_rand(&cl->rng) % CHAOS_NSCRIPTS],
               (int)(s_rand(&cl->rng) % CHAOS_NFORMATS), 0);
    } else if (roll < 62) {
        s_subagents(cl);
    } else if (roll < 70) {
        s_send(cl, LEDGER_SEND_INTERRUPT, "", -1, 0);
    } else if (roll < 78) {
        s_interrupt(cl);
    } else if (roll < 88) {
        s_edit(cl);
    } else if (roll < 94) {
        s_queue_delete(cl);
    } else {
        s_compact(cl);
    }
}

static void *s_client_thread(void *arg) {
    client_t *cl = arg;
    run_t *r = cl->run;
    while (!atomic_load(&r->stop)) {
        /* Like EventSource, a stream that never connected is opened again. */
        pthread_mutex_lock(&r->stream_lock);
        if (ledger_stream_dead(r->ledger, cl->chat, CHAOS_STREAM_DEAD_MS)) {
            int gw = s_pick_gateway(cl);
            printf("chaos: t=%5.1fs stream of chat %d never connected; reopened on gateway %d\n",
                   (double)(id_now_ms() - r->t0) / 1000.0, cl->chat, gw);
            s_stream_open(r, cl->chat, gw, ledger_stream_last_id(r->ledger, cl->chat));
        }
        pthread_mutex_unlock(&r->stream_lock);
        char status[32];
        bool agent_wait = false;
        s_observe(cl, status, sizeof status, &agent_wait);
        /* An agent wait is requires_action with nothing for the client to answer (POST
         * /tool-results would be refused with 409): the client acts as if the chat were busy,
         * and while draining waits for the children to end it. */
        if (!strcmp(status, "requires_action") && !agent_wait) {
            s_answer(cl);
        } else if (!atomic_load(&r->drain)) {
            s_act(cl);
        }
        s_sleep_ms(100 + (int64_t)(s_rand(&cl->rng) % 300));
    }
    return NULL;
}

static void s_create(run_t *r, int chat) {
    int tag = atomic_fetch_add(&r->tags, 1);
    char text[128];
    snprintf(text, sizeof text, "[sim:slow 10] " LEDGER_TAG_PREFIX "%06d hello from chat %d", tag,
             chat);
    json_t *body = json_pack("{s:[{s:s,s:s}],s:[{s:s,s:s,s:{s:s}}]}", "content", "type", "text",
                             "text", text, "dynamic_tools", "name", "ask", "description",
                             "Ask the client", "input_schema", "type", "object");
    if (r->cfg.mcp) {
        json_object_set_new(body, "mcp_servers", json_pack("[s]", "chaos"));
    }
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char url[160];
    int gw = chat % CHAOS_GATEWAYS;
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(r->cluster, gw));
    proc_http_t h = {0};
    ASSERT(proc_http("POST", url, cluster_token(r->cluster), b, &h) == 0);
    free(b);
    if (h.status != 201) {
        fprintf(stderr, "chaos: create: %ld %s\n", h.status, h.body);
        abort();
    }
    json_t *c = json_loads(h.body, 0, NULL);
    ledger_set_chat(r->ledger, chat, json_string_value(json_object_get(c, "id")));
    json_decref(c);
    ledger_call_t call = {
        .op = LEDGER_CREATE, .chat = chat, .status = h.status, .tag = tag, .schema = -1};
    ledger_add(r->ledger, &call);
    proc_http_free(&h);
    s_stream_open(r, chat, gw, 0);
}

/* --- The sampler: the workers' connections and the turns in flight. --- */

static const char *const s_apps[4] = {"chatfleet-worker acquirer", "chatfleet-worker heartbeater",
                                      "chatfleet-worker sync", "chatfleet-worker task"};

/* In flight: running, its model call attempted, and its runner's lease fresh (a takeover
 * pending after a kill does not count until the new owner holds it). */
static const char *const S_SAMPLE_SQL =
    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
    "         AND application_name LIKE 'chatfleet-worker%'),"
    "       (SELECT count(*) FROM pg_stat_activity WHERE application_name = $1),"
    "       (SELECT count(*) FROM pg_stat_activity WHERE application_name = $2),"
    "       (SELECT count(*) FROM pg_stat_activity WHERE application_name = $3),"
    "       (SELECT count(*) FROM pg_stat_activity WHERE application_name = $4),"
    "       (SELECT count(*) FROM chats WHERE status = 'running'),"
    "       (SELECT count(*) FROM chats c WHERE c.status = 'running' AND c.generation_attempt >= 1"
    "         AND EXISTS (SELECT 1 FROM chat_heartbeats h WHERE h.chat_id = c.id"
    "         AND h.runner_id = c.runner_id"
    "         AND h.heartbeat_at > statement_timestamp() - $5::bigint * interval '1 millisecond')),"
    "       (SELECT coalesce(string_agg(client_port::text, ','), '') FROM pg_stat_activity"
    "         WHERE backend_type = 'client backend' AND application_name LIKE"
    "         'chatfleet-worker%')";

#define CHAOS_DBSOCKS_MAX 1024 /* connections to the database a sample reads */

/* One sample into s; 0 when the database answered. conn is the sampler's own connection,
 * (re)opened here: a PostgreSQL restart is expected. pg_stat_activity is read before /proc,
 * so that a worker connection opened in between cannot pass for an orphan (listed, yet in no
 * worker's descriptors) and hide one that is held. */
static int s_sample(run_t *r, PGconn **conn, ledger_sample_t *s) {
    memset(s, 0, sizeof *s);
    char *ports = NULL; /* the worker backends' client ports, comma-separated */
    int rc = -1;
    if (!*conn || PQstatus(*conn) != CONNECTION_OK) {
        PQfinish(*conn);
        *conn = PQconnectdb(cluster_db_url(r->cluster));
        if (PQstatus(*conn) == CONNECTION_OK) {
            PQclear(PQexec(*conn, "SET application_name = 'chaos sampler'"));
        }
    }
    const char *params[] = {s_apps[0], s_apps[1], s_apps[2], s_apps[3],
                            CHAOS_STR(CHAOS_LEASE_STALE_MS)};
    PGresult *res = PQstatus(*conn) == CONNECTION_OK
                        ? PQexecParams(*conn, S_SAMPLE_SQL, 5, NULL, params, NULL, NULL, 0)
                        : NULL;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        s->worker_conns = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
        for (int i = 0; i < 4; i++) {
            s->by_app[i] = (int)strtol(PQgetvalue(res, 0, 1 + i), NULL, 10);
        }
        s->running = (int)strtol(PQgetvalue(res, 0, 5), NULL, 10);
        s->in_flight = (int)strtol(PQgetvalue(res, 0, 6), NULL, 10);
        ports = mem_strdup(PQgetvalue(res, 0, 7));
        rc = 0;
    }
    PQclear(res);
    proc_sock_t socks[CHAOS_DBSOCKS_MAX];
    int n = 0;
    for (int i = 0; i < r->npg_ports; i++) { /* with pg_ha, whichever member is primary */
        n += proc_tcp_to_port(r->pg_ports[i], socks + n, CHAOS_DBSOCKS_MAX - n);
    }
    for (int w = 0; w < CHAOS_WORKERS; w++) {
        s->sock[w] = proc_sockets_of(cluster_pid(r->cluster, CLUSTER_WORKER, w), socks, n);
    }
    for (char *p = ports; p && *p;) {
        char *end = NULL;
        unsigned long port = strtoul(p, &end, 10);
        bool live = false;
        for (int i = 0; i < n && !live; i++) {
            live = socks[i].mine && socks[i].port == port; /* mine: some worker's */
        }
        s->orphans += !live;
        p = end && *end == ',' ? end + 1 : NULL;
    }
    s->held = s->worker_conns - s->orphans;
    free(ports);
    return rc;
}

static void *s_sampler_thread(void *arg) {
    run_t *r = arg;
    PGconn *conn = NULL;
    while (atomic_load(&r->sampling)) {
        ledger_sample_t s;
        ledger_phase_t phase = (ledger_phase_t)atomic_load(&r->phase);
        if (s_sample(r, &conn, &s) == 0) {
            ledger_sample(r->ledger, phase, &s);
            pthread_mutex_lock(&r->sample_lock);
            r->last = s;
            pthread_mutex_unlock(&r->sample_lock);
        } else {
            ledger_sample(r->ledger, phase, NULL);
        }
        s_sleep_ms(CHAOS_SAMPLE_MS); /* the sampling period, not a wait for a condition */
    }
    PQfinish(conn);
    return NULL;
}

static ledger_sample_t s_last_sample(run_t *r) {
    pthread_mutex_lock(&r->sample_lock);
    ledger_sample_t s = r->last;
    pthread_mutex_unlock(&r->sample_lock);
    return s;
}

/* --- The slow phase. --- */

typedef struct {
    run_t *run;
    int first; /* this creator's first chat; it takes every CHAOS_SLOW_CREATORS-th */
} slow_creator_t;

/* Creates slow chat i with its one slow turn (a structured request for every
 * CHAOS_SLOW_STRUCTURED-th, whose first answer is the slow echo as text only, which the
 * finalizer refuses) and records it. */
static void s_slow_create(run_t *r, int i) {
    int tag = atomic_fetch_add(&r->tags, 1);
    bool structured = i % CHAOS_SLOW_STRUCTURED == CHAOS_SLOW_STRUCTURED - 1;
    char text[160];
    snprintf(text, sizeof text,
             "[sim:slow " CHAOS_STR(CHAOS_SLOW_PACE_MS) "] [sim:words " CHAOS_STR(
                 CHAOS_SLOW_WORDS) "]%s " LEDGER_TAG_PREFIX "%06d slow turn %d",
             structured ? " [sim:schema-text 1]" : "", tag, i);
    json_t *body = json_pack("{s:[{s:s,s:s}]}", "content", "type", "text", "text", text);
    if (structured) { /* json_object_set_new steals the parsed format */
        json_object_set_new(body, "response_format", json_loads(s_formats[0], 0, NULL));
    }
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char url[160];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(r->cluster, i % CHAOS_GATEWAYS));
    proc_http_t h = {0};
    ledger_slow_t rec = {.status = -1, .tag = tag, .schema = structured ? 0 : -1};
    if (proc_http("POST", url, cluster_token(r->cluster), b, &h) == 0) {
        rec.status = h.status;
        json_t *c = h.status == 201 ? json_loads(h.body, 0, NULL) : NULL;
        const char *id = json_string_value(json_object_get(c, "id"));
        snprintf(rec.chat_id, sizeof rec.chat_id, "%s", id ? id : "");
        json_decref(c);
    }
    free(b);
    proc_http_free(&h);
    ledger_slow_add(r->ledger, &rec);
}

static void *s_slow_creator_thread(void *arg) {
    slow_creator_t *c = arg;
    for (int i = c->first; i < c->run->cfg.slow_turns; i += CHAOS_SLOW_CREATORS) {
        s_slow_create(c->run, i);
    }
    return NULL;
}

static void s_slow_progress(run_t *r, const char *what) {
    ledger_sample_t s = s_last_sample(r);
    printf("chaos: t=%5.1fs slow phase, %s: %d chats running, %d turns in flight, worker"
           " connections %d (per worker %d/%d/%d), faults %d/%d\n",
           (double)(id_now_ms() - r->t0) / 1000.0, what, s.running, s.in_flight, s.worker_conns,
           s.sock[0], s.sock[1], s.sock[2], atomic_load(&r->slow.done), r->slow.n);
}

/* The slow phase (README.md): cfg.slow_turns chats created together, each with one slow
 * turn, while the slow schedule kills and stops workers; then quiescence. Returns the
 * milliseconds quiescence took after the last fault healed, or -1 when it was not reached. */
static int64_t s_slow_phase(run_t *r) {
    int n = r->cfg.slow_turns;
    atomic_store(&r->phase, (int)LEDGER_PHASE_SLOW);
    int64_t t0 = id_now_ms();
    printf("chaos: t=%5.1fs slow phase: %d chats, one turn each of %d chunks %d ms apart (about"
           " %.1f s), every %dth a structured request; %d worker faults\n",
           (double)(t0 - r->t0) / 1000.0, n, CHAOS_SLOW_WORDS + 5, CHAOS_SLOW_PACE_MS,
           (CHAOS_SLOW_WORDS + 5) * CHAOS_SLOW_PACE_MS / 1000.0, CHAOS_SLOW_STRUCTURED, r->slow.n);
    slow_creator_t creators[CHAOS_SLOW_CREATORS];
    pthread_t threads[CHAOS_SLOW_CREATORS];
    for (int i = 0; i < CHAOS_SLOW_CREATORS; i++) {
        creators[i] = (slow_creator_t){.run = r, .first = i};
        ASSERT(pthread_create(&threads[i], NULL, s_slow_creator_thread, &creators[i]) == 0);
    }
    for (int i = 0; i < CHAOS_SLOW_CREATORS; i++) {
        pthread_join(threads[i], NULL);
    }
    printf("chaos: t=%5.1fs slow phase: %d chats created in %lld ms\n",
           (double)(id_now_ms() - r->t0) / 1000.0, n, (long long)(id_now_ms() - t0));
    /* The faults begin once every turn has been accepted, so that each lands on hundreds in
     * flight (a kill while the chats are still being created would find few). */
    r->slow.t0 = id_now_ms();
    pthread_t faults;
    ASSERT(pthread_create(&faults, NULL, s_fault_thread, &r->slow) == 0);
    int64_t next = id_now_ms() + CHAOS_PROGRESS_MS;
    while (atomic_load(&r->slow.done) < r->slow.n) {
        s_sleep_ms(CHAOS_SAMPLE_MS); /* polls the fault thread's progress */
        if (id_now_ms() >= next) {
            s_slow_progress(r, "faults");
            next += CHAOS_PROGRESS_MS;
        }
    }
    pthread_join(faults, NULL);
    s_slow_progress(r, "faults healed, draining");
    int64_t healed = id_now_ms();
    int64_t q = -1;
    for (;;) {
        char *v = cluster_sql(r->cluster,
                              "SELECT ((SELECT count(*) FROM chats WHERE status IN ('running',"
                              " 'interrupting', 'requires_action')) + (SELECT count(*) FROM"
                              " chat_queued_messages))::text");
        bool done = v && !strcmp(v, "0");
        free(v);
        int64_t now = id_now_ms();
        if (done || now - healed > CHAOS_QUIESCE_MS) {
            q = done ? now - healed : -1;
            break;
        }
        if (now >= next) {
            s_slow_progress(r, "draining");
            next += CHAOS_PROGRESS_MS;
        }
        s_sleep_ms(250); /* the poll interval of the quiescence wait */
    }
    printf("chaos: t=%5.1fs slow phase: quiescence %s %lld ms after the last fault healed; the"
           " phase took %.1f s\n",
           (double)(id_now_ms() - r->t0) / 1000.0, q >= 0 ? "reached" : "NOT reached",
           (long long)(q >= 0 ? q : id_now_ms() - healed), (double)(id_now_ms() - t0) / 1000.0);
    return q;
}

/* Whether pid runs (not a zombie): a process that crashed unscheduled (a sanitizer's abort)
 * is not reaped by the cluster until the end, so kill(pid, 0) would still succeed. */
static bool s_alive(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    if (!f) {
        return false;
    }
    char line[512];
    bool alive = false;
    if (fgets(line, sizeof line, f)) {
        const char *end = strrchr(line, ')'); /* "pid (comm) S ..." */
        alive = end && end[1] == ' ' && end[2] != 'Z' && end[2] != 'X';
    }
    fclose(f);
    return alive;
}

/* Counts the cluster's processes that died outside the schedule (every fault restarts what
 * it kills), printing each with its log. */
static int s_check_alive(run_t *r) {
    static const struct {
        cluster_role_t role;
        int n;
    } roles[] = {
        {CLUSTER_BROKER, 1}, {CLUSTER_GATEWAY, CHAOS_GATEWAYS}, {CLUSTER_WORKER, CHAOS_WORKERS}};
    int all = 0;
    int dead = 0;
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) {
        for (int i = 0; i < roles[k].n; i++) {
            all++;
            if (!s_alive(cluster_pid(r->cluster, roles[k].role, i))) {
                dead++;
                printf("chaos: process %s died outside the schedule\n",
                       cluster_log(r->cluster, roles[k].role, i));
            }
        }
    }
    printf("chaos: processes: %d of %d alive after the run\n", all - dead, all);
    return dead;
}

static void s_progress(run_t *r, const char *phase) {
    int total = 0;
    int sends = ledger_count(r->ledger, LEDGER_SEND, &total);
    int sends_i = ledger_count(r->ledger, LEDGER_SEND_INTERRUPT, NULL);
    int edits = ledger_count(r->ledger, LEDGER_EDIT, NULL);
    int dels = ledger_count(r->ledger, LEDGER_QUEUE_DELETE, NULL);
    int ints = ledger_count(r->ledger, LEDGER_INTERRUPT, NULL);
    int tools = ledger_count(r->ledger, LEDGER_TOOL_RESULTS, NULL);
    ledger_agents_t ag = ledger_agent_counts(r->ledger);
    printf("chaos: t=%5.1fs %s: sends %d/%d accepted (%d/%d subagent turns), interrupt-sends %d,"
           " edits %d, queue deletes %d, interrupts %d, tool results %d, agent waits seen %d,"
           " faults %d/%d\n",
           (double)(id_now_ms() - r->t0) / 1000.0, phase, sends, total, ag.accepted, ag.turns,
           sends_i, edits, dels, ints, tools, ag.waits_seen, atomic_load(&r->main.done), r->main.n);
}

int chaos_run(const chaos_config_t *cfg) {
    run_t *r = mem_calloc(1, sizeof *r);
    r->cfg = *cfg;
    ASSERT(cfg->chats >= 1 && cfg->chats <= LEDGER_CHATS_MAX);
    ASSERT(cfg->slow_turns >= 0 && cfg->slow_turns <= LEDGER_SLOW_MAX);
    pthread_mutex_init(&r->stream_lock, NULL);
    pthread_mutex_init(&r->sample_lock, NULL);
    s_schedule(r);
    /* The slow phase's takeovers of a hundred chats at once need no longer lease: acquisition
     * takes them in batches and the phase drains in about one reply time (README.md). */
    static const char *const env[] = {
        "CHATFLEET_LEASE_STALE_MS=" CHAOS_STR(CHAOS_LEASE_STALE_MS),
        "CHATFLEET_HEARTBEAT_MS=600",
        "CHATFLEET_ACQUIRE_POLL_MS=300",
        "CHATFLEET_STREAM_POLL_MS=1000",
        "CHATFLEET_WORKER_RETRY_BASE_MS=50",
        "CHATFLEET_WORKER_RETRY_MAX_MS=500",
        "CHATFLEET_MAX_STEPS_PER_TURN=8",
        "CHATFLEET_REQUIRES_ACTION_DEADLINE_MS=120000",
        "CHATFLEET_LOG=info",
        "CHATFLEET_WORKER_DB_CONNS=" CHAOS_STR(CHAOS_WORKER_DB_CONNS),
        "CHATFLEET_SUBAGENT_MAX_CHILDREN=" CHAOS_STR(CHAOS_SUBAGENT_MAX_CHILDREN),
        NULL};
    /* With mcp: the config file naming the sim model and the chaos MCP server; with hooks:
     * the consumer's URL and secret. */
    const char *env_all[sizeof env / sizeof env[0] + 3];
    size_t n_env = 0;
    for (; env[n_env]; n_env++) {
        env_all[n_env] = env[n_env];
    }
    hookcheck_t *hooks = cfg->hooks ? hookcheck_new() : NULL;
    if (hooks) {
        env_all[n_env++] = hookcheck_url_env(hooks);
        env_all[n_env++] = hookcheck_secret_env(hooks);
    }
    char config[128] = "";
    char *config_env = NULL;
    if (cfg->mcp) {
        snprintf(config, sizeof config, "/tmp/cfchaos-mcp-%d.json", (int)getpid());
        FILE *f = fopen(config, "w");
        ASSERT(f);
        const char *src = getenv("CHATFLEET_SOURCE_DIR");
        fprintf(f,
                "{\"models\":[{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\","
                "\"default\":true}],\"mcp_servers\":{\"chaos\":{\"command\":\"node\","
                "\"args\":[\"%s/tests/mcp/paged_server.mjs\"],\"timeout_ms\":5000,"
                "\"sandbox\":{\"ro_paths\":[\"%s/tests/mcp\"]}}}}",
                src ? src : ".", src ? src : ".");
        fclose(f);
        config_env = mem_printf("CHATFLEET_CONFIG=%s", config);
        env_all[n_env++] = config_env;
    }
    env_all[n_env] = NULL;
    cluster_opts_t o = {.name = cfg->name,
                        .gateways = CHAOS_GATEWAYS,
                        .workers = CHAOS_WORKERS,
                        .env = env_all,
                        .private_pg = 1,
                        .pg_ha = cfg->pg_ha};
    int64_t boot = id_now_ms();
    r->cluster = cluster_new(&o);
    for (int i = 0; i < CHAOS_WORKERS; i++) {
        r->worker_starts[i] = 1;
    }
    for (int g = 0; g < CHAOS_GATEWAYS; g++) {
        atomic_store(&r->gw_up[g], 1);
    }
    printf("chaos: cluster up in %lld ms (private PostgreSQL %s)%s%s\n",
           (long long)(id_now_ms() - boot), cluster_db_url(r->cluster),
           cfg->mcp ? ", MCP server chaos on every chat" : "",
           hooks ? ", lifecycle hooks to a consumer" : "");
    char calls_log[128];
    snprintf(calls_log, sizeof calls_log, "%s.calls.log", cfg->name);
    r->ledger = ledger_new(cfg->chats, calls_log);
    ledger_set_schemas(r->ledger, s_formats, CHAOS_NFORMATS);
    ledger_set_workers(r->ledger, CHAOS_WORKERS, CHAOS_WORKER_DB_CONNS);
    s_pg_ports(r, cluster_db_url(r->cluster));
    atomic_store(&r->phase, (int)LEDGER_PHASE_WORKLOAD);
    atomic_store(&r->sampling, true);
    ASSERT(pthread_create(&r->sampler, NULL, s_sampler_thread, r) == 0);
    for (int c = 0; c < cfg->chats; c++) {
        s_create(r, c);
    }
    client_t *clients = mem_calloc((size_t)cfg->chats, sizeof *clients);
    pthread_t *threads = mem_calloc((size_t)cfg->chats, sizeof *threads);
    r->t0 = id_now_ms();
    r->main.t0 = r->t0;
    for (int c = 0; c < cfg->chats; c++) {
        clients[c] = (client_t){
            .run = r, .chat = c, .rng = cfg->seed * 7919u + (unsigned)c, .gw = c % CHAOS_GATEWAYS};
        ASSERT(pthread_create(&threads[c], NULL, s_client_thread, &clients[c]) == 0);
    }
    pthread_t faults;
    ASSERT(pthread_create(&faults, NULL, s_fault_thread, &r->main) == 0);
    int64_t end = r->t0 + (int64_t)cfg->seconds * 1000;
    while (id_now_ms() < end) {
        s_sleep_ms(end - id_now_ms() < CHAOS_PROGRESS_MS ? end - id_now_ms() : CHAOS_PROGRESS_MS);
        s_progress(r, "workload");
    }
    atomic_store(&r->drain, true);
    pthread_join(faults, NULL);
    s_progress(r, "faults healed, draining");
    /* Every chat counts, children and grandchildren too; an agent wait is requires_action, so
     * quiescence also waits for every wait to be resumed or canceled. */
    int64_t q = cluster_wait(r->cluster,
                             "SELECT ((SELECT count(*) FROM chats WHERE status IN ('running',"
                             " 'interrupting', 'requires_action')) + (SELECT count(*) FROM"
                             " chat_queued_messages))::text",
                             "0", CHAOS_QUIESCE_MS);
    printf("chaos: t=%5.1fs quiescence %s after %lld ms\n", (double)(id_now_ms() - r->t0) / 1000.0,
           q >= 0 ? "reached" : "NOT reached", (long long)q);
    atomic_store(&r->stop, true);
    for (int c = 0; c < cfg->chats; c++) {
        pthread_join(threads[c], NULL);
    }
    int64_t q_slow = cfg->slow_turns > 0 ? s_slow_phase(r) : 0;
    atomic_store(&r->sampling, false);
    pthread_join(r->sampler, NULL);
    char *logs[CHAOS_WORKERS * (2 * CHAOS_FAULTS_MAX + 1) + 1]; /* every start of every worker */
    int nlogs = 0;
    for (int w = 0; w < CHAOS_WORKERS; w++) {
        for (int s = 1; s <= r->worker_starts[w]; s++) {
            logs[nlogs++] = mem_printf("%s.worker%d.%d.log", cfg->name, w, s);
        }
    }
    logs[nlogs] = NULL;
    int dead = s_check_alive(r);
    int failed = ledger_check(r->ledger, cluster_db(r->cluster), (const char *const *)logs,
                              CHAOS_STREAM_WAIT_MS, cfg->slow_turns / 2);
    failed += q < 0;
    failed += q_slow < 0;
    failed += dead > 0;
    failed += hooks ? hookcheck_check(hooks) : 0;
    printf("chaos: seed %u: %s in %.1f s (%d faults, %d slow turns under %d more)\n", cfg->seed,
           failed ? "FAILED" : "passed", (double)(id_now_ms() - r->t0) / 1000.0, r->main.n,
           cfg->slow_turns, r->slow.n);
    for (int i = 0; i < nlogs; i++) {
        free(logs[i]);
    }
    ledger_destroy(&r->ledger);
    int unclean = cluster_destroy(&r->cluster);
    hookcheck_destroy(&hooks);
    if (config_env) {
        unlink(config);
        free(config_env);
    }
    if (unclean) {
        printf("chaos: %d processes did not exit cleanly on SIGTERM\n", unclean);
    }
    free(clients);
    free(threads);
    pthread_mutex_destroy(&r->stream_lock);
    pthread_mutex_destroy(&r->sample_lock);
    free(r);
    return failed;
}
