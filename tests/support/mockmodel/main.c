/*
 * chatfleet-mockmodel: the evented mock model server (mockmodel.h) as a process, for benches
 * and tests. Prints "listening port=N" on stdout once it listens; logs logfmt on stderr.
 *
 *   chatfleet-mockmodel [--listen HOST:PORT] [--duration-ms MS] [--chunks N] [--stall]
 *                       [--max-request-bytes N] [--verbose]
 *
 * SIGINT or SIGTERM stops it (exit 0). It raises its descriptor limit to the hard limit at
 * start: every concurrent stream costs one descriptor here and one in the client.
 */
#include "log.h"
#include "mockmodel.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

static void s_usage(FILE *to) {
    fprintf(to, "usage: chatfleet-mockmodel [--listen HOST:PORT] [--duration-ms MS] [--chunks N]\n"
                "                           [--stall] [--max-request-bytes N] [--verbose]\n"
                "  --listen HOST:PORT      IPv4 address to listen on; port 0 picks a free one\n"
                "                          (default 127.0.0.1:0); prints \"listening port=N\"\n"
                "  --duration-ms MS        each reply streams over MS (default 20000)\n"
                "  --chunks N              text deltas per reply (default 20)\n"
                "  --stall                 read every chat request and never answer it\n"
                "  --max-request-bytes N   headers plus body of one request (default 4194304)\n"
                "  --verbose               one log line per reply too\n"
                "Per request: [mock:duration MS] [mock:chunks N] [mock:stall] in the last user\n"
                "message, or the headers x-mock-duration-ms, x-mock-chunks, x-mock-stall: 1.\n"
                "GET /stats: the counters as JSON.\n");
}

static int s_num(const char *opt, const char *v, long long min, long long max, long long *out) {
    char *end = NULL;
    errno = 0;
    long long n = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || !end || *end || end == v || n < min || n > max) {
        fprintf(stderr, "chatfleet-mockmodel: %s wants an integer in %lld..%lld\n", opt, min, max);
        return -1;
    }
    *out = n;
    return 0;
}

/* Raises the soft descriptor limit to the hard one; returns the soft limit now in force. */
static long long s_raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return -1;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            (void)getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    return (long long)rl.rlim_cur;
}

int main(int argc, char **argv) {
    mockmodel_config_t cfg = {.listen = "127.0.0.1:0",
                              .duration_ms = 20000,
                              .chunks = 20,
                              .max_request_bytes = 4 * 1024 * 1024};
    log_init("mockmodel", getenv("CHATFLEET_LOG"));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n = 0;
        if (!strcmp(a, "--listen") && v) {
            cfg.listen = v;
            i++;
        } else if (!strcmp(a, "--duration-ms")) {
            if (s_num(a, v, 0, MOCKMODEL_DURATION_MAX_MS, &n) != 0) {
                return 2;
            }
            cfg.duration_ms = n;
            i++;
        } else if (!strcmp(a, "--chunks")) {
            if (s_num(a, v, 1, MOCKMODEL_CHUNKS_MAX, &n) != 0) {
                return 2;
            }
            cfg.chunks = (int)n;
            i++;
        } else if (!strcmp(a, "--max-request-bytes")) {
            if (s_num(a, v, MOCKMODEL_HEADER_MAX_BYTES + 1, 1LL << 30, &n) != 0) {
                return 2;
            }
            cfg.max_request_bytes = (size_t)n;
            i++;
        } else if (!strcmp(a, "--stall")) {
            cfg.stall = true;
        } else if (!strcmp(a, "--verbose")) {
            cfg.verbose = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "chatfleet-mockmodel: unknown or incomplete option %s\n", a);
            s_usage(stderr);
            return 2;
        }
    }
    long long nofile = s_raise_nofile();
    /* The stop signals arrive through a signalfd in the loop; SIGPIPE is never wanted (every
     * send says MSG_NOSIGNAL, but stdout may be a closed pipe). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    signal(SIGPIPE, SIG_IGN);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
        return 1;
    }
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    mockmodel_t *server = sfd >= 0 ? mockmodel_new(&cfg) : NULL;
    if (!server) {
        return 1;
    }
    log_info("config",
             "listen=%s port=%d duration_ms=%lld chunks=%d stall=%s max_request_bytes=%zu "
             "verbose=%s nofile=%lld",
             cfg.listen, mockmodel_port(server), (long long)cfg.duration_ms, cfg.chunks,
             cfg.stall ? "true" : "false", cfg.max_request_bytes, cfg.verbose ? "true" : "false",
             nofile);
    printf("listening port=%d\n", mockmodel_port(server));
    fflush(stdout);
    int rc = mockmodel_run(server, sfd);
    mockmodel_destroy(&server);
    close(sfd);
    return rc == 0 ? 0 : 1;
}
