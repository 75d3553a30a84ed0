/* chatfleet-broker: reads the configuration, starts the broker actor, and stops it cleanly on
 * SIGTERM or SIGINT; SIGUSR1 logs the counters. See broker/README.md. */
#include "broker.h"
#include "config.h"
#include "mem.h"
#include "protocol.h"

#include <czmq.h>

#include "log.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t s_stop = 0;
static volatile sig_atomic_t s_usr1 = 0;

static void s_on_signal(int sig) {
    if (sig == SIGUSR1) {
        s_usr1 = 1;
    } else {
        s_stop = 1;
    }
}

static void s_usage(FILE *out) {
    fprintf(out, "usage: chatfleet-broker [--pub ENDPOINT] [--sub ENDPOINT] [--relay ENDPOINT]\n"
                 "                        [--stats-interval-ms N] [--hwm N] [--log LEVEL]\n"
                 "Endpoints default to CHATFLEET_BROKER_PUB, _SUB and _RELAY.\n");
}

static int s_positive(const char *flag, const char *v, long long max, long long *out) {
    errno = 0;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (errno || !end || *end || n <= 0 || n > max) {
        fprintf(stderr, "chatfleet-broker: %s=%s is not a positive integer up to %lld\n", flag, v,
                max);
        return -1;
    }
    *out = n;
    return 0;
}

int main(int argc, char **argv) {
    config_t *cfg = config_new();
    if (!cfg) {
        return 2;
    }
    broker_config_t bc = {
        .pub_endpoint = cfg->broker_pub,
        .sub_endpoint = cfg->broker_sub,
        .relay_endpoint = cfg->broker_relay,
        .stats_interval_ms = BROKER_STATS_INTERVAL_MS,
        .hwm_msgs = BROKER_HWM_MSGS,
    };
    const char *level = cfg->log_level;
    /* Every option takes a value, so the options advance two at a time. */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n = 0;
        if (streq(a, "-h") || streq(a, "--help")) {
            s_usage(stdout);
            config_destroy(&cfg);
            return 0;
        } else if (!v) {
            s_usage(stderr);
            config_destroy(&cfg);
            return 2;
        } else if (streq(a, "--pub")) {
            bc.pub_endpoint = v;
        } else if (streq(a, "--sub")) {
            bc.sub_endpoint = v;
        } else if (streq(a, "--relay")) {
            bc.relay_endpoint = v;
        } else if (streq(a, "--log")) {
            level = v;
        } else if (streq(a, "--stats-interval-ms")) {
            if (s_positive(a, v, 86400000LL, &n) != 0) {
                config_destroy(&cfg);
                return 2;
            }
            bc.stats_interval_ms = n;
        } else if (streq(a, "--hwm")) {
            if (s_positive(a, v, 10000000LL, &n) != 0) {
                config_destroy(&cfg);
                return 2;
            }
            bc.hwm_msgs = (int)n;
        } else {
            s_usage(stderr);
            config_destroy(&cfg);
            return 2;
        }
    }
    if (log_init("broker", level) != 0) {
        fprintf(stderr, "chatfleet-broker: unknown log level %s\n", level);
    }
    log_info("broker_config",
             "pub=%s sub=%s relay=%s stats_interval_ms=%lld hwm=%d max_msg_bytes=%d "
             "worker_liveness=%d",
             bc.pub_endpoint, bc.sub_endpoint, bc.relay_endpoint, (long long)bc.stats_interval_ms,
             bc.hwm_msgs, PROTO_MSG_MAX_BYTES, PROTO_WORKER_LIVENESS);

    /* CZMQ's own handler would only set zsys_interrupted; ours also covers SIGUSR1 and
     * leaves the actor running until it is told to stop, so shutdown is one orderly path. */
    zsys_handler_set(NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);

    broker_t *b = broker_new(&bc);
    if (!b) {
        log_error("broker_start_failed", "reason=bind");
        config_destroy(&cfg);
        return 1;
    }
    zactor_t *broker = broker_actor(b);
    zpoller_t *poller = zpoller_new(broker, NULL);
    ASSERT(poller);
    int status = 0;
    while (!s_stop) {
        void *which = zpoller_wait(poller, 200);
        if (which == broker) {
            /* The actor only speaks when asked; anything unprompted means it has exited. */
            zmsg_t *m = zmsg_recv(broker);
            if (!m) {
                status = 1;
                break;
            }
            zmsg_destroy(&m);
        }
        if (s_usr1) {
            s_usr1 = 0;
            zstr_send(broker, "LOG");
        }
    }
    log_info("broker_shutdown", "signal=%d", (int)s_stop);
    zpoller_destroy(&poller);
    broker_destroy(&b);
    config_destroy(&cfg);
    return status;
}
