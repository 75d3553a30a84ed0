/*
 * A2A push notifications made safe (security issue 34; api-gateway/a2a/a2a_push.h), against real
 * processes: the fixture's PostgreSQL, a broker, a gateway and a worker (sim model), and
 * stand-in webhooks that are raw sockets in this program, counting requests and keeping their
 * bytes. Cases: a token that would smuggle a second request (and every other field with a
 * control character) is refused with -32602 naming the field, in v1 and v0.3; a delivery is
 * exactly one request, Standard Webhooks-signed with the config's secret; a stored value the
 * header builder refuses is given up, never sent; a 302 is not followed; a huge answer is cut
 * off; the config limits. A second cluster, whose allow-list covers 127.0.0.2 only, shows the
 * default policy refusing loopback, private, metadata and plain-http targets, and the
 * per-minute delivery rate deferring (not failing) a delivery; a gateway given an allow-list
 * that is not CIDRs refuses to start.
 */
#define _GNU_SOURCE /* strcasestr */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "a2a.h"
#include "cluster.h"
#include "clusterlog.h"
#include "id.h"
#include "mem.h"
#include "proc.h"
#include "whsig.h"

#define S_REQUESTS_MAX 16
#define S_REQUEST_MAX  65536
#define S_HUGE_BYTES   (512L * 1024 * 1024) /* what the huge answer would send at most */
#define S_USER_CONFIGS 20                   /* CHATFLEET_PUSH_CONFIGS_MAX of the cluster */
#define S_WAIT_MS      20000

static cluster_t *s_cluster; /* allow-list 127.0.0.0/8,::1/128 (the harness's) */
static cluster_t *s_strict;  /* allow-list 127.0.0.2/32 only, one delivery a minute */

/* --- A stand-in webhook: one thread, one connection at a time. --- */

typedef enum { S_OK = 0, S_REDIRECT, S_HUGE } s_mode_t;

typedef struct {
    int fd;
    int port;
    s_mode_t mode;
    char location[128]; /* S_REDIRECT: where the 302 points */
    pthread_t thread;
    pthread_mutex_t lock;
    bool stop;
    int seen;
    char *raw[S_REQUESTS_MAX];
    long huge_sent; /* S_HUGE: body bytes written before the client went away */
} s_hook_t;

/* Reads one request (head, then Content-Length bytes of body) into a new buffer. */
static char *s_read_request(int c) {
    char *buf = mem_calloc(1, S_REQUEST_MAX + 1);
    size_t n = 0;
    long want = -1;
    while (n < S_REQUEST_MAX) {
        struct pollfd p = {.fd = c, .events = POLLIN};
        if (poll(&p, 1, 5000) <= 0) {
            break;
        }
        ssize_t got = recv(c, buf + n, S_REQUEST_MAX - n, 0);
        if (got <= 0) {
            break;
        }
        n += (size_t)got;
        char *end = strstr(buf, "\r\n\r\n");
        if (end && want < 0) {
            char *cl = strcasestr(buf, "\r\ncontent-length:");
            want = (end - buf) + 4 + (cl && cl < end ? strtol(cl + 17, NULL, 10) : 0);
        }
        if (want >= 0 && (long)n >= want) {
            break;
        }
    }
    return buf;
}

static void *s_hook_run(void *arg) {
    s_hook_t *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->lock);
        bool stop = h->stop;
        pthread_mutex_unlock(&h->lock);
        if (stop) {
            return NULL;
        }
        struct pollfd p = {.fd = h->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) {
            continue;
        }
        int c = accept(h->fd, NULL, NULL);
        if (c < 0) {
            continue;
        }
        char *raw = s_read_request(c);
        pthread_mutex_lock(&h->lock);
        if (h->seen < S_REQUESTS_MAX) {
            h->raw[h->seen] = raw;
        } else {
            free(raw);
        }
        h->seen++;
        pthread_mutex_unlock(&h->lock);
        char head[256];
        if (h->mode == S_REDIRECT) {
            snprintf(head, sizeof head,
                     "HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n",
                     h->location);
            (void)!send(c, head, strlen(head), MSG_NOSIGNAL);
        } else if (h->mode == S_HUGE) {
            snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\nConnection: close\r\n\r\n",
                     S_HUGE_BYTES);
            (void)!send(c, head, strlen(head), MSG_NOSIGNAL);
            static char chunk[65536];
            memset(chunk, 'x', sizeof chunk);
            long sent = 0;
            while (sent < S_HUGE_BYTES) {
                struct pollfd w = {.fd = c, .events = POLLOUT};
                if (poll(&w, 1, 10000) <= 0) {
                    break;
                }
                ssize_t k = send(c, chunk, sizeof chunk, MSG_NOSIGNAL);
                if (k <= 0) {
                    break;
                }
                sent += k;
            }
            pthread_mutex_lock(&h->lock);
            h->huge_sent = sent;
            pthread_mutex_unlock(&h->lock);
        } else {
            snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            (void)!send(c, head, strlen(head), MSG_NOSIGNAL);
        }
        close(c);
    }
}

static s_hook_t *s_hook_new(const char *addr, s_mode_t mode) {
    s_hook_t *h = mem_calloc(1, sizeof *h);
    h->mode = mode;
    h->fd = proc_listen(addr, 16, &h->port);
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
    close(h->fd);
    for (int i = 0; i < h->seen && i < S_REQUESTS_MAX; i++) {
        free(h->raw[i]);
    }
    pthread_mutex_destroy(&h->lock);
    free(h);
    *h_p = NULL;
}

static int s_hook_seen(s_hook_t *h) {
    pthread_mutex_lock(&h->lock);
    int n = h->seen;
    pthread_mutex_unlock(&h->lock);
    return n;
}

/* Polls until the hook has seen at least n requests: true, or false past timeout_ms. */
static bool s_hook_wait(s_hook_t *h, int n, int64_t timeout_ms) {
    int64_t end = id_now_ms() + timeout_ms;
    while (s_hook_seen(h) < n) {
        if (id_now_ms() > end) {
            return false;
        }
        usleep(20 * 1000);
    }
    return true;
}

/* The value of header name in a raw request (case-insensitive name), newly allocated. */
static char *s_header(const char *raw, const char *name) {
    char key[96];
    snprintf(key, sizeof key, "\r\n%s:", name);
    const char *at = strcasestr(raw, key);
    const char *end = strstr(raw, "\r\n\r\n");
    if (!at || (end && at > end)) {
        return NULL;
    }
    at += strlen(key);
    at += strspn(at, " ");
    return mem_strndup(at, strcspn(at, "\r\n"));
}

/* --- JSON-RPC against a cluster's gateway 0 --- */

static json_t *s_rpc(cluster_t *c, const char *method, json_t *params) {
    json_t *req = json_pack("{s:s,s:i,s:s,s:o}", "jsonrpc", "2.0", "id", 7, "method", method,
                            "params", params);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    char url[512];
    snprintf(url, sizeof url, "%s%s", cluster_url(c, 0), A2A_RPC_PATH);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(c), body, &r), 0);
    free(body);
    assert_int_equal(r.status, 200);
    json_t *v = json_loads(r.body, 0, NULL);
    if (!v) {
        fail_msg("unreadable answer: %s", r.body);
    }
    proc_http_free(&r);
    return v;
}

/* A new task (SendMessage, returnImmediately) on c; its id, newly allocated. */
static char *s_task(cluster_t *c) {
    json_t *rpc = s_rpc(c, "SendMessage",
                        json_pack("{s:{s:s,s:s,s:[{s:s}]},s:{s:b}}", "message", "messageId",
                                  "m-push", "role", "ROLE_USER", "parts", "text", "push me",
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

/* A v1 create of {taskId, id, url} plus extra fields (stolen); the answer. */
static json_t *s_create(cluster_t *c, const char *task, const char *id, const char *url,
                        json_t *extra) {
    json_t *p = json_pack("{s:s,s:s,s:s}", "taskId", task, "id", id, "url", url);
    if (extra) {
        json_object_update(p, extra);
        json_decref(extra);
    }
    return s_rpc(c, "CreateTaskPushNotificationConfig", p);
}

/* Asserts rpc is -32602 naming field with detail in its detail; frees rpc. */
static void s_assert_invalid(json_t *rpc, const char *field, const char *detail) {
    json_t *e = json_object_get(rpc, "error");
    json_t *data = json_object_get(e, "data");
    const char *f = json_string_value(json_object_get(data, "field"));
    const char *d = json_string_value(json_object_get(data, "detail"));
    if (json_integer_value(json_object_get(e, "code")) != -32602 || !f || strcmp(f, field) || !d ||
        !strstr(d, detail)) {
        char *t = json_dumps(rpc, 0);
        fail_msg("want -32602 naming %s with \"%s\", got %s", field, detail, t);
    }
    json_decref(rpc);
}

/* Asserts rpc succeeded; its result's signingSecret (newly allocated); frees rpc. */
static char *s_assert_created(json_t *rpc) {
    json_t *res = json_object_get(rpc, "result");
    json_t *inner = json_object_get(res, "pushNotificationConfig");
    const char *secret = json_string_value(json_object_get(inner ? inner : res, "signingSecret"));
    if (!secret) {
        char *t = json_dumps(rpc, 0);
        fail_msg("want a created config with a signingSecret, got %s", t);
    }
    char *out = mem_strdup(secret);
    json_decref(rpc);
    return out;
}

static char *s_url(const char *addr, const s_hook_t *h, const char *path) {
    return mem_printf("http://%s:%d%s", addr, h->port, path);
}

static int64_t s_count(cluster_t *c, const char *where) {
    char *v = cluster_sql(c, "SELECT count(*) FROM a2a_push_configs WHERE %s", where);
    int64_t n = v ? strtoll(v, NULL, 10) : -1;
    free(v);
    return n;
}

/* --- Cases --- */

#define S_SMUGGLE "tok\r\nDELETE /admin/all-data HTTP/1.1\r\nAuthorization: Bearer attacker\r\n\r\n"

static void test_a_token_that_smuggles_a_request_is_refused_naming_the_field(void **u) {
    (void)u;
    char *task = s_task(s_cluster);
    const char *url = "http://127.0.0.1:9/hook";
    s_assert_invalid(s_create(s_cluster, task, "c1", url, json_pack("{s:s}", "token", S_SMUGGLE)),
                     "params.token", "control characters");
    s_assert_invalid(s_create(s_cluster, task, "c1", url,
                              json_pack("{s:{s:s,s:s}}", "authentication", "scheme", "Bearer",
                                        "credentials", "x\nX-Evil: 1")),
                     "params.authentication.credentials", "control characters");
    s_assert_invalid(s_create(s_cluster, task, "c1", url,
                              json_pack("{s:{s:s,s:s}}", "authentication", "scheme",
                                        "Bearer\r\nX-Evil:", "credentials", "x")),
                     "params.authentication.scheme", "control characters");
    s_assert_invalid(s_create(s_cluster, task, "c1", url,
                              json_pack("{s:{s:s,s:s}}", "authentication", "scheme", "Bearer evil",
                                        "credentials", "x")),
                     "params.authentication.scheme", "token");
    s_assert_invalid(s_create(s_cluster, task, "c1", url, json_pack("{s:s}", "token", "a\x7f")),
                     "params.token", "control characters");
    s_assert_invalid(s_create(s_cluster, task, "c\x01", url, NULL), "params.id",
                     "control characters");
    s_assert_invalid(s_create(s_cluster, task, "c1", "http://127.0.0.1:9/\r\nX-Evil: 1", NULL),
                     "params.url", "control characters");
    /* A NUL inside the JSON string: jansson keeps the length, the check sees the byte. */
    json_t *nul = json_pack("{s:s%}", "token", "a\0b", (size_t)3);
    s_assert_invalid(s_create(s_cluster, task, "c1", url, nul), "params.token", "U+0000");
    /* The v0.3 method names the v0.3 path. */
    json_t *legacy = json_pack("{s:s,s:{s:s,s:s,s:s}}", "taskId", task, "pushNotificationConfig",
                               "id", "c1", "url", url, "token", S_SMUGGLE);
    s_assert_invalid(s_rpc(s_cluster, "tasks/pushNotificationConfig/set", legacy),
                     "params.pushNotificationConfig.token", "control characters");
    legacy =
        json_pack("{s:s,s:{s:s,s:s,s:{s:[s],s:s}}}", "taskId", task, "pushNotificationConfig", "id",
                  "c1", "url", url, "authentication", "schemes", "Bearer", "credentials", "a\rb");
    s_assert_invalid(s_rpc(s_cluster, "tasks/pushNotificationConfig/set", legacy),
                     "params.pushNotificationConfig.authentication.credentials",
                     "control characters");
    /* Nothing was stored. */
    char *where = mem_printf("task_id = '%s'", task);
    assert_int_equal(s_count(s_cluster, where), 0);
    free(where);
    free(task);
}

static void test_each_delivery_is_one_signed_request(void **u) {
    (void)u;
    s_hook_t *hook = s_hook_new("127.0.0.1", S_OK);
    char *task = s_task(s_cluster);
    char *url = s_url("127.0.0.1", hook, "/hook");
    char *secret = s_assert_created(
        s_create(s_cluster, task, "signed", url,
                 json_pack("{s:s,s:{s:s,s:s}}", "token", "tok\t1", "authentication", "scheme",
                           "Bearer", "credentials", "s3cret")));
    assert_memory_equal(secret, "whsec_", 6);
    /* The task completes; WORKING and COMPLETED are delivered, and the config is done. */
    char *done = mem_printf("SELECT done FROM a2a_push_configs WHERE task_id = '%s'", task);
    assert_true(cluster_wait(s_cluster, done, "t", S_WAIT_MS) >= 0);
    int seen = s_hook_seen(hook);
    assert_int_equal(seen, 2);
    for (int i = 0; i < seen; i++) {
        const char *raw = hook->raw[i];
        printf("  request %d: %.*s\n", i, (int)strcspn(raw, "\r"), raw);
        /* One request line and one head per connection: nothing smuggled after it. */
        assert_int_equal(strncmp(raw, "POST /hook HTTP/1.1\r\n", 21), 0);
        assert_null(strstr(raw + 21, "HTTP/1."));
        assert_null(strstr(raw, "DELETE"));
        const char *body = strstr(raw, "\r\n\r\n") + 4;
        char *id = s_header(raw, "webhook-id");
        char *ts = s_header(raw, "webhook-timestamp");
        char *sig = s_header(raw, "webhook-signature");
        char *auth = s_header(raw, "Authorization");
        char *token = s_header(raw, "X-A2A-Notification-Token");
        char *delivery = s_header(raw, "X-A2A-Delivery-Id");
        assert_non_null(id);
        assert_non_null(ts);
        assert_non_null(sig);
        assert_string_equal(id, delivery);
        assert_non_null(strstr(body, id)); /* chatfleetDeliveryId */
        assert_string_equal(auth, "Bearer s3cret");
        assert_string_equal(token, "tok\t1");
        int64_t t = strtoll(ts, NULL, 10);
        assert_true(llabs(t - (int64_t)time(NULL)) < 120);
        assert_true(whsig_verify(secret, id, t, body, strlen(body), sig));
        assert_false(whsig_verify(secret, id, t + 1, body, strlen(body), sig));
        free(id);
        free(ts);
        free(sig);
        free(auth);
        free(token);
        free(delivery);
    }
    assert_string_not_equal(hook->raw[0], hook->raw[1]);
    /* The secret is the owner's to read back, in v1 and in the v0.3 shape. */
    json_t *got = s_rpc(s_cluster, "GetTaskPushNotificationConfig",
                        json_pack("{s:s,s:s}", "taskId", task, "id", "signed"));
    char *again = s_assert_created(got);
    assert_string_equal(again, secret);
    free(again);
    got = s_rpc(s_cluster, "tasks/pushNotificationConfig/get",
                json_pack("{s:s,s:s}", "id", task, "pushNotificationConfigId", "signed"));
    again = s_assert_created(got);
    assert_string_equal(again, secret);
    free(again);
    /* A row with a value the builder refuses (stored before issue 34) is given up, unsent. */
    char *ins = cluster_sql(s_cluster,
                            "INSERT INTO a2a_push_configs (owner_id, task_id, id, url, token,"
                            " signing_secret) SELECT owner_id, task_id, 'smuggled', url, E'%s',"
                            " signing_secret FROM a2a_push_configs WHERE task_id = '%s' AND id ="
                            " 'signed' RETURNING id",
                            "tok\\r\\nDELETE /admin/all-data HTTP/1.1\\r\\n\\r\\n", task);
    assert_non_null(ins);
    free(ins);
    char *given_up = mem_printf("SELECT done FROM a2a_push_configs WHERE task_id = '%s' AND id ="
                                " 'smuggled'",
                                task);
    assert_true(cluster_wait(s_cluster, given_up, "t", S_WAIT_MS) >= 0);
    assert_int_equal(s_hook_seen(hook), 2);
    /* The gateway logs the give-up right after its commit: the line may trail the row. */
    char *gave_up =
        clusterlog_wait_value(cluster_log(s_cluster, CLUSTER_GATEWAY, 0), "a2a_push_given_up",
                              "config_id", cluster_pid(s_cluster, CLUSTER_GATEWAY, 0), S_WAIT_MS);
    assert_non_null(gave_up);
    assert_string_equal(gave_up, "smuggled");
    free(gave_up);
    free(given_up);
    free(done);
    free(secret);
    free(url);
    free(task);
    s_hook_destroy(&hook);
}

static void test_a_redirect_is_not_followed(void **u) {
    (void)u;
    s_hook_t *other = s_hook_new("127.0.0.1", S_OK);
    s_hook_t *hook = s_hook_new("127.0.0.1", S_REDIRECT);
    char *other_url = s_url("127.0.0.1", other, "/elsewhere");
    snprintf(hook->location, sizeof hook->location, "%s", other_url);
    char *task = s_task(s_cluster);
    char *url = s_url("127.0.0.1", hook, "/hook");
    free(s_assert_created(s_create(s_cluster, task, "redirected", url, NULL)));
    /* A 302 is a failed delivery: retried with backoff, never followed. */
    char *failed =
        mem_printf("SELECT attempts >= 2 FROM a2a_push_configs WHERE task_id = '%s'", task);
    assert_true(cluster_wait(s_cluster, failed, "t", S_WAIT_MS) >= 0);
    assert_true(s_hook_seen(hook) >= 2);
    assert_int_equal(s_hook_seen(other), 0);
    char *sent = cluster_sql(s_cluster,
                             "SELECT coalesce(sent_state, '-') FROM a2a_push_configs"
                             " WHERE task_id = '%s'",
                             task);
    assert_string_equal(sent, "-");
    free(sent);
    free(failed);
    free(url);
    free(task);
    free(other_url);
    s_hook_destroy(&hook);
    s_hook_destroy(&other);
}

static void test_a_huge_answer_is_cut_off_without_hanging(void **u) {
    (void)u;
    s_hook_t *hook = s_hook_new("127.0.0.1", S_HUGE);
    char *task = s_task(s_cluster);
    char *url = s_url("127.0.0.1", hook, "/hook");
    int64_t start = id_now_ms();
    free(s_assert_created(s_create(s_cluster, task, "huge", url, NULL)));
    /* A 2xx whose body runs on is delivered: the body is read to 64 KiB and dropped. */
    char *done = mem_printf("SELECT done FROM a2a_push_configs WHERE task_id = '%s'", task);
    assert_true(cluster_wait(s_cluster, done, "t", S_WAIT_MS) >= 0);
    int64_t took = id_now_ms() - start;
    printf("  huge answer: %d requests, done after %lld ms\n", s_hook_seen(hook), (long long)took);
    assert_int_equal(s_hook_seen(hook), 2);
    /* The writer stops when the gateway closes: far short of the 512 MiB it offered. */
    assert_true(s_hook_wait(hook, 2, 1000));
    int64_t end = id_now_ms() + 5000;
    long sent = 0;
    while (id_now_ms() < end) {
        pthread_mutex_lock(&hook->lock);
        sent = hook->huge_sent;
        pthread_mutex_unlock(&hook->lock);
        if (sent > 0) {
            break;
        }
        usleep(20 * 1000);
    }
    printf("  huge answer: the writer sent %ld bytes before the gateway closed\n", sent);
    assert_true(sent > 0 && sent < 64L * 1024 * 1024);
    char *ready = mem_printf("%s/readyz", cluster_url(s_cluster, 0));
    assert_int_equal(proc_wait_http(ready, 2000), 0);
    free(ready);
    free(done);
    free(url);
    free(task);
    s_hook_destroy(&hook);
}

static void test_config_limits_are_refused_with_a_clear_error(void **u) {
    (void)u;
    s_hook_t *hook = s_hook_new("127.0.0.1", S_OK);
    char *url = s_url("127.0.0.1", hook, "/hook");
    char *task = s_task(s_cluster);
    char id[32];
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "l%d", i);
        free(s_assert_created(s_create(s_cluster, task, id, url, NULL)));
    }
    s_assert_invalid(s_create(s_cluster, task, "l10", url, NULL), "params",
                     "at most 10 push notification configs per task");
    /* Replacing one of the ten is no new config. */
    free(s_assert_created(s_create(s_cluster, task, "l3", url, NULL)));
    /* Per user: fill to CHATFLEET_PUSH_CONFIGS_MAX on fresh tasks, then one more. */
    int64_t held = s_count(s_cluster, "true");
    char *other = NULL;
    for (int64_t n = held; n < S_USER_CONFIGS; n++) {
        if ((n - held) % 10 == 0) {
            free(other);
            other = s_task(s_cluster);
        }
        snprintf(id, sizeof id, "u%lld", (long long)n);
        free(s_assert_created(s_create(s_cluster, other, id, url, NULL)));
    }
    free(other);
    other = s_task(s_cluster);
    s_assert_invalid(s_create(s_cluster, other, "over", url, NULL), "params",
                     "at most 20 push notification configs per user");
    json_t *legacy = json_pack("{s:s,s:{s:s,s:s}}", "taskId", other, "pushNotificationConfig", "id",
                               "over", "url", url);
    s_assert_invalid(s_rpc(s_cluster, "tasks/pushNotificationConfig/set", legacy),
                     "params.pushNotificationConfig", "CHATFLEET_PUSH_CONFIGS_MAX");
    /* Deleting one makes room. */
    json_decref(s_rpc(s_cluster, "DeleteTaskPushNotificationConfig",
                      json_pack("{s:s,s:s}", "taskId", task, "id", "l0")));
    free(s_assert_created(s_create(s_cluster, other, "over", url, NULL)));
    free(other);
    free(task);
    free(url);
    s_hook_destroy(&hook);
}

static void test_the_default_policy_refuses_non_public_and_plain_http_targets(void **u) {
    (void)u;
    char *task = s_task(s_strict);
    static const char *const refused[] = {"http://127.0.0.1:9/hook",
                                          "https://127.0.0.1/hook",
                                          "https://localhost/hook",
                                          "https://[::1]/hook",
                                          "https://10.0.0.1/hook",
                                          "https://192.168.1.10/hook",
                                          "https://172.16.0.1/hook",
                                          "https://100.64.0.1/hook",
                                          "https://169.254.169.254/latest",
                                          "https://[fd00:ec2::254]/latest",
                                          "https://[::ffff:127.0.0.1]/hook",
                                          "https://[::ffff:169.254.169.254]/",
                                          "https://0.0.0.0/hook",
                                          "https://[fe80::1]/hook",
                                          "https://224.0.0.1/hook",
                                          "https://2130706433/hook",
                                          "http://8.8.8.8/hook",
                                          "http://127.0.0.3:9/outside-the-list",
                                          "https://no-such-host.invalid/hook"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        s_assert_invalid(s_create(s_strict, task, "p", refused[i], NULL), "params.url",
                         "refused by the delivery policy");
    }
    s_assert_invalid(s_create(s_strict, task, "p", "http://8.8.8.8/hook", NULL), "params.url",
                     "needs https");
    char *where = mem_printf("task_id = '%s'", task);
    assert_int_equal(s_count(s_strict, where), 0);
    free(where);
    free(task);
}

static void test_deliveries_over_the_rate_are_deferred_not_failed(void **u) {
    (void)u;
    /* 127.0.0.2 is the strict cluster's allow-list; one delivery a minute per user. */
    s_hook_t *hook = s_hook_new("127.0.0.2", S_OK);
    char *url = s_url("127.0.0.2", hook, "/hook");
    char *task = s_task(s_strict);
    free(s_assert_created(s_create(s_strict, task, "r1", url, NULL)));
    free(s_assert_created(s_create(s_strict, task, "r2", url, NULL)));
    assert_true(s_hook_wait(hook, 1, S_WAIT_MS));
    /* The other one is put off to the next minute, with no failed attempt. */
    char *deferred = mem_printf("SELECT count(*) FROM a2a_push_configs WHERE task_id = '%s' AND"
                                " sent_state IS NULL AND attempts = 0 AND NOT done AND next_at >"
                                " now() + interval '20 seconds'",
                                task);
    assert_true(cluster_wait(s_strict, deferred, "1", S_WAIT_MS) >= 0);
    assert_int_equal(s_hook_seen(hook), 1);
    char *log = proc_file_text(cluster_log(s_strict, CLUSTER_GATEWAY, 0));
    assert_non_null(strstr(log, "a2a_push_deferred"));
    free(log);
    free(deferred);
    free(task);
    free(url);
    s_hook_destroy(&hook);
}

static void test_an_allow_list_that_is_not_cidrs_stops_the_gateway(void **u) {
    (void)u;
    char bin[600];
    proc_build_path(NULL, "api-gateway/chatfleet-gateway", bin, sizeof bin);
    char out[] = "/tmp/test_a2a_push_badcidr.XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    char *db = mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(s_cluster));
    char *const argv[] = {bin, "serve", NULL};
    char *const env[] = {db, "CHATFLEET_HTTP_LISTEN=127.0.0.1:1",
                         "CHATFLEET_PUSH_ALLOW_CIDRS=127.0.0.0/8,10.0.0.1", NULL};
    assert_int_equal(proc_run(argv, env, out, 10000), 2);
    char *text = proc_file_text(out);
    printf("  %s", text);
    assert_non_null(strstr(text, "CHATFLEET_PUSH_ALLOW_CIDRS"));
    assert_non_null(strstr(text, "10.0.0.1"));
    free(text);
    free(db);
    unlink(out);
}

static int s_setup(void **state) {
    (void)state;
    static const char *const env[] = {"CHATFLEET_PUSH_CONFIGS_MAX=20", NULL};
    cluster_opts_t o = {.name = "test_a2a_push", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    static const char *const strict_env[] = {"CHATFLEET_PUSH_ALLOW_CIDRS=127.0.0.2/32",
                                             "CHATFLEET_PUSH_DELIVERIES_PER_MIN=1", NULL};
    cluster_opts_t s = {
        .name = "test_a2a_push_strict", .gateways = 1, .workers = 0, .env = strict_env};
    s_strict = cluster_new(&s);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    (void)cluster_destroy(&s_strict);
    (void)cluster_destroy(&s_cluster);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_token_that_smuggles_a_request_is_refused_naming_the_field),
        cmocka_unit_test(test_each_delivery_is_one_signed_request),
        cmocka_unit_test(test_a_redirect_is_not_followed),
        cmocka_unit_test(test_a_huge_answer_is_cut_off_without_hanging),
        cmocka_unit_test(test_config_limits_are_refused_with_a_clear_error),
        cmocka_unit_test(test_the_default_policy_refuses_non_public_and_plain_http_targets),
        cmocka_unit_test(test_deliveries_over_the_rate_are_deferred_not_failed),
        cmocka_unit_test(test_an_allow_list_that_is_not_cidrs_stops_the_gateway),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
