/* chatfleet-broker: reads the configuration, starts the broker actor, and stops it cleanly on
 * SIGTERM or SIGINT; SIGUSR1 logs the counters, SIGHUP re-reads the CURVE allow directory.
 * `chatfleet-broker keygen` makes CURVE certificates. See broker/README.md. */
#include "auth.h"
#include "broker.h"
#include "config.h"
#include "curve.h"
#include "mem.h"
#include "protocol.h"
#include "registry.h"
#include "sigs.h"

#include <czmq.h>

#include "log.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t s_stop = 0;
static volatile sig_atomic_t s_usr1 = 0;
static volatile sig_atomic_t s_hup = 0;

static void s_on_signal(int sig) {
    if (sig == SIGUSR1) {
        s_usr1 = 1;
    } else if (sig == SIGHUP) {
        s_hup = 1;
    } else {
        s_stop = 1;
    }
}

static void s_usage(FILE *out) {
    fprintf(out, "usage: chatfleet-broker [--pub ENDPOINT] [--sub ENDPOINT] [--relay ENDPOINT]\n"
                 "                        [--stats-interval-ms N] [--hwm N] [--log LEVEL]\n"
                 "                        [--max-workers N] [--handshake-ms N]\n"
                 "                        [--max-handshakes N] [--max-handshakes-per-addr N]\n"
                 "                        [--fd-reserve N]\n"
                 "                        [--curve-server-key FILE --curve-allow-dir DIR]\n"
                 "       chatfleet-broker keygen --role gateway|worker|broker NAME DIR\n"
                 "Endpoints default to CHATFLEET_BROKER_PUB, _SUB and _RELAY; the CURVE\n"
                 "settings to CHATFLEET_CURVE_SERVER_KEY and CHATFLEET_CURVE_ALLOW_DIR; the\n"
                 "handshake bounds to CHATFLEET_BROKER_HANDSHAKE_MS, _MAX_HANDSHAKES,\n"
                 "_MAX_HANDSHAKES_PER_ADDR and _FD_RESERVE.\n");
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

/* keygen --role ROLE NAME DIR: writes DIR/NAME.cert and DIR/NAME.cert_secret (0600). */
static int s_keygen(int argc, char **argv) {
    if (argc != 6 || !streq(argv[2], "--role")) {
        s_usage(stderr);
        return 2;
    }
    char err[512];
    if (curve_keygen(argv[3], argv[4], argv[5], err, sizeof err) != 0) {
        fprintf(stderr, "chatfleet-broker keygen: %s\n", err);
        return 1;
    }
    curve_key_t key;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.cert", argv[5], argv[4]);
    if (curve_key_read(path, false, &key, err, sizeof err) != 0) {
        fprintf(stderr, "chatfleet-broker keygen: %s\n", err);
        return 1;
    }
    printf("%s %s %s/%s.cert_secret\n", path, key.public_txt, argv[5], argv[4]);
    return 0;
}

static const char *s_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The guard setting flag (or its variable, with flag NULL) = v into *out. */
static int s_guard_setting(const char *name, const char *v, int *out) {
    long long n = 0;
    if (s_positive(name, v, 1000000LL, &n) != 0) {
        return -1;
    }
    *out = (int)n;
    return 0;
}

/* The guard's settings from the environment. Returns 0, or -1 on a bad value (reported). */
static int s_guard_env(guard_config_t *g) {
    struct {
        const char *name;
        int *field;
    } vars[] = {{GUARD_ENV_HANDSHAKE_MS, &g->handshake_ms},
                {GUARD_ENV_MAX_HANDSHAKE, &g->max_handshakes},
                {GUARD_ENV_MAX_PER_ADDR, &g->max_per_addr},
                {GUARD_ENV_FD_RESERVE, &g->fd_reserve}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = s_env(vars[i].name);
        if (v && s_guard_setting(vars[i].name, v, vars[i].field) != 0) {
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && streq(argv[1], "keygen")) {
        return s_keygen(argc, argv);
    }
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
        .max_workers = REGISTRY_MAX_WORKERS,
    };
    guard_config_t gc = {.handshake_ms = GUARD_HANDSHAKE_MS,
                         .max_handshakes = GUARD_MAX_HANDSHAKES,
                         .max_per_addr = GUARD_MAX_PER_ADDR,
                         .fd_reserve = GUARD_FD_RESERVE};
    if (s_guard_env(&gc) != 0) {
        config_destroy(&cfg);
        return 2;
    }
    const char *server_key = s_env(AUTH_ENV_SERVER_KEY);
    const char *allow_dir = s_env(AUTH_ENV_ALLOW_DIR);
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
        } else if (streq(a, "--max-workers")) {
            if (s_positive(a, v, 10000000LL, &n) != 0) {
                config_destroy(&cfg);
                return 2;
            }
            bc.max_workers = (size_t)n;
        } else if (streq(a, "--handshake-ms") || streq(a, "--max-handshakes") ||
                   streq(a, "--max-handshakes-per-addr") || streq(a, "--fd-reserve")) {
            int *field = streq(a, "--handshake-ms")     ? &gc.handshake_ms
                         : streq(a, "--max-handshakes") ? &gc.max_handshakes
                         : streq(a, "--fd-reserve")     ? &gc.fd_reserve
                                                        : &gc.max_per_addr;
            if (s_guard_setting(a, v, field) != 0) {
                config_destroy(&cfg);
                return 2;
            }
        } else if (streq(a, "--curve-server-key")) {
            server_key = v;
        } else if (streq(a, "--curve-allow-dir")) {
            allow_dir = v;
        } else {
            s_usage(stderr);
            config_destroy(&cfg);
            return 2;
        }
    }
    if (log_init("broker", level) != 0) {
        fprintf(stderr, "chatfleet-broker: unknown log level %s\n", level);
    }
    /* Every descriptor the hard limit allows: the guard keeps handshakes within a budget of
     * them and the rest for admitted peers (README "Hostile peers"). */
    long nofile = -1;
    long nofile_hard = -1;
    if (guard_raise_nofile(&nofile, &nofile_hard) != 0) {
        log_warn("broker_nofile_unknown", "error=\"%s\"", strerror(errno));
    }
    /* CURVE takes both settings; one without the other, or a file that cannot be used,
     * is a configuration error (exit 2), never a silent fall-back to a plain bus. */
    auth_t *auth = NULL;
    if (server_key || allow_dir) {
        char err[700];
        if (!server_key || !allow_dir) {
            fprintf(stderr,
                    "chatfleet-broker: %s is set but %s is not: set both for CURVE, or neither "
                    "for a plain bus\n",
                    server_key ? AUTH_ENV_SERVER_KEY : AUTH_ENV_ALLOW_DIR,
                    server_key ? AUTH_ENV_ALLOW_DIR : AUTH_ENV_SERVER_KEY);
            config_destroy(&cfg);
            return 2;
        }
        auth = auth_new(server_key, allow_dir, err, sizeof err);
        if (!auth) {
            fprintf(stderr, "chatfleet-broker: %s\n", err);
            log_error("broker_config_invalid", "detail=\"%s\"", err);
            config_destroy(&cfg);
            return 2;
        }
        bc.auth = auth;
    }
    log_info("broker_config",
             "pub=%s sub=%s relay=%s stats_interval_ms=%lld hwm=%d max_msg_bytes=%d "
             "worker_liveness=%d max_workers=%zu curve=%s curve_server_key=%s "
             "curve_public=%s curve_allow_dir=%s curve_allowed_keys=%zu handshake_ms=%d "
             "max_handshakes=%d max_handshakes_per_addr=%d fd_reserve=%d nofile=%ld "
             "nofile_hard=%ld",
             bc.pub_endpoint, bc.sub_endpoint, bc.relay_endpoint, (long long)bc.stats_interval_ms,
             bc.hwm_msgs, PROTO_MSG_MAX_BYTES, PROTO_WORKER_LIVENESS, bc.max_workers,
             auth ? "on" : "off", auth ? server_key : "-", auth ? auth_public(auth) : "-",
             auth ? allow_dir : "-", auth ? auth_count(auth) : (size_t)0, gc.handshake_ms,
             gc.max_handshakes, gc.max_per_addr, gc.fd_reserve, nofile, nofile_hard);

    /* CZMQ's own handler would only set zsys_interrupted; ours also covers SIGUSR1 and
     * leaves the actor running until it is told to stop, so shutdown is one orderly path. */
    zsys_handler_set(NULL);
    sigs_install(s_on_signal, (const int[]){SIGTERM, SIGINT, SIGUSR1, SIGHUP, 0}, 0,
                 SIGS_PIPE_KEEP);

    bc.guard = gc;
    broker_t *b = broker_new(&bc);
    if (!b) {
        log_error("broker_start_failed", "reason=bind");
        auth_destroy(&auth);
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
        if (s_hup) {
            s_hup = 0;
            zstr_send(broker, "RELOAD");
        }
    }
    log_info("broker_shutdown", "signal=%d", (int)s_stop);
    zpoller_destroy(&poller);
    broker_destroy(&b);
    auth_destroy(&auth);
    config_destroy(&cfg);
    return status;
}
