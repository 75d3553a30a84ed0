/* W3C trace context from the gateway to the worker (issue 40): a create, a send and an edit
 * store the request's traceparent with the user message (migration 0018), a request without
 * one (or with an invalid one) gets a new trace, a queued send keeps its own through
 * promotion, and the worker's steps of each turn name that trace (event=generation_step
 * trace_id=...). The worker exports its turns to an OTLP/HTTP JSON receiver run by this test
 * (CHATFLEET_OTLP_ENDPOINT): a chat_turn span in the request's trace, a child of the
 * request's span, with the turn's stages as its children. A subagent's turns join the trace
 * of the turn that spawned it, as children of the spawn's tool_call span; a turn cut by a
 * shutdown is exported once as abandoned, and the turn the restarted worker runs for the same
 * prompt once as completed, under a span id of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "clusterlog.h"
#include "mem.h"
#include "proc.h"
#include "trace.h"

static cluster_t *s_cluster;

/* --- The OTLP receiver: one thread, one connection at a time, every span kept. --- */

static struct {
    int fd;
    int port;
    pthread_t thread;
    pthread_mutex_t lock;
    json_t *spans; /* every span received, with "_service" copied from its resource */
    int posts;
    volatile bool stop;
} s_rx;

/* Reads one request (headers, then Content-Length bytes) and keeps its spans; answers 200. */
static void s_rx_handle(int c) {
    char *buf = mem_calloc(1, 1 << 22);
    size_t len = 0, cap = (1 << 22) - 1, need = 0;
    char *body = NULL;
    while (len < cap) {
        ssize_t n = read(c, buf + len, cap - len);
        if (n <= 0) {
            break;
        }
        len += (size_t)n;
        buf[len] = '\0';
        char *end = body ? body : strstr(buf, "\r\n\r\n");
        if (end && !body) {
            body = end + 4;
            char *cl = strstr(buf, "Content-Length:"); /* as libcurl spells it */
            need = cl ? strtoul(cl + 15, NULL, 10) : 0;
        }
        if (body && (size_t)(buf + len - body) >= need) {
            break;
        }
    }
    json_error_t e;
    json_t *req =
        body && !strncmp(buf, "POST /v1/traces ", 16) ? json_loadb(body, need, 0, &e) : NULL;
    size_t i, j, k;
    json_t *rs, *ss, *sp;
    pthread_mutex_lock(&s_rx.lock);
    s_rx.posts++;
    json_array_foreach(json_object_get(req, "resourceSpans"), i, rs) {
        json_t *attrs = json_object_get(json_object_get(rs, "resource"), "attributes");
        json_t *a, *service = NULL;
        size_t m;
        json_array_foreach(attrs, m, a) {
            if (!strcmp(json_string_value(json_object_get(a, "key")), "service.name")) {
                service = json_object_get(json_object_get(a, "value"), "stringValue");
            }
        }
        json_array_foreach(json_object_get(rs, "scopeSpans"), j, ss) {
            json_array_foreach(json_object_get(ss, "spans"), k, sp) {
                json_t *copy = json_deep_copy(sp);
                json_object_set(copy, "_service", service ? service : json_null());
                json_array_append_new(s_rx.spans, copy);
            }
        }
    }
    pthread_mutex_unlock(&s_rx.lock);
    json_decref(req);
    const char *ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: 2\r\nConnection: close\r\n\r\n{}";
    (void)!write(c, ok, strlen(ok));
    free(buf);
}

static void *s_rx_run(void *arg) {
    (void)arg;
    while (!s_rx.stop) {
        struct pollfd p = {.fd = s_rx.fd, .events = POLLIN};
        if (poll(&p, 1, 100) == 1) {
            int c = accept(s_rx.fd, NULL, NULL);
            if (c >= 0) {
                s_rx_handle(c);
                close(c);
            }
        }
    }
    return NULL;
}

static void s_rx_start(void) {
    s_rx.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ASSERT(bind(s_rx.fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s_rx.fd, 16) == 0);
    socklen_t al = sizeof a;
    ASSERT(getsockname(s_rx.fd, (struct sockaddr *)&a, &al) == 0);
    s_rx.port = ntohs(a.sin_port);
    s_rx.spans = json_array();
    pthread_mutex_init(&s_rx.lock, NULL);
    ASSERT(pthread_create(&s_rx.thread, NULL, s_rx_run, NULL) == 0);
}

static void s_rx_stop(void) {
    s_rx.stop = true;
    pthread_join(s_rx.thread, NULL);
    close(s_rx.fd);
    json_decref(s_rx.spans);
    pthread_mutex_destroy(&s_rx.lock);
}

/* A copy of the received spans of trace_id named name (NULL: any), as an array. */
static json_t *s_rx_spans(const char *trace_id, const char *name) {
    json_t *out = json_array();
    size_t i;
    json_t *sp;
    pthread_mutex_lock(&s_rx.lock);
    json_array_foreach(s_rx.spans, i, sp) {
        if (!strcmp(json_string_value(json_object_get(sp, "traceId")), trace_id) &&
            (!name || !strcmp(json_string_value(json_object_get(sp, "name")), name))) {
            json_array_append_new(out, json_deep_copy(sp));
        }
    }
    pthread_mutex_unlock(&s_rx.lock);
    return out;
}

static const char *s_attr(const json_t *span, const char *key) {
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(span, "attributes"), i, a) {
        if (!strcmp(json_string_value(json_object_get(a, "key")), key)) {
            return json_string_value(json_object_get(json_object_get(a, "value"), "stringValue"));
        }
    }
    return NULL;
}

static size_t s_write(char *data, size_t size, size_t n, void *arg) {
    json_t **out = arg;
    json_error_t e;
    json_decref(*out);
    *out = json_loadb(data, size * n, 0, &e); /* the answers here are small: one write */
    return size * n;
}

/* One request with a traceparent header (NULL: none); the status, the answer into *out. */
static long s_request(const char *method, const char *path, const char *traceparent,
                      const char *body, json_t **out) {
    char url[512], auth[256], tp[128];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", cluster_token(s_cluster));
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    if (traceparent) {
        snprintf(tp, sizeof tp, "traceparent: %s", traceparent);
        h = curl_slist_append(h, tp);
    }
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
    json_t *answer = NULL;
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out) {
        *out = answer;
    } else {
        json_decref(answer);
    }
    return status;
}

/* The traceparent stored with the chat's latest user row. */
static char *s_stored(const char *chat) {
    return cluster_sql(s_cluster,
                       "SELECT coalesce(traceparent, 'null') FROM chat_messages WHERE chat_id ="
                       " '%s' AND role = 'user' ORDER BY id DESC LIMIT 1",
                       chat);
}

/* Creates a chat whose first message is text (sent with traceparent tp, or none), asserting
 * the 201, and writes its id to chat. */
static void s_create_chat(const char *tp, const char *text, char chat[ID_UUID_LEN + 1]) {
    char body[256];
    snprintf(body, sizeof body, "{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    json_t *chat_json = NULL;
    assert_int_equal(s_request("POST", "/api/v2/chats", tp, body, &chat_json), 201);
    snprintf(chat, ID_UUID_LEN + 1, "%s", json_string_value(json_object_get(chat_json, "id")));
    json_decref(chat_json);
}

static void s_wait_idle(const char *chat) {
    char got[64];
    assert_int_equal(cluster_wait_status(s_cluster, chat, "waiting:true", 20000, got, sizeof got),
                     0);
}

/* The worker's log names the trace in a generation_step of the chat. */
static bool s_logged(const char *chat, const char *trace_id) {
    char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_WORKER, 0));
    char *want = mem_printf("chat_id=%s", chat);
    char *tid = mem_printf("trace_id=%s", trace_id);
    bool found = false;
    for (char *line = log; line && *line && !found;) {
        char *end = strchr(line, '\n');
        if (end) {
            *end = '\0';
        }
        found = strstr(line, "event=generation_step") && strstr(line, want) && strstr(line, tid);
        line = end ? end + 1 : NULL;
    }
    free(tid);
    free(want);
    free(log);
    return found;
}

static void test_a_request_trace_reaches_the_worker(void **u) {
    (void)u;
    const char *given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    char chat[ID_UUID_LEN + 1];
    s_create_chat(given, "traced", chat);
    s_wait_idle(chat);
    char *stored = s_stored(chat);
    assert_string_equal(stored, given);
    free(stored);
    assert_true(s_logged(chat, "4bf92f3577b34da6a3ce929d0e0e4736"));
    /* A send without a header: a new, valid trace of its own. */
    char path[256];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    long st = s_request("POST", path, NULL,
                        "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}", NULL);
    assert_true(st == 200 || st == 201);
    s_wait_idle(chat);
    stored = s_stored(chat);
    trace_ctx_t t;
    assert_int_equal(trace_parse(stored, &t), 0);
    assert_string_not_equal(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_true(s_logged(chat, t.trace_id));
    free(stored);
    /* An invalid header (uppercase hex) is not carried: a new trace again. */
    const char *bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
    st = s_request("POST", path, bad, "{\"content\":[{\"type\":\"text\",\"text\":\"bad\"}]}", NULL);
    assert_true(st == 200 || st == 201);
    s_wait_idle(chat);
    stored = s_stored(chat);
    assert_int_equal(trace_parse(stored, &t), 0);
    assert_string_not_equal(stored, bad);
    free(stored);
    /* An edit of the first message carries the edit's trace. */
    char *first = cluster_sql(s_cluster,
                              "SELECT min(id) FROM chat_messages WHERE chat_id = '%s'"
                              " AND role = 'user'",
                              chat);
    const char *edit_tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages/%s", chat, first);
    free(first);
    st = s_request("PATCH", path, edit_tp,
                   "{\"content\":[{\"type\":\"text\",\"text\":\"edited\"}]}", NULL);
    assert_true(st == 200 || st == 201);
    s_wait_idle(chat);
    stored = s_stored(chat);
    assert_string_equal(stored, edit_tp);
    free(stored);
    assert_true(s_logged(chat, "0af7651916cd43dd8448eb211c80319c"));
    /* A send queued behind a running turn keeps its trace through promotion. */
    s_create_chat(NULL, "[sim:slow 300] busy", chat);
    const char *queued_tp = "00-11111111111111111111111111111111-2222222222222222-00";
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    st = s_request("POST", path, queued_tp,
                   "{\"content\":[{\"type\":\"text\",\"text\":\"later\"}]}", NULL);
    assert_true(st == 200 || st == 201 || st == 202);
    s_wait_idle(chat);
    stored = s_stored(chat);
    assert_string_equal(stored, queued_tp);
    free(stored);
    char *promoted = cluster_sql(s_cluster,
                                 "SELECT queued_message_id IS NOT NULL FROM chat_messages WHERE"
                                 " chat_id = '%s' AND role = 'user' ORDER BY id DESC LIMIT 1",
                                 chat);
    assert_string_equal(promoted, "t"); /* it went through the queue */
    free(promoted);
    assert_true(s_logged(chat, "11111111111111111111111111111111"));
}

/* The received spans of trace_id named name once there are at least min of them (or after
 * timeout_ms). */
static json_t *s_rx_wait(const char *trace_id, const char *name, size_t min, int64_t timeout_ms) {
    int64_t deadline = id_now_ms() + timeout_ms;
    json_t *got = s_rx_spans(trace_id, name);
    while (json_array_size(got) < min && id_now_ms() < deadline) {
        usleep(100 * 1000);
        json_decref(got);
        got = s_rx_spans(trace_id, name);
    }
    return got;
}

/* The span of spans whose id is id, or NULL. */
static json_t *s_span_of(const json_t *spans, const char *id) {
    size_t i;
    json_t *sp;
    json_array_foreach(spans, i, sp) {
        if (!strcmp(json_string_value(json_object_get(sp, "spanId")), id)) {
            return sp;
        }
    }
    return NULL;
}

static const char *s_str(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static void test_turns_are_exported_as_otlp_spans(void **u) {
    (void)u;
    const char *trace_id = "aaaabbbbccccddddeeeeffff00001111";
    const char *given = "00-aaaabbbbccccddddeeeeffff00001111-1234567890abcdef-01";
    char chat[ID_UUID_LEN + 1];
    s_create_chat(given, "[sim:tool time] now", chat);
    s_wait_idle(chat);
    /* The exporter posts within a second of a span; the turn's span comes last. */
    json_t *turns = NULL;
    int64_t deadline = id_now_ms() + 10000;
    while (id_now_ms() < deadline) {
        json_decref(turns);
        turns = s_rx_spans(trace_id, "chat_turn");
        if (json_array_size(turns) > 0) {
            break;
        }
        usleep(100 * 1000);
    }
    assert_int_equal(json_array_size(turns), 1);
    json_t *turn = json_array_get(turns, 0);
    char *dump = json_dumps(turn, JSON_COMPACT);
    printf("chat_turn: %s\n", dump ? dump : "(none)");
    free(dump);
    assert_string_equal(json_string_value(json_object_get(turn, "parentSpanId")),
                        "1234567890abcdef");
    assert_string_equal(json_string_value(json_object_get(turn, "_service")), "chatfleet-worker");
    assert_string_equal(s_attr(turn, "turn_outcome"), "completed");
    assert_string_equal(s_attr(turn, "chat_id"), chat);
    assert_string_equal(s_attr(turn, "chat_kind"), "root");
    const char *turn_id = json_string_value(json_object_get(turn, "spanId"));
    assert_int_equal(strlen(turn_id), 16);
    /* Times are decimal strings of nanoseconds; the turn starts at the prompt's creation. */
    long long t0 = strtoll(json_string_value(json_object_get(turn, "startTimeUnixNano")), NULL, 10);
    long long t1 = strtoll(json_string_value(json_object_get(turn, "endTimeUnixNano")), NULL, 10);
    assert_true(t0 > 1600000000LL * 1000000000LL && t0 < t1);
    /* Its stages are its children, inside it, in the same trace. */
    const char *stages[] = {"acquisition",      "prepare", "generation_step",
                            "provider_attempt", "stream",  "time_to_first_token",
                            "tool_call",        "commit"};
    json_t *all = s_rx_spans(trace_id, NULL);
    for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++) {
        size_t i, n = 0;
        json_t *sp;
        json_array_foreach(all, i, sp) {
            if (strcmp(json_string_value(json_object_get(sp, "name")), stages[s])) {
                continue;
            }
            n++;
            assert_string_equal(json_string_value(json_object_get(sp, "parentSpanId")), turn_id);
            assert_string_not_equal(json_string_value(json_object_get(sp, "spanId")), turn_id);
            long long s0 =
                strtoll(json_string_value(json_object_get(sp, "startTimeUnixNano")), NULL, 10);
            long long s1 =
                strtoll(json_string_value(json_object_get(sp, "endTimeUnixNano")), NULL, 10);
            /* The turn starts at the prompt's creation, read as an age on the database's
             * clock: a reading on another task may land a few milliseconds later. It ends
             * after the step that closed it. */
            assert_true(s0 <= s1 && s0 >= t0 - 50000000LL && s1 <= t1);
        }
        printf("stage=%s spans=%zu\n", stages[s], n);
        assert_true(n >= 1);
    }
    json_decref(all);
    json_decref(turns);
    /* The model's stages name it. */
    json_t *attempts = s_rx_spans(trace_id, "provider_attempt");
    const char *model = s_attr(json_array_get(attempts, 0), "model");
    assert_true(model && model[0]);
    json_decref(attempts);
}

static void test_a_subagents_turns_join_the_trace_of_the_turn_that_spawned_it(void **u) {
    (void)u;
    const char *trace_id = "5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e";
    const char *given = "00-5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e-0123456789abcdef-01";
    char parent[ID_UUID_LEN + 1];
    s_create_chat(given, "[sim:spawn 1] delegate", parent);
    s_wait_idle(parent); /* after its child answered and its wait resumed */
    char *child =
        cluster_sql(s_cluster, "SELECT id FROM chats WHERE parent_chat_id = '%s'", parent);
    assert_non_null(child);
    /* The child's prompt carries the parent's trace; its parent span is the spawn's. */
    char *stored = s_stored(child);
    trace_ctx_t t;
    assert_int_equal(trace_parse(stored, &t), 0);
    assert_string_equal(t.trace_id, trace_id);
    free(stored);
    /* The parent's turns: up to its agent wait, and its answer after it. */
    json_t *turns = s_rx_wait(trace_id, "chat_turn", 3, 10000);
    json_t *all = s_rx_spans(trace_id, NULL);
    size_t i, parents = 0, children = 0;
    const char *parent_spans[2] = {"", ""};
    json_t *turn;
    json_array_foreach(turns, i, turn) {
        char *dump = json_dumps(turn, JSON_COMPACT);
        printf("chat_turn: %s\n", dump ? dump : "(none)");
        free(dump);
        assert_string_equal(s_attr(turn, "turn_outcome"), "completed");
        if (!strcmp(s_attr(turn, "chat_id"), parent)) {
            parent_spans[parents++ % 2] = s_str(turn, "spanId");
            assert_string_equal(s_str(turn, "parentSpanId"), "0123456789abcdef");
            assert_string_equal(s_attr(turn, "chat_kind"), "root");
            continue;
        }
        children++;
        assert_string_equal(s_attr(turn, "chat_id"), child);
        assert_string_equal(s_attr(turn, "chat_kind"), "subagent");
        /* A child of the parent's spawn_agent call, which is a child of the parent's turn. */
        const char *up = s_str(turn, "parentSpanId");
        assert_string_equal(up, t.span_id);
        json_t *call = s_span_of(all, up);
        assert_non_null(call);
        assert_string_equal(s_str(call, "name"), "tool_call");
        assert_string_equal(s_attr(call, "chat_id"), parent);
        json_t *spawner = s_span_of(turns, s_str(call, "parentSpanId"));
        assert_non_null(spawner);
        assert_string_equal(s_attr(spawner, "chat_id"), parent);
        /* The child's stages are its turn's children. */
        json_t *sp;
        size_t j, stages = 0;
        json_array_foreach(all, j, sp) {
            stages += !strcmp(s_attr(sp, "chat_id"), child) &&
                      strcmp(s_str(sp, "name"), "chat_turn") &&
                      !strcmp(s_str(sp, "parentSpanId"), s_str(turn, "spanId"));
        }
        printf("child stages under its turn: %zu\n", stages);
        assert_true(stages >= 3);
    }
    assert_int_equal(parents, 2);
    assert_int_equal(children, 1);
    assert_string_not_equal(parent_spans[0], parent_spans[1]); /* two runners' turns */
    json_decref(all);
    json_decref(turns);
    free(child);
}

static void test_a_turn_cut_by_a_shutdown_is_exported_abandoned(void **u) {
    (void)u;
    const char *trace_id = "dead0000beef0000dead0000beef0000";
    const char *given = "00-dead0000beef0000dead0000beef0000-fedcba9876543210-01";
    char chat[ID_UUID_LEN + 1];
    s_create_chat(given, "[sim:slow 100] [sim:words 40] cut", chat);
    char *q = mem_printf("SELECT (generation_attempt >= 1)::text FROM chats WHERE id = '%s'", chat);
    assert_true(cluster_wait(s_cluster, q, "true", 10000) >= 0);
    free(q);
    /* SIGTERM mid-stream: the drain lets the chat go and its open turn closes abandoned; the
     * exporter posts it before the worker exits. The restarted worker runs the turn again. */
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGTERM);
    clusterlog_worker_start(s_cluster, 0);
    s_wait_idle(chat);
    json_t *turns = s_rx_wait(trace_id, "chat_turn", 2, 10000);
    usleep(1500 * 1000); /* a third would come within the exporter's second: none may */
    json_decref(turns);
    turns = s_rx_spans(trace_id, "chat_turn");
    assert_int_equal(json_array_size(turns), 2);
    size_t i, abandoned = 0, completed = 0;
    json_t *turn;
    json_array_foreach(turns, i, turn) {
        char *dump = json_dumps(turn, JSON_COMPACT);
        printf("chat_turn: %s\n", dump ? dump : "(none)");
        free(dump);
        assert_string_equal(s_str(turn, "parentSpanId"), "fedcba9876543210");
        assert_string_equal(s_attr(turn, "chat_id"), chat);
        abandoned += !strcmp(s_attr(turn, "turn_outcome"), "abandoned");
        completed += !strcmp(s_attr(turn, "turn_outcome"), "completed");
        /* Neither is an error: an abandoned turn leaves the status unset. */
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(turn, "status"), "code")), 0);
    }
    assert_int_equal(abandoned, 1);
    assert_int_equal(completed, 1);
    assert_string_not_equal(s_str(json_array_get(turns, 0), "spanId"),
                            s_str(json_array_get(turns, 1), "spanId"));
    json_decref(turns);
}

static int s_setup(void **u) {
    (void)u;
    s_rx_start();
    static char otlp[96];
    snprintf(otlp, sizeof otlp, "CHATFLEET_OTLP_ENDPOINT=http://127.0.0.1:%d/", s_rx.port);
    static const char *env[] = {"CHATFLEET_SIM_CHUNK_MS=0", otlp, NULL};
    cluster_opts_t o = {.name = "test_trace_carry", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    return s_cluster ? 0 : -1;
}

static int s_teardown(void **u) {
    (void)u;
    int rc = cluster_destroy(&s_cluster);
    s_rx_stop();
    return rc;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_request_trace_reaches_the_worker),
        cmocka_unit_test(test_turns_are_exported_as_otlp_spans),
        cmocka_unit_test(test_a_subagents_turns_join_the_trace_of_the_turn_that_spawned_it),
        cmocka_unit_test(test_a_turn_cut_by_a_shutdown_is_exported_abandoned),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
