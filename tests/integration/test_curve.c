/* CURVE on the bus with real processes (issue 16, ARCHITECTURE.md §9 "Trust"): a cluster of a
 * broker, a gateway and two workers, each with its own certificate. Peers without a
 * certificate, or with one the broker's allow directory does not hold, read nothing while a
 * chat streams and their forged parts never reach the SSE stream; they cannot register or
 * heartbeat a worker id. A gateway's key cannot register as a worker, another worker's key
 * cannot take over or answer for a worker id, and removing a worker's certificate from the
 * allow directory cuts that worker off. Key settings that are partial or unreadable stop
 * every process at start with exit status 2. Each refusal is also seen in the broker's
 * counters, and positive controls (an admitted subscriber, the genuine worker's answer)
 * show that the channel under test works. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bus.h"
#include "cluster.h"
#include "curve.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "relay.h"
#include "sse.h"

#define WAIT_MS 20000

static cluster_t *s_c;
static char s_outsider_dir[64]; /* certificates the broker never admitted */

static curve_t *s_keys(const char *dir, const char *name) {
    char cert[600];
    char server[600];
    char err[600];
    snprintf(cert, sizeof cert, "%s/%s.cert_secret", dir, name);
    snprintf(server, sizeof server, "%s/broker.cert", cluster_curve_dir(s_c));
    curve_t *k = curve_new(cert, server, err, sizeof err);
    if (!k) {
        fail_msg("%s", err);
    }
    return k;
}

static void s_stats(wire_stats_t *out) {
    curve_t *gw = s_keys(cluster_curve_dir(s_c), "gateway0");
    relay_client_t *c = relay_client_new_with(cluster_endpoint(s_c, "relay"), gw);
    curve_destroy(&gw);
    assert_non_null(c);
    assert_int_equal(relay_client_stats(c, 5000, out), 0);
    relay_client_destroy(&c);
}

/* The worker id a worker process logged at start (polled: workers start asynchronously). */
static char *s_worker_id(int i) {
    for (int n = 0; n < 200; n++) {
        FILE *f = fopen(cluster_log(s_c, CLUSTER_WORKER, i), "r");
        char line[4096];
        while (f && fgets(line, sizeof line, f)) {
            char *p = strstr(line, "event=worker_started worker_id=");
            if (p) {
                fclose(f);
                p += strlen("event=worker_started worker_id=");
                return mem_printf("%.36s", p);
            }
        }
        if (f) {
            fclose(f);
        }
        usleep(50 * 1000);
    }
    fail_msg("worker %d never logged worker_started", i);
    return NULL;
}

static int s_group_setup(void **u) {
    (void)u;
    static const char *const env[] = {"CHATFLEET_SIM_CHUNK_MS=40", "CHATFLEET_HEARTBEAT_MS=200",
                                      NULL};
    cluster_opts_t o = {.name = "test_curve", .gateways = 1, .workers = 2, .env = env, .curve = 1};
    s_c = cluster_new(&o);
    snprintf(s_outsider_dir, sizeof s_outsider_dir, "%s/outsider", cluster_curve_dir(s_c));
    char err[512];
    if (curve_keygen("worker", "worker", s_outsider_dir, err, sizeof err) != 0 ||
        curve_keygen("gateway", "gateway", s_outsider_dir, err, sizeof err) != 0) {
        fail_msg("%s", err);
    }
    return 0;
}

static int s_group_teardown(void **u) {
    (void)u;
    return cluster_destroy(&s_c);
}

static char *s_create(const char *text) {
    char url[160];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_c, 0));
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_c), body, &r), 0);
    assert_int_equal(r.status, 201);
    json_t *v = json_loads(r.body, 0, NULL);
    char *id = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    proc_http_free(&r);
    free(body);
    return id;
}

/* Reads whatever sub has waiting (up to wait_ms), counting messages and parts of chat. */
static int s_drain(bus_subscriber_t *sub, int wait_ms) {
    int n = 0;
    wire_msg_t m;
    int64_t end = id_now_ms() + wait_ms;
    while (id_now_ms() < end && bus_subscriber_recv(sub, &m, 20) >= 0) {
        if (m.type != 0) {
            n++;
            wire_msg_clear(&m);
        }
    }
    return n;
}

static void s_forge(bus_publisher_t *pub, const char *chat, int64_t hv, int64_t ga, int64_t seq) {
    wire_part_t p = {.history_version = hv, .generation_attempt = ga, .seq = seq};
    snprintf(p.chat_id, sizeof p.chat_id, "%s", chat);
    snprintf(p.role, sizeof p.role, "assistant");
    const char *json = "{\"type\":\"text\",\"text\":\"FORGED\"}";
    p.part.text = (char *)json;
    p.part.len = strlen(json);
    (void)bus_publisher_part(pub, &p); /* a refused peer's send is queued, then lost */
}

static int s_has_forged(sse_t *s) {
    for (int i = 0; i < sse_count(s); i++) {
        char *t = json_dumps(sse_get(s, i), 0);
        int hit = t && strstr(t, "FORGED") != NULL;
        free(t);
        if (hit) {
            return 1;
        }
    }
    return 0;
}

static int s_is_waiting(json_t *e, void *u) {
    (void)u;
    json_t *st = json_object_get(json_object_get(json_object_get(e, "data"), "status"), "status");
    return json_is_string(st) && !strcmp(json_string_value(st), "waiting");
}

static void test_outsiders_read_nothing_and_forge_nothing_while_a_chat_streams(void **u) {
    (void)u;
    curve_t *stranger = s_keys(s_outsider_dir, "worker"); /* a certificate never admitted */
    curve_t *gw = s_keys(cluster_curve_dir(s_c), "gateway0");
    const char *sub_ep = cluster_endpoint(s_c, "sub");
    const char *pub_ep = cluster_endpoint(s_c, "pub");
    bus_subscriber_t *plain_sub = bus_subscriber_new_with(sub_ep, NULL);
    bus_subscriber_t *stranger_sub = bus_subscriber_new_with(sub_ep, stranger);
    bus_subscriber_t *control = bus_subscriber_new_with(sub_ep, gw); /* admitted */
    bus_publisher_t *plain_pub = bus_publisher_new_with(pub_ep, NULL);
    bus_publisher_t *stranger_pub = bus_publisher_new_with(pub_ep, stranger);
    bus_publisher_t *gw_pub = bus_publisher_new_with(pub_ep, gw); /* admitted, not a worker */
    assert_true(plain_sub && stranger_sub && control && plain_pub && stranger_pub && gw_pub);
    bus_subscriber_t *subs[] = {plain_sub, stranger_sub, control};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(bus_subscriber_subscribe(subs[i], "chat:"), 0);
    }
    wire_stats_t s0;
    s_stats(&s0);

    char *chat = s_create("curve [sim:words 120]");
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(s_c, 0), chat);
    sse_t *s = sse_open(url, cluster_token(s_c), 0);
    char *q = mem_printf("SELECT status = 'running' AND generation_attempt > 0 FROM chats "
                         "WHERE id = '%s'",
                         chat);
    assert_true(cluster_wait(s_c, q, "t", WAIT_MS) >= 0);
    free(q);
    char *row = cluster_sql(s_c,
                            "SELECT history_version || ' ' || generation_attempt FROM chats "
                            "WHERE id = '%s'",
                            chat);
    long long hv = 0;
    long long ga = 0;
    assert_int_equal(sscanf(row, "%lld %lld", &hv, &ga), 2);
    free(row);
    /* While the turn streams, every forger sends parts for the live episode, over the
     * seqs the worker is about to use. */
    int forged = 0;
    for (int64_t seq = 1; seq <= 200; seq++) {
        s_forge(plain_pub, chat, hv, ga, seq);
        s_forge(stranger_pub, chat, hv, ga, seq);
        s_forge(gw_pub, chat, hv, ga, seq);
        forged++;
        if (seq % 20 == 0) {
            usleep(20 * 1000);
        }
    }
    int done = sse_wait(s, 0, "status", s_is_waiting, NULL, WAIT_MS);
    assert_true(done >= 0);
    int n_plain = s_drain(plain_sub, 300);
    int n_stranger = s_drain(stranger_sub, 300);
    int n_control = s_drain(control, 300);
    printf("during one streamed turn: plain subscriber %d, unadmitted key %d, admitted gateway "
           "key %d messages; %d forged parts sent by each of three forgers\n",
           n_plain, n_stranger, n_control, forged);
    assert_int_equal(n_plain, 0);
    assert_int_equal(n_stranger, 0);
    assert_true(n_control > 10); /* the control: the bus did carry the chat */
    assert_false(s_has_forged(s));
    wire_stats_t s1;
    s_stats(&s1);
    printf("broker forbidden %lld -> %lld\n", (long long)s0.forbidden, (long long)s1.forbidden);
    /* The admitted gateway's forged parts reached the broker and were refused there (the
     * unauthenticated ones never got past the handshake). */
    assert_true(s1.forbidden - s0.forbidden >= forged);
    sse_close(&s);
    free(chat);
    for (int i = 0; i < 3; i++) {
        bus_subscriber_destroy(&subs[i]);
    }
    bus_publisher_destroy(&plain_pub);
    bus_publisher_destroy(&stranger_pub);
    bus_publisher_destroy(&gw_pub);
    curve_destroy(&stranger);
    curve_destroy(&gw);
}

/* A relay handler that answers every request "ok" with one forged part. */
static int s_hijack(void *ctx, const wire_request_t *req, wire_reply_t *reply) {
    (void)ctx;
    reply->nparts = 1;
    reply->parts = mem_calloc(1, sizeof *reply->parts);
    reply->parts[0].seq = req->episode.after_seq + 1;
    snprintf(reply->parts[0].role, sizeof reply->parts[0].role, "assistant");
    reply->parts[0].part.text = mem_strdup("{\"type\":\"text\",\"text\":\"FORGED\"}");
    reply->parts[0].part.len = strlen(reply->parts[0].part.text);
    return 0;
}

/* One relay request for a chat worker_id does not have, with the admitted gateway key:
 * relay_client_fetch's result, with *reply set on 0. No cmocka assertion, so that a thread
 * may call it too. */
static int s_fetch(const char *worker_id, int timeout_ms, wire_msg_t *reply) {
    char cert[600];
    char server[600];
    char err[600];
    snprintf(cert, sizeof cert, "%s/gateway0.cert_secret", cluster_curve_dir(s_c));
    snprintf(server, sizeof server, "%s/broker.cert", cluster_curve_dir(s_c));
    curve_t *gw = curve_new(cert, server, err, sizeof err);
    relay_client_t *c = gw ? relay_client_new_with(cluster_endpoint(s_c, "relay"), gw) : NULL;
    curve_destroy(&gw);
    wire_select_t ep = {.history_version = 0, .generation_attempt = 1, .after_seq = 0};
    int rc = c && id_uuid_new(ep.chat_id) == 0
                 ? relay_client_fetch(c, worker_id, &ep, 10, timeout_ms, reply)
                 : -1;
    relay_client_destroy(&c);
    return rc;
}

/* Asks worker_id, through the admitted gateway key, for a chat it does not have: its answer,
 * or -1 when none came within the wait. */
static int s_ask_try(const char *worker_id) {
    wire_msg_t reply;
    /* A new client's CURVE handshake comes first: under the sanitizers on a loaded machine a
     * fresh-clone run once waited out 3 s here, so the wait is generous (an answer is quick). */
    if (s_fetch(worker_id, 10000, &reply) != 0) {
        return -1;
    }
    wire_status_t st = reply.u.reply.status;
    assert_int_equal(reply.u.reply.nparts == 0, st != WIRE_STATUS_OK);
    wire_msg_clear(&reply);
    return (int)st;
}

static wire_status_t s_ask(const char *worker_id) {
    int st = s_ask_try(worker_id);
    assert_int_not_equal(st, -1);
    return (wire_status_t)st;
}

static int64_t s_registrations(relay_worker_t *w) {
    int64_t reg = -1;
    int64_t served = -1;
    assert_int_equal(relay_worker_status(w, &reg, &served), 0);
    return reg;
}

/* A worker's handler that holds its answer until released: the request reaches it while its
 * key is admitted, the answer leaves after the key is revoked. */
typedef struct {
    atomic_int got;
    atomic_int release;
} s_gate_t;

static int s_held(void *ctx, const wire_request_t *req, wire_reply_t *reply) {
    (void)req;
    s_gate_t *g = ctx;
    atomic_store(&g->got, 1);
    for (int i = 0; i < 2000 && !atomic_load(&g->release); i++) {
        usleep(10 * 1000);
    }
    reply->status = WIRE_STATUS_NO_EPISODE;
    return 0;
}

/* One relay request from a thread (s_fetch: no cmocka assertion off the main thread). */
typedef struct {
    char worker_id[ID_UUID_LEN + 1];
    int rc;
    int status;
} s_asker_t;

static void *s_asker(void *arg) {
    s_asker_t *a = arg;
    wire_msg_t reply;
    a->rc = s_fetch(a->worker_id, 15000, &reply);
    if (a->rc == 0) {
        a->status = (int)reply.u.reply.status;
        wire_msg_clear(&reply);
    }
    return NULL;
}

static void test_worker_ids_are_bound_to_their_key(void **u) {
    (void)u;
    char *w0 = s_worker_id(0);
    const char *relay = cluster_endpoint(s_c, "relay");
    const char *dir = cluster_curve_dir(s_c);
    /* The genuine worker answers "no_episode" for a chat it does not run. */
    assert_int_equal(s_ask(w0), WIRE_STATUS_NO_EPISODE);
    wire_stats_t s0;
    s_stats(&s0);
    curve_t *stranger = s_keys(s_outsider_dir, "worker");
    curve_t *gw = s_keys(dir, "gateway0");
    curve_t *w1 = s_keys(dir, "worker1");
    char fresh[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(fresh), 0);
    /* Heartbeating (and registering) worker 0's id: without a key, with an unadmitted key,
     * with worker 1's key. A fresh id with the gateway's key. */
    relay_worker_t *h_plain = relay_worker_new_with(relay, w0, 50, s_hijack, NULL, NULL);
    relay_worker_t *h_stranger = relay_worker_new_with(relay, w0, 50, s_hijack, NULL, stranger);
    relay_worker_t *h_w1 = relay_worker_new_with(relay, w0, 50, s_hijack, NULL, w1);
    relay_worker_t *h_gw = relay_worker_new_with(relay, fresh, 50, s_hijack, NULL, gw);
    assert_true(h_plain && h_stranger && h_w1 && h_gw);
    usleep(1000 * 1000); /* twenty heartbeats each */
    assert_int_equal(s_registrations(h_plain), 0);
    assert_int_equal(s_registrations(h_stranger), 0);
    assert_int_equal(s_registrations(h_w1), 0);
    assert_int_equal(s_registrations(h_gw), 0);
    /* Worker 0 still answers for its id, and the gateway-keyed one was never registered. */
    assert_int_equal(s_ask(w0), WIRE_STATUS_NO_EPISODE);
    assert_int_equal(s_ask(fresh), WIRE_STATUS_NO_SUCH_WORKER);
    wire_stats_t s1;
    s_stats(&s1);
    printf("forbidden %lld -> %lld, workers %lld\n", (long long)s0.forbidden,
           (long long)s1.forbidden, (long long)s1.workers);
    assert_true(s1.forbidden - s0.forbidden >= 20); /* worker 1's key and the gateway's */
    assert_int_equal(s1.workers, 2);
    relay_worker_destroy(&h_plain);
    relay_worker_destroy(&h_stranger);
    relay_worker_destroy(&h_w1);
    relay_worker_destroy(&h_gw);

    /* A relay_reply naming worker 0, sent with worker 1's key, is refused at the broker. */
    zsock_t *d = zsock_new(ZMQ_DEALER);
    assert_int_equal(curve_apply(w1, zsock_resolve(d)), 0);
    assert_int_equal(zsock_connect(d, "%s", relay), 0);
    wire_msg_t rep = {.type = WIRE_RELAY_REPLY};
    assert_int_equal(id_uuid_new(rep.u.reply.request_id), 0);
    memcpy(rep.u.reply.worker_id, w0, ID_UUID_LEN + 1);
    rep.u.reply.status = WIRE_STATUS_OK;
    assert_int_equal(id_uuid_new(rep.u.reply.episode.chat_id), 0);
    rep.u.reply.episode.generation_attempt = 1;
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&rep, &data, &size), 0);
    for (int i = 0; i < 5; i++) {
        assert_true(zmq_send(zsock_resolve(d), "route", 5, ZMQ_SNDMORE) >= 0);
        assert_true(zmq_send(zsock_resolve(d), data, size, 0) >= 0);
    }
    free(data);
    wire_stats_t s2;
    for (int n = 0; n < 50; n++) {
        s_stats(&s2);
        if (s2.forbidden - s1.forbidden >= 5) {
            break;
        }
        usleep(20 * 1000);
    }
    assert_true(s2.forbidden - s1.forbidden >= 5);
    zsock_destroy(&d);
    curve_destroy(&stranger);
    curve_destroy(&gw);
    curve_destroy(&w1);
    free(w0);
}

static void test_removing_a_worker_certificate_cuts_it_off(void **u) {
    (void)u;
    char *w1 = s_worker_id(1);
    /* Worker 1 answers for itself (the control). In two fresh-clone runs on a loaded machine
     * one such request went unanswered (relay_request_timeout) right after the test before,
     * which sends forged traffic with worker 1's key; the cause is not established, so the
     * control asks again within 30 s and reports a failure only when none is answered. */
    int st0 = -1;
    int64_t t_ask = id_now_ms();
    while (id_now_ms() - t_ask < 30000 && (st0 = s_ask_try(w1)) == -1) {
        usleep(100 * 1000);
    }
    assert_int_equal(st0, WIRE_STATUS_NO_EPISODE);
    /* A subscription held with worker 1's key before the revocation, and one with the
     * gateway's key: both read a chat's traffic now (the control). */
    curve_t *k = s_keys(cluster_curve_dir(s_c), "worker1");
    curve_t *gk = s_keys(cluster_curve_dir(s_c), "gateway0");
    bus_subscriber_t *held = bus_subscriber_new_with(cluster_endpoint(s_c, "sub"), k);
    bus_subscriber_t *kept = bus_subscriber_new_with(cluster_endpoint(s_c, "sub"), gk);
    assert_int_equal(bus_subscriber_subscribe(held, "chat:"), 0);
    assert_int_equal(bus_subscriber_subscribe(kept, "chat:"), 0);
    char *before = s_create("before the revocation");
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", before);
    assert_true(cluster_wait(s_c, q, "waiting", WAIT_MS) >= 0);
    free(q);
    free(before);
    int held_before = s_drain(held, 300);
    assert_true(held_before > 0);
    assert_true(s_drain(kept, 300) > 0);
    /* A request held by a worker with worker 1's key (under a fresh id) while the key is
     * revoked: its answer comes from a revoked key, so the broker answers the requester
     * itself, no_such_worker, instead of leaving it to wait. */
    char held_id[ID_UUID_LEN + 1];
    assert_int_equal(id_uuid_new(held_id), 0);
    s_gate_t gate = {0};
    relay_worker_t *holder =
        relay_worker_new_with(cluster_endpoint(s_c, "relay"), held_id, 1000, s_held, &gate, k);
    assert_non_null(holder);
    for (int i = 0; i < 500 && s_registrations(holder) == 0; i++) {
        usleep(10 * 1000);
    }
    assert_true(s_registrations(holder) > 0);
    s_asker_t asker = {.rc = -2};
    memcpy(asker.worker_id, held_id, sizeof asker.worker_id);
    pthread_t asking;
    assert_int_equal(pthread_create(&asking, NULL, s_asker, &asker), 0);
    for (int i = 0; i < 1000 && !atomic_load(&gate.got); i++) {
        usleep(10 * 1000);
    }
    assert_true(atomic_load(&gate.got));

    char path[600];
    snprintf(path, sizeof path, "%s/allow/worker1.cert", cluster_curve_dir(s_c));
    int64_t t0 = id_now_ms();
    assert_int_equal(unlink(path), 0);
    /* Within the broker's reload interval (1 s) and a heartbeat, worker 1 is forgotten and
     * its beats refused: the relay answers for it from the broker, "no_such_worker". A request
     * left unanswered on a loaded machine (a CI run once met one, before the broker answered
     * for revoked replies) is counted and asked again. */
    int st = WIRE_STATUS_NO_EPISODE;
    int unanswered = 0;
    while (id_now_ms() - t0 < 25000 && (st = s_ask_try(w1)) != WIRE_STATUS_NO_SUCH_WORKER) {
        unanswered += st == -1;
        usleep(100 * 1000);
    }
    printf("worker 1 cut off %lld ms after its certificate was removed (%d requests "
           "unanswered meanwhile)\n",
           (long long)(id_now_ms() - t0), unanswered);
    assert_int_equal(st, WIRE_STATUS_NO_SUCH_WORKER);
    atomic_store(&gate.release, 1); /* the key is revoked now: the held answer goes out */
    assert_int_equal(pthread_join(asking, NULL), 0);
    printf("the request held across the revocation: rc %d, status %d\n", asker.rc, asker.status);
    assert_int_equal(asker.rc, 0);
    assert_int_equal(asker.status, WIRE_STATUS_NO_SUCH_WORKER);
    relay_worker_destroy(&holder);
    usleep(500 * 1000); /* more heartbeats: they stay refused */
    assert_int_equal(s_ask(w1), WIRE_STATUS_NO_SUCH_WORKER);
    /* A new connection with that key is refused at the handshake, and the subscription it
     * held was cut when the broker reset its subscribers: neither reads anything now, while
     * the gateway's subscription (which reconnected by itself) still does. */
    bus_subscriber_t *sub = bus_subscriber_new_with(cluster_endpoint(s_c, "sub"), k);
    assert_int_equal(bus_subscriber_subscribe(sub, "chat:"), 0);
    (void)s_drain(held, 300); /* what it got before the cut */
    (void)s_drain(kept, 300);
    char *chat = s_create("after the revocation");
    q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(s_c, q, "waiting", WAIT_MS) >= 0); /* worker 0 served it */
    free(q);
    int n_new = s_drain(sub, 300);
    int n_held = s_drain(held, 300);
    int n_kept = s_drain(kept, 300);
    printf("after the revocation: new connection %d, held subscription %d (had %d before), "
           "gateway %d messages\n",
           n_new, n_held, held_before, n_kept);
    assert_int_equal(n_new, 0);
    assert_int_equal(n_held, 0);
    assert_true(n_kept > 0);
    bus_subscriber_destroy(&sub);
    bus_subscriber_destroy(&held);
    bus_subscriber_destroy(&kept);
    curve_destroy(&k);
    curve_destroy(&gk);
    free(chat);
    free(w1);
}

/* Runs argv with env added; returns its exit status and its output in *out. */
static int s_run(char *const argv[], char *const env[], char **out) {
    char log[128];
    snprintf(log, sizeof log, "test_curve.refuse.%d.log", (int)getpid());
    pid_t pid = proc_spawn(argv, env, log);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    FILE *f = fopen(log, "r");
    char buf[8192] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) {
        fclose(f);
    }
    unlink(log);
    *out = mem_strdup(buf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_partial_or_unreadable_key_settings_refuse_to_start(void **u) {
    (void)u;
    const char *build = getenv("CHATFLEET_BUILD_DIR");
    const char *dir = cluster_curve_dir(s_c);
    char broker[600];
    char worker[600];
    char gateway[600];
    snprintf(broker, sizeof broker, "%s/broker/chatfleet-broker", build);
    snprintf(worker, sizeof worker, "%s/worker/chatfleet-worker", build);
    snprintf(gateway, sizeof gateway, "%s/api-gateway/chatfleet-gateway", build);
    char *cert = mem_printf("CHATFLEET_CURVE_CERT=%s/worker0.cert_secret", dir);
    char *pub_only = mem_printf("CHATFLEET_CURVE_CERT=%s/worker0.cert", dir); /* no secret */
    char *server = mem_printf("CHATFLEET_CURVE_SERVER_PUBLIC=%s/broker.cert", dir);
    char *missing = mem_printf("CHATFLEET_CURVE_SERVER_PUBLIC=%s/nonexistent.cert", dir);
    char *skey = mem_printf("CHATFLEET_CURVE_SERVER_KEY=%s/broker.cert_secret", dir);
    char *allow_missing = mem_printf("CHATFLEET_CURVE_ALLOW_DIR=%s/no-such-dir", dir);
    char *db = mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(s_c));
    struct {
        char *bin;
        char *env[4];
        const char *expect; /* in the output */
    } cases[] = {
        {worker, {cert, db, NULL}, "CHATFLEET_CURVE_SERVER_PUBLIC is not"},
        {worker, {server, db, NULL}, "CHATFLEET_CURVE_CERT is not"},
        {worker, {pub_only, server, db, NULL}, "worker0.cert has no valid curve/secret-key"},
        {gateway, {cert, missing, db, NULL}, "nonexistent.cert"},
        {broker, {skey, NULL}, "CHATFLEET_CURVE_ALLOW_DIR is not"},
        {broker, {skey, allow_missing, NULL}, "no-such-dir"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {cases[i].bin, cases[i].bin == gateway ? "serve" : NULL, NULL};
        char *out = NULL;
        int rc = s_run(argv, cases[i].env, &out);
        printf("case %zu: exit %d: %s", i, rc,
               strstr(out, "chatfleet-") ? strstr(out, "chatfleet-") : out);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(out, cases[i].expect));
        free(out);
    }
    free(cert);
    free(pub_only);
    free(server);
    free(missing);
    free(skey);
    free(allow_missing);
    free(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outsiders_read_nothing_and_forge_nothing_while_a_chat_streams),
        cmocka_unit_test(test_worker_ids_are_bound_to_their_key),
        cmocka_unit_test(test_partial_or_unreadable_key_settings_refuse_to_start),
        /* Last: it revokes worker 1 for the rest of the run. */
        cmocka_unit_test(test_removing_a_worker_certificate_cuts_it_off),
    };
    return cmocka_run_group_tests(tests, s_group_setup, s_group_teardown);
}
