/*
 * A2A push deliveries are not head-of-line blocked (issue 42 item 2; api-gateway/a2a/a2a_push.h),
 * against real processes: the fixture's PostgreSQL, a broker and a gateway (no worker: tasks stay
 * SUBMITTED, which is a state to deliver). One user (the hog) points 48 configs at a webhook that
 * accepts and never answers; another user's push is delivered while every one of the hog's
 * deliveries still hangs, and the hog never holds more than CHATFLEET_PUSH_USER_INFLIGHT_MAX
 * connections at once. The delivery deadline (CHATFLEET_PUSH_TIMEOUT_MS) ends the hanging POSTs
 * as failed attempts with backoff on their own configs, and the other user is still served at
 * once. The figures (how long the other user waited) are printed, not asserted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "a2a.h"
#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "proc.h"

#define S_HOG_CONFIGS   48
#define S_USER_INFLIGHT 8     /* CHATFLEET_PUSH_USER_INFLIGHT_MAX of the cluster */
#define S_TIMEOUT_MS    10000 /* CHATFLEET_PUSH_TIMEOUT_MS of the cluster */
#define S_HELD_MAX      256   /* connections the hanging webhook holds at once */
#define S_WAIT_MS       30000

static cluster_t *s_cluster;
static char *s_hog;       /* the hog's token */
static char *s_bystander; /* the other user's token */

/* --- Webhooks: one that holds every connection open and never answers, one that answers 200.
 * Each is one thread polling its listener and (hang) the connections it holds. --- */

typedef struct {
    int fd;
    int port;
    bool answer; /* answer 200 and close, or hold the connection and never answer */
    pthread_t thread;
    pthread_mutex_t lock;
    bool stop;
    int held[S_HELD_MAX];
    int n_held;   /* connections open now */
    int max_held; /* the most open at once */
    int accepted; /* connections ever accepted */
} s_hook_t;

/* Reads what a held connection sent: false when the client has closed it. */
static bool s_drain(int c) {
    char buf[4096];
    ssize_t got = recv(c, buf, sizeof buf, MSG_DONTWAIT);
    return got > 0 || (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

static void s_answer(int c) {
    char buf[8192];
    struct pollfd p = {.fd = c, .events = POLLIN};
    if (poll(&p, 1, 2000) > 0) {
        (void)!recv(c, buf, sizeof buf, 0); /* the whole request fits: a small POST */
    }
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    (void)!send(c, ok, sizeof ok - 1, MSG_NOSIGNAL);
    close(c);
}

static void *s_hook_run(void *arg) {
    s_hook_t *h = arg;
    for (;;) {
        struct pollfd p[S_HELD_MAX + 1];
        pthread_mutex_lock(&h->lock);
        if (h->stop) {
            pthread_mutex_unlock(&h->lock);
            return NULL;
        }
        int n = h->n_held;
        p[0] = (struct pollfd){.fd = h->fd, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            p[i + 1] = (struct pollfd){.fd = h->held[i], .events = POLLIN};
        }
        pthread_mutex_unlock(&h->lock);
        if (poll(p, (nfds_t)n + 1, 50) <= 0) {
            continue;
        }
        pthread_mutex_lock(&h->lock);
        for (int i = n; i >= 1; i--) { /* from the end: a closed one is swapped with the last */
            if (p[i].revents && !s_drain(p[i].fd)) {
                close(p[i].fd);
                for (int k = 0; k < h->n_held; k++) {
                    if (h->held[k] == p[i].fd) {
                        h->held[k] = h->held[--h->n_held];
                        break;
                    }
                }
            }
        }
        pthread_mutex_unlock(&h->lock);
        if (p[0].revents & POLLIN) {
            int c = accept(h->fd, NULL, NULL);
            if (c < 0) {
                continue;
            }
            pthread_mutex_lock(&h->lock);
            h->accepted++;
            if (!h->answer && h->n_held < S_HELD_MAX) {
                h->held[h->n_held++] = c;
                h->max_held = h->n_held > h->max_held ? h->n_held : h->max_held;
                c = -1;
            }
            pthread_mutex_unlock(&h->lock);
            if (c >= 0) {
                s_answer(c);
            }
        }
    }
}

static s_hook_t *s_hook_new(bool answer) {
    s_hook_t *h = mem_calloc(1, sizeof *h);
    h->answer = answer;
    h->fd = proc_listen("127.0.0.1", 128, &h->port);
    assert_true(h->fd >= 0);
    pthread_mutex_init(&h->lock, NULL);
    assert_int_equal(pthread_create(&h->thread, NULL, s_hook_run, h), 0);
    return h;
}

static void s_hook_destroy(s_hook_t **h_p) {
    s_hook_t *h = *h_p;
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    for (int i = 0; i < h->n_held; i++) {
        close(h->held[i]);
    }
    close(h->fd);
    pthread_mutex_destroy(&h->lock);
    free(h);
    *h_p = NULL;
}

/* A snapshot of the hook's counters. */
static void s_hook_counts(s_hook_t *h, int *held, int *max_held, int *accepted) {
    pthread_mutex_lock(&h->lock);
    *held = h->n_held;
    *max_held = h->max_held;
    *accepted = h->accepted;
    pthread_mutex_unlock(&h->lock);
}

/* Polls until the hook has accepted at least n connections (hold: open at once): the time it
 * took in ms, or -1 past timeout_ms. */
static int64_t s_hook_wait(s_hook_t *h, int n, bool hold, int64_t timeout_ms) {
    int64_t start = id_now_ms();
    for (;;) {
        int held = 0;
        int max_held = 0;
        int accepted = 0;
        s_hook_counts(h, &held, &max_held, &accepted);
        if ((hold ? held : accepted) >= n) {
            return id_now_ms() - start;
        }
        if (id_now_ms() - start > timeout_ms) {
            return -1;
        }
        usleep(5 * 1000);
    }
}

/* --- JSON-RPC as one user --- */

static json_t *s_rpc(const char *token, const char *method, json_t *params) {
    json_t *req = json_pack("{s:s,s:i,s:s,s:o}", "jsonrpc", "2.0", "id", 7, "method", method,
                            "params", params);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    char url[512];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), A2A_RPC_PATH);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, token, body, &r), 0);
    free(body);
    assert_int_equal(r.status, 200);
    json_t *v = json_loads(r.body, 0, NULL);
    if (!v) {
        fail_msg("unreadable answer: %s", r.body);
    }
    proc_http_free(&r);
    return v;
}

/* A new task of the user's; its id, newly allocated. */
static char *s_task(const char *token) {
    json_t *rpc = s_rpc(token, "SendMessage",
                        json_pack("{s:{s:s,s:s,s:[{s:s}]},s:{s:b}}", "message", "messageId",
                                  "m-fair", "role", "ROLE_USER", "parts", "text", "push me",
                                  "configuration", "returnImmediately", 1));
    const char *id = json_string_value(
        json_object_get(json_object_get(json_object_get(rpc, "result"), "task"), "id"));
    if (!id) {
        char *t = json_dumps(rpc, 0);
        fail_msg("SendMessage: %s", t);
    }
    char *out = mem_strdup(id);
    json_decref(rpc);
    return out;
}

/* Creates config id of task to the hook's URL, asserting it was stored. */
static void s_config(const char *token, const char *task, const char *id, const s_hook_t *h) {
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", h->port);
    json_t *rpc = s_rpc(token, "CreateTaskPushNotificationConfig",
                        json_pack("{s:s,s:s,s:s}", "taskId", task, "id", id, "url", url));
    if (!json_object_get(rpc, "result")) {
        char *t = json_dumps(rpc, 0);
        fail_msg("CreateTaskPushNotificationConfig: %s", t);
    }
    json_decref(rpc);
}

static int64_t s_number(const char *sql) {
    char *v = cluster_sql(s_cluster, "%s", sql);
    int64_t n = v ? strtoll(v, NULL, 10) : -1;
    free(v);
    return n;
}

/* The other user's new config: how long after its creation its first POST arrived, in ms. */
static int64_t s_bystander_push(s_hook_t *ok) {
    int held = 0;
    int max_held = 0;
    int before = 0;
    s_hook_counts(ok, &held, &max_held, &before);
    char *task = s_task(s_bystander);
    int64_t start = id_now_ms();
    s_config(s_bystander, task, "bystander", ok);
    int64_t waited = s_hook_wait(ok, before + 1, false, S_WAIT_MS);
    assert_true(waited >= 0);
    free(task);
    return id_now_ms() - start;
}

/* --- Cases --- */

static void test_a_hog_with_48_hanging_webhooks_does_not_delay_another_user(void **u) {
    (void)u;
    s_hook_t *hang = s_hook_new(false);
    s_hook_t *ok = s_hook_new(true);
    /* The hog: 48 configs (ten a task at most) to the webhook that never answers. */
    char id[32];
    char *task = NULL;
    for (int i = 0; i < S_HOG_CONFIGS; i++) {
        if (i % 10 == 0) {
            free(task);
            task = s_task(s_hog);
        }
        snprintf(id, sizeof id, "hog%d", i);
        s_config(s_hog, task, id, hang);
    }
    free(task);
    /* Its deliveries are in flight, as many at once as its per-user cap allows. */
    int64_t filled = s_hook_wait(hang, S_USER_INFLIGHT, true, S_WAIT_MS);
    assert_true(filled >= 0);
    int64_t took = s_bystander_push(ok);
    int held = 0;
    int max_held = 0;
    int accepted = 0;
    s_hook_counts(hang, &held, &max_held, &accepted);
    int64_t failed = s_number("SELECT count(*) FROM a2a_push_configs WHERE id LIKE 'hog%'"
                              " AND attempts > 0");
    printf("  another user's push delivered %lld ms after its config was created, while %d of"
           " the hog's deliveries hung (at most %d at once, %d accepted, %lld failed)\n",
           (long long)took, held, max_held, accepted, (long long)failed);
    /* Not behind the hog: none of the hog's POSTs had reached its deadline yet. */
    assert_int_equal(failed, 0);
    assert_int_equal(held, S_USER_INFLIGHT);
    assert_true(max_held <= S_USER_INFLIGHT);
    /* The deadline ends the hanging POSTs: failed attempts on the hog's own configs, each with
     * its own backoff, the next of the hog's configs taking their place. */
    char *sql = mem_printf("SELECT count(*) >= %d FROM a2a_push_configs WHERE id LIKE 'hog%%'"
                           " AND attempts > 0 AND next_at > now() - interval '1 minute'",
                           S_USER_INFLIGHT);
    int64_t waited = cluster_wait(s_cluster, sql, "t", S_TIMEOUT_MS + S_WAIT_MS);
    assert_true(waited >= 0);
    free(sql);
    assert_true(s_hook_wait(hang, S_USER_INFLIGHT + 1, false, S_WAIT_MS) >= 0);
    took = s_bystander_push(ok);
    s_hook_counts(hang, &held, &max_held, &accepted);
    printf("  after the deadline: another user's push delivered in %lld ms; the hog %d hanging"
           " (at most %d at once, %d accepted)\n",
           (long long)took, held, max_held, accepted);
    assert_true(max_held <= S_USER_INFLIGHT);
    char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_GATEWAY, 0));
    assert_non_null(strstr(log, "push_user_inflight_max=8"));
    assert_non_null(strstr(log, "push_timeout_ms=10000"));
    free(log);
    s_hook_destroy(&ok);
    s_hook_destroy(&hang);
}

static int s_setup(void **state) {
    (void)state;
    static const char *const env[] = {"CHATFLEET_PUSH_USER_INFLIGHT_MAX=8",
                                      "CHATFLEET_PUSH_TIMEOUT_MS=10000", NULL};
    cluster_opts_t o = {.name = "test_a2a_push_fair", .gateways = 1, .workers = 0, .env = env};
    s_cluster = cluster_new(&o);
    s_hog = cluster_user_add(s_cluster, false, "hog");
    s_bystander = cluster_user_add(s_cluster, false, "bystander");
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    free(s_hog);
    free(s_bystander);
    (void)cluster_destroy(&s_cluster);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_hog_with_48_hanging_webhooks_does_not_delay_another_user),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
