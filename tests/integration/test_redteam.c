/*
 * A red-team pass over the surfaces added since the last one (security issue 34, item 5), as a
 * hostile authenticated user who is not an operator, against a real cluster (the fixture's
 * PostgreSQL, chatfleet-broker, one chatfleet-gateway, one chatfleet-worker on the sim model):
 * every chat route and every A2A task method on another user's chat or task answers exactly
 * what an unknown one does and changes nothing; only operators read the admin API; compaction
 * thresholds outside 0..100 are refused naming the field, one user's thresholds are theirs
 * alone, and a threshold the chat cannot stay under ends the turn in an error instead of a
 * compaction loop; the console serves only its own files, typed, with its security headers,
 * and a token is accepted only in the Authorization header; MCP servers are names of the
 * deployment, never a command, URL or environment; no request field makes the gateway connect
 * to an address of the caller's choosing; deep, wide and endless bodies are refused and the
 * gateway lives on. deploy/OPERATIONS.md, "What an authenticated user can and cannot make the
 * cluster do", lists what each test proves.
 */
#define _GNU_SOURCE /* strcasestr */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"
#include "dynbuf.h"
#include "mem.h"
#include "proc.h"
#include "routes.h"

#define S_WAIT_MS   20000
#define S_TEXT(t)   "{\"type\":\"text\",\"text\":\"" t "\"}"
#define S_SEND(t)   "{\"content\":[" S_TEXT(t) "]}"
#define S_UNKNOWN   "00000000-0000-4000-8000-00000000dead" /* a chat id nobody has */
#define S_THRESHOLD "/api/v2/chats/config/user-compaction-thresholds/"

static cluster_t *s_cluster;
static char s_config[256];
static char *s_mallory;  /* the hostile user's token */
static char *s_operator; /* an operator's token (user-add --admin) */

/* --- HTTP through libcurl: raw paths (no dot-segment folding), headers kept. --- */

typedef struct {
    long status;
    char *body;    /* NUL-terminated */
    char *headers; /* the response head, NUL-terminated */
} s_resp_t;

/* An answer past this is a failed probe (curl sees a short write). */
#define S_ANSWER_MAX_BYTES (16 * 1024 * 1024)

static size_t s_collect(char *data, size_t size, size_t n, void *ud) {
    return dynbuf_add(ud, data, size * n) == 0 ? size * n : 0;
}

/* A body of chunked_bytes 'x' bytes sent chunked, without a Content-Length. */
static size_t s_endless(char *out, size_t size, size_t n, void *ud) {
    size_t *left = ud;
    size_t k = size * n < *left ? size * n : *left;
    memset(out, 'x', k);
    *left -= k;
    return k;
}

/* method path with token (NULL: none) and body (NULL: none); header is one extra request
 * header or NULL; chunked_bytes > 0 sends that many bytes chunked instead of body. */
static s_resp_t s_http_ex(const char *method, const char *path, const char *token, const char *body,
                          const char *header, size_t chunked_bytes) {
    CURL *c = curl_easy_init();
    ASSERT(c);
    char *url = mem_printf("%s%s", cluster_url(s_cluster, 0), path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char *auth = token ? mem_printf("Authorization: Bearer %s", token) : NULL;
    if (auth) {
        h = curl_slist_append(h, auth);
    }
    if (header) {
        h = curl_slist_append(h, header);
    }
    dynbuf_t b;
    dynbuf_t hd;
    dynbuf_init(&b, S_ANSWER_MAX_BYTES);
    dynbuf_init(&hd, S_ANSWER_MAX_BYTES);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s_collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hd);
    if (chunked_bytes > 0) {
        h = curl_slist_append(h, "Transfer-Encoding: chunked");
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, s_endless);
        curl_easy_setopt(c, CURLOPT_READDATA, &chunked_bytes);
    } else if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode rc = curl_easy_perform(c);
    s_resp_t r = {0};
    /* A server may answer 413 and close before the whole body is sent. */
    if (rc != CURLE_OK && rc != CURLE_SEND_ERROR) {
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    r.body = mem_strdup(dynbuf_str(&b));
    r.headers = mem_strdup(dynbuf_str(&hd));
    dynbuf_free(&b);
    dynbuf_free(&hd);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(auth);
    free(url);
    return r;
}

static s_resp_t s_http(const char *method, const char *path, const char *token, const char *body) {
    return s_http_ex(method, path, token, body, NULL, 0);
}

static void s_free(s_resp_t *r) {
    free(r->body);
    free(r->headers);
}

/* The value of response header name (case-insensitive), newly allocated, or NULL. */
static char *s_header(const s_resp_t *r, const char *name) {
    char key[96];
    snprintf(key, sizeof key, "\n%s:", name);
    const char *at = strcasestr(r->headers, key);
    if (!at) {
        return NULL;
    }
    at += strlen(key);
    at += strspn(at, " ");
    return mem_strndup(at, strcspn(at, "\r\n"));
}

/* Asserts status want, and for a 400 that the first validation names field; frees r. */
static void s_expect(s_resp_t r, long want, const char *field, const char *what) {
    if (r.status != want) {
        fail_msg("%s: want %ld, got %ld: %.300s", what, want, r.status, r.body);
    }
    if (field) {
        json_t *e = json_loads(r.body, 0, NULL);
        const char *got = json_string_value(
            json_object_get(json_array_get(json_object_get(e, "validations"), 0), "field"));
        if (!got || strcmp(got, field) != 0) {
            fail_msg("%s: want field %s in %.300s", what, field, r.body);
        }
        json_decref(e);
    }
    s_free(&r);
}

static char *s_sql(const char *fmt, const char *arg) {
    char *q = mem_printf(fmt, arg);
    char *v = cluster_sql(s_cluster, "%s", q);
    free(q);
    ASSERT(v);
    return v;
}

/* A new chat of token's owner from body (201), its id newly allocated. */
static char *s_create(const char *token, const char *body) {
    s_resp_t r = s_http("POST", "/api/v2/chats", token, body);
    if (r.status != 201) {
        fail_msg("create: %ld %.300s", r.status, r.body);
    }
    json_t *c = json_loads(r.body, 0, NULL);
    char *id = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    s_free(&r);
    return id;
}

static void s_wait_status(const char *chat, const char *want) {
    char got[64];
    if (cluster_wait_status(s_cluster, chat, want, S_WAIT_MS, got, sizeof got) != 0) {
        fail_msg("chat %s: want %s, still %s", chat, want, got);
    }
}

/* Everything a stranger could change on a chat, as one string. */
static char *s_snapshot(const char *chat) {
    return s_sql("SELECT concat_ws('|', status, archived, title, snapshot_version,"
                 " history_version, queue_version, compaction_requested_at, last_error,"
                 " (SELECT count(*) FROM chat_messages m WHERE m.chat_id = c.id),"
                 " (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = c.id))"
                 " FROM chats c WHERE id = '%s'",
                 chat);
}

/* --- Cross-user: chats. --- */

/* Every route on one chat, with a body it would accept from the owner. A route added without a
 * line here fails the test: each new chat route gets its cross-user probe. */
static const struct {
    const char *method;
    const char *pattern;
    const char *body;
} s_chat_probes[] = {
    {"GET", "/api/v2/chats/{}", NULL},
    {"PATCH", "/api/v2/chats/{}", "{\"title\":\"owned\",\"archived\":true}"},
    {"POST", "/api/v2/chats/{}/interrupt", NULL},
    {"POST", "/api/v2/chats/{}/tool-results",
     "{\"results\":[{\"tool_call_id\":\"a\",\"output\":1}]}"},
    {"POST", "/api/v2/chats/{}/compact", NULL},
    {"POST", "/api/v2/chats/{}/clear", NULL},
    {"POST", "/api/v2/chats/{}/reconcile-invalid", NULL},
    {"POST", "/api/v2/chats/{}/title/regenerate", NULL},
    {"GET", "/api/v2/chats/{}/stream", NULL},
    {"GET", "/api/v2/chats/{}/messages", NULL},
    {"GET", "/api/v2/chats/{}/usage", NULL},
    {"POST", "/api/v2/chats/{}/messages", S_SEND("owned")},
    {"PATCH", "/api/v2/chats/{}/messages/{}", S_SEND("owned")},
    {"DELETE", "/api/v2/chats/{}/queue/{}", NULL},
    {"POST", "/api/v2/chats/{}/queue/{}/promote", NULL},
};

/* pattern with its first "{}" as chat and its second as item. */
static char *s_fill(const char *pattern, const char *chat, const char *item) {
    char *out = mem_strdup("");
    int n = 0;
    for (const char *p = pattern; *p;) {
        const char *at = strstr(p, "{}");
        size_t k = at ? (size_t)(at - p) : strlen(p);
        char *next = mem_printf("%s%.*s%s", out, (int)k, p, at ? (n++ == 0 ? chat : item) : "");
        free(out);
        out = next;
        p += k + (at ? 2 : 0);
    }
    return out;
}

static void test_a_stranger_gets_the_unknown_chat_answer_on_every_chat_route(void **u) {
    (void)u;
    char *chat = s_create(cluster_token(s_cluster), S_SEND("private [sim:words 3]"));
    s_wait_status(chat, "waiting:true");
    char *msg = s_sql("SELECT min(id) FROM chat_messages WHERE chat_id = '%s'", chat);
    char *before = s_snapshot(chat);
    int count = 0;
    http_route_t *routes = routes_all(&count);
    int probed = 0;
    for (int i = 0; i < count; i++) {
        if (strncmp(routes[i].pattern, "/api/v2/chats/{}", 16) != 0) {
            continue;
        }
        size_t k = 0;
        while (k < sizeof s_chat_probes / sizeof s_chat_probes[0] &&
               (strcmp(s_chat_probes[k].pattern, routes[i].pattern) ||
                strcmp(s_chat_probes[k].method, routes[i].method))) {
            k++;
        }
        if (k == sizeof s_chat_probes / sizeof s_chat_probes[0]) {
            fail_msg("%s %s has no cross-user probe here", routes[i].method, routes[i].pattern);
        }
        char *theirs = s_fill(routes[i].pattern, chat, msg);
        char *nobody = s_fill(routes[i].pattern, S_UNKNOWN, msg);
        s_resp_t a = s_http(routes[i].method, theirs, s_mallory, s_chat_probes[k].body);
        s_resp_t b = s_http(routes[i].method, nobody, s_mallory, s_chat_probes[k].body);
        /* Byte for byte the unknown chat's answer: the 404 tells nothing of existence. */
        if (a.status != 404 || b.status != 404 || strcmp(a.body, b.body) != 0) {
            fail_msg("%s %s: a stranger got %ld %s, an unknown chat %ld %s", routes[i].method,
                     routes[i].pattern, a.status, a.body, b.status, b.body);
        }
        s_free(&a);
        s_free(&b);
        free(theirs);
        free(nobody);
        probed++;
    }
    assert_int_equal(probed, (int)(sizeof s_chat_probes / sizeof s_chat_probes[0]));
    char *after = s_snapshot(chat);
    assert_string_equal(before, after);
    /* Nor does the list, the cursor or the watch's source show it. */
    s_resp_t r = s_http("GET", "/api/v2/chats?limit=200", s_mallory, NULL);
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, chat));
    s_free(&r);
    char *cursor = mem_printf("/api/v2/chats?after_id=%s", chat);
    s_expect(s_http("GET", cursor, s_mallory, NULL), 400, "after_id", "a foreign cursor");
    free(cursor);
    free(routes);
    free(before);
    free(after);
    free(msg);
    free(chat);
}

/* --- Cross-user: A2A tasks and their push configs. --- */

static json_t *s_rpc(const char *token, const char *method, json_t *params) {
    json_t *req = json_pack("{s:s,s:i,s:s,s:o}", "jsonrpc", "2.0", "id", 1, "method", method,
                            "params", params);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    s_resp_t r = s_http("POST", "/a2a", token, body);
    free(body);
    if (r.status != 200) {
        fail_msg("%s: HTTP %ld %.300s", method, r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    ASSERT(v);
    s_free(&r);
    return v;
}

/* The same call by mallory on task and on an id no task has: both the same error. */
static void s_same_error(const char *method, const char *key, const char *task, json_t *extra) {
    json_t *p1 = json_pack("{s:s}", key, task);
    json_t *p2 = json_pack("{s:s}", key, "987654321");
    if (extra) {
        json_object_update(p1, extra);
        json_object_update(p2, extra);
    }
    json_t *a = s_rpc(s_mallory, method, p1);
    json_t *b = s_rpc(s_mallory, method, p2);
    json_t *ea = json_object_get(a, "error");
    if (!ea || json_integer_value(json_object_get(ea, "code")) != -32001 ||
        !json_equal(ea, json_object_get(b, "error"))) {
        char *ta = json_dumps(a, 0);
        fail_msg("%s on another user's task: %s", method, ta);
    }
    json_decref(a);
    json_decref(b);
}

static void test_another_user_s_a2a_task_and_its_push_configs_are_task_not_found(void **u) {
    (void)u;
    json_t *sent =
        s_rpc(cluster_token(s_cluster), "SendMessage",
              json_pack("{s:{s:s,s:s,s:[{s:s}]},s:{s:b}}", "message", "messageId", "m-red", "role",
                        "ROLE_USER", "parts", "text", "secret task [sim:slow 200]", "configuration",
                        "returnImmediately", 1));
    json_t *task = json_object_get(json_object_get(sent, "result"), "task");
    const char *tid = json_string_value(json_object_get(task, "id"));
    const char *ctx = json_string_value(json_object_get(task, "contextId"));
    assert_non_null(tid);
    assert_non_null(ctx);
    s_same_error("GetTask", "id", tid, NULL);
    s_same_error("CancelTask", "id", tid, NULL);
    s_same_error("SubscribeToTask", "id", tid, NULL);
    json_t *cfg = json_pack("{s:s,s:s}", "id", "stolen", "url", "https://example.com/hook");
    s_same_error("CreateTaskPushNotificationConfig", "taskId", tid, cfg);
    json_decref(cfg);
    json_t *id = json_pack("{s:s}", "id", "stolen");
    s_same_error("GetTaskPushNotificationConfig", "taskId", tid, id);
    s_same_error("DeleteTaskPushNotificationConfig", "taskId", tid, id);
    json_decref(id);
    s_same_error("ListTaskPushNotificationConfigs", "taskId", tid, NULL);
    /* ListTasks: none of the owner's, even asked by the owner's context id. */
    json_t *all = s_rpc(s_mallory, "ListTasks", json_object());
    json_t *by_ctx = s_rpc(s_mallory, "ListTasks", json_pack("{s:s}", "contextId", ctx));
    json_t *by_none = s_rpc(s_mallory, "ListTasks", json_pack("{s:s}", "contextId", S_UNKNOWN));
    char *t_all = json_dumps(all, 0);
    assert_null(strstr(t_all, tid));
    assert_null(strstr(t_all, ctx));
    assert_true(json_equal(json_object_get(by_ctx, "result"), json_object_get(by_none, "result")) ||
                json_equal(json_object_get(by_ctx, "error"), json_object_get(by_none, "error")));
    free(t_all);
    json_decref(all);
    json_decref(by_ctx);
    json_decref(by_none);
    char *cfgs = s_sql("SELECT count(*) FROM a2a_push_configs WHERE task_id = '%s'", tid);
    assert_string_equal(cfgs, "0");
    free(cfgs);
    /* Mallory's CancelTask did not cancel it: the owner's turn ends as usual. */
    s_wait_status(ctx, "waiting:true");
    char *why =
        s_sql("SELECT coalesce(last_error ->> 'kind', 'none') FROM chats WHERE id = '%s'", ctx);
    assert_string_equal(why, "none");
    free(why);
    json_decref(sent);
}

/* --- The admin API. --- */

static void test_only_an_operator_reads_the_admin_api(void **u) {
    (void)u;
    int count = 0;
    http_route_t *routes = routes_all(&count);
    int admin = 0;
    for (int i = 0; i < count; i++) {
        if (!strstr(routes[i].pattern, "/admin")) {
            continue;
        }
        admin++;
        assert_false(routes[i].open);
        const char *m = routes[i].method;
        s_expect(s_http(m, routes[i].pattern, s_mallory, "{}"), 403, NULL, "mallory");
        s_expect(s_http(m, routes[i].pattern, cluster_token(s_cluster), "{}"), 403, NULL, "user");
        s_expect(s_http(m, routes[i].pattern, NULL, "{}"), 401, NULL, "no token");
        if (!strcmp(m, "GET")) {
            s_expect(s_http(m, routes[i].pattern, s_operator, NULL), 200, NULL, "operator");
        }
        /* Other methods on the path run nothing. */
        const char *others[] = {"POST", "PUT", "PATCH", "DELETE"};
        for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
            if (strcmp(others[k], m) != 0) {
                s_expect(s_http(others[k], routes[i].pattern, s_mallory, "{\"is_admin\":true}"),
                         405, NULL, others[k]);
            }
        }
    }
    assert_true(admin >= 1);
    char *flag = cluster_sql(s_cluster, "SELECT is_admin FROM users WHERE name = 'mallory'");
    assert_string_equal(flag, "f");
    free(flag);
    free(routes);
}

/* --- Compaction thresholds. --- */

static void test_thresholds_outside_0_to_100_are_400_naming_the_field(void **u) {
    (void)u;
    const char *path = S_THRESHOLD "simwin";
    static const char *const bad[] = {"-1",    "101",  "2147483648", "9223372036854775808",
                                      "1e999", "50.5", "\"50\"",     "true",
                                      "null",  "[50]", "{}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *body = mem_printf("{\"threshold_percent\":%s}", bad[i]);
        s_expect(s_http("PUT", path, s_mallory, body), 400, "threshold_percent", bad[i]);
        free(body);
    }
    s_expect(s_http("PUT", path, s_mallory, "{}"), 400, "threshold_percent", "missing");
    s_expect(s_http("PUT", path, s_mallory, "{\"threshold_percent\":50,\"user_id\":\"x\"}"), 400,
             "user_id", "an extra field");
    s_expect(s_http("PUT", S_THRESHOLD "nope", s_mallory, "{\"threshold_percent\":50}"), 404, NULL,
             "an unknown model");
    s_expect(s_http("PUT", S_THRESHOLD "..%2F..%2Fsim", s_mallory, "{\"threshold_percent\":50}"),
             404, NULL, "a path in the name");
    char *none = cluster_sql(s_cluster, "SELECT count(*) FROM user_compaction_thresholds");
    assert_string_equal(none, "0");
    free(none);
    /* One user's threshold is theirs alone: another neither sees nor deletes it. */
    s_expect(s_http("PUT", path, cluster_token(s_cluster), "{\"threshold_percent\":90}"), 200, NULL,
             "the owner's");
    s_resp_t r = s_http("GET", "/api/v2/chats/config/user-compaction-thresholds", s_mallory, NULL);
    assert_int_equal(r.status, 200);
    json_t *list = json_loads(r.body, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(list, "thresholds")), 0);
    json_decref(list);
    s_free(&r);
    s_expect(s_http("DELETE", path, s_mallory, NULL), 204, NULL, "mallory's own delete");
    char *kept = cluster_sql(s_cluster, "SELECT string_agg(threshold_percent::text, ',') FROM"
                                        " user_compaction_thresholds");
    assert_string_equal(kept, "90");
    free(kept);
    s_expect(s_http("DELETE", path, cluster_token(s_cluster), NULL), 204, NULL, "cleanup");
}

static char *s_summaries(const char *chat) {
    return s_sql("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role = 'assistant'"
                 " AND compressed AND content -> 0 ->> 'tool_name' = 'chat_summarized'",
                 chat);
}

/* A chat on simwin (a 1000-token window) under mallory's threshold pct, three turns whose
 * replies report 500 input tokens; the chat id. */
static char *s_three_turns(int pct, const char *last) {
    char *body = mem_printf("{\"threshold_percent\":%d}", pct);
    s_expect(s_http("PUT", S_THRESHOLD "simwin", s_mallory, body), 200, NULL, "threshold");
    free(body);
    char *chat = s_create(s_mallory, "{\"model\":\"simwin\",\"content\":[" S_TEXT(
                                         "one [sim:usage 500] [sim:words 3]") "]}");
    s_wait_status(chat, "waiting:true");
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    s_expect(s_http("POST", path, s_mallory, S_SEND("two [sim:usage 500] [sim:words 3]")), 200,
             NULL, "two");
    s_wait_status(chat, "waiting:true");
    s_expect(s_http("POST", path, s_mallory, S_SEND("three [sim:usage 500] [sim:words 3]")), 200,
             NULL, "three");
    s_wait_status(chat, last);
    free(path);
    return chat;
}

static void test_a_threshold_the_chat_cannot_stay_under_ends_in_an_error_not_a_loop(void **u) {
    (void)u;
    /* 1% of 1000 tokens: every reply is over it. The second turn compacts once; the third
     * turn's first reply after that summary is still over: the turn fails, it does not
     * compact again. */
    char *chat = s_three_turns(1, "error:true");
    char *n = s_summaries(chat);
    assert_string_equal(n, "1");
    free(n);
    char *kind = s_sql("SELECT last_error ->> 'kind' FROM chats WHERE id = '%s'", chat);
    assert_string_equal(kind, "context_limit");
    free(kind);
    free(chat);
    /* 0%: compacts before every model call that follows a reply, so at most one summary a
     * turn, and every turn ends. */
    chat = s_three_turns(0, "waiting:true");
    n = s_summaries(chat);
    assert_string_equal(n, "2");
    free(n);
    free(chat);
    s_expect(s_http("DELETE", S_THRESHOLD "simwin", s_mallory, NULL), 204, NULL, "cleanup");
}

/* --- The console and tokens. --- */

static void test_the_console_serves_only_its_files_typed_and_unframeable(void **u) {
    (void)u;
    static const char *const files[][2] = {{"index.html", "text/html; charset=utf-8"},
                                           {"app.js", "text/javascript; charset=utf-8"},
                                           {"style.css", "text/css; charset=utf-8"}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = mem_printf("/console/%s", files[i][0]);
        s_resp_t r = s_http("GET", path, NULL, NULL);
        assert_int_equal(r.status, 200);
        static const char *const want[][2] = {
            {"Content-Type", NULL},
            {"X-Content-Type-Options", "nosniff"},
            {"Content-Security-Policy",
             "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"},
            {"X-Frame-Options", "DENY"},
            {"Referrer-Policy", "no-referrer"}};
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            char *v = s_header(&r, want[k][0]);
            const char *expect = want[k][1] ? want[k][1] : files[i][1];
            if (!v || strcmp(v, expect) != 0) {
                fail_msg("%s: %s is %s, want %s", path, want[k][0], v ? v : "missing", expect);
            }
            free(v);
        }
        if (i == 0) {
            /* The sign-in field has no name: a form submitted without its script never
             * puts the token in a URL. */
            const char *in = strstr(r.body, "<input id=\"token\"");
            assert_non_null(in);
            char *tag = mem_strndup(in, strcspn(in, ">"));
            assert_null(strstr(tag, "name="));
            free(tag);
        }
        s_free(&r);
        free(path);
    }
    static const char *const refused[] = {
        "/console/../../../../etc/passwd",
        "/console/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/console/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/console/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/console/%252e%252e%252fetc%252fpasswd",
        "/console/..%5c..%5c..%5cetc%5cpasswd",
        "/console/%2fetc%2fpasswd",
        "/console//etc/passwd",
        "/console/.%2e",
        "/console/..",
        "/console/README.md",
        "/console/index.html/",
        "/console/index.html%2f..%2f..%2fREADME.md",
        "/console/INDEX.HTML",
        "/console/index.html.bak",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        s_resp_t r = s_http("GET", refused[i], NULL, NULL);
        if (r.status != 404 || strstr(r.body, "root:")) {
            fail_msg("%s: %ld %.200s", refused[i], r.status, r.body);
        }
        s_free(&r);
    }
    s_resp_t r = s_http("GET", "/console", NULL, NULL);
    assert_int_equal(r.status, 302);
    char *loc = s_header(&r, "Location");
    assert_string_equal(loc, "/console/index.html");
    free(loc);
    s_free(&r);
}

static void test_a_token_is_accepted_only_in_the_authorization_header(void **u) {
    (void)u;
    const char *tok = cluster_token(s_cluster);
    s_expect(s_http("GET", "/api/v2/chats", tok, NULL), 200, NULL, "the header");
    static const char *const queries[] = {"access_token", "token", "bearer", "auth"};
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        char *path = mem_printf("/api/v2/chats?%s=%s", queries[i], tok);
        s_expect(s_http("GET", path, NULL, NULL), 401, NULL, queries[i]);
        free(path);
    }
    char *cookie = mem_printf("Cookie: token=%s; access_token=%s", tok, tok);
    s_expect(s_http_ex("GET", "/api/v2/chats", NULL, NULL, cookie, 0), 401, NULL, "a cookie");
    free(cookie);
    char *basic = mem_printf("Authorization: Basic %s", tok);
    s_expect(s_http_ex("GET", "/api/v2/chats", NULL, NULL, basic, 0), 401, NULL, "basic");
    free(basic);
}

/* --- MCP and hooks: names of the deployment, never addresses of the caller. --- */

static void test_mcp_servers_are_deployment_names_never_a_command_url_or_env(void **u) {
    (void)u;
    char *mark = mem_printf("/tmp/cf-redteam-mcp-%d", (int)getpid());
    char *before = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    const struct {
        const char *body;
        const char *field;
    } cases[] = {
        {"{\"content\":[],\"mcp_servers\":[{\"name\":\"x\",\"command\":\"/bin/sh\","
         "\"args\":[\"-c\",\"touch MARK\"]}]}",
         "mcp_servers[0]"},
        {"{\"content\":[],\"mcp_servers\":[{\"url\":\"http://127.0.0.1:9/mcp\"}]}",
         "mcp_servers[0]"},
        {"{\"content\":[],\"mcp_servers\":[\"everything\"]}", "mcp_servers[0]"},
        {"{\"content\":[],\"mcp_servers\":{\"x\":{\"command\":\"/bin/sh\"}}}", "mcp_servers"},
        {"{\"content\":[],\"mcp\":{\"x\":{\"command\":\"/bin/sh\"}}}", "mcp"},
        {"{\"content\":[],\"mcp_env\":{\"LD_PRELOAD\":\"/tmp/x.so\"}}", "mcp_env"},
        {"{\"content\":[],\"dynamic_tools\":[{\"name\":\"mcp__fs__read_file\"}]}",
         "dynamic_tools[0].name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *body = mem_strdup(cases[i].body);
        char *m = strstr(body, "MARK");
        if (m) {
            char *b2 = mem_printf("%.*s%s%s", (int)(m - body), body, mark, m + 4);
            free(body);
            body = b2;
        }
        s_expect(s_http("POST", "/api/v2/chats", s_mallory, body), 400, cases[i].field, body);
        free(body);
    }
    char *chat = s_create(s_mallory, "{\"content\":[]}");
    char *path = mem_printf("/api/v2/chats/%s", chat);
    s_expect(s_http("PATCH", path, s_mallory, "{\"mcp_servers\":[\"x\"]}"), 400, "mcp_servers",
             "on update");
    char *after = cluster_sql(s_cluster, "SELECT count(*) - 1 FROM chats");
    assert_string_equal(before, after);
    assert_int_equal(access(mark, F_OK), -1);
    free(path);
    free(chat);
    free(before);
    free(after);
    free(mark);
}

static void test_no_request_field_makes_the_gateway_connect_where_the_user_says(void **u) {
    (void)u;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ASSERT(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 8) == 0);
    ASSERT(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    char *url = mem_printf("http://127.0.0.1:%d/steal", ntohs(a.sin_port));
    char *chat = s_create(s_mallory, "{\"content\":[]}");
    const struct {
        const char *method;
        const char *path; /* %s: the chat */
        const char *fmt;  /* %s: the URL */
        const char *field;
    } cases[] = {
        {"POST", "/api/v2/chats", "{\"content\":[],\"hooks\":{\"url\":\"%s\"}}", "hooks"},
        {"POST", "/api/v2/chats", "{\"content\":[],\"hooks_url\":\"%s\"}", "hooks_url"},
        {"POST", "/api/v2/chats", "{\"content\":[],\"webhook\":\"%s\"}", "webhook"},
        {"POST", "/api/v2/chats/%s/messages",
         "{\"content\":[" S_TEXT("x") "],\"hooks\":{\"url\":\"%s\"}}", "hooks"},
        {"PATCH", "/api/v2/chats/%s", "{\"hooks_url\":\"%s\"}", "hooks_url"},
        {"PUT", S_THRESHOLD "sim", "{\"threshold_percent\":50,\"url\":\"%s\"}", "url"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = mem_printf(cases[i].path, chat);
        char *body = mem_printf(cases[i].fmt, url);
        s_expect(s_http(cases[i].method, path, s_mallory, body), 400, cases[i].field, body);
        free(path);
        free(body);
    }
    /* A2A metadata is the client's: whatever it holds, a whole task runs and nothing dials. */
    json_t *got = s_rpc(s_mallory, "SendMessage",
                        json_pack("{s:{s:s,s:s,s:[{s:s}],s:{s:{s:s},s:s}}}", "message", "messageId",
                                  "m-url", "role", "ROLE_USER", "parts", "text", url, "metadata",
                                  "hooks", "url", url, "callbackUrl", url));
    assert_non_null(json_object_get(got, "result"));
    json_decref(got);
    int conn = accept(fd, NULL, NULL);
    assert_int_equal(conn, -1);
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    close(fd);
    free(chat);
    free(url);
}

/* --- Bodies. --- */

static char *s_nested(size_t depth, const char *prefix, const char *suffix) {
    char *s = mem_alloc(strlen(prefix) + 2 * depth + strlen(suffix) + 1);
    size_t n = strlen(prefix);
    memcpy(s, prefix, n);
    memset(s + n, '[', depth);
    memset(s + n + depth, ']', depth);
    memcpy(s + n + 2 * depth, suffix, strlen(suffix) + 1);
    return s;
}

static void test_deep_wide_and_endless_bodies_are_refused_and_the_gateway_lives(void **u) {
    (void)u;
    pid_t gw = cluster_pid(s_cluster, CLUSTER_GATEWAY, 0);
    char *chat = s_create(s_mallory, "{\"content\":[]}");
    char *p_chat = mem_printf("/api/v2/chats/%s", chat);
    char *p_msgs = mem_printf("/api/v2/chats/%s/messages", chat);
    char *p_tools = mem_printf("/api/v2/chats/%s/tool-results", chat);
    const char *body_routes[][2] = {{"POST", "/api/v2/chats"},
                                    {"PATCH", p_chat},
                                    {"POST", p_msgs},
                                    {"POST", p_tools},
                                    {"PUT", S_THRESHOLD "sim"}};
    char *deep = s_nested(300000, "{\"content\":", "}");
    char *deep40 = s_nested(40, "{\"content\":", "}");
    json_t *wide = json_array();
    for (int i = 0; i < 5000; i++) {
        json_array_append_new(wide, json_integer(i));
    }
    json_t *keys = json_object();
    for (int i = 0; i < 5000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        json_object_set_new(keys, k, json_integer(i));
    }
    json_t *wide_body = json_pack("{s:o}", "content", wide); /* steals wide */
    char *wide_s = json_dumps(wide_body, JSON_COMPACT);
    json_decref(wide_body);
    char *keys_s = json_dumps(keys, JSON_COMPACT);
    json_decref(keys);
    char *long_s = mem_alloc(600000);
    snprintf(long_s, 16, "{\"title\":\"");
    memset(long_s + 10, 'a', 599000);
    memcpy(long_s + 599010, "\"}", 3);
    const char *bodies[] = {deep, deep40, wide_s, keys_s, long_s};
    for (size_t r = 0; r < sizeof body_routes / sizeof body_routes[0]; r++) {
        for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
            s_resp_t got = s_http(body_routes[r][0], body_routes[r][1], s_mallory, bodies[b]);
            json_t *e = json_loads(got.body, 0, NULL);
            if (got.status != 400 || !json_object_get(e, "validations")) {
                fail_msg("%s %s body %zu: %ld %.200s", body_routes[r][0], body_routes[r][1], b,
                         got.status, got.body);
            }
            json_decref(e);
            s_free(&got);
        }
        s_expect(
            s_http_ex(body_routes[r][0], body_routes[r][1], s_mallory, NULL, NULL, 3 * 1024 * 1024),
            413, NULL, "an endless chunked body");
    }
    /* JSON-RPC answers its errors in the envelope, never a result. */
    char *deep_rpc = s_nested(30000,
                              "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ListTasks\","
                              "\"params\":{\"x\":",
                              "}}");
    const char *rpcs[] = {deep_rpc, deep, keys_s};
    for (size_t b = 0; b < sizeof rpcs / sizeof rpcs[0]; b++) {
        s_resp_t got = s_http("POST", "/a2a", s_mallory, rpcs[b]);
        json_t *v = json_loads(got.body, 0, NULL);
        if (got.status != 200 && got.status != 413) {
            fail_msg("/a2a body %zu: %ld", b, got.status);
        }
        assert_true(got.status == 413 ||
                    (json_object_get(v, "error") && !json_object_get(v, "result")));
        json_decref(v);
        s_free(&got);
    }
    s_expect(s_http_ex("POST", "/a2a", s_mallory, NULL, NULL, 3 * 1024 * 1024), 413, NULL,
             "an endless chunked JSON-RPC body");
    assert_int_equal(cluster_pid(s_cluster, CLUSTER_GATEWAY, 0), gw);
    assert_int_equal(kill(gw, 0), 0);
    s_expect(s_http("GET", "/healthz", NULL, NULL), 200, NULL, "alive");
    free(deep_rpc);
    free(deep);
    free(deep40);
    free(wide_s);
    free(keys_s);
    free(long_s);
    free(p_chat);
    free(p_msgs);
    free(p_tools);
    free(chat);
}

/* --- Setup. --- */

static int s_setup(void **state) {
    (void)state;
    snprintf(s_config, sizeof s_config, "/tmp/cf-redteam-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    fprintf(f, "{\"models\":[{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\","
               "\"default\":true},{\"name\":\"simwin\",\"provider\":\"sim\",\"model\":\"sim\","
               "\"context_limit\":1000}]}");
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    const char *env[] = {cfg, NULL};
    cluster_opts_t o = {.name = "test_redteam", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    s_mallory = cluster_user_add(s_cluster, false, "mallory");
    s_operator = cluster_user_add(s_cluster, true, "operator");
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_cluster);
    unlink(s_config);
    free(s_mallory);
    free(s_operator);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_stranger_gets_the_unknown_chat_answer_on_every_chat_route),
        cmocka_unit_test(test_another_user_s_a2a_task_and_its_push_configs_are_task_not_found),
        cmocka_unit_test(test_only_an_operator_reads_the_admin_api),
        cmocka_unit_test(test_thresholds_outside_0_to_100_are_400_naming_the_field),
        cmocka_unit_test(test_a_threshold_the_chat_cannot_stay_under_ends_in_an_error_not_a_loop),
        cmocka_unit_test(test_the_console_serves_only_its_files_typed_and_unframeable),
        cmocka_unit_test(test_a_token_is_accepted_only_in_the_authorization_header),
        cmocka_unit_test(test_mcp_servers_are_deployment_names_never_a_command_url_or_env),
        cmocka_unit_test(test_no_request_field_makes_the_gateway_connect_where_the_user_says),
        cmocka_unit_test(test_deep_wide_and_endless_bodies_are_refused_and_the_gateway_lives),
    };
    int rc = cmocka_run_group_tests(tests, s_setup, s_teardown);
    curl_global_cleanup();
    return rc;
}
