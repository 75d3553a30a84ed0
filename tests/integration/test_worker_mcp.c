/*
 * MCP tools end to end (ARCHITECTURE.md §7.9, issue 18): a cluster of real processes whose
 * default model is the mock OpenAI server (its real streaming wire, scripting the tool calls),
 * and real MCP servers over stdio: @modelcontextprotocol/server-everything and
 * @modelcontextprotocol/server-filesystem (on a temporary directory), installed with npm into
 * the build directory at test time, plus tests/mcp/paged_server.mjs for what the real servers
 * never do (a paged tools/list, a garbage answer). A turn whose model calls an MCP tool gets
 * the server's real result; every page of tools/list is offered; a server killed mid-call, a
 * server that never answers and a server that answers garbage each give an error result and
 * the turn goes on; a worker killed during an MCP call leaves exactly one tool result after the
 * takeover. The cluster runs CURVE, and tests/mcp/env_server.mjs reports what a server sees
 * (issue 34): only its configured environment plus PATH, HOME and LANG, no variable of the
 * worker's (the database URL, the provider key), and in the sandbox (bwrap, required when it
 * works here) neither the worker's CURVE secret key nor its config file, whether they lie outside
 * the server's paths (absent) or inside one (masked). Without npm or the registry the test exits
 * 77 (skipped) only when `npm ping` fails too; an install that fails with the registry reachable
 * fails the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "id.h"
#include "mem.h"
#include "mockprov.h"
#include "proc.h"
#include "sandbox.h"

#define WAIT_MS 40000

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static char s_config[256];
static char s_dir[64]; /* the filesystem server's directory */
/* envwide's own copy of env_server.mjs: its /tmp grant masks a checkout that lives in /tmp */
static char s_wide[64];
static char s_npm[600];
static char s_source[512];
static int s_http_port;
static pid_t s_http_pid; /* tests/mcp/http_server.mjs: server-everything over Streamable HTTP */
static char s_http_log[128];
static bool s_sandboxed; /* bwrap works here: the worker runs with CHATFLEET_MCP_SANDBOX=require */

#define HTTP_TOKEN "mcp-test-token"

/* (Re)starts the Streamable HTTP server on its port and waits until it listens. */
static void s_http_start(void) {
    char script[600];
    char port[16];
    snprintf(script, sizeof script, "%s/tests/mcp/http_server.mjs", s_source);
    snprintf(port, sizeof port, "%d", s_http_port);
    char *argv[] = {"/usr/bin/env", "node", script, s_npm, port, HTTP_TOKEN, NULL};
    s_http_pid = proc_spawn(argv, NULL, s_http_log);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", s_http_port);
    ASSERT(proc_wait_http(url, 20000) == 0);
}

/* --- The mock's replies (OpenAI Chat Completions streams). --- */

static void s_push_text(const char *text) {
    mockprov_push_openai_text(s_mock, text);
}

/* A reply that calls tool name with the JSON arguments args under the call id id. */
static void s_push_call(const char *id, const char *name, const char *args) {
    mockprov_push_openai_call(s_mock, id, name, args);
}

/* The tool names offered in the mock's request index (a new array). */
static json_t *s_offered(int index) {
    json_t *req = mockprov_request(s_mock, index);
    assert_non_null(req);
    json_t *names = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(json_object_get(req, "body"), "tools"), i, t) {
        json_array_append(names, json_object_get(json_object_get(t, "function"), "name"));
    }
    json_decref(req);
    return names;
}

static bool s_has_name(const json_t *names, const char *name) {
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) {
        if (!strcmp(json_string_value(n), name)) {
            return true;
        }
    }
    return false;
}

/* --- The gateway, the database and the worker's log. --- */

/* POST /chats: the new chat's id (201) or the error body in out. */
static long s_post_chat(const char *body, char *out, size_t size) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    long status = r.status;
    if (status == 201) {
        json_t *v = json_loads(r.body, 0, NULL);
        snprintf(out, size, "%s", json_string_value(json_object_get(v, "id")));
        json_decref(v);
    } else {
        printf("  POST /chats: %ld %s\n", status, r.body);
        snprintf(out, size, "%s", r.body ? r.body : "");
    }
    proc_http_free(&r);
    return status;
}

/* A chat enabling servers (a JSON array text) whose first message is text. */
static void s_create(const char *servers, const char *text, char chat[ID_UUID_LEN + 1]) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],"
                            "\"mcp_servers\":%s}",
                            text, servers);
    long status = s_post_chat(body, chat, ID_UUID_LEN + 1);
    free(body);
    assert_int_equal(status, 201);
}

static void s_wait_waiting(const char *chat) {
    char *q =
        mem_printf("SELECT status || ':' || (worker_id IS NULL) FROM chats WHERE id = '%s'", chat);
    if (cluster_wait(s_cluster, q, "waiting:true", WAIT_MS) < 0) {
        char *got = cluster_sql(s_cluster, "%s", q);
        fail_msg("chat %s is %s, not waiting", chat, got ? got : "(none)");
    }
    free(q);
}

/* A turn of a new chat enabling servers whose first message is text: the calls pushed before
 * are the model's, then its closing reply; returns once the chat waits. */
static void s_run_turn(const char *servers, const char *text, const char *reply,
                       char chat[ID_UUID_LEN + 1]) {
    s_push_text(reply);
    s_create(servers, text, chat);
    s_wait_waiting(chat);
}

/* The tool rows answering call id in chat: how many, and the last one's content. */
static long s_results(const char *chat, const char *id, char **content) {
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'tool' AND content::jsonb @> '[{\"tool_call_id\":\"%s\"}]'",
                          chat, id);
    assert_non_null(n);
    long v = strtol(n, NULL, 10);
    free(n);
    if (content) {
        *content =
            cluster_sql(s_cluster,
                        "SELECT content::jsonb::text FROM chat_messages WHERE chat_id = '%s' AND"
                        " role = 'tool' AND content::jsonb @> '[{\"tool_call_id\":\"%s\"}]'"
                        " ORDER BY id DESC LIMIT 1",
                        chat, id);
        assert_non_null(*content);
    }
    return v;
}

/* Asserts that call id of chat has exactly one result, that it holds want, and that its
 * is_error is is_error (-1: either). */
static void s_expect(const char *chat, const char *id, const char *want, int is_error) {
    char *content = NULL;
    assert_int_equal(s_results(chat, id, &content), 1);
    printf("  result: %s\n", content);
    assert_non_null(strstr(content, want));
    if (is_error >= 0) {
        assert_non_null(strstr(content, is_error ? "\"is_error\": true" : "\"is_error\": false"));
    }
    free(content);
}

/* Waits until the worker's log has a line holding every needle after byte from; returns the
 * line (caller frees). */
static char *s_wait_log(size_t from, const char *a, const char *b) {
    int64_t end = id_now_ms() + WAIT_MS;
    while (id_now_ms() < end) {
        char *text = proc_file_text(cluster_log(s_cluster, CLUSTER_WORKER, 0));
        char *line = text && strlen(text) > from ? text + from : NULL;
        while (line && *line) {
            char *nl = strchr(line, '\n');
            if (nl) {
                *nl = 0;
            }
            if (strstr(line, a) && (!b || strstr(line, b))) {
                char *out = mem_strdup(line);
                free(text);
                return out;
            }
            line = nl ? nl + 1 : NULL;
        }
        free(text);
        usleep(50 * 1000);
    }
    fail_msg("no worker log line with %s %s", a, b ? b : "");
    return NULL;
}

static size_t s_log_size(void) {
    char *text = proc_file_text(cluster_log(s_cluster, CLUSTER_WORKER, 0));
    size_t n = text ? strlen(text) : 0;
    free(text);
    return n;
}

/* The pid in a log line's pid= field. */
static pid_t s_pid_of(const char *line) {
    const char *p = strstr(line, " pid=");
    assert_non_null(p);
    return (pid_t)strtol(p + 5, NULL, 10);
}

/* --- The cases. --- */

static void test_a_model_call_of_an_mcp_tool_gets_the_real_result(void **state) {
    (void)state;
    int first = mockprov_request_count(s_mock);
    s_push_call("call_echo", "mcp__everything__echo", "{\"message\":\"hello from the model\"}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"everything\"]", "echo something", "the echo came back", chat);
    s_expect(chat, "call_echo", "Echo: hello from the model", 0);
    json_t *names = s_offered(first);
    assert_true(s_has_name(names, "mcp__everything__echo"));
    assert_true(s_has_name(names, "time"));
    assert_false(s_has_name(names, "mcp__files__read_text_file")); /* not enabled here */
    json_decref(names);
    /* The reply after the result saw it. */
    json_t *req = mockprov_request(s_mock, first + 1);
    assert_non_null(
        strstr(json_string_value(json_object_get(req, "body_text")), "Echo: hello from the model"));
    json_decref(req);
}

/* A tool's image takes the uploads' path: stored as the chat's file (linked, listed, served
 * with its SHA-256), the tool's result naming it instead of carrying its bytes, which the model
 * is not sent (ARCHITECTURE.md §3, "Files"). */
static void test_a_tool_s_image_becomes_a_file_of_the_chat(void **state) {
    (void)state;
    int first = mockprov_request_count(s_mock);
    s_push_call("call_img", "mcp__everything__get-tiny-image", "{}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"everything\"]", "show me the logo", "a logo", chat);
    s_expect(chat, "call_img", "\"file_id\"", 0);
    char *files = cluster_sql(s_cluster,
                              "SELECT string_agg(mime_type || ' ' || name || ' ' || size_bytes"
                              " || ' ' || encode(sha256, 'hex') || ' ' || id, ',')"
                              " FROM chat_files WHERE chat_id = '%s'",
                              chat);
    assert_non_null(files);
    printf("  files: %s\n", files);
    char type[32], name[128], hex[65], id[ID_UUID_LEN + 1];
    long size = 0;
    assert_int_equal(sscanf(files, "%31s %127s %ld %64s %36s", type, name, &size, hex, id), 5);
    assert_string_equal(type, "image/png");
    assert_true(size > 1000);
    free(files);
    /* The result row and the model's next request hold no base64 image. */
    char *data = cluster_sql(s_cluster,
                             "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'"
                             " AND content::text LIKE '%%iVBORw0KGgo%%'",
                             chat);
    assert_string_equal(data, "0");
    free(data);
    json_t *req = mockprov_request(s_mock, first + 1);
    const char *body = json_string_value(json_object_get(req, "body_text"));
    assert_null(strstr(body, "iVBORw0KGgo"));
    assert_non_null(strstr(body, id));
    json_decref(req);
    /* Served back whole: the bytes' SHA-256 is the one recorded. */
    char *url = mem_printf("%s/api/v2/chats/files/%s", cluster_url(s_cluster, 0), id);
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    free(url);
    proc_http_free(&r);
    char *sum = cluster_sql(s_cluster,
                            "SELECT encode(sha256(string_agg(data, '' ORDER BY seq)), 'hex')"
                            " FROM chat_file_chunks WHERE file_id = '%s'",
                            id);
    assert_string_equal(sum, hex);
    free(sum);
}

static void test_a_chat_without_servers_is_offered_no_mcp_tool(void **state) {
    (void)state;
    int first = mockprov_request_count(s_mock);
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[]", "no tools from servers", "plain", chat);
    json_t *names = s_offered(first);
    for (size_t i = 0; i < json_array_size(names); i++) {
        assert_null(strstr(json_string_value(json_array_get(names, i)), "mcp__"));
    }
    json_decref(names);
}

static void test_the_filesystem_server_reads_a_file_of_its_directory(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/note.txt", s_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("the contents of note.txt", f);
    fclose(f);
    char *args = mem_printf("{\"path\":\"%s\"}", path);
    s_push_call("call_read", "mcp__files__read_text_file", args);
    free(args);
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"files\",\"everything\"]", "read the note", "read it", chat);
    s_expect(chat, "call_read", "the contents of note.txt", 0);
}

static void test_every_page_of_tools_list_is_offered(void **state) {
    (void)state;
    int first = mockprov_request_count(s_mock);
    s_push_call("call_t5", "mcp__paged__t5", "{\"x\":\"y\"}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"paged\"]", "use the last page", "paged done", chat);
    json_t *names = s_offered(first);
    const char *want[] = {"mcp__paged__t1", "mcp__paged__t2", "mcp__paged__t3",
                          "mcp__paged__t4", "mcp__paged__t5", "mcp__paged__garbage"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_true(s_has_name(names, want[i]));
    }
    json_decref(names);
    s_expect(chat, "call_t5", "called t5 with {\\\"x\\\":\\\"y\\\"}", 0);
}

static void test_garbage_from_a_server_is_an_error_result_and_it_restarts(void **state) {
    (void)state;
    s_push_call("call_g", "mcp__paged__garbage", "{}");
    s_push_call("call_after", "mcp__paged__t1", "{\"x\":\"again\"}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"paged\"]", "garbage please", "after garbage", chat);
    s_expect(chat, "call_g", "garbage from the server", 1);
    /* The restarted server answers the next call of the same turn. */
    s_expect(chat, "call_after", "called t1", 0);
}

static void test_a_server_killed_mid_call_gives_an_error_result_and_the_turn_goes_on(void **state) {
    (void)state;
    size_t from = s_log_size();
    s_push_call("call_long", "mcp__everything__trigger-long-running-operation",
                "{\"duration\":30,\"steps\":30}");
    s_push_text("went on after the crash");
    char chat[ID_UUID_LEN + 1];
    s_create("[\"everything\"]", "run long", chat);
    char *line = s_wait_log(from, "event=mcp_call ", "tool=trigger-long-running-operation");
    pid_t pid = s_pid_of(line);
    free(line);
    printf("  killing MCP server pid %d mid-call\n", (int)pid);
    assert_int_equal(kill(pid, SIGKILL), 0);
    s_wait_waiting(chat);
    s_expect(chat, "call_long", "failed during the call", 1);
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'assistant' AND content::text LIKE '%%went on after the crash%%'",
                          chat);
    assert_string_equal(n, "1");
    free(n);
}

static void test_a_server_that_never_answers_gives_a_timeout_result(void **state) {
    (void)state;
    s_push_call("call_slow", "mcp__slow__trigger-long-running-operation",
                "{\"duration\":60,\"steps\":2}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"slow\"]", "never answered", "went on after the timeout", chat);
    s_expect(chat, "call_slow", "did not answer within 1500 ms", 1);
}

static void test_an_interrupt_during_an_mcp_call_ends_the_turn_at_once(void **state) {
    (void)state;
    size_t from = s_log_size();
    s_push_call("call_int", "mcp__everything__trigger-long-running-operation",
                "{\"duration\":60,\"steps\":60}");
    char chat[ID_UUID_LEN + 1];
    s_create("[\"everything\"]", "interrupt me", chat);
    free(s_wait_log(from, "event=mcp_call ", "tool=trigger-long-running-operation"));
    int64_t t0 = id_now_ms();
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/interrupt", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), "{}", &r), 0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    s_wait_waiting(chat);
    printf("  waiting %lld ms after the interrupt (the call would have run 60 s)\n",
           (long long)(id_now_ms() - t0));
    /* The cancelled call committed no result of the server's. */
    char *n =
        cluster_sql(s_cluster,
                    "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role = 'tool'"
                    " AND content::text LIKE '%%Long running operation completed%%'",
                    chat);
    assert_string_equal(n, "0");
    free(n);
    assert_true(s_results(chat, "call_int", NULL) <= 1);
}

static void
test_a_worker_killed_during_an_mcp_call_commits_one_result_after_takeover(void **state) {
    (void)state;
    size_t from = s_log_size();
    s_push_call("call_takeover", "mcp__everything__trigger-long-running-operation",
                "{\"duration\":2,\"steps\":2}");
    s_push_text("finished after the takeover");
    char chat[ID_UUID_LEN + 1];
    s_create("[\"everything\"]", "survive a crash", chat);
    free(s_wait_log(from, "event=mcp_call ", "tool=trigger-long-running-operation"));
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGKILL);
    assert_int_equal(s_results(chat, "call_takeover", NULL), 0);
    cluster_start(s_cluster, CLUSTER_WORKER, 0);
    s_wait_waiting(chat);
    s_expect(chat, "call_takeover", "Long running operation completed", 0);
}

/* The first member key anywhere in v (depth first), or NULL. Borrowed. */
static json_t *s_member(json_t *v, const char *key) {
    json_t *found = json_object_get(v, key);
    const char *k;
    json_t *m;
    size_t i;
    json_object_foreach(v, k, m) {
        found = found ? found : s_member(m, key);
    }
    json_array_foreach(v, i, m) {
        found = found ? found : s_member(m, key);
    }
    return found;
}

/* The env server's report (its structuredContent) as call id of chat committed it. New. */
static json_t *s_report(const char *chat, const char *id) {
    char *content = NULL;
    assert_int_equal(s_results(chat, id, &content), 1);
    json_t *v = json_loads(content, 0, NULL);
    free(content);
    json_t *report = json_incref(s_member(v, "structuredContent"));
    json_decref(v);
    assert_non_null(report);
    char *text = json_dumps(report, JSON_COMPACT);
    printf("  %s: %s\n", id, text);
    /* None of the worker's variables: no CHATFLEET_*, no database URL, no provider key. */
    assert_null(strstr(text, "CHATFLEET_"));
    assert_null(strstr(text, "postgres"));
    assert_null(strstr(text, "sk-test"));
    free(text);
    const json_t *env = json_object_get(report, "env");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)env, key, val) {
        assert_true(!strcmp(key, "GREETING") || !strcmp(key, "PATH") || !strcmp(key, "HOME") ||
                    !strcmp(key, "LANG") || !strcmp(key, "PWD")); /* PWD: bwrap's, the cwd */
    }
    assert_string_equal(json_string_value(json_object_get(env, "GREETING")), "hello sandbox");
    assert_string_equal(json_string_value(json_object_get(env, "PATH")), SANDBOX_PATH_DEFAULT);
    assert_string_equal(json_string_value(json_object_get(env, "LANG")), "C.UTF-8");
    assert_string_equal(json_string_value(json_object_get(env, "HOME")),
                        json_string_value(json_object_get(report, "cwd")));
    return report;
}

static const char *s_file(const json_t *report, const char *path) {
    return json_string_value(json_object_get(json_object_get(report, "files"), path));
}

static void test_an_mcp_server_sees_none_of_the_worker_s_secrets(void **state) {
    (void)state;
    char secret[128];
    char visible[128];
    snprintf(secret, sizeof secret, "%s/worker0.cert_secret", cluster_curve_dir(s_cluster));
    snprintf(visible, sizeof visible, "%s/visible.txt", s_dir);
    FILE *f = fopen(visible, "w");
    assert_non_null(f);
    fputs("visible", f);
    fclose(f);
    char *args = mem_printf("{\"paths\":[\"%s\",\"%s\",\"%s\"]}", secret, s_config, visible);
    s_push_call("call_env", "mcp__env__probe", args);
    s_push_call("call_wide", "mcp__envwide__probe", args);
    free(args);
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"env\",\"envwide\"]", "what do you see", "probed", chat);
    json_t *env = s_report(chat, "call_env");
    json_t *wide = s_report(chat, "call_wide");
    if (s_sandboxed) {
        /* Outside every path the server lists: absent. */
        assert_string_equal(s_file(env, secret), "ENOENT");
        assert_string_equal(s_file(env, s_config), "ENOENT");
        assert_string_equal(s_file(env, visible), "ENOENT");
        /* envwide lists /tmp: the key and the config file in it are masked (/dev/null on a
         * nodev mount), the rest of /tmp is there. */
        assert_string_equal(s_file(wide, secret), "EACCES");
        assert_string_equal(s_file(wide, s_config), "EACCES");
        assert_string_equal(s_file(wide, visible), "read 7 bytes: visible");
    } else {
        printf("  no usable bwrap here: the environment only was checked\n");
    }
    json_decref(env);
    json_decref(wide);
}

/* POST /chats with a text message and extra (members of the body) is refused with a 400
 * naming field. */
static void s_refused(const char *extra, const char *field) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"x\"}],%s}", extra);
    char out[4096];
    assert_int_equal(s_post_chat(body, out, sizeof out), 400);
    char *want = mem_printf("\"field\":\"%s\"", field);
    assert_non_null(strstr(out, want));
    free(want);
    free(body);
}

static void test_a_streamable_http_server_answers_a_call(void **state) {
    (void)state;
    s_push_call("call_web", "mcp__web__echo", "{\"message\":\"over http\"}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"web\"]", "echo over http", "http done", chat);
    s_expect(chat, "call_web", "Echo: over http", 0);
    /* Every request but an initialize carried the session and the negotiated version (and
     * the configured Authorization header: the server answers 401 without it). */
    char *log = proc_file_text(s_http_log);
    assert_non_null(log);
    int initializes = 0;
    int in_session = 0;
    for (char *line = log; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = 0;
        }
        if (strstr(line, "session=- protocol=-")) {
            initializes++;
        } else {
            assert_non_null(strstr(line, "protocol=2025-06-18"));
            in_session++;
        }
        line = nl ? nl + 1 : NULL;
    }
    printf("  http requests: %d initialize, %d in a session\n", initializes, in_session);
    assert_true(initializes >= 1 && in_session >= 3);
    free(log);
}

static void test_an_expired_http_session_is_an_error_then_renewed(void **state) {
    (void)state;
    /* A restarted server knows no session: the next call gets 404, which fails that call
     * and makes the worker initialize again; the call after it succeeds. */
    (void)proc_stop(s_http_pid, 5000);
    s_http_start();
    s_push_call("call_stale", "mcp__web__echo", "{\"message\":\"stale\"}");
    s_push_call("call_fresh", "mcp__web__echo", "{\"message\":\"fresh\"}");
    char chat[ID_UUID_LEN + 1];
    s_run_turn("[\"web\"]", "survive a server restart", "session renewed", chat);
    s_expect(chat, "call_stale", "session expired", 1);
    s_expect(chat, "call_fresh", "Echo: fresh", 0);
}

static void test_create_refuses_servers_the_deployment_does_not_have(void **state) {
    (void)state;
    s_refused("\"mcp_servers\":[\"everything\",\"nope\"]", "mcp_servers[1]");
    s_refused("\"mcp_servers\":[\"paged\",\"paged\"]", "mcp_servers[1]");
    s_refused("\"mcp_servers\":[\"paged\",7]", "mcp_servers[1]");
    s_refused("\"mcp_servers\":\"paged\"", "mcp_servers");
    s_refused("\"dynamic_tools\":[{\"name\":\"mcp__paged__t1\"}]", "dynamic_tools[0].name");
}

/* --- Setup. --- */

/* npm install of both servers into the build directory; 77 when the registry is unreachable. */
static int s_install(const char *build) {
    snprintf(s_npm, sizeof s_npm, "%s/mcp-npm", build);
    char *cmd = mem_printf("mkdir -p '%s' && npm install --no-audit --no-fund --prefix '%s'"
                           " @modelcontextprotocol/server-everything"
                           " @modelcontextprotocol/server-filesystem > '%s/npm.log' 2>&1",
                           s_npm, s_npm, s_npm);
    int rc = system(cmd);
    free(cmd);
    if (rc == 0) {
        return 0;
    }
    if (system("timeout 30 npm ping > /dev/null 2>&1") != 0) {
        fprintf(stderr, "npm or its registry is unreachable: skipped\n");
        return 77;
    }
    fprintf(stderr, "npm install of the MCP servers failed (see %s/npm.log)\n", s_npm);
    return 1;
}

static int s_setup(void **state) {
    (void)state;
    const char *build = getenv("CHATFLEET_BUILD_DIR");
    const char *source = getenv("CHATFLEET_SOURCE_DIR");
    ASSERT(build && source);
    snprintf(s_source, sizeof s_source, "%s", source);
    s_mock = mockprov_new();
    ASSERT(s_mock);
    s_http_port = proc_free_port();
    snprintf(s_http_log, sizeof s_http_log, "test_worker_mcp.http.%d.log", (int)getpid());
    s_http_start();
    snprintf(s_dir, sizeof s_dir, "/tmp/cf-mcp-files.XXXXXX");
    ASSERT(mkdtemp(s_dir));
    snprintf(s_wide, sizeof s_wide, "/tmp/cf-mcp-wide.XXXXXX");
    ASSERT(mkdtemp(s_wide));
    char *copy = mem_printf("cp '%s/tests/mcp/env_server.mjs' '%s/'", s_source, s_wide);
    ASSERT(system(copy) == 0);
    free(copy);
    snprintf(s_config, sizeof s_config, "/tmp/cf-mcp-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    const char *ev = "@modelcontextprotocol/server-everything/dist/index.js";
    /* Each stdio server lists the files it runs (ro_paths): the sandbox shows nothing else of
     * the machine but its system directories (deploy/OPERATIONS.md, "MCP servers"). */
    char scripts[600];
    snprintf(scripts, sizeof scripts, "%s/tests/mcp", s_source);
    fprintf(f,
            "{\"models\":[{\"name\":\"mock\",\"provider\":\"openai\",\"model\":\"gpt\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true},"
            "{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\"}],"
            "\"mcp_servers\":{"
            "\"everything\":{\"command\":\"node\",\"args\":[\"%s/node_modules/%s\",\"stdio\"],"
            "\"sandbox\":{\"ro_paths\":[\"%s\"]}},"
            "\"slow\":{\"command\":\"node\",\"args\":[\"%s/node_modules/%s\",\"stdio\"],"
            "\"timeout_ms\":1500,\"sandbox\":{\"ro_paths\":[\"%s\"]}},"
            "\"files\":{\"command\":\"node\",\"args\":[\"%s/node_modules/"
            "@modelcontextprotocol/server-filesystem/dist/index.js\",\"%s\"],"
            "\"sandbox\":{\"ro_paths\":[\"%s\"],\"rw_paths\":[\"%s\"]}},"
            "\"paged\":{\"command\":\"node\",\"args\":[\"%s/paged_server.mjs\"],"
            "\"sandbox\":{\"ro_paths\":[\"%s\"]}},"
            "\"env\":{\"command\":\"node\",\"args\":[\"%s/env_server.mjs\"],"
            "\"env\":{\"GREETING\":\"hello sandbox\"},\"sandbox\":{\"ro_paths\":[\"%s\"]}},"
            "\"envwide\":{\"command\":\"node\",\"args\":[\"%s/env_server.mjs\"],"
            "\"env\":{\"GREETING\":\"hello sandbox\"},"
            "\"sandbox\":{\"ro_paths\":[\"%s\",\"/tmp\"]}},"
            "\"web\":{\"url\":\"http://127.0.0.1:%d/mcp\",\"headers\":{\"Authorization\":"
            "\"Bearer " HTTP_TOKEN "\"}}}}",
            mockprov_url(s_mock), s_npm, ev, s_npm, s_npm, ev, s_npm, s_npm, s_dir, s_npm, s_dir,
            scripts, scripts, scripts, scripts, s_wide, s_wide, s_http_port);
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    /* Titles from the sim, so that the mock's scripted replies all go to the turns. */
    s_sandboxed = sandbox_usable(NULL, 0);
    const char *env[] = {
        cfg, "MOCK_KEY=sk-test", "CHATFLEET_TITLE_MODEL=sim",
        s_sandboxed ? "CHATFLEET_MCP_SANDBOX=require" : "CHATFLEET_MCP_SANDBOX=auto", NULL};
    /* CURVE: the worker has a secret key file (CHATFLEET_CURVE_CERT) for the servers to miss. */
    cluster_opts_t o = {
        .name = "test_worker_mcp", .gateways = 1, .workers = 1, .env = env, .curve = 1};
    s_cluster = cluster_new(&o);
    free(cfg);
    /* The tools a step offers are those of the servers ready by then: wait for all four. */
    const char *names[] = {"server=everything ", "server=slow ", "server=files ",
                           "server=paged ",      "server=env ",  "server=envwide ",
                           "server=web "};
    for (int i = 0; i < 7; i++) {
        free(s_wait_log(0, "event=mcp_ready ", names[i]));
    }
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_cluster);
    mockprov_destroy(&s_mock);
    (void)proc_stop(s_http_pid, 5000);
    unlink(s_config);
    char *cmd = mem_printf("rm -rf '%s' '%s'", s_dir, s_wide);
    (void)!system(cmd);
    free(cmd);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    const char *build = getenv("CHATFLEET_BUILD_DIR");
    int rc = s_install(build ? build : ".");
    if (rc != 0) {
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_model_call_of_an_mcp_tool_gets_the_real_result),
        cmocka_unit_test(test_a_tool_s_image_becomes_a_file_of_the_chat),
        cmocka_unit_test(test_a_chat_without_servers_is_offered_no_mcp_tool),
        cmocka_unit_test(test_the_filesystem_server_reads_a_file_of_its_directory),
        cmocka_unit_test(test_every_page_of_tools_list_is_offered),
        cmocka_unit_test(test_garbage_from_a_server_is_an_error_result_and_it_restarts),
        cmocka_unit_test(test_a_server_killed_mid_call_gives_an_error_result_and_the_turn_goes_on),
        cmocka_unit_test(test_a_server_that_never_answers_gives_a_timeout_result),
        cmocka_unit_test(test_an_interrupt_during_an_mcp_call_ends_the_turn_at_once),
        cmocka_unit_test(test_a_worker_killed_during_an_mcp_call_commits_one_result_after_takeover),
        cmocka_unit_test(test_a_streamable_http_server_answers_a_call),
        cmocka_unit_test(test_an_expired_http_session_is_an_error_then_renewed),
        cmocka_unit_test(test_create_refuses_servers_the_deployment_does_not_have),
        cmocka_unit_test(test_an_mcp_server_sees_none_of_the_worker_s_secrets),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
