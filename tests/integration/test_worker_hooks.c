/*
 * Lifecycle hooks end to end (ARCHITECTURE.md §7.10, issue 18): a cluster of real processes
 * (its gateway and worker both dispatch) whose default model is the mock OpenAI server
 * scripting calls of the local `echo` tool and of an MCP tool (tests/mcp/paged_server.mjs),
 * and a hook consumer this test runs (tests/support/hookcons.h). The must-show turn: every
 * event with its ids in order for a turn with an MCP call and a compaction. A tool call sends
 * pre_tool_use and post_tool_use, signed, with their ids; an input override is what the tool
 * runs with; a deny answers the call as denied and the turn goes on; a consumer that goes down
 * fails the turn closed (the chat in error, naming the hook) and refuses new prompts at the
 * gateway, and the next turn after it is back succeeds; a worker killed while a pre_tool_use
 * is held leaves the step to the next owner, which sends the same event id again (a duplicate
 * delivery) and commits one result; an invalid answer to stop ends the turn in error; a
 * compaction sends pre_compact before its summary call and post_compact after its commit, and
 * a failed pre_compact ends the turn in error with no summary call made; context from answers
 * becomes rows for its audience, a stop's continues a turn once, a pre_compact's guides the
 * summary. The gateway's prompt decisions are test_gateway_hooks.c's, a structured request's stop
 * test_worker_hooks_structured.c's.
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
#include "hookcons.h"
#include "hooks.h"
#include "id.h"
#include "mem.h"
#include "mockprov.h"
#include "proc.h"

#define WAIT_MS  40000
#define S_SECRET "integration-secret"

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static hookcons_t *s_cons;
static int s_port;
static char s_config[256];

static void s_push_text(const char *text) {
    mockprov_push_openai_text(s_mock, text);
}

static void s_push_echo(const char *id, const char *args) {
    mockprov_push_openai_call(s_mock, id, "echo", args);
}

static void s_create(const char *text, char chat[ID_UUID_LEN + 1]) {
    assert_int_equal(cluster_create_chat(s_cluster, 0, text, chat), 201);
}

/* Sends text to chat; returns the status, and the parsed answer in *out when out is given. */
static long s_send(const char *chat, const char *text, json_t **out) {
    return cluster_send(s_cluster, 0, chat, text, out);
}

/* Waits until the chat's status (and owner) is want ("waiting:true", "error:true"). */
static void s_wait_status(const char *chat, const char *want) {
    char got[64];
    if (cluster_wait_status(s_cluster, chat, want, WAIT_MS, got, sizeof got) != 0) {
        fail_msg("chat %s is %s, not %s", chat, got, want);
    }
}

/* The one tool row answering call id in chat, as text (caller frees). */
static char *s_result(const char *chat, const char *id) {
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'tool' AND content::jsonb @> '[{\"tool_call_id\":\"%s\"}]'",
                          chat, id);
    assert_string_equal(n, "1");
    free(n);
    char *c =
        cluster_sql(s_cluster,
                    "SELECT content::jsonb::text FROM chat_messages WHERE chat_id = '%s' AND role ="
                    " 'tool' AND content::jsonb @> '[{\"tool_call_id\":\"%s\"}]'",
                    chat, id);
    assert_non_null(c);
    printf("  result: %s\n", c);
    return c;
}

/* The requests the consumer kept from index from on for chat, each signed (an array). */
static json_t *s_events(int from, const char *chat) {
    json_t *out = hookcons_events(s_cons, from, chat, S_SECRET);
    assert_non_null(out); /* every delivery verifies */
    return out;
}

/* Polls until the consumer has n events of chat; returns them (an array). */
static json_t *s_wait_events(int from, const char *chat, size_t n) {
    int64_t end = id_now_ms() + WAIT_MS;
    for (;;) {
        json_t *evs = s_events(from, chat);
        if (json_array_size(evs) >= n || id_now_ms() > end) {
            return evs;
        }
        json_decref(evs);
        usleep(20 * 1000);
    }
}

static void test_a_tool_call_is_announced_before_and_after_with_its_ids(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "pre_tool_use", 200,
                    "{\"decision\":\"allow\",\"input\":{\"text\":\"overridden\"}}", false);
    int from = hookcons_seen(s_cons);
    s_push_echo("call_ov", "{\"text\":\"original\"}");
    s_push_text("echo done");
    char chat[ID_UUID_LEN + 1];
    s_create("echo please", chat);
    s_wait_status(chat, "waiting:true");
    char *r = s_result(chat, "call_ov");
    assert_non_null(strstr(r, "overridden")); /* the tool ran with the consumer's input */
    assert_null(strstr(r, "original"));
    free(r);
    json_t *evs = s_events(from, chat);
    assert_int_equal(json_array_size(evs), 5);
    /* The gateway's admission events first, before anything was committed. */
    json_t *start = json_array_get(evs, 0);
    json_t *prompt = json_array_get(evs, 1);
    assert_string_equal(hookcons_str(start, "event", false), "session_start");
    assert_string_equal(hookcons_str(prompt, "event", false), "user_prompt_submit");
    assert_string_equal(hookcons_str(prompt, "prompt", true), "echo please");
    assert_string_equal(hookcons_str(start, "submission_id", true),
                        hookcons_str(prompt, "submission_id", true));
    json_t *pre = json_array_get(evs, 2);
    json_t *post = json_array_get(evs, 3);
    json_t *stop = json_array_get(evs, 4);
    assert_string_equal(hookcons_str(stop, "event", false),
                        "stop"); /* the turn's end, after its reply */
    assert_string_equal(hookcons_str(pre, "event", false), "pre_tool_use");
    assert_string_equal(hookcons_str(post, "event", false), "post_tool_use");
    assert_string_equal(hookcons_str(pre, "tool_call_id", true), "call_ov");
    assert_string_equal(hookcons_str(pre, "tool_name", true), "echo");
    assert_string_equal(hookcons_str(post, "tool_call_id", true), "call_ov");
    /* The ids are those of the durable coordinates (chat, history_version, event, call). */
    json_int_t hv =
        json_integer_value(json_object_get(json_object_get(pre, "data"), "history_version"));
    char id[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id(chat, 0, 0, HOOKS_SESSION_START, hookcons_str(start, "submission_id", true), id);
    assert_string_equal(hookcons_str(start, "event_id", false), id);
    hooks_event_id(chat, 0, 0, HOOKS_USER_PROMPT_SUBMIT,
                   hookcons_str(prompt, "submission_id", true), id);
    assert_string_equal(hookcons_str(prompt, "event_id", false), id);
    hooks_event_id(chat, hv, 0, HOOKS_PRE_TOOL_USE, "call_ov", id);
    assert_string_equal(hookcons_str(pre, "event_id", false), id);
    hooks_event_id(chat, hv, 0, HOOKS_POST_TOOL_USE, "call_ov", id);
    assert_string_equal(hookcons_str(post, "event_id", false), id);
    json_int_t stop_hv =
        json_integer_value(json_object_get(json_object_get(stop, "data"), "history_version"));
    assert_true(stop_hv > hv);
    hooks_event_id(chat, stop_hv, 0, HOOKS_STOP, NULL, id);
    assert_string_equal(hookcons_str(stop, "event_id", false), id);
    char *post_text = json_dumps(post, JSON_COMPACT);
    assert_non_null(strstr(post_text, "overridden")); /* post_tool_use carries the result */
    free(post_text);
    json_decref(evs);
}

static void test_the_effective_config_shows_hooks_with_the_secret_redacted(void **state) {
    (void)state;
    char *want = mem_printf("event=hooks_config url=http://127.0.0.1:%d/hooks secret=***", s_port);
    char *log = NULL;
    int64_t end = id_now_ms() + WAIT_MS; /* the worker may still be starting */
    for (;;) {
        log = proc_file_text(cluster_log(s_cluster, CLUSTER_WORKER, 0));
        if ((log && strstr(log, want)) || id_now_ms() > end) {
            break;
        }
        free(log);
        usleep(50 * 1000);
    }
    assert_non_null(log);
    assert_non_null(strstr(log, want));
    assert_null(strstr(log, S_SECRET));
    free(want);
    free(log);
}

static void test_a_denied_call_is_answered_as_denied_and_the_turn_goes_on(void **state) {
    (void)state;
    hookcons_answer(s_cons, "pre_tool_use", 200,
                    "{\"decision\":\"deny\",\"reason\":\"echo is not allowed\"}", false);
    s_push_echo("call_deny", "{\"text\":\"secret\"}");
    s_push_text("told it was denied");
    char chat[ID_UUID_LEN + 1];
    s_create("echo something forbidden", chat);
    s_wait_status(chat, "waiting:true");
    char *r = s_result(chat, "call_deny");
    assert_non_null(strstr(r, "denied by a pre_tool_use hook: echo is not allowed"));
    assert_non_null(strstr(r, "\"is_error\": true"));
    free(r);
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'assistant' AND content::text LIKE '%%told it was denied%%'",
                          chat);
    assert_string_equal(n, "1");
    free(n);
}

static void test_a_consumer_down_fails_the_turn_closed_then_it_recovers(void **state) {
    (void)state;
    /* The consumer goes down while it holds the pre_tool_use (the gateway's events passed). */
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "pre_tool_use", 200, "{}", true);
    int from = hookcons_seen(s_cons);
    s_push_echo("call_down", "{\"text\":\"x\"}");
    char chat[ID_UUID_LEN + 1];
    s_create("echo while the consumer goes down", chat);
    json_decref(s_wait_events(from, chat, 3));
    hookcons_destroy(&s_cons);
    s_wait_status(chat, "error:true");
    char *err = cluster_sql(s_cluster, "SELECT last_error::text FROM chats WHERE id = '%s'", chat);
    printf("  last_error: %s\n", err);
    assert_non_null(strstr(err, "hook_dispatch_failed"));
    assert_non_null(strstr(err, "pre_tool_use hook failed"));
    free(err);
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'tool'",
                          chat);
    assert_string_equal(n, "0"); /* the tool never ran */
    free(n);
    /* While it is down, a new prompt is refused at the gateway and nothing is stored. */
    char *before = cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages");
    long st = s_send(chat, "a prompt nobody can judge", NULL);
    assert_int_equal(st, 502);
    char *after = cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages");
    assert_string_equal(before, after);
    free(before);
    free(after);
    /* Back up on the same port: the next turn runs its tool. */
    s_cons = hookcons_new(s_port);
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    s_push_echo("call_up", "{\"text\":\"back\"}");
    s_push_text("recovered");
    char chat2[ID_UUID_LEN + 1];
    s_create("echo after recovery", chat2);
    s_wait_status(chat2, "waiting:true");
    char *r = s_result(chat2, "call_up");
    assert_non_null(strstr(r, "back"));
    free(r);
}

static void test_an_invalid_stop_answer_ends_the_turn_in_error(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "stop", 200, "{\"decision\":\"deny\"}", false);
    s_push_text("a reply the stop hook refuses");
    char chat[ID_UUID_LEN + 1];
    s_create("just talk", chat);
    s_wait_status(chat, "error:true");
    char *err = cluster_sql(s_cluster, "SELECT last_error::text FROM chats WHERE id = '%s'", chat);
    printf("  last_error: %s\n", err);
    assert_non_null(strstr(err, "stop hook failed: hook answer: decision: not accepted on stop"));
    free(err);
    hookcons_answer(s_cons, "stop", 200, "{}", false);
}

/* The whole (not streamed) answer to a summary call. */
static void s_push_summary(const char *text) {
    char *body = mem_printf("{\"id\":\"s\",\"object\":\"chat.completion\",\"choices\":[{"
                            "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                            "\"%s\"},\"finish_reason\":\"stop\"}]}",
                            text);
    mockprov_reply_t *r = mockprov_reply_new(200, "application/json");
    mockprov_reply_body(r, body, 0, 0);
    mockprov_push(s_mock, &r);
    free(body);
}

static long s_compact(const char *chat) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/compact", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), "{}", &r), 0);
    long status = r.status;
    proc_http_free(&r);
    return status;
}

static void test_a_compaction_is_announced_and_fails_closed(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    s_push_text("first reply");
    char chat[ID_UUID_LEN + 1];
    s_create("something to compact", chat);
    s_wait_status(chat, "waiting:true");
    int from = hookcons_seen(s_cons);
    s_push_summary("SUMMARY-HOOKED");
    assert_int_equal(s_compact(chat), 200);
    s_wait_status(chat, "waiting:true");
    json_t *evs = s_events(from, chat);
    assert_int_equal(json_array_size(evs), 3);
    json_t *pre = json_array_get(evs, 0);
    json_t *post = json_array_get(evs, 1);
    assert_string_equal(hookcons_str(pre, "event", false), "pre_compact");
    /* post_compact once the triplet committed, at that commit's history_version. */
    assert_string_equal(hookcons_str(post, "event", false), "post_compact");
    assert_string_equal(hookcons_str(post, "source", true), "manual");
    assert_string_equal(hookcons_str(post, "summary", true), "SUMMARY-HOOKED");
    json_int_t hv =
        json_integer_value(json_object_get(json_object_get(post, "data"), "history_version"));
    char *committed = cluster_sql(s_cluster,
                                  "SELECT max(revision) FROM chat_messages WHERE chat_id = '%s'"
                                  " AND content::text LIKE '%%SUMMARY-HOOKED%%'",
                                  chat);
    assert_int_equal(hv, atoll(committed));
    free(committed);
    char id[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id(chat, hv, 0, HOOKS_POST_COMPACT, NULL, id);
    assert_string_equal(hookcons_str(post, "event_id", false), id);
    assert_string_equal(hookcons_str(json_array_get(evs, 2), "event", false),
                        "stop"); /* the turn's end */
    json_decref(evs);
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND"
                          " content::text LIKE '%%SUMMARY-HOOKED%%'",
                          chat);
    assert_string_equal(n, "2"); /* the boundary row and the tool result */
    free(n);
    /* A consumer refusing to answer sensibly stops the compaction: no summary call is made. */
    s_push_text("second reply");
    char chat2[ID_UUID_LEN + 1];
    s_create("another to compact", chat2);
    s_wait_status(chat2, "waiting:true");
    hookcons_answer(s_cons, "pre_compact", 500, "{}", false);
    int calls = mockprov_request_count(s_mock);
    assert_int_equal(s_compact(chat2), 200);
    s_wait_status(chat2, "error:true");
    char *err = cluster_sql(s_cluster, "SELECT last_error::text FROM chats WHERE id = '%s'", chat2);
    printf("  last_error: %s\n", err);
    assert_non_null(strstr(err, "pre_compact hook failed: hook consumer: HTTP status 500"));
    free(err);
    assert_int_equal(mockprov_request_count(s_mock), calls);
    hookcons_answer(s_cons, "pre_compact", 200, "{}", false);
}

static void test_a_step_made_again_after_takeover_sends_the_same_event_ids(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "pre_tool_use", 200, "{}", true); /* held until the worker dies */
    int from = hookcons_seen(s_cons);
    s_push_echo("call_again", "{\"text\":\"once\"}");
    s_push_text("finished after the takeover");
    char chat[ID_UUID_LEN + 1];
    s_create("echo across a crash", chat);
    json_decref(s_wait_events(from, chat, 3)); /* session_start, user_prompt_submit, the held one */
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGKILL);
    hookcons_answer(s_cons, "pre_tool_use", 200, "{}", false);
    cluster_start(s_cluster, CLUSTER_WORKER, 0);
    s_wait_status(chat, "waiting:true");
    json_t *evs = s_events(from, chat);
    assert_int_equal(json_array_size(evs), 6);
    assert_string_equal(hookcons_str(json_array_get(evs, 0), "event", false), "session_start");
    assert_string_equal(hookcons_str(json_array_get(evs, 1), "event", false), "user_prompt_submit");
    json_t *first = json_array_get(evs, 2);
    json_t *again = json_array_get(evs, 3);
    assert_string_equal(hookcons_str(first, "event", false), "pre_tool_use");
    assert_string_equal(hookcons_str(again, "event", false), "pre_tool_use");
    /* Delivered twice with one id: the consumer deduplicates on it. */
    assert_string_equal(hookcons_str(first, "event_id", false),
                        hookcons_str(again, "event_id", false));
    assert_string_equal(hookcons_str(json_array_get(evs, 4), "event", false), "post_tool_use");
    assert_string_equal(hookcons_str(json_array_get(evs, 5), "event", false), "stop");
    json_decref(evs);
    char *r = s_result(chat, "call_again"); /* exactly one result committed */
    free(r);
}

/* Waits until the worker's log holds text. */
static void s_wait_log(const char *text) {
    int64_t end = id_now_ms() + WAIT_MS;
    for (;;) {
        char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_WORKER, 0));
        bool found = log && strstr(log, text);
        free(log);
        if (found || id_now_ms() > end) {
            assert_true(found);
            return;
        }
        usleep(50 * 1000);
    }
}

/* Asserts that ev is event with the id of (chat, hv, event, call id or submission). */
static void s_expect_event(const json_t *ev, hooks_event_t event, const char *chat,
                           const char *coordinate) {
    assert_string_equal(hookcons_str(ev, "event", false), hooks_event_name(event));
    json_int_t hv =
        json_integer_value(json_object_get(json_object_get(ev, "data"), "history_version"));
    char id[HOOKS_EVENT_ID_LEN + 1];
    hooks_event_id(chat, hv, 0, event, coordinate, id);
    assert_string_equal(hookcons_str(ev, "event_id", false), id);
    printf("  %-18s history_version=%lld id=%.12s\n", hooks_event_name(event), (long long)hv, id);
}

/* The must-show turn (issue 18): every event with its ids, in order, for a turn whose model
 * calls an MCP tool (its input overridden by pre_tool_use) and a compaction after it. */
static void test_every_event_of_a_turn_with_an_mcp_call_and_a_compaction(void **state) {
    (void)state;
    s_wait_log("event=mcp_ready server=paged");
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "pre_tool_use", 200, "{\"input\":{\"x\":\"hooked\"}}", false);
    int from = hookcons_seen(s_cons);
    mockprov_push_openai_call(s_mock, "call_mcp", "mcp__paged__t1", "{\"x\":\"model\"}");
    s_push_text("the MCP tool answered");
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(
        cluster_post_chat(s_cluster, 0,
                          "{\"mcp_servers\":[\"paged\"],\"content\":[{\"type\":\"text\","
                          "\"text\":\"call the paged tool\"}]}",
                          chat),
        201);
    s_wait_status(chat, "waiting:true");
    char *res = s_result(chat, "call_mcp");
    assert_non_null(strstr(res, "called t1 with {\\\"x\\\":\\\"hooked\\\"}"));
    free(res);
    hookcons_answer(s_cons, "pre_tool_use", 200, "{}", false);
    s_push_summary("SUMMARY-OF-THE-MCP-TURN");
    assert_int_equal(s_compact(chat), 200);
    s_wait_status(chat, "waiting:true");
    json_t *evs = s_events(from, chat);
    assert_int_equal(json_array_size(evs), 8);
    const char *sub = hookcons_str(json_array_get(evs, 0), "submission_id", true);
    s_expect_event(json_array_get(evs, 0), HOOKS_SESSION_START, chat, sub);
    s_expect_event(json_array_get(evs, 1), HOOKS_USER_PROMPT_SUBMIT, chat, sub);
    s_expect_event(json_array_get(evs, 2), HOOKS_PRE_TOOL_USE, chat, "call_mcp");
    assert_string_equal(hookcons_str(json_array_get(evs, 2), "tool_name", true), "mcp__paged__t1");
    s_expect_event(json_array_get(evs, 3), HOOKS_POST_TOOL_USE, chat, "call_mcp");
    char *post = json_dumps(json_array_get(evs, 3), JSON_COMPACT);
    assert_non_null(strstr(post, "called t1 with")); /* the server's result */
    free(post);
    s_expect_event(json_array_get(evs, 4), HOOKS_STOP, chat, NULL);
    s_expect_event(json_array_get(evs, 5), HOOKS_PRE_COMPACT, chat, NULL);
    s_expect_event(json_array_get(evs, 6), HOOKS_POST_COMPACT, chat, NULL);
    s_expect_event(json_array_get(evs, 7), HOOKS_STOP, chat, NULL);
    json_decref(evs);
}

static void test_a_failed_pre_tool_use_of_an_mcp_call_ends_the_turn_in_error(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "pre_tool_use", 500, "{}", false);
    mockprov_push_openai_call(s_mock, "call_mcp_fail", "mcp__paged__t2", "{}");
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(
        cluster_post_chat(s_cluster, 0,
                          "{\"mcp_servers\":[\"paged\"],\"content\":[{\"type\":\"text\","
                          "\"text\":\"a call the hook fails\"}]}",
                          chat),
        201);
    s_wait_status(chat, "error:true");
    char *err = cluster_sql(s_cluster, "SELECT last_error::text FROM chats WHERE id = '%s'", chat);
    printf("  last_error: %s\n", err);
    assert_non_null(strstr(err, "pre_tool_use hook failed: hook consumer: HTTP status 500"));
    free(err);
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'tool'",
                          chat);
    assert_string_equal(n, "0"); /* the MCP call was never made */
    free(n);
    hookcons_answer(s_cons, "pre_tool_use", 200, "{}", false);
}

/* The messages the owner sees, as text (caller frees). */
static char *s_visible(const char *chat) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    char *text = mem_strdup(r.body);
    proc_http_free(&r);
    return text;
}

static void test_context_from_answers_becomes_rows_for_its_audience(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "user_prompt_submit", 200,
                    "{\"model_context\":\"PROMPT-MODEL-CTX\",\"user_context\":\"PROMPT-USER-CTX\"}",
                    false);
    hookcons_answer(s_cons, "post_tool_use", 200, "{\"model_context\":\"TOOL-MODEL-CTX\"}", false);
    int calls = mockprov_request_count(s_mock);
    s_push_echo("call_ctx", "{\"text\":\"ctx\"}");
    s_push_text("answered with context");
    char chat[ID_UUID_LEN + 1];
    s_create("a prompt with context", chat);
    s_wait_status(chat, "waiting:true");
    /* The rows: the prompt's model-only context and its user-only notice, then after the
     * tool's result its model-only context. */
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg(role || '/' || visibility || '/' ||"
                             " (content -> 0 ->> 'type'), ' ' ORDER BY id) FROM chat_messages"
                             " WHERE chat_id = '%s' AND role <> 'system'",
                             chat);
    printf("  rows: %s\n", rows);
    assert_string_equal(rows, "user/both/text user/model/text assistant/user/text"
                              " assistant/both/tool-call tool/both/tool-result user/model/text"
                              " assistant/both/text");
    free(rows);
    /* The model saw both model contexts, in the second request the tool context too. */
    json_t *first = mockprov_request(s_mock, calls);
    json_t *second = mockprov_request(s_mock, calls + 1);
    char *a = json_dumps(json_object_get(first, "body"), JSON_COMPACT);
    char *b = json_dumps(json_object_get(second, "body"), JSON_COMPACT);
    assert_non_null(strstr(a, "PROMPT-MODEL-CTX"));
    assert_null(strstr(a, "PROMPT-USER-CTX")); /* the user's notice never reaches a model */
    assert_non_null(strstr(b, "TOOL-MODEL-CTX"));
    free(a);
    free(b);
    json_decref(first);
    json_decref(second);
    /* The owner sees the notice, never the model's context. */
    char *visible = s_visible(chat);
    assert_non_null(strstr(visible, "PROMPT-USER-CTX"));
    assert_null(strstr(visible, "PROMPT-MODEL-CTX"));
    assert_null(strstr(visible, "TOOL-MODEL-CTX"));
    free(visible);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
    hookcons_answer(s_cons, "post_tool_use", 200, "{}", false);
}

static void test_a_stop_with_model_context_continues_the_turn_once(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "stop", 200, "{\"model_context\":\"KEEP-GOING\"}", false);
    int calls = mockprov_request_count(s_mock);
    int from = hookcons_seen(s_cons);
    s_push_text("the first answer");
    s_push_text("the second answer");
    char chat[ID_UUID_LEN + 1];
    s_create("answer twice", chat);
    s_wait_status(chat, "waiting:true");
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg(role || '/' || visibility, ' ' ORDER BY id) FROM"
                             " chat_messages WHERE chat_id = '%s' AND role <> 'system'",
                             chat);
    printf("  rows: %s\n", rows);
    /* One continuation, though the second stop answered with context too. */
    assert_string_equal(rows, "user/both assistant/both user/model assistant/both");
    free(rows);
    assert_int_equal(mockprov_request_count(s_mock), calls + 2);
    json_t *second = mockprov_request(s_mock, calls + 1);
    char *b = json_dumps(json_object_get(second, "body"), JSON_COMPACT);
    assert_non_null(strstr(b, "KEEP-GOING"));
    free(b);
    json_decref(second);
    json_t *evs = s_events(from, chat);
    size_t n = json_array_size(evs);
    assert_string_equal(hookcons_str(json_array_get(evs, n - 2), "event", false), "stop");
    assert_string_equal(hookcons_str(json_array_get(evs, n - 1), "event", false), "stop");
    json_decref(evs);
    hookcons_answer(s_cons, "stop", 200, "{}", false);
}

static void test_compaction_context_guides_the_summary_and_follows_it(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    s_push_text("something worth compacting");
    char chat[ID_UUID_LEN + 1];
    s_create("a chat to compact with context", chat);
    s_wait_status(chat, "waiting:true");
    hookcons_answer(s_cons, "pre_compact", 200, "{\"model_context\":\"FOCUS-ON-CITIES\"}", false);
    hookcons_answer(
        s_cons, "post_compact", 200,
        "{\"model_context\":\"AFTER-COMPACT-CTX\",\"user_context\":\"COMPACTED-NOTICE\"}", false);
    int calls = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-WITH-GUIDANCE");
    assert_int_equal(s_compact(chat), 200);
    s_wait_status(chat, "waiting:true");
    /* The summary call carried the guidance; no call followed (a manual compaction's
     * model-only context does not resume the turn). */
    assert_int_equal(mockprov_request_count(s_mock), calls + 1);
    json_t *req = mockprov_request(s_mock, calls);
    char *text = json_dumps(json_object_get(req, "body"), JSON_COMPACT);
    assert_non_null(strstr(text, "Guidance for this summary: FOCUS-ON-CITIES"));
    free(text);
    json_decref(req);
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg(role || '/' || visibility || '/' || (content -> 0"
                             " ->> 'text'), ' ' ORDER BY id) FROM chat_messages WHERE chat_id ="
                             " '%s' AND structured_output ->> 'event' = 'post_compact'",
                             chat);
    printf("  rows: %s\n", rows);
    assert_string_equal(rows, "user/model/AFTER-COMPACT-CTX assistant/user/COMPACTED-NOTICE");
    free(rows);
    char *visible = s_visible(chat);
    assert_non_null(strstr(visible, "COMPACTED-NOTICE"));
    assert_null(strstr(visible, "AFTER-COMPACT-CTX"));
    free(visible);
    hookcons_answer(s_cons, "pre_compact", 200, "{}", false);
    hookcons_answer(s_cons, "post_compact", 200, "{}", false);
}

static int s_setup(void **state) {
    (void)state;
    s_mock = mockprov_new();
    ASSERT(s_mock);
    s_cons = hookcons_new(0);
    s_port = hookcons_port(s_cons);
    snprintf(s_config, sizeof s_config, "/tmp/cf-hooks-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    fprintf(f,
            "{\"models\":[{\"name\":\"mock\",\"provider\":\"openai\",\"model\":\"gpt\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true},"
            "{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\"}],"
            "\"mcp_servers\":{\"paged\":{\"command\":\"node\",\"args\":["
            "\"%s/tests/mcp/paged_server.mjs\"],\"sandbox\":{\"ro_paths\":[\"%s/tests/mcp\"]}}}}",
            mockprov_url(s_mock), getenv("CHATFLEET_SOURCE_DIR"), getenv("CHATFLEET_SOURCE_DIR"));
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    char *url = mem_printf("CHATFLEET_HOOKS_URL=http://127.0.0.1:%d/hooks", s_port);
    const char *env[] = {cfg, url, "CHATFLEET_HOOKS_SECRET=" S_SECRET,
                         "CHATFLEET_HOOKS_TIMEOUT_MS=20000", "MOCK_KEY=sk-test",
                         /* Titles from the sim: the mock's scripted replies go to the turns. */
                         "CHATFLEET_TITLE_MODEL=sim", NULL};
    cluster_opts_t o = {.name = "test_worker_hooks", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    free(url);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_cluster);
    mockprov_destroy(&s_mock);
    hookcons_destroy(&s_cons);
    unlink(s_config);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_effective_config_shows_hooks_with_the_secret_redacted),
        cmocka_unit_test(test_a_tool_call_is_announced_before_and_after_with_its_ids),
        cmocka_unit_test(test_a_denied_call_is_answered_as_denied_and_the_turn_goes_on),
        cmocka_unit_test(test_a_consumer_down_fails_the_turn_closed_then_it_recovers),
        cmocka_unit_test(test_a_step_made_again_after_takeover_sends_the_same_event_ids),
        cmocka_unit_test(test_an_invalid_stop_answer_ends_the_turn_in_error),
        cmocka_unit_test(test_a_compaction_is_announced_and_fails_closed),
        cmocka_unit_test(test_every_event_of_a_turn_with_an_mcp_call_and_a_compaction),
        cmocka_unit_test(test_a_failed_pre_tool_use_of_an_mcp_call_ends_the_turn_in_error),
        cmocka_unit_test(test_context_from_answers_becomes_rows_for_its_audience),
        cmocka_unit_test(test_a_stop_with_model_context_continues_the_turn_once),
        cmocka_unit_test(test_compaction_context_guides_the_summary_and_follows_it),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
