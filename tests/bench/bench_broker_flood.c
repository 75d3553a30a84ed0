/* bench_broker_flood: what a flood of worker registrations with random ids costs a real
 * chatfleet-broker (issue 16: 200,000 of them once grew the registry to 200,002 entries,
 * 42 -> 125 MB that were never returned, and wrote 200,000 log lines). Prints the broker's
 * resident memory (VmRSS before and after, VmHWM) and the size of its log, for a plain
 * broker and for one with CURVE where every registration comes from one admitted worker
 * key. Exits 1 when the registry grew past its cap or the log past LOG_MAX_LINES, so the
 * figures it prints are also checked.
 *
 *   bench_broker_flood [BROKER_PATH] [REGISTRATIONS]   (default 200000)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

#include <czmq.h>

#include "id.h"
#include "wire.h"

#define S_CAP         4096 /* the broker's default --max-workers */
#define LOG_MAX_LINES 1000 /* a flood must cost about one line per second, not one per message */

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

/* A field of /proc/PID/status in kB ("VmRSS", "VmHWM"), or -1. */
static long s_status_kb(pid_t pid, const char *field) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
        }
    }
    if (f) {
        fclose(f);
    }
    return v;
}

static void s_log_size(const char *path, long *bytes, long *lines) {
    FILE *f = fopen(path, "r");
    *bytes = 0;
    *lines = 0;
    int c;
    while (f && (c = fgetc(f)) != EOF) {
        (*bytes)++;
        *lines += c == '\n';
    }
    if (f) {
        fclose(f);
    }
}

/* Sends msg as [""][body]; blocking (back-pressure, not loss). */
static void s_send(void *h, const wire_msg_t *msg) {
    char *data = NULL;
    size_t size = 0;
    if (wire_encode(msg, &data, &size) != 0) {
        fprintf(stderr, "encode failed\n");
        exit(1);
    }
    zmq_send(h, "", 0, ZMQ_SNDMORE);
    zmq_send(h, data, size, 0);
    free(data);
}

/* Reads and discards what the broker sent back; returns 1 when a stats reply was among it
 * (copied to *st). */
static int s_drain(void *h, int timeout_ms, wire_stats_t *st) {
    int found = 0;
    zmq_pollitem_t it = {h, 0, ZMQ_POLLIN, 0};
    while (zmq_poll(&it, 1, found ? 0 : timeout_ms) > 0) {
        zmsg_t *m = zmsg_recv(h);
        if (!m) {
            break;
        }
        zframe_t *body = zmsg_last(m);
        wire_msg_t w;
        char why[128];
        if (body && wire_decode(zframe_data(body), zframe_size(body), &w, why, sizeof why) == 0) {
            if (w.type == WIRE_STATS) {
                *st = w.u.stats;
                found = 1;
            }
            wire_msg_clear(&w);
        }
        zmsg_destroy(&m);
        timeout_ms = 0;
    }
    return found;
}

typedef struct {
    const char *name;
    bool curve;
} s_mode_t;

static int s_run(const char *broker, const s_mode_t *mode, long count) {
    char relay[64];
    char pub[64];
    char sub[64];
    snprintf(relay, sizeof relay, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(pub, sizeof pub, "tcp://127.0.0.1:%d", s_free_port());
    snprintf(sub, sizeof sub, "tcp://127.0.0.1:%d", s_free_port());
    char dir[] = "/tmp/cfflood.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char log[128];
    char skey[128];
    char allow[128];
    snprintf(log, sizeof log, "%s/broker.log", dir);
    snprintf(skey, sizeof skey, "%s/broker.cert_secret", dir);
    snprintf(allow, sizeof allow, "%s/allow", dir);
    zsys_dir_create("%s", allow);
    zcert_t *server = zcert_new();
    zcert_t *client = zcert_new();
    zcert_set_meta(client, "role", "worker");
    char path[160];
    snprintf(path, sizeof path, "%s/broker.cert", dir);
    zcert_save(server, path);
    snprintf(path, sizeof path, "%s/worker.cert", allow);
    zcert_save_public(client, path);

    pid_t pid = fork();
    if (pid == 0) {
        FILE *out = freopen(log, "w", stderr);
        (void)out;
        dup2(2, 1);
        if (mode->curve) {
            execl(broker, "chatfleet-broker", "--pub", pub, "--sub", sub, "--relay", relay, "--log",
                  "info", "--curve-server-key", skey, "--curve-allow-dir", allow, (char *)NULL);
        } else {
            execl(broker, "chatfleet-broker", "--pub", pub, "--sub", sub, "--relay", relay, "--log",
                  "info", (char *)NULL);
        }
        _exit(127);
    }
    zclock_sleep(300);
    zsock_t *d = zsock_new(ZMQ_DEALER);
    void *h = zsock_resolve(d);
    int hwm = 0; /* unbounded on our side: the broker paces us through TCP */
    zmq_setsockopt(h, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (mode->curve) {
        zcert_apply(client, d);
        zsock_set_curve_serverkey(d, zcert_public_txt(server));
    }
    zsock_connect(d, "%s", relay);
    wire_stats_t st = {0};
    wire_msg_t q = {.type = WIRE_STATS_REQUEST};
    do {
        s_send(h, &q);
    } while (!s_drain(h, 200, &st));
    long rss0 = s_status_kb(pid, "VmRSS");
    long bytes0 = 0;
    long lines0 = 0;
    s_log_size(log, &bytes0, &lines0);
    int64_t t0 = zclock_mono();
    for (long i = 0; i < count; i++) {
        wire_msg_t m = {.type = WIRE_REGISTER};
        id_uuid_new(m.u.worker.worker_id);
        m.u.worker.heartbeat_ms = 60000; /* the longest liveness a worker may claim */
        s_send(h, &m);
        if (i % 1000 == 0) {
            s_drain(h, 0, &st);
        }
    }
    s_send(h, &q);
    while (!s_drain(h, 10000, &st)) {
        s_send(h, &q);
    }
    int64_t took = zclock_mono() - t0;
    zclock_sleep(1200); /* one more second of rate-limited logging */
    long rss1 = s_status_kb(pid, "VmRSS");
    long hwm_kb = s_status_kb(pid, "VmHWM");
    long bytes1 = 0;
    long lines1 = 0;
    s_log_size(log, &bytes1, &lines1);
    printf("%-6s %8ld registrations in %5lld ms: workers=%lld refused=%lld forbidden=%lld "
           "dropped=%lld | RSS %ld -> %ld kB (peak %ld kB) | log +%ld lines, +%ld bytes\n",
           mode->name, count, (long long)took, (long long)st.workers, (long long)st.refused,
           (long long)st.forbidden, (long long)st.dropped, rss0, rss1, hwm_kb, lines1 - lines0,
           bytes1 - bytes0);
    zsock_destroy(&d);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    zcert_destroy(&server);
    zcert_destroy(&client);
    zdir_t *z = zdir_new(dir, NULL);
    if (z) {
        zdir_remove(z, true);
        zdir_destroy(&z);
    }
    int bad =
        st.workers > S_CAP || lines1 - lines0 > LOG_MAX_LINES || st.workers + st.refused < count;
    if (bad) {
        printf("%-6s FAILED: the registry or the log was not bounded\n", mode->name);
    }
    return bad;
}

int main(int argc, char **argv) {
    char broker[1024];
    proc_build_path(argc > 1 ? argv[1] : NULL, "broker/chatfleet-broker", broker, sizeof broker);
    long count = argc > 2 ? strtol(argv[2], NULL, 10) : 200000;
    if (count <= 0) {
        count = 200000;
    }
    zsys_handler_set(NULL);
    s_mode_t modes[] = {{"plain", false}, {"curve", true}};
    int bad = 0;
    for (size_t i = 0; i < 2; i++) {
        bad |= s_run(broker, &modes[i], count);
    }
    return bad;
}
