/*
 * chatfleet-worker: acquires runnable chats, drives the model and tool loop, and commits
 * every outcome through the fenced state machine (ARCHITECTURE.md §1.2; worker/README.md).
 *
 * Prints its effective settings, runs until SIGTERM or SIGINT, then shuts down gracefully:
 * stop acquiring, cancel tasks, Abandon every owned chat so another worker takes over at
 * once. SIGUSR1 logs the counters.
 */
#include "config.h"
#include "curve.h"
#include "log.h"
#include "sigs.h"
#include "status.h"
#include "worker.h"

#include <czmq.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <stdio.h>

static volatile sig_atomic_t s_stop;
static volatile sig_atomic_t s_usr1;

static void s_on_signal(int sig) {
    if (sig == SIGUSR1) {
        s_usr1 = 1;
    } else if (sig != SIGALRM) { /* SIGALRM only wakes the loop to refresh /metrics */
        s_stop = sig;
    }
}

int main(void) {
    config_t *cfg = config_new();
    if (!cfg) {
        return 2;
    }
    worker_options_t opts;
    if (worker_options_load(&opts) != 0) {
        config_destroy(&cfg);
        return 2;
    }
    if (log_init("worker", cfg->log_level) != 0) {
        fprintf(stderr, "chatfleet-worker: unknown log level %s\n", cfg->log_level);
    }
    config_log(cfg);
    /* CURVE on the bus when both key settings are given (ARCHITECTURE.md §9 "Trust"); one
     * without the other, or an unusable file, is a configuration error. */
    curve_t *keys = NULL;
    if (curve_start("chatfleet-worker", "worker", &keys) != 0) {
        config_destroy(&cfg);
        return 2;
    }
    /* CZMQ's handler would only set zsys_interrupted and stop every zloop at once; the
     * shutdown must instead run in order, so signals are ours. */
    zsys_handler_set(NULL);
    static const int signals[] = {SIGTERM, SIGINT, SIGUSR1, SIGALRM, 0};
    sigs_install(s_on_signal, signals, 0, SIGS_PIPE_IGNORE);
    /* Blocked here and in every thread started below (they inherit the mask), so the
     * signals reach only sigsuspend in the loop, without a lost wake-up. */
    sigset_t old;
    sigs_block(signals, &old);
    worker_t *w = worker_new(cfg, &opts);
    if (!w) {
        config_destroy(&cfg);
        curve_destroy(&keys);
        return 1;
    }
    /* /healthz and /metrics when CHATFLEET_WORKER_HTTP_LISTEN is set; the metrics text is
     * refreshed here, once a second, from this thread. */
    const char *listen = getenv("CHATFLEET_WORKER_HTTP_LISTEN");
    status_t *status = listen && *listen ? status_new(listen, worker_id(w)) : NULL;
    if (status) {
        struct itimerval tick = {{1, 0}, {1, 0}};
        setitimer(ITIMER_REAL, &tick, NULL);
        status_set(status, worker_metrics(w));
    }
    while (!s_stop) {
        sigsuspend(&old);
        if (s_usr1) {
            s_usr1 = 0;
            worker_log_counters(w);
        }
        if (status && !s_stop) {
            status_set(status, worker_metrics(w));
        }
    }
    log_info("worker_stopping", "worker_id=%s signal=%d", worker_id(w), (int)s_stop);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    int rc = worker_shutdown(w);
    status_destroy(&status);
    worker_log_counters(w);
    worker_destroy(&w);
    config_destroy(&cfg);
    curve_set_default(NULL);
    curve_destroy(&keys);
    log_info("worker_stopped", "clean=%d", rc == 0);
    return rc == 0 ? 0 : 1;
}
