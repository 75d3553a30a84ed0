/*
 * The gateway's lifecycle hooks end to end (ARCHITECTURE.md §7.10, issue 18): a cluster of
 * real processes whose gateway and worker dispatch to a consumer this test runs
 * (tests/support/hookcons.h), the mock OpenAI server as the model. user_prompt_submit is heard
 * before anything is stored: a deny is 403 with kind hook_denied and stores nothing (no chat
 * for a create), an input override is what is stored and what the model is asked, an invalid
 * answer refuses the prompt (502, hook_dispatch_failed); an edit starts a session
 * (session_start, whose context follows the prompt, then user_prompt_submit, its override
 * stored); an A2A SendMessage goes through the same hooks (a deny is JSON-RPC error -32050); the
 * context of a queued prompt follows it when it is promoted, and session_start's context on a
 * create without a first message is kept (the chat waits). The
 * worker's events and the consumer going down are test_worker_hooks.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "a2a.h"
#include "cluster.h"
#include "hookcons.h"
#include "id.h"
#include "mem.h"
#include "mockprov.h"
#include "proc.h"

#define WAIT_MS  40000
#define S_SECRET "gateway-hooks-secret"

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static hookcons_t *s_cons;
static char s_config[256];

static void s_push_text(const char *text) {
    mockprov_push_openai_text(s_mock, text);
}

static void s_create(const char *text, char chat[ID_UUID_LEN + 1]) {
    assert_int_equal(cluster_create_chat(s_cluster, 0, text, chat), 201);
}

/* Sends text to chat; returns the status, and the parsed answer in *out when out is given. */
static long s_send(const char *chat, const char *text, json_t **out) {
    return cluster_send(s_cluster, 0, chat, text, out);
}

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

/* The number of chat_messages rows of chat, as text (caller frees). */
static char *s_rows(const char *chat) {
    return cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s'", chat);
}

static void test_a_denied_prompt_is_refused_and_nothing_is_stored(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    s_push_text("the first reply");
    char chat[ID_UUID_LEN + 1];
    s_create("an allowed first prompt", chat);
    s_wait_status(chat, "waiting:true");
    hookcons_answer(s_cons, "user_prompt_submit", 200,
                    "{\"decision\":\"deny\",\"reason\":\"no secrets here\"}", false);
    char *before = s_rows(chat);
    int calls = mockprov_request_count(s_mock);
    json_t *ans = NULL;
    assert_int_equal(s_send(chat, "tell me the secret", &ans), 403);
    assert_string_equal(json_string_value(json_object_get(ans, "kind")), "hook_denied");
    assert_string_equal(json_string_value(json_object_get(ans, "detail")), "no secrets here");
    json_decref(ans);
    char *after = s_rows(chat);
    assert_string_equal(before, after); /* nothing stored */
    free(before);
    free(after);
    char *n = cluster_sql(s_cluster,
                          "SELECT count(*) FROM chat_queued_messages WHERE chat_id = '%s'", chat);
    assert_string_equal(n, "0");
    free(n);
    s_wait_status(chat, "waiting:true"); /* no turn started, no model called */
    assert_int_equal(mockprov_request_count(s_mock), calls);
    /* A create whose first prompt is denied creates no chat. */
    char *chats = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"secret\"}]}", &r),
                     0);
    assert_int_equal(r.status, 403);
    assert_non_null(strstr(r.body, "\"kind\":\"hook_denied\""));
    proc_http_free(&r);
    char *chats_after = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    assert_string_equal(chats, chats_after);
    free(chats);
    free(chats_after);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
}

static void test_an_overridden_prompt_is_what_is_stored_and_sent(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{\"input\":\"REWRITTEN prompt\"}", false);
    int calls = mockprov_request_count(s_mock);
    s_push_text("answered the rewritten prompt");
    char chat[ID_UUID_LEN + 1];
    s_create("ORIGINAL prompt", chat);
    s_wait_status(chat, "waiting:true");
    char *c = cluster_sql(s_cluster,
                          "SELECT content::text FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'user' AND visibility <> 'model'",
                          chat);
    printf("  stored: %s\n", c);
    assert_non_null(strstr(c, "REWRITTEN prompt"));
    assert_null(strstr(c, "ORIGINAL"));
    free(c);
    /* The model was asked the override. */
    json_t *req = mockprov_request(s_mock, calls);
    assert_non_null(req);
    char *text = json_dumps(json_object_get(req, "body"), JSON_COMPACT);
    assert_non_null(strstr(text, "REWRITTEN prompt"));
    assert_null(strstr(text, "ORIGINAL"));
    free(text);
    json_decref(req);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
}

static void test_an_invalid_prompt_answer_refuses_the_prompt(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    s_push_text("a reply");
    char chat[ID_UUID_LEN + 1];
    s_create("a first prompt", chat);
    s_wait_status(chat, "waiting:true");
    /* A tool input object is no prompt: the answer is invalid and the hook fails closed. */
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{\"input\":{\"text\":\"x\"}}", false);
    char *before = s_rows(chat);
    json_t *ans = NULL;
    assert_int_equal(s_send(chat, "judge me", &ans), 502);
    assert_string_equal(json_string_value(json_object_get(ans, "kind")), "hook_dispatch_failed");
    assert_non_null(strstr(json_string_value(json_object_get(ans, "detail")),
                           "user_prompt_submit hook failed: hook answer: input: must be a string"));
    json_decref(ans);
    char *after = s_rows(chat);
    assert_string_equal(before, after);
    free(before);
    free(after);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
}

static void test_an_edit_starts_a_session_and_submits_its_prompt(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    s_push_text("a reply to edit away");
    char chat[ID_UUID_LEN + 1];
    s_create("the prompt before the edit", chat);
    s_wait_status(chat, "waiting:true");
    char *mid = cluster_sql(s_cluster,
                            "SELECT id FROM chat_messages WHERE chat_id = '%s' AND role = 'user'"
                            " AND visibility <> 'model' AND NOT deleted",
                            chat);
    int from = hookcons_seen(s_cons);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{\"input\":\"EDITED by the hook\"}", false);
    hookcons_answer(s_cons, "session_start", 200, "{\"model_context\":\"SESSION-CTX\"}", false);
    s_push_text("a reply to the edit");
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages/%s", cluster_url(s_cluster, 0), chat,
             mid);
    proc_http_t r;
    assert_int_equal(proc_http("PATCH", url, cluster_token(s_cluster),
                               "{\"content\":[{\"type\":\"text\",\"text\":\"edited\"}]}", &r),
                     0);
    assert_int_equal(r.status, 200);
    proc_http_free(&r);
    s_wait_status(chat, "waiting:true");
    json_t *evs = s_events(from, chat);
    assert_true(json_array_size(evs) >= 3);
    assert_string_equal(hookcons_str(json_array_get(evs, 0), "event", false), "session_start");
    assert_string_equal(hookcons_str(json_array_get(evs, 0), "source", true), "edit");
    assert_string_equal(hookcons_str(json_array_get(evs, 1), "event", false), "user_prompt_submit");
    assert_string_equal(hookcons_str(json_array_get(evs, 1), "prompt", true), "edited");
    json_decref(evs);
    char *c = cluster_sql(s_cluster,
                          "SELECT content::text FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'user' AND visibility <> 'model' AND NOT deleted",
                          chat);
    assert_non_null(strstr(c, "EDITED by the hook"));
    free(c);
    /* The session's context right after the edited prompt, for the model only. */
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg(role || '/' || visibility || '/' || (content -> 0"
                             " ->> 'text'), ' ' ORDER BY id) FROM chat_messages WHERE chat_id ="
                             " '%s' AND NOT deleted AND role = 'user'",
                             chat);
    printf("  rows: %s\n", rows);
    assert_string_equal(rows, "user/both/EDITED by the hook user/model/SESSION-CTX");
    free(rows);
    hookcons_answer(s_cons, "session_start", 200, "{}", false);
    free(mid);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
}

/* The chat's messages as REST shows them (GET .../messages), a new array. */
static json_t *s_rest_messages(const char *chat) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *body = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    assert_non_null(body);
    json_t *out = json_incref(json_object_get(body, "messages"));
    json_decref(body);
    assert_true(json_is_array(out));
    return out;
}

/* The id of the REST message whose first text part is text (0: none). */
static int64_t s_rest_id(const json_t *msgs, const char *role, const char *text) {
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(m, "content"), 0), "text"));
        if (!strcmp(json_string_value(json_object_get(m, "role")), role) && t && !strcmp(t, text)) {
            return json_integer_value(json_object_get(m, "id"));
        }
    }
    return 0;
}

/* Whether REST shows the row with id after right after the row with id before. */
static bool s_rest_adjacent(const json_t *msgs, int64_t before, int64_t after) {
    int64_t next = 0;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        int64_t id = json_integer_value(json_object_get(m, "id"));
        if (id > before && (next == 0 || id < next)) {
            next = id;
        }
    }
    return before > 0 && next == after;
}

/* The body the mock received as its request index, as compact JSON text (caller frees). */
static char *s_request_body(int index) {
    json_t *req = mockprov_request(s_mock, index);
    assert_non_null(req);
    char *text = json_dumps(json_object_get(req, "body"), JSON_COMPACT);
    assert_non_null(text);
    json_decref(req);
    return text;
}

/* A prompt sent while the chat runs is queued: the context its user_prompt_submit answer added
 * is kept with it and follows it when it is promoted (the model sees the model_context in the
 * next request, REST shows the user_context right after the prompt); nothing is dropped. */
static void test_a_queued_prompts_context_follows_it_when_promoted(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    /* The first turn's reply ends 4 s after its first part, so that the chat still runs when
     * the next prompt arrives. */
    const char *part =
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"slow reply\"},"
        "\"finish_reason\":null}]}\n\n";
    const char *end =
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
        "data: [DONE]\n\n";
    mockprov_reply_t *slow = mockprov_reply_new(200, "text/event-stream");
    mockprov_reply_chunk(slow, part, strlen(part), 0);
    mockprov_reply_chunk(slow, end, strlen(end), 4000);
    mockprov_push(s_mock, &slow);
    s_push_text("the queued prompt answered");
    int calls = mockprov_request_count(s_mock);
    char chat[ID_UUID_LEN + 1];
    s_create("a prompt that runs", chat);
    hookcons_answer(s_cons, "user_prompt_submit", 200,
                    "{\"model_context\":\"QUEUED-MODEL-CTX\",\"user_context\":\"QUEUED-USER-CTX\"}",
                    false);
    json_t *ans = NULL;
    assert_int_equal(s_send(chat, "the queued prompt", &ans), 200);
    assert_true(json_is_true(json_object_get(ans, "queued")));
    json_decref(ans);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
    char *kept =
        cluster_sql(s_cluster,
                    "SELECT jsonb_array_length(hook_context::jsonb) FROM chat_queued_messages"
                    " WHERE chat_id = '%s'",
                    chat);
    assert_non_null(kept);
    assert_string_equal(kept, "2");
    free(kept);
    assert_int_equal(mockprov_wait_requests(s_mock, calls + 2, WAIT_MS), 0);
    s_wait_status(chat, "waiting:true");
    /* In history right after the promoted prompt: the model-only row, then the user-only one. */
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg(role || '/' || visibility || '/' || (content -> 0"
                             " ->> 'text'), ' ' ORDER BY id) FROM chat_messages WHERE chat_id ="
                             " '%s' AND NOT deleted AND id >= (SELECT id FROM chat_messages WHERE"
                             " chat_id = '%s' AND queued_message_id IS NOT NULL)",
                             chat, chat);
    printf("  rows: %s\n", rows);
    assert_non_null(strstr(rows, "user/both/the queued prompt user/model/QUEUED-MODEL-CTX"
                                 " assistant/user/QUEUED-USER-CTX assistant/both/"
                                 "the queued prompt answered"));
    free(rows);
    json_t *msgs = s_rest_messages(chat);
    int64_t prompt = s_rest_id(msgs, "user", "the queued prompt");
    int64_t shown = s_rest_id(msgs, "assistant", "QUEUED-USER-CTX");
    assert_true(s_rest_adjacent(msgs, prompt, shown));
    assert_int_equal(s_rest_id(msgs, "user", "QUEUED-MODEL-CTX"), 0); /* the model's only */
    json_decref(msgs);
    /* The promoted turn's model request carries the model_context after the prompt. */
    char *text = s_request_body(calls + 1);
    char *p = strstr(text, "the queued prompt");
    assert_non_null(p);
    assert_non_null(strstr(p, "QUEUED-MODEL-CTX"));
    assert_null(strstr(text, "QUEUED-USER-CTX"));
    free(text);
    char *log = proc_file_text(cluster_log(s_cluster, CLUSTER_GATEWAY, 0));
    assert_null(strstr(log, "hook_context_dropped"));
    free(log);
}

/* A create without a first message: session_start's context is stored alone, the chat waits
 * (no turn, no model call); REST shows the user_context, and the first prompt's model request
 * carries the model_context before it. */
static void test_a_session_context_without_a_prompt_is_kept(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "session_start", 200,
                    "{\"model_context\":\"EMPTY-MODEL-CTX\",\"user_context\":\"EMPTY-USER-CTX\"}",
                    false);
    int calls = mockprov_request_count(s_mock);
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(cluster_post_chat(s_cluster, 0, "{\"content\":[]}", chat), 201);
    hookcons_answer(s_cons, "session_start", 200, "{}", false);
    s_wait_status(chat, "waiting:true");
    char *rows = cluster_sql(s_cluster,
                             "SELECT string_agg(role || '/' || visibility || '/' || (content -> 0"
                             " ->> 'text'), ' ' ORDER BY id) FROM chat_messages WHERE chat_id ="
                             " '%s' AND role <> 'system'",
                             chat);
    assert_string_equal(rows, "user/model/EMPTY-MODEL-CTX assistant/user/EMPTY-USER-CTX");
    free(rows);
    char *title = cluster_sql(s_cluster, "SELECT title FROM chats WHERE id = '%s'", chat);
    assert_string_equal(title, "New Chat");
    free(title);
    assert_int_equal(mockprov_request_count(s_mock), calls); /* no turn */
    json_t *msgs = s_rest_messages(chat);
    assert_int_not_equal(s_rest_id(msgs, "assistant", "EMPTY-USER-CTX"), 0);
    json_decref(msgs);
    s_push_text("the first prompt answered");
    assert_int_equal(s_send(chat, "the first prompt", NULL), 200);
    s_wait_status(chat, "waiting:true");
    char *text = s_request_body(calls);
    char *ctx = strstr(text, "EMPTY-MODEL-CTX");
    assert_non_null(ctx);
    assert_non_null(strstr(ctx, "the first prompt"));
    assert_null(strstr(text, "EMPTY-USER-CTX"));
    free(text);
}

/* One A2A SendMessage of text (JSON-RPC over POST /a2a); its parsed answer. */
static json_t *s_a2a_send(const char *text) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), A2A_RPC_PATH);
    char *body = mem_printf("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\",\"params\":"
                            "{\"message\":{\"messageId\":\"m-hook\",\"role\":\"ROLE_USER\","
                            "\"parts\":[{\"text\":\"%s\"}]},\"configuration\":"
                            "{\"returnImmediately\":true}}}",
                            text);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    free(body);
    printf("  a2a: %ld %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    return v;
}

static void test_an_a2a_prompt_goes_through_the_same_hooks(void **state) {
    (void)state;
    hookcons_answer(s_cons, NULL, 200, "{}", false);
    hookcons_answer(s_cons, "user_prompt_submit", 200,
                    "{\"decision\":\"deny\",\"reason\":\"not over A2A\"}", false);
    char *chats = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    json_t *v = s_a2a_send("a prompt the hook denies");
    json_t *e = json_object_get(v, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), -32050);
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "data"), "kind")),
                        "hook_denied");
    json_decref(v);
    char *after = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    assert_string_equal(chats, after); /* nothing stored */
    free(chats);
    free(after);
    /* Allowed with an override: the stored prompt is the consumer's. */
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{\"input\":\"A2A-OVERRIDE\"}", false);
    s_push_text("answered over A2A");
    v = s_a2a_send("the A2A original");
    const char *ctx = json_string_value(
        json_object_get(json_object_get(json_object_get(v, "result"), "task"), "contextId"));
    assert_non_null(ctx);
    char chat[ID_UUID_LEN + 1];
    snprintf(chat, sizeof chat, "%s", ctx);
    json_decref(v);
    char *c = cluster_sql(s_cluster,
                          "SELECT content::text FROM chat_messages WHERE chat_id = '%s' AND role ="
                          " 'user'",
                          chat);
    assert_non_null(strstr(c, "A2A-OVERRIDE"));
    assert_null(strstr(c, "original"));
    free(c);
    /* The prompt's two events first; the worker's stop for the turn may follow (the A2A answer
     * can read the committed reply before the stop hook is heard), never a second prompt. */
    s_wait_status(chat, "waiting:true");
    json_t *evs = s_events(0, chat);
    assert_true(json_array_size(evs) >= 2);
    assert_string_equal(hookcons_str(json_array_get(evs, 0), "event", false), "session_start");
    assert_string_equal(hookcons_str(json_array_get(evs, 1), "event", false), "user_prompt_submit");
    assert_string_equal(hookcons_str(json_array_get(evs, 1), "source", true), "a2a");
    for (size_t i = 2; i < json_array_size(evs); i++) {
        assert_string_equal(hookcons_str(json_array_get(evs, i), "event", false), "stop");
    }
    json_decref(evs);
    hookcons_answer(s_cons, "user_prompt_submit", 200, "{}", false);
}

static int s_setup(void **state) {
    (void)state;
    s_mock = mockprov_new();
    ASSERT(s_mock);
    s_cons = hookcons_new(0);
    snprintf(s_config, sizeof s_config, "/tmp/cf-gwhooks-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    fprintf(f,
            "{\"models\":[{\"name\":\"mock\",\"provider\":\"openai\",\"model\":\"gpt\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true},"
            "{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\"}]}",
            mockprov_url(s_mock));
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    char *url = mem_printf("CHATFLEET_HOOKS_URL=http://127.0.0.1:%d/hooks", hookcons_port(s_cons));
    const char *env[] = {cfg, url, "CHATFLEET_HOOKS_SECRET=" S_SECRET, "MOCK_KEY=sk-test",
                         /* Titles from the sim: the mock's scripted replies go to the turns. */
                         "CHATFLEET_TITLE_MODEL=sim", NULL};
    cluster_opts_t o = {.name = "test_gateway_hooks", .gateways = 1, .workers = 1, .env = env};
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
        cmocka_unit_test(test_a_denied_prompt_is_refused_and_nothing_is_stored),
        cmocka_unit_test(test_an_overridden_prompt_is_what_is_stored_and_sent),
        cmocka_unit_test(test_an_invalid_prompt_answer_refuses_the_prompt),
        cmocka_unit_test(test_an_edit_starts_a_session_and_submits_its_prompt),
        cmocka_unit_test(test_an_a2a_prompt_goes_through_the_same_hooks),
        cmocka_unit_test(test_a_queued_prompts_context_follows_it_when_promoted),
        cmocka_unit_test(test_a_session_context_without_a_prompt_is_kept),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
