/* Integration tests of the real chatfleet-broker process with the bus and relay clients:
 * per-topic delivery in order per publisher, recovery after the broker is killed and
 * restarted, the watermark, relay routing by worker id, "no_such_worker" for unknown and
 * dead workers, counters on request, a clean SIGTERM shutdown, and a refused start (an
 * unusable or an already bound endpoint: exit 1; broker_new NULL, nothing left running).
 *
 * Endpoints are ipc:// sockets in a fresh temporary directory, or tcp:// on loopback ports
 * picked free at run time. Nothing sleeps to wait for a condition: every wait polls a
 * condition with a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"
#include "bus.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "relay.h"

#define S_START_DEADLINE_MS  5000
#define S_RESUME_BOUND_MS    1000 /* the bound for delivery after a restart */
#define S_NO_WORKER_BOUND_MS 500  /* an unknown worker is answered well within this */

typedef struct {
    char dir[256];
    char pub[300];
    char sub[300];
    char relay[300];
    const char *max_workers; /* --max-workers, or NULL for the default */
    pid_t pid;
} s_broker_t;

static const char *s_broker_path(void) {
    static char path[512];
    const char *b = getenv("CHATFLEET_BUILD_DIR");
    snprintf(path, sizeof path, "%s/broker/chatfleet-broker", b ? b : ".");
    return path;
}

/* A loopback TCP port that was free a moment ago. */
static int s_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void s_broker_init(s_broker_t *b, bool tcp) {
    memset(b, 0, sizeof *b);
    if (tcp) {
        snprintf(b->pub, sizeof b->pub, "tcp://127.0.0.1:%d", s_free_port());
        snprintf(b->sub, sizeof b->sub, "tcp://127.0.0.1:%d", s_free_port());
        snprintf(b->relay, sizeof b->relay, "tcp://127.0.0.1:%d", s_free_port());
    } else {
        snprintf(b->dir, sizeof b->dir, "/tmp/cf-broker-XXXXXX");
        assert_non_null(mkdtemp(b->dir));
        snprintf(b->pub, sizeof b->pub, "ipc://%s/pub", b->dir);
        snprintf(b->sub, sizeof b->sub, "ipc://%s/sub", b->dir);
        snprintf(b->relay, sizeof b->relay, "ipc://%s/relay", b->dir);
    }
}

/* Starts the broker process and waits until it answers a stats request. */
static void s_broker_start(s_broker_t *b) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        proc_die_with_parent();
        char *argv[] = {
            "chatfleet-broker",    "--pub", b->pub, "--sub", b->sub, "--relay", b->relay,
            "--stats-interval-ms", "1000",  NULL,   NULL,    NULL};
        if (b->max_workers) {
            argv[9] = "--max-workers";
            argv[10] = (char *)b->max_workers;
        }
        execv(s_broker_path(), argv);
        _exit(127);
    }
    b->pid = pid;
    relay_client_t *c = relay_client_new(b->relay);
    assert_non_null(c);
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    wire_stats_t st;
    while (relay_client_stats(c, 100, &st) != 0) {
        int status;
        assert_int_equal(waitpid(pid, &status, WNOHANG), 0); /* still running */
        assert_true(id_now_ms() < deadline);
    }
    relay_client_destroy(&c);
}

static void s_broker_kill(s_broker_t *b) {
    assert_int_equal(kill(b->pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(b->pid, &status, 0), b->pid);
    b->pid = 0;
}

static void s_broker_fini(s_broker_t *b) {
    if (b->pid > 0) {
        s_broker_kill(b);
    }
    if (b->dir[0]) {
        char path[400];
        const char *names[] = {"pub", "sub", "relay"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", b->dir, names[i]);
            unlink(path);
        }
        rmdir(b->dir);
    }
}

static void s_uuid(char out[ID_UUID_LEN + 1]) {
    assert_int_equal(id_uuid_new(out), 0);
}

/* An update hint whose worker_id names the publisher and history_version its sequence. */
static hint_update_t s_hint(const char *chat_id, int64_t sv, const char *pub_id, int64_t seq) {
    hint_update_t h = {0};
    snprintf(h.chat_id, sizeof h.chat_id, "%s", chat_id);
    h.snapshot_version = sv;
    snprintf(h.worker_id, sizeof h.worker_id, "%s", pub_id);
    h.history_version = seq;
    snprintf(h.status, sizeof h.status, "running");
    return h;
}

/* ------------------------------------------------------------------------------------------
 * Pub/sub: 2 publishers, 3 subscribers.
 */

#define S_PUBS          2
#define S_SUBS          3
#define S_CHATS_PER_PUB 2

typedef struct {
    s_broker_t broker;
    bus_publisher_t *pub[S_PUBS];
    char pub_id[S_PUBS][ID_UUID_LEN + 1];
    char ready_chat[S_PUBS][ID_UUID_LEN + 1];
    char chat[S_PUBS][S_CHATS_PER_PUB][ID_UUID_LEN + 1];
    char own_chat[ID_UUID_LEN + 1];
    int64_t sv[S_PUBS][S_CHATS_PER_PUB]; /* last snapshot_version published per chat */
    int64_t ready_sv[S_PUBS];
    int64_t own_sv;
    int64_t seq[S_PUBS]; /* last sequence per publisher */
    bus_subscriber_t *sub[S_SUBS];
    int64_t last_seq[S_SUBS][S_PUBS]; /* per subscriber, per publisher: order check */
    int got[S_SUBS][S_PUBS][S_CHATS_PER_PUB];
    int got_own[S_SUBS];
    int64_t last_ready_seen[S_SUBS][S_PUBS];
} s_fleet_t;

/* Subscriptions: S0 gets one chat of publisher 0; S1 one chat of publisher 1 plus ownership
 * hints; S2 every update hint. Each also hears both publishers' readiness chats. */
static bool s_wants(int s, int p, int c) {
    if (s == 0) {
        return p == 0 && c == 0;
    }
    if (s == 1) {
        return p == 1 && c == 0;
    }
    return true;
}

static void s_fleet_new(s_fleet_t *f, bool tcp) {
    memset(f, 0, sizeof *f);
    s_broker_init(&f->broker, tcp);
    s_broker_start(&f->broker);
    s_uuid(f->own_chat);
    for (int p = 0; p < S_PUBS; p++) {
        f->pub[p] = bus_publisher_new(f->broker.pub);
        assert_non_null(f->pub[p]);
        s_uuid(f->pub_id[p]);
        s_uuid(f->ready_chat[p]);
        for (int c = 0; c < S_CHATS_PER_PUB; c++) {
            s_uuid(f->chat[p][c]);
        }
    }
    for (int s = 0; s < S_SUBS; s++) {
        f->sub[s] = bus_subscriber_new(f->broker.sub);
        assert_non_null(f->sub[s]);
        char topic[PROTO_TOPIC_MAX_BYTES];
        for (int p = 0; p < S_PUBS; p++) {
            snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, f->ready_chat[p]);
            assert_int_equal(bus_subscriber_subscribe(f->sub[s], topic), 0);
        }
        if (s == 2) {
            assert_int_equal(bus_subscriber_subscribe(f->sub[s], PROTO_TOPIC_UPDATE), 0);
        } else {
            int p = s;
            snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_UPDATE, f->chat[p][0]);
            assert_int_equal(bus_subscriber_subscribe(f->sub[s], topic), 0);
        }
        if (s == 1) {
            assert_int_equal(bus_subscriber_subscribe(f->sub[s], PROTO_TOPIC_OWNERSHIP), 0);
        }
    }
}

static void s_fleet_destroy(s_fleet_t *f) {
    for (int s = 0; s < S_SUBS; s++) {
        bus_subscriber_destroy(&f->sub[s]);
    }
    for (int p = 0; p < S_PUBS; p++) {
        bus_publisher_destroy(&f->pub[p]);
    }
    s_broker_fini(&f->broker);
}

/* Publishes one readiness hint from every publisher. */
static void s_publish_ready(s_fleet_t *f) {
    for (int p = 0; p < S_PUBS; p++) {
        hint_update_t h = s_hint(f->ready_chat[p], ++f->ready_sv[p], f->pub_id[p], 0);
        (void)bus_publisher_update(f->pub[p], &h); /* may be dropped while connecting */
    }
}

/* Drains every subscriber for up to wait_ms, checking topics and per-publisher order. */
static void s_drain(s_fleet_t *f, int wait_ms) {
    zpoller_t *poller = zpoller_new(NULL);
    for (int s = 0; s < S_SUBS; s++) {
        zpoller_add(poller, bus_subscriber_sock(f->sub[s]));
    }
    int64_t deadline = id_now_ms() + wait_ms;
    for (;;) {
        bool any = false;
        for (int s = 0; s < S_SUBS; s++) {
            wire_msg_t m;
            while (bus_subscriber_recv(f->sub[s], &m, 0) == 1) {
                any = true;
                if (m.type == WIRE_OWNERSHIP) {
                    assert_int_equal(s, 1);
                    assert_string_equal(m.u.ownership.chat_id, f->own_chat);
                    f->got_own[s]++;
                    continue;
                }
                assert_int_equal(m.type, WIRE_UPDATE);
                const hint_update_t *h = &m.u.update;
                int p = -1;
                for (int i = 0; i < S_PUBS; i++) {
                    if (strcmp(h->worker_id, f->pub_id[i]) == 0) {
                        p = i;
                    }
                }
                assert_true(p >= 0);
                if (strcmp(h->chat_id, f->ready_chat[p]) == 0) {
                    f->last_ready_seen[s][p] = h->snapshot_version;
                    continue;
                }
                int c = -1;
                for (int i = 0; i < S_CHATS_PER_PUB; i++) {
                    if (strcmp(h->chat_id, f->chat[p][i]) == 0) {
                        c = i;
                    }
                }
                assert_true(c >= 0);
                assert_true(s_wants(s, p, c)); /* only the topics subscribed to */
                /* In order per publisher: its sequence only grows at each subscriber. */
                assert_true(h->history_version > f->last_seq[s][p]);
                f->last_seq[s][p] = h->history_version;
                f->got[s][p][c]++;
            }
        }
        if (!any) {
            int64_t now = id_now_ms();
            if (now >= deadline) {
                break;
            }
            zpoller_wait(poller, (int)(deadline - now));
        }
    }
    zpoller_destroy(&poller);
}

/* Publishes readiness hints until every subscriber has seen one from every publisher that
 * was sent after `since` (so each path publisher -> broker -> subscriber is live). Returns
 * the time it took. */
static int64_t s_wait_all_paths(s_fleet_t *f, int64_t bound_ms) {
    int64_t start = id_now_ms();
    int64_t since[S_PUBS];
    for (int p = 0; p < S_PUBS; p++) {
        since[p] = f->ready_sv[p];
    }
    for (;;) {
        s_publish_ready(f);
        s_drain(f, 5);
        bool all = true;
        for (int s = 0; s < S_SUBS; s++) {
            for (int p = 0; p < S_PUBS; p++) {
                all = all && f->last_ready_seen[s][p] > since[p];
            }
        }
        if (all) {
            return id_now_ms() - start;
        }
        assert_true(id_now_ms() - start < bound_ms);
    }
}

static void s_publish_round(s_fleet_t *f, int rounds) {
    for (int r = 0; r < rounds; r++) {
        for (int p = 0; p < S_PUBS; p++) {
            for (int c = 0; c < S_CHATS_PER_PUB; c++) {
                hint_update_t h = s_hint(f->chat[p][c], ++f->sv[p][c], f->pub_id[p], ++f->seq[p]);
                assert_int_equal(bus_publisher_update(f->pub[p], &h), 0);
            }
        }
        hint_ownership_t o = {.snapshot_version = ++f->own_sv};
        snprintf(o.chat_id, sizeof o.chat_id, "%s", f->own_chat);
        hint_sink_t sink = bus_publisher_sink(f->pub[1]);
        sink.ownership(sink.ctx, &o);
    }
}

static void test_two_publishers_three_subscribers_get_their_topics_in_order(void **state) {
    (void)state;
    s_fleet_t *f = mem_calloc(1, sizeof *f);
    s_fleet_new(f, false);
    s_wait_all_paths(f, S_START_DEADLINE_MS);
    const int rounds = 200;
    s_publish_round(f, rounds);
    /* Wait until the subscriber that wants everything has it all (bounded). */
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    for (;;) {
        s_drain(f, 20);
        int total = 0;
        for (int p = 0; p < S_PUBS; p++) {
            for (int c = 0; c < S_CHATS_PER_PUB; c++) {
                total += f->got[2][p][c];
            }
        }
        if (total == rounds * S_PUBS * S_CHATS_PER_PUB && f->got[0][0][0] == rounds &&
            f->got[1][1][0] == rounds && f->got_own[1] == rounds) {
            break;
        }
        assert_true(id_now_ms() < deadline);
    }
    /* Nothing beyond: exact counts per subscriber and chat. */
    s_drain(f, 50);
    for (int s = 0; s < S_SUBS; s++) {
        for (int p = 0; p < S_PUBS; p++) {
            for (int c = 0; c < S_CHATS_PER_PUB; c++) {
                assert_int_equal(f->got[s][p][c], s_wants(s, p, c) ? rounds : 0);
            }
        }
    }
    assert_int_equal(f->got_own[0], 0);
    assert_int_equal(f->got_own[2], 0);
    for (int s = 0; s < S_SUBS; s++) {
        bus_sub_counters_t sc;
        bus_subscriber_counters(f->sub[s], &sc);
        assert_int_equal(sc.malformed, 0);
        assert_int_equal(sc.gaps, 0);
    }
    for (int p = 0; p < S_PUBS; p++) {
        bus_pub_counters_t pc;
        bus_publisher_counters(f->pub[p], &pc);
        assert_int_equal(pc.dropped, 0);
    }
    s_fleet_destroy(f);
    free(f);
}

static void test_broker_restart_resumes_delivery_within_1s_without_client_restart(void **state) {
    (void)state;
    s_fleet_t *f = mem_calloc(1, sizeof *f);
    s_fleet_new(f, true);
    char worker_id[ID_UUID_LEN + 1];
    s_uuid(worker_id);
    s_wait_all_paths(f, S_START_DEADLINE_MS);
    s_publish_round(f, 20);
    s_drain(f, 50);

    s_broker_kill(&f->broker);
    /* Publishing while the broker is down must neither block nor fail loudly. */
    s_publish_ready(f);
    s_publish_round(f, 5);

    int64_t restarted = id_now_ms();
    s_broker_start(&f->broker);
    int64_t took = s_wait_all_paths(f, S_RESUME_BOUND_MS + 2000);
    int64_t since_restart = id_now_ms() - restarted;
    printf("# delivery resumed %lld ms after the restart was issued (%lld ms after ready)\n",
           (long long)since_restart, (long long)took);
    assert_true(since_restart < S_RESUME_BOUND_MS);

    /* Ordinary hints flow again, still in order per publisher (s_drain asserts it). */
    int before = f->got[2][0][0];
    s_publish_round(f, 10);
    int64_t deadline = id_now_ms() + S_RESUME_BOUND_MS;
    while (f->got[2][0][0] < before + 10) {
        s_drain(f, 10);
        assert_true(id_now_ms() < deadline);
    }
    s_fleet_destroy(f);
    free(f);
}

static void test_watermark_discards_stale_and_duplicate_hints(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, false);
    s_broker_start(&b);
    bus_publisher_t *pub = bus_publisher_new(b.pub);
    bus_subscriber_t *sub = bus_subscriber_new(b.sub);
    char chat[ID_UUID_LEN + 1];
    char other[ID_UUID_LEN + 1];
    char pid[ID_UUID_LEN + 1];
    s_uuid(chat);
    s_uuid(other);
    s_uuid(pid);
    assert_int_equal(bus_subscriber_subscribe(sub, PROTO_TOPIC_UPDATE), 0);
    assert_int_equal(bus_subscriber_subscribe(sub, PROTO_TOPIC_OWNERSHIP), 0);
    /* Establish the path with hints of another chat. */
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    int64_t osv = 0;
    for (;;) {
        hint_update_t h = s_hint(other, ++osv, pid, 0);
        (void)bus_publisher_update(pub, &h);
        wire_msg_t m;
        if (bus_subscriber_recv(sub, &m, 20) == 1) {
            wire_msg_clear(&m);
            break;
        }
        assert_true(id_now_ms() < deadline);
    }
    bus_sub_counters_t c0;
    bus_subscriber_counters(sub, &c0);
    /* 5, 5 (duplicate), 3 (stale), 6, then an ownership hint at 6 (its own channel), then
     * a duplicate ownership hint, then 9 (two lost on the way: counted as a gap). */
    int64_t svs[] = {5, 5, 3, 6};
    for (size_t i = 0; i < 4; i++) {
        hint_update_t h = s_hint(chat, svs[i], pid, (int64_t)i);
        assert_int_equal(bus_publisher_update(pub, &h), 0);
    }
    hint_ownership_t o = {.snapshot_version = 6};
    snprintf(o.chat_id, sizeof o.chat_id, "%s", chat);
    assert_int_equal(bus_publisher_ownership(pub, &o), 0);
    assert_int_equal(bus_publisher_ownership(pub, &o), 0);
    hint_update_t h9 = s_hint(chat, 9, pid, 9);
    assert_int_equal(bus_publisher_update(pub, &h9), 0);

    int64_t expect_sv[] = {5, 6, 6, 9};
    wire_type_t expect_type[] = {WIRE_UPDATE, WIRE_UPDATE, WIRE_OWNERSHIP, WIRE_UPDATE};
    for (int i = 0; i < 4; i++) {
        wire_msg_t m;
        assert_int_equal(bus_subscriber_recv(sub, &m, S_START_DEADLINE_MS), 1);
        assert_int_equal(m.type, expect_type[i]);
        int64_t sv =
            m.type == WIRE_UPDATE ? m.u.update.snapshot_version : m.u.ownership.snapshot_version;
        assert_int_equal(sv, expect_sv[i]);
        wire_msg_clear(&m);
    }
    bus_sub_counters_t c1;
    bus_subscriber_counters(sub, &c1);
    assert_int_equal(c1.stale - c0.stale, 3);
    assert_int_equal(c1.gaps - c0.gaps, 2);
    assert_int_equal(c1.delivered - c0.delivered, 4);
    /* After forgetting the chat its history no longer suppresses anything. */
    bus_subscriber_forget(sub, chat);
    hint_update_t h2 = s_hint(chat, 2, pid, 10);
    assert_int_equal(bus_publisher_update(pub, &h2), 0);
    wire_msg_t m;
    assert_int_equal(bus_subscriber_recv(sub, &m, S_START_DEADLINE_MS), 1);
    assert_int_equal(m.u.update.snapshot_version, 2);
    wire_msg_clear(&m);

    bus_subscriber_destroy(&sub);
    bus_publisher_destroy(&pub);
    s_broker_fini(&b);
}

static void test_live_parts_are_delivered_unwatermarked_and_bad_frames_counted(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, false);
    s_broker_start(&b);
    bus_publisher_t *pub = bus_publisher_new(b.pub);
    bus_subscriber_t *sub = bus_subscriber_new(b.sub);
    char chat[ID_UUID_LEN + 1];
    char other[ID_UUID_LEN + 1];
    s_uuid(chat);
    s_uuid(other);
    char topic[PROTO_TOPIC_MAX_BYTES];
    snprintf(topic, sizeof topic, "%s%s", PROTO_TOPIC_PART, chat);
    assert_int_equal(bus_subscriber_subscribe(sub, topic), 0);
    wire_part_t part = {.history_version = 3, .generation_attempt = 1};
    snprintf(part.chat_id, sizeof part.chat_id, "%s", chat);
    snprintf(part.role, sizeof part.role, "assistant");
    /* Seq 1 until the path is up; then 2..5, and seq 2 again (parts are not watermarked:
     * the stream loop's Part operation decides). */
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    wire_msg_t m;
    for (;;) {
        part.seq = 1;
        assert_int_equal(wire_json_set(&part.part, "{\"type\":\"text\",\"text\":\"a\"}", 26), 0);
        assert_int_equal(bus_publisher_part(pub, &part), 0);
        if (bus_subscriber_recv(sub, &m, 20) == 1) {
            break;
        }
        assert_true(id_now_ms() < deadline);
    }
    assert_int_equal(m.type, WIRE_PART);
    assert_string_equal(m.u.part.part.text, "{\"type\":\"text\",\"text\":\"a\"}");
    wire_msg_clear(&m);
    while (bus_subscriber_recv(sub, &m, 50) == 1) {
        wire_msg_clear(&m); /* extra seq-1 probes */
    }
    int64_t seqs[] = {2, 3, 4, 5, 2};
    for (int i = 0; i < 5; i++) {
        part.seq = seqs[i];
        assert_int_equal(bus_publisher_part(pub, &part), 0);
    }
    /* Another chat's part on the same family is not delivered (not subscribed). */
    wire_part_t foreign = part;
    snprintf(foreign.chat_id, sizeof foreign.chat_id, "%s", other);
    assert_int_equal(bus_publisher_part(pub, &foreign), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(bus_subscriber_recv(sub, &m, S_START_DEADLINE_MS), 1);
        assert_int_equal(m.type, WIRE_PART);
        assert_string_equal(m.u.part.chat_id, chat);
        assert_int_equal(m.u.part.seq, seqs[i]);
        wire_msg_clear(&m);
    }
    /* A raw publisher sends a body under the wrong topic, and garbage: both are counted
     * malformed at the subscriber and never delivered. */
    zsock_t *raw = zsock_new(ZMQ_PUB);
    zsock_set_linger(raw, 0);
    assert_int_equal(zsock_connect(raw, "%s", b.pub), 0);
    wire_msg_t wrong = {.type = WIRE_PART, .u.part = foreign};
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&wrong, &data, &size), 0);
    bus_sub_counters_t c0;
    bus_subscriber_counters(sub, &c0);
    deadline = id_now_ms() + S_START_DEADLINE_MS;
    bus_sub_counters_t c1 = c0;
    while (c1.malformed < c0.malformed + 2) {
        zmsg_t *z = zmsg_new();
        zmsg_addstr(z, topic);
        zmsg_addmem(z, data, size);
        zmsg_send(&z, raw);
        z = zmsg_new();
        zmsg_addstr(z, topic);
        zmsg_addstr(z, "not msgpack");
        zmsg_send(&z, raw);
        assert_int_equal(bus_subscriber_recv(sub, &m, 20), 0);
        bus_subscriber_counters(sub, &c1);
        assert_true(id_now_ms() < deadline);
    }
    free(data);
    zsock_destroy(&raw);
    free(part.part.text); /* the publisher copied nothing it keeps */
    bus_subscriber_destroy(&sub);
    bus_publisher_destroy(&pub);
    s_broker_fini(&b);
}

static void test_publisher_counts_drops_and_never_blocks_when_the_broker_stalls(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, true);
    s_broker_start(&b);
    bus_publisher_t *pub = bus_publisher_new(b.pub);
    /* Wait until the publisher's connection is up: the broker counts what it receives. */
    relay_client_t *c = relay_client_new(b.relay);
    char chat[ID_UUID_LEN + 1];
    char pid[ID_UUID_LEN + 1];
    s_uuid(chat);
    s_uuid(pid);
    int64_t sv = 0;
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    for (;;) {
        sv++;
        hint_update_t h = s_hint(chat, sv, pid, sv);
        (void)bus_publisher_update(pub, &h);
        wire_stats_t st;
        assert_int_equal(relay_client_stats(c, 2000, &st), 0);
        if (st.pub_in > 0) {
            break;
        }
        assert_true(id_now_ms() < deadline);
    }
    /* Stall the broker: the pipe fills to the high-water mark, then sends fail at once. */
    assert_int_equal(kill(b.pid, SIGSTOP), 0);
    bus_pub_counters_t c0;
    bus_publisher_counters(pub, &c0);
    const int attempts = 400000;
    int failed = 0;
    int64_t t0 = id_now_ms();
    for (int i = 0; i < attempts && failed < 1000; i++) {
        sv++;
        hint_update_t h = s_hint(chat, sv, pid, sv);
        if (bus_publisher_update(pub, &h) != 0) {
            failed++;
        }
    }
    int64_t took = id_now_ms() - t0;
    assert_int_equal(kill(b.pid, SIGCONT), 0);
    bus_pub_counters_t c1;
    bus_publisher_counters(pub, &c1);
    printf("# stalled broker: %lld sent, %lld dropped (counted) in %lld ms\n",
           (long long)(c1.sent - c0.sent), (long long)(c1.dropped - c0.dropped), (long long)took);
    assert_int_equal(failed, 1000);
    assert_int_equal(c1.dropped - c0.dropped, failed);
    assert_true(c1.sent - c0.sent >= BUS_PUB_SNDHWM / 2);
    assert_int_equal(c1.invalid, 0);
    relay_client_destroy(&c);
    bus_publisher_destroy(&pub);
    s_broker_fini(&b);
}

/* ------------------------------------------------------------------------------------------
 * Relay.
 */

typedef struct {
    const char *name;
    int calls;
} s_handler_ctx_t;

/* Serves three parts per episode whose text names the worker; closed after seq 3. */
static int s_handler(void *ctx, const wire_request_t *req, wire_reply_t *reply) {
    s_handler_ctx_t *h = ctx;
    h->calls++;
    if (req->episode.generation_attempt == 99) {
        reply->status = WIRE_STATUS_NO_EPISODE;
        return 0;
    }
    for (int64_t seq = req->episode.after_seq + 1; seq <= 3; seq++) {
        if ((int64_t)reply->nparts >= req->max_parts) {
            reply->more = true;
            break;
        }
        char json[128];
        int n = snprintf(json, sizeof json, "{\"worker\":\"%s\",\"seq\":%lld}", h->name,
                         (long long)seq);
        assert_int_equal(wire_reply_add(reply, seq, "assistant", json, (size_t)n), 0);
    }
    reply->closed = true;
    return 0;
}

static wire_select_t s_episode(const char *chat, int64_t after) {
    wire_select_t e = {.history_version = 4, .generation_attempt = 2, .after_seq = after};
    snprintf(e.chat_id, sizeof e.chat_id, "%s", chat);
    return e;
}

/* Fetches from worker_id until it answers "ok" (registered and reachable) or the deadline.
 * Each attempt is a full round trip through the broker, which paces the loop. */
static void s_wait_reachable(relay_client_t *c, const char *worker_id, const char *chat,
                             int64_t bound_ms) {
    int64_t deadline = id_now_ms() + bound_ms;
    for (;;) {
        wire_select_t ep = s_episode(chat, 3); /* nothing after 3: an empty "ok" answer */
        wire_msg_t r;
        if (relay_client_fetch(c, worker_id, &ep, 1, 200, &r) == 0) {
            wire_status_t st = r.u.reply.status;
            wire_msg_clear(&r);
            if (st == WIRE_STATUS_OK) {
                return;
            }
            assert_int_equal(st, WIRE_STATUS_NO_SUCH_WORKER);
        }
        assert_true(id_now_ms() < deadline);
    }
}

/* A raw DEALER on the relay, as a bystander or a misbehaving worker. */
static zsock_t *s_raw_dealer(const char *endpoint) {
    zsock_t *d = zsock_new(ZMQ_DEALER);
    assert_non_null(d);
    zsock_set_linger(d, 0);
    assert_int_equal(zsock_connect(d, "%s", endpoint), 0);
    return d;
}

static void s_raw_send(zsock_t *d, const wire_msg_t *m) {
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(m, &data, &size), 0);
    zmsg_t *msg = zmsg_new();
    zmsg_addmem(msg, "", 0);
    zmsg_addmem(msg, data, size);
    assert_int_equal(zmsg_send(&msg, d), 0);
    free(data);
}

/* Receives one [route][body] within wait_ms and decodes it; 1 decoded, 0 nothing. */
static int s_raw_recv(zsock_t *d, wire_msg_t *out, int wait_ms) {
    zpoller_t *p = zpoller_new(d, NULL);
    void *which = zpoller_wait(p, wait_ms);
    zpoller_destroy(&p);
    if (!which) {
        return 0;
    }
    zmsg_t *msg = zmsg_recv(d);
    assert_non_null(msg);
    assert_int_equal(zmsg_size(msg), 2);
    zframe_t *route = zmsg_pop(msg);
    zframe_t *body = zmsg_pop(msg);
    assert_int_equal(wire_decode(zframe_data(body), zframe_size(body), out, NULL, 0), 0);
    zframe_destroy(&route);
    zframe_destroy(&body);
    zmsg_destroy(&msg);
    return 1;
}

static void test_relay_request_reaches_only_the_addressed_worker(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, true);
    s_broker_start(&b);
    char xid[ID_UUID_LEN + 1];
    char yid[ID_UUID_LEN + 1];
    char chat[ID_UUID_LEN + 1];
    s_uuid(xid);
    s_uuid(yid);
    s_uuid(chat);
    s_handler_ctx_t hx = {"X", 0};
    s_handler_ctx_t hy = {"Y", 0};
    relay_worker_t *x = relay_worker_new(b.relay, xid, 100, s_handler, &hx);
    relay_worker_t *y = relay_worker_new(b.relay, yid, 100, s_handler, &hy);
    assert_non_null(x);
    assert_non_null(y);
    relay_client_t *c1 = relay_client_new(b.relay);
    relay_client_t *c2 = relay_client_new(b.relay);
    s_wait_reachable(c1, xid, chat, S_START_DEADLINE_MS);
    s_wait_reachable(c1, yid, chat, S_START_DEADLINE_MS);
    hx.calls = 0;
    hy.calls = 0;
    /* A bystander client, connected (it got its own answer), must receive nothing else. */
    zsock_t *bystander = s_raw_dealer(b.relay);
    wire_msg_t q = {.type = WIRE_STATS_REQUEST};
    s_raw_send(bystander, &q);
    wire_msg_t st;
    assert_int_equal(s_raw_recv(bystander, &st, S_START_DEADLINE_MS), 1);
    assert_int_equal(st.type, WIRE_STATS);

    wire_select_t ep = s_episode(chat, 0);
    wire_msg_t r;
    assert_int_equal(relay_client_fetch(c1, xid, &ep, PROTO_REPLY_MAX_PARTS, 2000, &r), 0);
    assert_int_equal(r.u.reply.status, WIRE_STATUS_OK);
    assert_string_equal(r.u.reply.worker_id, xid);
    assert_int_equal(r.u.reply.nparts, 3);
    assert_true(r.u.reply.closed);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(r.u.reply.parts[i].seq, (int64_t)i + 1);
        assert_non_null(strstr(r.u.reply.parts[i].part.text, "\"worker\":\"X\""));
    }
    assert_string_equal(r.u.reply.episode.chat_id, chat);
    wire_msg_clear(&r);
    assert_int_equal(hx.calls, 1);
    assert_int_equal(hy.calls, 0);

    /* Paging: after seq 1, at most one part, more=true. */
    ep = s_episode(chat, 1);
    assert_int_equal(relay_client_fetch(c2, yid, &ep, 1, 2000, &r), 0);
    assert_int_equal(r.u.reply.nparts, 1);
    assert_int_equal(r.u.reply.parts[0].seq, 2);
    assert_true(r.u.reply.more);
    assert_non_null(strstr(r.u.reply.parts[0].part.text, "\"worker\":\"Y\""));
    wire_msg_clear(&r);
    assert_int_equal(hx.calls, 1);
    assert_int_equal(hy.calls, 1);

    /* A missing episode is an answer, not an error. */
    ep = s_episode(chat, 0);
    ep.generation_attempt = 99;
    assert_int_equal(relay_client_fetch(c1, xid, &ep, 10, 2000, &r), 0);
    assert_int_equal(r.u.reply.status, WIRE_STATUS_NO_EPISODE);
    assert_int_equal(r.u.reply.nparts, 0);
    wire_msg_clear(&r);

    /* The replies went to their requesters only. */
    wire_msg_t stray;
    assert_int_equal(s_raw_recv(bystander, &stray, 50), 0);
    zsock_destroy(&bystander);

    relay_client_destroy(&c1);
    relay_client_destroy(&c2);
    relay_worker_destroy(&x);
    relay_worker_destroy(&y);
    s_broker_fini(&b);
}

static void test_relay_unknown_worker_is_answered_promptly(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, false);
    s_broker_start(&b);
    relay_client_t *c = relay_client_new(b.relay);
    char nobody[ID_UUID_LEN + 1];
    char chat[ID_UUID_LEN + 1];
    s_uuid(nobody);
    s_uuid(chat);
    wire_select_t ep = s_episode(chat, 0);
    for (int i = 0; i < 20; i++) {
        int64_t t0 = id_now_ms();
        wire_msg_t r;
        assert_int_equal(relay_client_fetch(c, nobody, &ep, 10, 2000, &r), 0);
        int64_t took = id_now_ms() - t0;
        assert_int_equal(r.u.reply.status, WIRE_STATUS_NO_SUCH_WORKER);
        assert_string_equal(r.u.reply.worker_id, nobody);
        assert_int_equal(r.u.reply.nparts, 0);
        assert_true(took < S_NO_WORKER_BOUND_MS);
        wire_msg_clear(&r);
    }
    relay_client_destroy(&c);
    s_broker_fini(&b);
}

static void test_relay_dead_worker_is_forgotten_and_answered_promptly(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, true);
    s_broker_start(&b);
    relay_client_t *c = relay_client_new(b.relay);
    char chat[ID_UUID_LEN + 1];
    s_uuid(chat);

    /* 1. A worker whose process ends: its connection closes, and the next request to it is
     *    answered "no_such_worker" at once (the broker cannot route to it any more). */
    char zid[ID_UUID_LEN + 1];
    s_uuid(zid);
    s_handler_ctx_t hz = {"Z", 0};
    relay_worker_t *z = relay_worker_new(b.relay, zid, 100, s_handler, &hz);
    s_wait_reachable(c, zid, chat, S_START_DEADLINE_MS);
    relay_worker_destroy(&z);
    int64_t t0 = id_now_ms();
    int64_t bound = 100 * PROTO_WORKER_LIVENESS + S_NO_WORKER_BOUND_MS;
    for (;;) {
        wire_select_t ep = s_episode(chat, 0);
        wire_msg_t r;
        int rc = relay_client_fetch(c, zid, &ep, 10, 200, &r);
        wire_status_t st = rc == 0 ? r.u.reply.status : WIRE_STATUS_OK;
        wire_msg_clear(&r);
        if (rc == 0 && st == WIRE_STATUS_NO_SUCH_WORKER) {
            break;
        }
        assert_true(id_now_ms() - t0 < bound);
    }
    printf("# closed worker answered no_such_worker after %lld ms\n",
           (long long)(id_now_ms() - t0));

    /* 2. A worker that hangs: registered, connection open, but silent. After
     *    PROTO_WORKER_LIVENESS missed beats it is forgotten. */
    char hid[ID_UUID_LEN + 1];
    s_uuid(hid);
    zsock_t *hung = s_raw_dealer(b.relay);
    wire_msg_t reg = {.type = WIRE_REGISTER};
    snprintf(reg.u.worker.worker_id, sizeof reg.u.worker.worker_id, "%s", hid);
    reg.u.worker.heartbeat_ms = 100;
    s_raw_send(hung, &reg);
    wire_msg_t ack;
    assert_int_equal(s_raw_recv(hung, &ack, S_START_DEADLINE_MS), 1);
    assert_int_equal(ack.type, WIRE_REGISTERED);
    int64_t registered_at = id_now_ms();
    /* While it is live, requests are forwarded to it (and go unanswered: the client's own
     * deadline bounds the wait). */
    wire_select_t ep = s_episode(chat, 0);
    wire_msg_t r;
    int64_t expired_at = 0;
    for (;;) {
        int rc = relay_client_fetch(c, hid, &ep, 10, 50, &r);
        if (rc == 0) {
            assert_int_equal(r.u.reply.status, WIRE_STATUS_NO_SUCH_WORKER);
            wire_msg_clear(&r);
            expired_at = id_now_ms();
            break;
        }
        assert_true(id_now_ms() - registered_at < 100 * PROTO_WORKER_LIVENESS + 1000);
    }
    int64_t silent = expired_at - registered_at;
    printf("# silent worker forgotten after %lld ms (liveness %d ms)\n", (long long)silent,
           100 * PROTO_WORKER_LIVENESS);
    assert_true(silent >= 100 * PROTO_WORKER_LIVENESS - 10);
    /* The hung worker did receive the requests made while it was live. */
    wire_msg_t fwd;
    assert_int_equal(s_raw_recv(hung, &fwd, 100), 1);
    assert_int_equal(fwd.type, WIRE_RELAY_REQUEST);
    assert_string_equal(fwd.u.request.worker_id, hid);
    zsock_destroy(&hung);

    relay_client_destroy(&c);
    s_broker_fini(&b);
}

static void test_relay_worker_reregisters_after_broker_restart(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, false);
    s_broker_start(&b);
    char wid[ID_UUID_LEN + 1];
    char chat[ID_UUID_LEN + 1];
    s_uuid(wid);
    s_uuid(chat);
    s_handler_ctx_t hw = {"W", 0};
    relay_worker_t *w = relay_worker_new(b.relay, wid, 50, s_handler, &hw);
    relay_client_t *c = relay_client_new(b.relay);
    s_wait_reachable(c, wid, chat, S_START_DEADLINE_MS);
    s_broker_kill(&b);
    /* While the broker is down a request fails within its own deadline. */
    wire_select_t ep = s_episode(chat, 0);
    wire_msg_t r;
    int64_t t0 = id_now_ms();
    assert_int_equal(relay_client_fetch(c, wid, &ep, 10, 100, &r), -1);
    assert_true(id_now_ms() - t0 < 100 + S_NO_WORKER_BOUND_MS);
    int64_t restarted = id_now_ms();
    s_broker_start(&b);
    s_wait_reachable(c, wid, chat, S_RESUME_BOUND_MS);
    printf("# worker reachable again %lld ms after the restart was issued\n",
           (long long)(id_now_ms() - restarted));
    int64_t regs = 0;
    int64_t served = 0;
    assert_int_equal(relay_worker_status(w, &regs, &served), 0);
    assert_true(regs >= 2);
    relay_client_destroy(&c);
    relay_worker_destroy(&w);
    s_broker_fini(&b);
}

/* Sends one message of n raw frames on a DEALER (the ROUTER adds the connection's route). */
static void s_raw_frames(zsock_t *d, const void *const *data, const size_t *size, int n) {
    zmsg_t *msg = zmsg_new();
    for (int i = 0; i < n; i++) {
        zmsg_addmem(msg, data[i], size[i]);
    }
    assert_int_equal(zmsg_send(&msg, d), 0);
}

/* Asks for the counters on d and expects the stats answer to be the next message there: so
 * everything d sent before was handled, and none of it was answered. */
static wire_stats_t s_raw_stats(zsock_t *d) {
    wire_msg_t q = {.type = WIRE_STATS_REQUEST};
    s_raw_send(d, &q);
    wire_msg_t st;
    assert_int_equal(s_raw_recv(d, &st, S_START_DEADLINE_MS), 1);
    assert_int_equal(st.type, WIRE_STATS);
    return st.u.stats;
}

static wire_msg_t s_worker_msg(wire_type_t type, const char *worker_id) {
    wire_msg_t m = {.type = type};
    snprintf(m.u.worker.worker_id, sizeof m.u.worker.worker_id, "%.*s", ID_UUID_LEN, worker_id);
    m.u.worker.heartbeat_ms = PROTO_HEARTBEAT_MAX_MS; /* nobody expires during the test */
    return m;
}

static void s_expect_registered(zsock_t *d, const char *worker_id) {
    wire_msg_t ack;
    assert_int_equal(s_raw_recv(d, &ack, S_START_DEADLINE_MS), 1);
    assert_int_equal(ack.type, WIRE_REGISTERED);
    assert_string_equal(ack.u.worker.worker_id, worker_id);
    assert_int_equal(ack.u.worker.heartbeat_ms, PROTO_HEARTBEAT_MAX_MS);
}

/* register / heartbeat: acknowledged when new or when a register; refused past the cap. */
static void s_pin_registrations(zsock_t *w, char ids[3][ID_UUID_LEN + 1]) {
    wire_stats_t s0 = s_raw_stats(w);
    wire_msg_t m = s_worker_msg(WIRE_REGISTER, ids[0]);
    s_raw_send(w, &m);
    s_expect_registered(w, ids[0]);
    m.type = WIRE_HEARTBEAT; /* from a known worker: not answered */
    s_raw_send(w, &m);
    m.type = WIRE_REGISTER; /* again: answered again */
    s_raw_send(w, &m);
    s_expect_registered(w, ids[0]);
    m = s_worker_msg(WIRE_HEARTBEAT, ids[1]); /* from an unknown worker: registers it */
    s_raw_send(w, &m);
    s_expect_registered(w, ids[1]);
    m = s_worker_msg(WIRE_REGISTER, ids[2]); /* past --max-workers 2: refused, unanswered */
    s_raw_send(w, &m);
    m.type = WIRE_HEARTBEAT;
    s_raw_send(w, &m);
    wire_stats_t s1 = s_raw_stats(w);
    assert_int_equal(s1.workers, 2);
    assert_int_equal(s1.refused - s0.refused, 2);
    assert_int_equal(s1.dropped, s0.dropped);
    assert_int_equal(s1.relay_in - s0.relay_in, 7);   /* six messages and the stats request */
    assert_int_equal(s1.relay_out - s0.relay_out, 4); /* three acks and the stats answer */
}

/* Receives the forwarded request on the worker's DEALER: [requester's route][body unchanged];
 * returns the route. */
static zframe_t *s_expect_forwarded(zsock_t *w, const char *body, size_t size) {
    zmsg_t *fwd = zmsg_recv(w);
    assert_non_null(fwd);
    assert_int_equal(zmsg_size(fwd), 2);
    zframe_t *route = zmsg_pop(fwd);
    zframe_t *got = zmsg_pop(fwd);
    assert_true(zframe_size(route) > 0);
    assert_int_equal(zframe_size(got), size);
    assert_memory_equal(zframe_data(got), body, size);
    zframe_destroy(&got);
    zmsg_destroy(&fwd);
    return route;
}

/* A relay_request is forwarded unchanged with the requester's route; the worker's reply
 * goes back on that route; a reply with no route or a gone route is dropped. */
static void s_pin_forwarding(zsock_t *w, zsock_t *g, const char *worker_id) {
    wire_stats_t s0 = s_raw_stats(w);
    wire_msg_t q = {.type = WIRE_RELAY_REQUEST, .u.request.max_parts = 5};
    s_uuid(q.u.request.request_id);
    s_uuid(q.u.request.episode.chat_id);
    snprintf(q.u.request.worker_id, sizeof q.u.request.worker_id, "%s", worker_id);
    char *body = NULL;
    size_t size = 0;
    assert_int_equal(wire_encode(&q, &body, &size), 0);
    s_raw_send(g, &q);
    zframe_t *route = s_expect_forwarded(w, body, size);
    free(body);
    wire_msg_t rep = {.type = WIRE_RELAY_REPLY, .u.reply.episode = q.u.request.episode};
    memcpy(rep.u.reply.request_id, q.u.request.request_id, sizeof rep.u.reply.request_id);
    memcpy(rep.u.reply.worker_id, q.u.request.worker_id, sizeof rep.u.reply.worker_id);
    rep.u.reply.status = WIRE_STATUS_NO_EPISODE;
    assert_int_equal(wire_encode(&rep, &body, &size), 0);
    const void *frames[] = {zframe_data(route), body};
    size_t sizes[] = {zframe_size(route), size};
    s_raw_frames(w, frames, sizes, 2);
    wire_msg_t back;
    assert_int_equal(s_raw_recv(g, &back, S_START_DEADLINE_MS), 1);
    assert_int_equal(back.type, WIRE_RELAY_REPLY);
    assert_string_equal(back.u.reply.request_id, q.u.request.request_id);
    assert_int_equal(back.u.reply.status, WIRE_STATUS_NO_EPISODE);
    wire_msg_clear(&back);
    frames[0] = "";
    sizes[0] = 0; /* no route */
    s_raw_frames(w, frames, sizes, 2);
    frames[0] = "gone";
    sizes[0] = 4; /* nobody has that route */
    s_raw_frames(w, frames, sizes, 2);
    wire_stats_t s1 = s_raw_stats(w);
    assert_int_equal(s1.dropped - s0.dropped, 2);
    assert_int_equal(s1.relay_in - s0.relay_in, 5);
    assert_int_equal(s1.relay_out - s0.relay_out, 3); /* forward, reply, stats answer */
    zframe_destroy(&route);
    free(body);
}

/* Bad layouts, a malformed body and types the broker does not take on the relay: dropped,
 * unanswered. A route frame at the bound is served. */
static void s_pin_drops(zsock_t *w, const char *worker_id) {
    wire_stats_t s0 = s_raw_stats(w);
    wire_msg_t m = s_worker_msg(WIRE_REGISTERED, worker_id);
    s_raw_send(w, &m);
    m = (wire_msg_t){.type = WIRE_STATS};
    s_raw_send(w, &m);
    char *body = NULL;
    size_t size = 0;
    m = (wire_msg_t){.type = WIRE_STATS_REQUEST};
    assert_int_equal(wire_encode(&m, &body, &size), 0);
    char long_route[PROTO_ROUTE_MAX_BYTES + 1];
    memset(long_route, 'r', sizeof long_route);
    const void *frames[] = {"", "", body};
    size_t sizes[] = {0, 0, size};
    s_raw_frames(w, &frames[2], &sizes[2], 1); /* one frame */
    s_raw_frames(w, frames, sizes, 3);         /* three frames */
    frames[1] = "\xc1";
    sizes[1] = 1;
    s_raw_frames(w, frames, sizes, 2); /* not msgpack */
    frames[1] = long_route;
    sizes[1] = sizeof long_route;
    s_raw_frames(w, &frames[1], &sizes[1], 2); /* a route over PROTO_ROUTE_MAX_BYTES */
    sizes[1] = PROTO_ROUTE_MAX_BYTES;          /* at the bound: answered on the sender's route */
    s_raw_frames(w, &frames[1], &sizes[1], 2);
    wire_msg_t st;
    assert_int_equal(s_raw_recv(w, &st, S_START_DEADLINE_MS), 1);
    assert_int_equal(st.type, WIRE_STATS);
    wire_stats_t s1 = s_raw_stats(w);
    assert_int_equal(s1.dropped - s0.dropped, 6);
    assert_int_equal(s1.relay_in - s0.relay_in, 8);
    assert_int_equal(s1.relay_out - s0.relay_out, 2);
    free(body);
}

/* Pins what the relay does with each message type and layout (README "Relay"), counted
 * exactly: answers, forwards, refusals and drops. */
static void test_relay_handles_each_message_type_as_specified(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, false);
    b.max_workers = "2";
    s_broker_start(&b);
    zsock_t *w = s_raw_dealer(b.relay);
    zsock_t *g = s_raw_dealer(b.relay);
    char ids[3][ID_UUID_LEN + 1];
    for (int i = 0; i < 3; i++) {
        s_uuid(ids[i]);
    }
    s_pin_registrations(w, ids);
    s_pin_forwarding(w, g, ids[0]);
    s_pin_drops(w, ids[0]);
    zsock_destroy(&g);
    zsock_destroy(&w);
    s_broker_fini(&b);
}

static void test_broker_counts_messages_and_drops_malformed(void **state) {
    (void)state;
    s_broker_t b;
    s_broker_init(&b, false);
    s_broker_start(&b);
    relay_client_t *c = relay_client_new(b.relay);
    wire_stats_t s0;
    assert_int_equal(relay_client_stats(c, 2000, &s0), 0);
    /* Garbage on the relay and a publisher sending one frame instead of two. */
    zsock_t *raw = s_raw_dealer(b.relay);
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, "");
    zmsg_addstr(m, "\xc1 not msgpack");
    assert_int_equal(zmsg_send(&m, raw), 0);
    zsock_t *pub = zsock_new(ZMQ_PUB);
    zsock_set_linger(pub, 0);
    assert_int_equal(zsock_connect(pub, "%s", b.pub), 0);
    /* The broker subscribes its XSUB to everything; send until it has counted one. */
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    wire_stats_t s1;
    for (;;) {
        zstr_send(pub, "chat:update:one-frame-only");
        assert_int_equal(relay_client_stats(c, 2000, &s1), 0);
        if (s1.pub_in > s0.pub_in && s1.dropped >= s0.dropped + 2) {
            break;
        }
        assert_true(id_now_ms() < deadline);
    }
    assert_true(s1.relay_in > s0.relay_in);
    assert_true(s1.relay_out > s0.relay_out);
    assert_int_equal(s1.pub_out, s0.pub_out);
    assert_true(s1.uptime_ms >= s0.uptime_ms);
    zsock_destroy(&pub);
    zsock_destroy(&raw);
    relay_client_destroy(&c);
    s_broker_fini(&b);
}

static void test_broker_exits_cleanly_on_sigterm_and_sigint(void **state) {
    (void)state;
    int sigs[] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        s_broker_t b;
        s_broker_init(&b, false);
        s_broker_start(&b);
        assert_int_equal(kill(b.pid, sigs[i]), 0);
        int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
        int status = 0;
        pid_t got = 0;
        zpoller_t *idle = zpoller_new(NULL);
        while ((got = waitpid(b.pid, &status, WNOHANG)) == 0) {
            assert_true(id_now_ms() < deadline);
            zpoller_wait(idle, 5); /* pacing between polls of the exit status */
        }
        zpoller_destroy(&idle);
        assert_int_equal(got, b.pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        b.pid = 0;
        s_broker_fini(&b);
    }
}

/* Starts a broker process on the three endpoints with its log discarded; returns its pid. */
static pid_t s_broker_spawn_quiet(const char *pub, const char *sub, const char *relay) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        proc_die_with_parent();
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        execl(s_broker_path(), "chatfleet-broker", "--pub", pub, "--sub", sub, "--relay", relay,
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void test_broker_refuses_to_start_on_an_unusable_endpoint(void **state) {
    (void)state;
    pid_t pid = s_broker_spawn_quiet("tcp://192.0.2.1:1", "ipc:///nonexistent-dir/sub",
                                     "ipc:///nonexistent-dir/relay");
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
}

/* Waits (polling, bounded) for pid to exit and returns its exit status. */
static int s_wait_exit(pid_t pid) {
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    int status = 0;
    pid_t got = 0;
    zpoller_t *idle = zpoller_new(NULL);
    while ((got = waitpid(pid, &status, WNOHANG)) == 0) {
        assert_true(id_now_ms() < deadline);
        zpoller_wait(idle, 5); /* pacing between polls of the exit status */
    }
    zpoller_destroy(&idle);
    assert_int_equal(got, pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_broker_process_exits_1_on_an_endpoint_already_bound(void **state) {
    (void)state;
    s_broker_t a;
    s_broker_init(&a, true);
    s_broker_start(&a);
    /* A second broker on the same endpoints cannot bind: it exits with 1 at once, and the
     * first one is undisturbed. */
    pid_t pid = s_broker_spawn_quiet(a.pub, a.sub, a.relay);
    assert_int_equal(s_wait_exit(pid), 1);
    relay_client_t *c = relay_client_new(a.relay);
    assert_non_null(c);
    wire_stats_t st;
    assert_int_equal(relay_client_stats(c, 1000, &st), 0);
    relay_client_destroy(&c);
    s_broker_fini(&a);
}

static void test_broker_new_is_null_on_a_bound_endpoint_and_releases_what_it_bound(void **state) {
    (void)state;
    s_broker_t a;
    s_broker_init(&a, true);
    broker_config_t ca = {a.pub, a.sub, a.relay, 1000, 0, 0, NULL, {0}};
    broker_t *first = broker_new(&ca);
    assert_non_null(first);
    /* The relay endpoint is taken: broker_new fails, and the two endpoints it did bind are
     * closed. libzmq lets go of a closed listener in its I/O thread, a moment later, so the
     * next broker binds them once that has happened (polled, bounded). */
    s_broker_t b;
    s_broker_init(&b, true);
    broker_config_t cb = {b.pub, b.sub, a.relay, 1000, 0, 0, NULL, {0}};
    assert_null(broker_new(&cb));
    cb.relay_endpoint = b.relay;
    broker_t *second = NULL;
    int64_t deadline = id_now_ms() + S_START_DEADLINE_MS;
    zpoller_t *idle = zpoller_new(NULL);
    while (!(second = broker_new(&cb))) {
        assert_true(id_now_ms() < deadline);
        zpoller_wait(idle, 20); /* pacing between attempts */
    }
    zpoller_destroy(&idle);
    /* Both answer: the failed start disturbed neither. */
    broker_t *both[] = {first, second};
    for (int i = 0; i < 2; i++) {
        zactor_t *actor = broker_actor(both[i]);
        assert_int_equal(zstr_send(actor, "STATS"), 0);
        uint64_t v[9];
        assert_int_equal(zsock_recv(actor, "888888888", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                                    &v[6], &v[7], &v[8]),
                         0);
    }
    broker_destroy(&second);
    broker_destroy(&first);
    assert_null(first);
    broker_destroy(&first); /* safe on NULL */
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    log_init("test_broker", getenv("CHATFLEET_LOG") ? getenv("CHATFLEET_LOG") : "warn");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_publishers_three_subscribers_get_their_topics_in_order),
        cmocka_unit_test(test_broker_restart_resumes_delivery_within_1s_without_client_restart),
        cmocka_unit_test(test_watermark_discards_stale_and_duplicate_hints),
        cmocka_unit_test(test_live_parts_are_delivered_unwatermarked_and_bad_frames_counted),
        cmocka_unit_test(test_publisher_counts_drops_and_never_blocks_when_the_broker_stalls),
        cmocka_unit_test(test_relay_request_reaches_only_the_addressed_worker),
        cmocka_unit_test(test_relay_unknown_worker_is_answered_promptly),
        cmocka_unit_test(test_relay_dead_worker_is_forgotten_and_answered_promptly),
        cmocka_unit_test(test_relay_worker_reregisters_after_broker_restart),
        cmocka_unit_test(test_relay_handles_each_message_type_as_specified),
        cmocka_unit_test(test_broker_counts_messages_and_drops_malformed),
        cmocka_unit_test(test_broker_exits_cleanly_on_sigterm_and_sigint),
        cmocka_unit_test(test_broker_refuses_to_start_on_an_unusable_endpoint),
        cmocka_unit_test(test_broker_process_exits_1_on_an_endpoint_already_bound),
        cmocka_unit_test(test_broker_new_is_null_on_a_bound_endpoint_and_releases_what_it_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
