/* bench_broker: hints per second and publish->receive latency (p50, p99) through a real
 * chatfleet-broker, next to a direct PUB->SUB link measured in the same run; the ratios are
 * the broker's overhead. Prints figures; never fails a build.
 *
 *   bench_broker [BROKER_PATH] [MESSAGES]
 *
 * BROKER_PATH defaults to $CHATFLEET_BUILD_DIR/broker/chatfleet-broker, else
 * ../broker/chatfleet-broker beside this program. Both paths use loopback TCP on ports
 * picked free at run time, one publisher and one subscriber, frames [topic][payload] as the
 * bus sends them (payload sizes 64 B and 1 KiB). Throughput: the publisher sends MESSAGES
 * as fast as the pipe accepts (ZMQ_XPUB_NODROP, blocking: back-pressure instead of loss on
 * the first hop); the figure is messages received per second, with any loss reported.
 * Latency: one message in flight at a time, timestamped with the monotonic clock.
 *
 * A second broker runs with CURVE (ARCHITECTURE.md §9 "Trust": a server key, an allow
 * directory holding the publisher's and subscriber's certificates, made for the run in a
 * temporary directory); its rows and the curve / plain-broker ratios come from the same
 * run, so the cost of CURVE is read against the same machine state. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

#include <czmq.h>

#define S_TOPIC          "chat:update:0f8fad5b-d9cb-469f-a165-70867728950e"
#define S_LAT_SAMPLES    20000
#define S_IDLE_END_MS    500 /* throughput run ends when nothing arrives for this long */
#define S_READY_DEADLINE 5000

static int64_t s_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int s_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        return -1;
    }
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

typedef struct {
    void *pub;
    void *sub;
} s_link_t;

static void s_opts(void *s) {
    int zero = 0;
    int hwm = 100000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
}

static int s_send(void *pub, const char *payload, size_t size) {
    if (zmq_send(pub, S_TOPIC, strlen(S_TOPIC), ZMQ_SNDMORE) < 0) {
        return -1;
    }
    return zmq_send(pub, payload, size, 0) < 0 ? -1 : 0;
}

/* Receives one [topic][payload] within timeout_ms into buf (at most cap bytes). Returns the
 * payload size, or -1 on timeout. */
static int s_recv(void *sub, char *buf, size_t cap, int timeout_ms) {
    zmq_pollitem_t it = {sub, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) {
        return -1;
    }
    char topic[128];
    if (zmq_recv(sub, topic, sizeof topic, 0) < 0) {
        return -1;
    }
    int n = zmq_recv(sub, buf, cap, 0);
    return n;
}

/* Sends probes until one arrives, so that subscription and connections are up. */
static int s_ready(s_link_t *l, char *buf, size_t size) {
    int64_t deadline = s_now_ns() + (int64_t)S_READY_DEADLINE * 1000000;
    while (s_now_ns() < deadline) {
        s_send(l->pub, buf, size);
        if (s_recv(l->sub, buf, size, 10) >= 0) {
            /* Drain what else is in flight. */
            while (s_recv(l->sub, buf, size, 50) >= 0) {
            }
            return 0;
        }
    }
    return -1;
}

static int s_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double msgs_per_s;
    long lost;
    double p50_us;
    double p99_us;
} s_result_t;

static void s_measure(s_link_t *l, size_t size, long messages, s_result_t *r) {
    char *buf = calloc(1, size);
    char *in = calloc(1, size);
    memset(buf, 'x', size);
    if (s_ready(l, buf, size) != 0) {
        fprintf(stderr, "bench_broker: path never became ready\n");
        exit(1);
    }
    /* Throughput. */
    int64_t t0 = s_now_ns();
    long got = 0;
    int64_t last = t0;
    for (long i = 0; i < messages; i++) {
        s_send(l->pub, buf, size);
        while (s_recv(l->sub, in, size, 0) >= 0) {
            got++;
            last = s_now_ns();
        }
    }
    while (s_recv(l->sub, in, size, S_IDLE_END_MS) >= 0) {
        got++;
        last = s_now_ns();
    }
    r->msgs_per_s = (double)got / ((double)(last - t0) / 1e9);
    r->lost = messages - got;
    /* Latency, one in flight. */
    int64_t *lat = calloc(S_LAT_SAMPLES, sizeof *lat);
    int n = 0;
    for (int i = 0; i < S_LAT_SAMPLES; i++) {
        int64_t sent = s_now_ns();
        memcpy(buf, &sent, sizeof sent);
        s_send(l->pub, buf, size);
        if (s_recv(l->sub, in, size, 1000) >= (int)sizeof sent) {
            int64_t when;
            memcpy(&when, in, sizeof when);
            if (when == sent) {
                lat[n++] = s_now_ns() - sent;
            }
        }
    }
    qsort(lat, (size_t)n, sizeof *lat, s_cmp);
    r->p50_us = n ? (double)lat[n / 2] / 1000.0 : -1;
    r->p99_us = n ? (double)lat[(n * 99) / 100] / 1000.0 : -1;
    free(lat);
    free(buf);
    free(in);
}

/* CURVE keys of the run: the broker's, and the clients' (one certificate each). */
typedef struct {
    char dir[64];
    zcert_t *broker;
    zcert_t *pub;
    zcert_t *sub;
} s_keys_t;

static void s_keys_make(s_keys_t *k) {
    snprintf(k->dir, sizeof k->dir, "/tmp/cfbench-curve.XXXXXX");
    if (!mkdtemp(k->dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/allow", k->dir);
    zsys_dir_create("%s", path);
    k->broker = zcert_new();
    k->pub = zcert_new();
    k->sub = zcert_new();
    zcert_set_meta(k->broker, "role", "broker");
    zcert_set_meta(k->pub, "role", "worker");
    zcert_set_meta(k->sub, "role", "gateway");
    snprintf(path, sizeof path, "%s/broker.cert", k->dir);
    zcert_save(k->broker, path);
    snprintf(path, sizeof path, "%s/allow/pub.cert", k->dir);
    zcert_save_public(k->pub, path);
    snprintf(path, sizeof path, "%s/allow/sub.cert", k->dir);
    zcert_save_public(k->sub, path);
}

static void s_keys_destroy(s_keys_t *k) {
    zcert_destroy(&k->broker);
    zcert_destroy(&k->pub);
    zcert_destroy(&k->sub);
    zdir_t *d = zdir_new(k->dir, NULL);
    if (d) {
        zdir_remove(d, true);
        zdir_destroy(&d);
    }
}

static void s_link_open(s_link_t *l, void *ctx, const char *pub_ep, const char *sub_ep, bool direct,
                        const s_keys_t *keys) {
    int one = 1;
    l->pub = zmq_socket(ctx, ZMQ_PUB);
    l->sub = zmq_socket(ctx, ZMQ_SUB);
    s_opts(l->pub);
    s_opts(l->sub);
    if (keys) {
        const char *server = zcert_public_txt(keys->broker);
        zmq_setsockopt(l->pub, ZMQ_CURVE_SERVERKEY, server, 40);
        zmq_setsockopt(l->pub, ZMQ_CURVE_PUBLICKEY, zcert_public_txt(keys->pub), 40);
        zmq_setsockopt(l->pub, ZMQ_CURVE_SECRETKEY, zcert_secret_txt(keys->pub), 40);
        zmq_setsockopt(l->sub, ZMQ_CURVE_SERVERKEY, server, 40);
        zmq_setsockopt(l->sub, ZMQ_CURVE_PUBLICKEY, zcert_public_txt(keys->sub), 40);
        zmq_setsockopt(l->sub, ZMQ_CURVE_SECRETKEY, zcert_secret_txt(keys->sub), 40);
    }
    zmq_setsockopt(l->pub, ZMQ_XPUB_NODROP, &one, sizeof one);
    zmq_setsockopt(l->sub, ZMQ_SUBSCRIBE, "chat:", 5);
    if (direct) {
        zmq_bind(l->pub, pub_ep);
    } else {
        zmq_connect(l->pub, pub_ep);
    }
    zmq_connect(l->sub, sub_ep);
}

static void s_link_close(s_link_t *l) {
    zmq_close(l->pub);
    zmq_close(l->sub);
}

int main(int argc, char **argv) {
    char broker[1024];
    proc_build_path(argc > 1 ? argv[1] : NULL, "broker/chatfleet-broker", broker, sizeof broker);
    long messages = argc > 2 ? strtol(argv[2], NULL, 10) : 200000;
    if (messages <= 0) {
        messages = 200000;
    }
    char pub_ep[64];
    char sub_ep[64];
    char relay_ep[64];
    char direct_ep[64];
    char cpub_ep[64];
    char csub_ep[64];
    char crelay_ep[64];
    snprintf(cpub_ep, sizeof cpub_ep, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(csub_ep, sizeof csub_ep, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(crelay_ep, sizeof crelay_ep, "tcp://127.0.0.1:%d", s_free_port());
    s_keys_t keys;
    s_keys_make(&keys);
    char skey[128];
    char allow[128];
    snprintf(skey, sizeof skey, "%s/broker.cert_secret", keys.dir);
    snprintf(allow, sizeof allow, "%s/allow", keys.dir);
    snprintf(pub_ep, sizeof pub_ep, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(sub_ep, sizeof sub_ep, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(relay_ep, sizeof relay_ep, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(direct_ep, sizeof direct_ep, "tcp://127.0.0.1:%d", s_free_port());

    pid_t pid = fork();
    if (pid == 0) {
        execl(broker, "chatfleet-broker", "--pub", pub_ep, "--sub", sub_ep, "--relay", relay_ep,
              "--hwm", "100000", "--log", "warn", (char *)NULL);
        perror("exec chatfleet-broker");
        _exit(127);
    }
    pid_t cpid = fork();
    if (cpid == 0) {
        execl(broker, "chatfleet-broker", "--pub", cpub_ep, "--sub", csub_ep, "--relay", crelay_ep,
              "--hwm", "100000", "--log", "warn", "--curve-server-key", skey, "--curve-allow-dir",
              allow, (char *)NULL);
        perror("exec chatfleet-broker");
        _exit(127);
    }
    void *ctx = zmq_ctx_new();
    size_t sizes[] = {64, 1024};
    printf("bench_broker: %ld messages per throughput run, %d latency samples, loopback TCP\n",
           messages, S_LAT_SAMPLES);
    printf("%-6s %-7s %12s %8s %10s %10s\n", "size", "path", "msgs/s", "lost", "p50_us", "p99_us");
    for (size_t i = 0; i < 2; i++) {
        s_result_t direct;
        s_result_t via;
        s_result_t curve;
        s_link_t l;
        s_link_open(&l, ctx, direct_ep, direct_ep, true, NULL);
        s_measure(&l, sizes[i], messages, &direct);
        s_link_close(&l);
        s_link_open(&l, ctx, pub_ep, sub_ep, false, NULL);
        s_measure(&l, sizes[i], messages, &via);
        s_link_close(&l);
        s_link_open(&l, ctx, cpub_ep, csub_ep, false, &keys);
        s_measure(&l, sizes[i], messages, &curve);
        s_link_close(&l);
        printf("%-6zu %-7s %12.0f %8ld %10.1f %10.1f\n", sizes[i], "direct", direct.msgs_per_s,
               direct.lost, direct.p50_us, direct.p99_us);
        printf("%-6zu %-7s %12.0f %8ld %10.1f %10.1f\n", sizes[i], "broker", via.msgs_per_s,
               via.lost, via.p50_us, via.p99_us);
        printf("%-6zu %-7s %12.2f %8s %10.2f %10.2f   (broker / direct)\n", sizes[i], "ratio",
               via.msgs_per_s / direct.msgs_per_s, "", via.p50_us / direct.p50_us,
               via.p99_us / direct.p99_us);
        printf("%-6zu %-7s %12.0f %8ld %10.1f %10.1f\n", sizes[i], "curve", curve.msgs_per_s,
               curve.lost, curve.p50_us, curve.p99_us);
        printf("%-6zu %-7s %12.2f %8s %10.2f %10.2f   (curve broker / plain broker)\n", sizes[i],
               "ratio", curve.msgs_per_s / via.msgs_per_s, "", curve.p50_us / via.p50_us,
               curve.p99_us / via.p99_us);
    }
    zmq_ctx_term(ctx);
    kill(pid, SIGTERM);
    kill(cpid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    waitpid(cpid, &status, 0);
    s_keys_destroy(&keys);
    return 0;
}
