/*
 * A structured request's end under the lifecycle hooks (ARCHITECTURE.md §7.10, §8; issue 18):
 * a cluster of real processes whose worker dispatches to a consumer this test runs
 * (tests/support/hookcons.h), the mock OpenAI server scripting the finalizer calls. The end
 * hears stop before its receipt, and a failed stop fails the request; a stop answer with
 * model_context on a request that would succeed continues it once (an invalidation row holding
 * the context: the model is asked again with it and must submit again; the receipt carries the
 * second value however often the hook answers so); a stop without model_context adds its
 * user_context in the receipt's bundle; the invalidation is durable: a worker killed after it
 * leaves the next owner needing a new submission.
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
#include "id.h"
#include "mem.h"
#include "mockprov.h"
#include "proc.h"

#define WAIT_MS  40000
#define S_SECRET "structured-hooks-secret"
#define S_SCHEMA                                                                                   \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]" \
    "}"

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static hookcons_t *s_cons;
static char s_config[256];

/* Waits until the chat's status (and owner) is want ("waiting:true"). */
static void s_wait_status(const char *chat, const char *want) {
    char got[64];
    if (cluster_wait_status(s_cluster, chat, want, WAIT_MS, got, sizeof got) != 0) {
        fail_msg("chat %s is %s, not %s", chat, got, want);
    }
}

/* The requests the consumer kept from index from on for chat, each signed (an array). */
static json_t *s_events(int from, const char *chat) {
    json_t *out = hookcons_events(s_cons, from, chat, S_SECRET);
    assert_non_null(out); /* every delivery verifies */
    return out;
}

/* Creates a chat on the mock model asking for a city; its id into chat. */
static void s_create(char chat[ID_UUID_LEN + 1]) {
    assert_int_equal(
        cluster_post_chat(s_cluster, 0,
                          "{\"content\":[{\"type\":\"text\",\"text\":\"a city\"}],"
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                          "\"name\":\"c\",\"schema\":" S_SCHEMA "}}}",
                          chat),
        201);
}

/* Scripts a submission of city, then a closing text. */
static void s_push_submission(const char *id, const char *city) {
    char *args = mem_printf("{\"output\":{\"city\":\"%s\"}}", city);
    mockprov_push_openai_call(s_mock, id, "submit_structured_output", args);
    free(args);
    mockprov_push_openai_text(s_mock, "submitted");
}

/* "status:value" of the chat's receipts, joined by spaces. */
static char *s_receipts(const char *chat) {
    return cluster_sql(s_cluster,
                       "SELECT string_agg((structured_output ->> 'status') || ':' || coalesce("
                       "structured_output -> 'value' ->> 'city', '-'), ' ' ORDER BY id) FROM"
                       " chat_messages WHERE chat_id = '%s' AND structured_output ->> 'type' ="
                       " 'structured-output-outcome'",
                       chat);
}

/* The number of the chat's rows of structured_output type. */
static int s_count(const char *chat, const char *type) {
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND"
                          " structured_output ->> 'type' = '%s'",
                          chat, type);
    char *end = NULL;
    long v = n ? strtol(n, &end, 10) : -1;
    if (!n || *end != '\0') {
        fail_msg("chat %s: no count of %s rows (%s)", chat, type, n ? n : "a failed query");
    }
    free(n);
    return (int)v;
}

/* The number of the consumer's events of kind event from index from on for chat. */
static int s_heard(int from, const char *chat, const char *event) {
    json_t *evs = s_events(from, chat);
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e) {
        n += !strcmp(hookcons_str(e, "event", false), event);
    }
    json_decref(evs);
    return n;
}

static void test_a_structured_request_hears_stop_before_its_receipt(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    int from = hookcons_seen(s_cons);
    const char *body =
        "{\"model\":\"sim\",\"content\":[{\"type\":\"text\",\"text\":\"a city\"}],"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"c\","
        "\"schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "\"required\":[\"city\"]}}}}";
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(cluster_post_chat(s_cluster, 0, body, chat), 201);
    s_wait_status(chat, "waiting:true");
    char *rid = cluster_sql(s_cluster,
                            "SELECT structured_output_request_id FROM chat_messages WHERE chat_id"
                            " = '%s' AND role = 'user'",
                            chat);
    char *receipt = cluster_sql(s_cluster,
                                "SELECT structured_output ->> 'status' FROM chat_messages WHERE"
                                " chat_id = '%s' AND structured_output ->> 'type' ="
                                " 'structured-output-outcome'",
                                chat);
    printf("  receipt: %s request: %s\n", receipt ? receipt : "(none)", rid ? rid : "(none)");
    assert_non_null(receipt);
    assert_non_null(rid);
    assert_string_equal(receipt, "succeeded");
    free(receipt);
    json_t *evs = s_events(from, chat);
    size_t n = json_array_size(evs);
    assert_true(n >= 3);
    json_t *stop = json_array_get(evs, n - 1);
    assert_string_equal(hookcons_str(stop, "event", false), "stop");
    assert_string_equal(hookcons_str(stop, "request_id", true), rid);
    assert_string_equal(hookcons_str(stop, "outcome", true), "succeed");
    json_decref(evs);
    /* A failed stop at the request's end fails the request: a failed receipt, the chat in
     * error. */
    hookcons_answer(s_cons, "stop", 503, "{}", false);
    assert_int_equal(cluster_post_chat(s_cluster, 0, body, chat), 201);
    s_wait_status(chat, "error:true");
    receipt = cluster_sql(s_cluster,
                          "SELECT (structured_output ->> 'status') || ':' || (structured_output ->"
                          " 'error' ->> 'code') FROM chat_messages WHERE chat_id = '%s' AND"
                          " structured_output ->> 'type' = 'structured-output-outcome'",
                          chat);
    printf("  receipt: %s\n", receipt ? receipt : "(none)");
    assert_non_null(receipt);
    assert_string_equal(receipt, "failed:generation_failed");
    free(receipt);
    free(rid);
    hookcons_answer(s_cons, "stop", 200, "{}", false);
}

/* A stop hook that answers model_context every time: the request that would succeed goes on
 * once (the invalidation row holds the context, the model is asked again with it and submits
 * again), then ends with one succeeded receipt of the second value; stop is heard twice. */
static void test_a_stop_with_model_context_continues_a_request_once(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "stop", 200,
                    "{\"model_context\":\"CHECK-AGAIN\",\"user_context\":\"SEEN-BY-HOOK\"}", false);
    int calls = mockprov_request_count(s_mock);
    int from = hookcons_seen(s_cons);
    s_push_submission("sub_1", "Paris");
    s_push_submission("sub_2", "Lyon");
    char chat[ID_UUID_LEN + 1];
    s_create(chat);
    s_wait_status(chat, "waiting:true");
    char *receipts = s_receipts(chat);
    printf("  receipts: %s\n", receipts);
    assert_string_equal(receipts, "succeeded:Lyon");
    free(receipts);
    assert_int_equal(mockprov_request_count(s_mock), calls + 4);
    assert_int_equal(s_count(chat, "structured-output-invalidation"), 1);
    assert_int_equal(s_count(chat, "structured-output-candidate"), 2);
    assert_int_equal(s_heard(from, chat, "stop"), 2);
    /* The model was asked again with the context, after the first submission. */
    json_t *third = mockprov_request(s_mock, calls + 2);
    char *b = json_dumps(json_object_get(third, "body"), JSON_COMPACT);
    assert_non_null(strstr(b, "CHECK-AGAIN"));
    assert_null(strstr(b, "SEEN-BY-HOOK"));
    free(b);
    json_decref(third);
    /* The rows: the invalidation (model-only, bound to the request) with the first answer's
     * user_context; the second answer's user_context after the receipt, in its bundle. */
    char *rows =
        cluster_sql(s_cluster,
                    "SELECT string_agg(role || '/' || visibility || '/' || coalesce("
                    "structured_output ->> 'type', '-'), ' ' ORDER BY id) FROM chat_messages"
                    " WHERE chat_id = '%s' AND role <> 'system' AND (structured_output ->>"
                    " 'type' IN ('structured-output-invalidation', 'hook-context',"
                    " 'structured-output-outcome'))",
                    chat);
    printf("  rows: %s\n", rows);
    assert_string_equal(rows, "user/model/structured-output-invalidation"
                              " assistant/user/hook-context"
                              " assistant/user/structured-output-outcome"
                              " assistant/user/hook-context");
    free(rows);
    char *bound =
        cluster_sql(s_cluster,
                    "SELECT (i.structured_output_request_id = r.structured_output_request_id"
                    " AND i.structured_output ->> 'request_id' ="
                    " r.structured_output_request_id::text)::text FROM chat_messages i,"
                    " chat_messages r WHERE i.chat_id = '%1$s' AND r.chat_id = '%1$s' AND"
                    " i.structured_output ->> 'type' = 'structured-output-invalidation' AND"
                    " r.role = 'user' AND r.visibility = 'both'",
                    chat);
    assert_string_equal(bound, "true");
    free(bound);
    hookcons_answer(s_cons, "stop", 200, "{}", false);
}

/* A stop answer with user_context only ends the request: its row goes in the receipt's bundle,
 * right after the receipt; the model is not asked again. */
static void test_a_stop_without_model_context_adds_its_user_context_to_the_receipt(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "stop", 200, "{\"user_context\":\"NOTED\"}", false);
    int calls = mockprov_request_count(s_mock);
    s_push_submission("sub_3", "Nice");
    char chat[ID_UUID_LEN + 1];
    s_create(chat);
    s_wait_status(chat, "waiting:true");
    char *receipts = s_receipts(chat);
    assert_string_equal(receipts, "succeeded:Nice");
    free(receipts);
    assert_int_equal(mockprov_request_count(s_mock), calls + 2);
    assert_int_equal(s_count(chat, "structured-output-invalidation"), 0);
    char *last =
        cluster_sql(s_cluster,
                    "SELECT string_agg(role || '/' || visibility || '/' || (content -> 0 ->>"
                    " 'text'), ' ' ORDER BY id) FROM (SELECT * FROM chat_messages WHERE"
                    " chat_id = '%s' ORDER BY id DESC LIMIT 1) t",
                    chat);
    assert_string_equal(last, "assistant/user/NOTED");
    free(last);
    hookcons_answer(s_cons, "stop", 200, "{}", false);
}

/* The invalidation is a durable row: a worker killed while the model is asked again leaves
 * the next owner needing a new submission (the first candidate cannot close the request) and
 * no second continuation. */
static void test_an_invalidation_survives_a_worker_kill(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "stop", 200, "{\"model_context\":\"CHECK-AGAIN\"}", false);
    int calls = mockprov_request_count(s_mock);
    s_push_submission("sub_4", "Paris");
    /* The model call after the invalidation stalls until the worker is killed. */
    mockprov_reply_t *stall = mockprov_reply_new(200, "text/event-stream");
    const char *part = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,"
                       "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                       "\"assistant\",\"content\":\"thinking\"},\"finish_reason\":null}]}\n\n";
    mockprov_reply_chunk(stall, part, strlen(part), 0);
    mockprov_reply_hold(stall, 120000);
    mockprov_push(s_mock, &stall);
    s_push_submission("sub_5", "Lyon");
    char chat[ID_UUID_LEN + 1];
    s_create(chat);
    assert_int_equal(mockprov_wait_requests(s_mock, calls + 3, WAIT_MS), 0);
    assert_int_equal(s_count(chat, "structured-output-invalidation"), 1);
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGKILL);
    cluster_start(s_cluster, CLUSTER_WORKER, 0);
    s_wait_status(chat, "waiting:true");
    char *receipts = s_receipts(chat);
    printf("  receipts after the kill: %s\n", receipts);
    assert_string_equal(receipts, "succeeded:Lyon");
    free(receipts);
    assert_int_equal(s_count(chat, "structured-output-invalidation"), 1);
    assert_int_equal(mockprov_request_count(s_mock), calls + 5);
    json_t *again = mockprov_request(s_mock, calls + 3);
    char *b = json_dumps(json_object_get(again, "body"), JSON_COMPACT);
    assert_non_null(strstr(b, "CHECK-AGAIN"));
    free(b);
    json_decref(again);
    hookcons_answer(s_cons, "stop", 200, "{}", false);
}

static int s_setup(void **state) {
    (void)state;
    s_mock = mockprov_new();
    ASSERT(s_mock);
    s_cons = hookcons_new(0);
    snprintf(s_config, sizeof s_config, "/tmp/cf-sohooks-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    int written =
        fprintf(f,
                "{\"models\":[{\"name\":\"mock\",\"provider\":\"openai\",\"model\":\"gpt\","
                "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true},"
                "{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\"}]}",
                mockprov_url(s_mock));
    ASSERT(written > 0 && fclose(f) == 0);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    char *url = mem_printf("CHATFLEET_HOOKS_URL=http://127.0.0.1:%d/hooks", hookcons_port(s_cons));
    const char *env[] = {cfg, url, "CHATFLEET_HOOKS_SECRET=" S_SECRET, "MOCK_KEY=sk-test",
                         /* Titles from the sim: the mock's scripted replies go to the turns. */
                         "CHATFLEET_TITLE_MODEL=sim", NULL};
    cluster_opts_t o = {
        .name = "test_worker_hooks_structured", .gateways = 1, .workers = 1, .env = env};
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
    int kept = unlink(s_config);
    return unclean == 0 && kept == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_structured_request_hears_stop_before_its_receipt),
        cmocka_unit_test(test_a_stop_with_model_context_continues_a_request_once),
        cmocka_unit_test(test_a_stop_without_model_context_adds_its_user_context_to_the_receipt),
        cmocka_unit_test(test_an_invalidation_survives_a_worker_kill),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
