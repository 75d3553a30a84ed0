/* clusterlog: what the processes of a test cluster wrote in their logs; see clusterlog.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clusterlog.h"
#include "id.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

int clusterlog_count(const char *path, const char *a, const char *b) {
    FILE *f = fopen(path, "r");
    if (!f) {
        return 0;
    }
    char line[8192]; /* bounds one log line; a longer one is read in pieces */
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n += strstr(line, a) && (!b || strstr(line, b));
    }
    fclose(f);
    return n;
}

char *clusterlog_value(const char *path, const char *event, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) {
        return NULL;
    }
    char line[4096]; /* bounds one log line; the events read here are short */
    char *out = NULL;
    char ev[128];
    snprintf(ev, sizeof ev, "event=%s ", event);
    char k[64];
    snprintf(k, sizeof k, " %s=", key);
    while (!out && fgets(line, sizeof line, f)) {
        char *p = strstr(line, ev);
        char *v = p ? strstr(p, k) : NULL;
        if (v) {
            v += strlen(k);
            out = mem_strndup(v, strcspn(v, " \n"));
        }
    }
    fclose(f);
    return out;
}

/* Nonzero once pid has exited; WNOWAIT leaves it a zombie for its owner to reap. */
static int s_exited(pid_t pid) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != 0;
}

char *clusterlog_wait_value(const char *path, const char *event, const char *key, pid_t pid,
                            int64_t timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    char *v;
    while (!(v = clusterlog_value(path, event, key))) {
        if (s_exited(pid) || id_now_ms() >= deadline) {
            return NULL;
        }
        struct timespec ts = {0, 10 * 1000 * 1000}; /* poll interval, not a wait for state */
        nanosleep(&ts, NULL);
    }
    return v;
}

char *clusterlog_worker_id(const cluster_t *c, int worker, int64_t timeout_ms) {
    return clusterlog_wait_value(cluster_log(c, CLUSTER_WORKER, worker), "worker_started",
                                 "worker_id", cluster_pid(c, CLUSTER_WORKER, worker), timeout_ms);
}

int clusterlog_worker_of(const cluster_t *c, int workers, const char *worker_id) {
    for (int i = 0; i < workers; i++) {
        char *id =
            clusterlog_value(cluster_log(c, CLUSTER_WORKER, i), "worker_started", "worker_id");
        int mine = id && !strcmp(id, worker_id);
        free(id);
        if (mine) {
            return i;
        }
    }
    return -1;
}

int64_t clusterlog_expect(cluster_t *c, const char *sql, const char *want, int64_t timeout_ms) {
    int64_t ms = cluster_wait(c, sql, want, timeout_ms);
    if (ms < 0) {
        char *v = cluster_sql(c, "%s", sql);
        fail_msg("waited %lld ms for [%s] = %s, last %s", (long long)timeout_ms, sql, want,
                 v ? v : "NULL");
    }
    return ms;
}

int64_t clusterlog_expect_status(cluster_t *c, const char *chat, const char *status,
                                 int64_t timeout_ms) {
    char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    int64_t ms = clusterlog_expect(c, q, status, timeout_ms);
    free(q);
    return ms;
}

void clusterlog_worker_start(cluster_t *c, int worker) {
    cluster_start(c, CLUSTER_WORKER, worker);
    clusterlog_worker_ready(c, worker);
}

void clusterlog_worker_ready(cluster_t *c, int worker) {
    char *id = clusterlog_worker_id(c, worker, 10000);
    if (!id) {
        fail_msg("worker %d did not start (see %s)", worker,
                 cluster_log(c, CLUSTER_WORKER, worker));
    }
    free(id);
}
