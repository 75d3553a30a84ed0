/*
 * Native constrained decoding (issue 7 item 4): a cluster whose model configs declare
 * "native_structured_output": true, one on the sim and one on the mock OpenAI server. A
 * structured request on a chat without dynamic tools is served with the provider's native
 * schema field and no tools at all; the reply's text is the submission, screened and
 * validated: it succeeds with the value, or invalid texts use up the same budget of three
 * rejections and the request fails validation_exhausted.
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

#include "cluster.h"
#include "mem.h"
#include "mockprov.h"
#include "proc.h"

#define WAIT_MS 20000

#define SCHEMA                                                                                     \
    "{\"type\":\"object\",\"required\":[\"n\"],\"properties\":{\"n\":{\"type\":\"integer\"}},"     \
    "\"additionalProperties\":false}"

/* One OpenAI stream chunk whose delta is text. */
#define OA(delta, finish)                                                                          \
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","      \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":" finish "}]}\n\n"
#define OA_TEXT(text)                                                                              \
    OA("{\"role\":\"assistant\",\"content\":\"\"}", "null")                                        \
    OA("{\"content\":" text "}", "null") OA("{}", "\"stop\"") "data: [DONE]\n\n"

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static char s_config[256];

static void s_push(const char *body) {
    mockprov_reply_t *r = mockprov_reply_new(200, "text/event-stream");
    mockprov_reply_body(r, body, 7, 0); /* 7-byte chunks: cuts fall mid-line */
    mockprov_push(s_mock, &r);
}

/* Creates a structured chat on model with text; returns the chat id (caller frees). */
static char *s_create(const char *model, const char *text) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"model\":\"%s\","
                            "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                            "\"name\":\"n\",\"schema\":" SCHEMA "}}}",
                            text, model);
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    free(body);
    if (r.status != 201) {
        fail_msg("POST /api/v2/chats: %ld %s", r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    char *id = mem_strdup(json_string_value(json_object_get(v, "id")));
    json_decref(v);
    return id;
}

static long s_count(const char *chat, const char *where);

/* Waits for the chat's receipt to reach status and the chat to settle, then checks it is the
 * one receipt the chat has; returns it (caller decrefs). */
static json_t *s_receipt(const char *chat, const char *status) {
    char *q = mem_printf("SELECT structured_output ->> 'status' FROM chat_messages WHERE chat_id ="
                         " '%s' AND structured_output ->> 'type' = 'structured-output-outcome'",
                         chat);
    if (cluster_wait(s_cluster, q, status, WAIT_MS) < 0) {
        char *got = cluster_sql(s_cluster, "%s", q);
        fail_msg("chat %s: no %s receipt (got %s)", chat, status, got ? got : "none");
    }
    free(q);
    q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
    if (cluster_wait(s_cluster, q, "waiting", WAIT_MS) < 0) {
        fail_msg("chat %s: did not return to waiting after its receipt", chat);
    }
    free(q);
    assert_int_equal(s_count(chat, "structured_output ->> 'type' = 'structured-output-outcome'"),
                     1);
    char *text = cluster_sql(s_cluster,
                             "SELECT structured_output::text FROM chat_messages WHERE chat_id ="
                             " '%s' AND structured_output ->> 'type' = 'structured-output-outcome'",
                             chat);
    json_t *so = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(so);
    return so;
}

static long s_count(const char *chat, const char *where) {
    char *n = cluster_sql(
        s_cluster, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND %s", chat, where);
    assert_non_null(n);
    long v = strtol(n, NULL, 10);
    free(n);
    return v;
}

static int s_occurrences(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) {
        n++;
    }
    return n;
}

/* `chatfleet ask --schema` on a terminal (a pty from script(1)) in native mode: the model's
 * answer is the JSON value, shown as it streams, and not printed again as the fenced block
 * (issue 19); the value's one member appears once. */
static void test_cli_on_a_terminal_prints_a_native_value_once(void **u) {
    (void)u;
    if (access("/usr/bin/script", X_OK) != 0) {
        skip(); /* util-linux's script(1) gives the CLI a terminal */
    }
    char cli[600];
    proc_build_path(NULL, "cli/chatfleet", cli, sizeof cli);
    char *line = mem_printf("'%s' ask --schema '" SCHEMA "' 'n?'", cli);
    char *url = mem_printf("CHATFLEET_URL=%s", cluster_url(s_cluster, 0));
    char *token = mem_printf("CHATFLEET_TOKEN=%s", cluster_token(s_cluster));
    char out[64];
    snprintf(out, sizeof out, "test_worker_native.tty.%d.out", (int)getpid());
    char *const argv[] = {"/usr/bin/script", "-qec", line, "/dev/null", NULL};
    char *const env[] = {url, token, NULL};
    int rc = proc_run(argv, env, out, 30000);
    char *text = proc_file_text(out);
    printf("  tty: %s\n", text);
    if (rc != 0 || s_occurrences(text, "\"n\"") != 1 || strstr(text, "```json")) {
        fail_msg("want the value once and no fenced copy (exit %d): %s", rc, text);
    }
    unlink(out);
    free(text);
    free(token);
    free(url);
    free(line);
}

static void test_sim_native_request_succeeds_with_a_text_value_and_no_tools(void **u) {
    (void)u;
    char *chat = s_create("sim-native", "n?");
    json_t *so = s_receipt(chat, "succeeded");
    assert_null(json_object_get(json_object_get(so, "error"), "code"));
    /* The sim fails a native call that also offers tools (400): success means none. */
    assert_true(json_is_integer(json_object_get(json_object_get(so, "value"), "n")));
    assert_int_equal(json_object_size(json_object_get(so, "value")), 1);
    /* The answer is the assistant's text; no tool call was made or answered. */
    assert_int_equal(s_count(chat, "role = 'tool'"), 0);
    assert_int_equal(s_count(chat, "role = 'assistant' AND content::text LIKE '%tool-call%'"), 0);
    assert_int_equal(s_count(chat, "role = 'assistant' AND content->0->>'type' = 'text' AND"
                                   " structured_output ->> 'type' = 'structured-output-step' AND"
                                   " structured_output::jsonb ? 'value'"),
                     1);
    json_decref(so);
    free(chat);
}

static void test_sim_native_prose_and_invalid_values_exhaust_the_budget(void **u) {
    (void)u;
    char *chat = s_create("sim-native", "n? [sim:schema-text 1] [sim:schema-wrong 2]");
    json_t *so = s_receipt(chat, "failed");
    assert_string_equal(json_string_value(json_object_get(json_object_get(so, "error"), "code")),
                        "validation_exhausted");
    assert_int_equal(
        s_count(chat,
                "structured_output ->> 'rejection' = 'invalid_output' AND role = 'assistant'"),
        3);
    json_decref(so);
    free(chat);
}

static void test_openai_native_request_carries_response_format_and_no_tools(void **u) {
    (void)u;
    int before = mockprov_request_count(s_mock);
    s_push(OA_TEXT("\"{\\\"n\\\":42}\""));
    char *chat = s_create("openai-native", "n?");
    json_t *so = s_receipt(chat, "succeeded");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(so, "value"), "n")), 42);
    json_decref(so);
    assert_int_equal(mockprov_request_count(s_mock) - before, 1);
    json_t *req = mockprov_request(s_mock, before);
    assert_string_equal(json_string_value(json_object_get(req, "path")), "/v1/chat/completions");
    const json_t *body = json_object_get(req, "body");
    assert_non_null(body);
    assert_null(json_object_get(body, "tools"));
    const json_t *rf = json_object_get(body, "response_format");
    assert_string_equal(json_string_value(json_object_get(rf, "type")), "json_schema");
    const json_t *js = json_object_get(rf, "json_schema");
    assert_string_equal(json_string_value(json_object_get(js, "name")), "n");
    json_t *want = json_loads(SCHEMA, 0, NULL);
    assert_true(json_equal(json_object_get(js, "schema"), want));
    json_decref(want);
    json_decref(req);
    free(chat);
}

static void test_openai_native_invalid_json_three_times_is_validation_exhausted(void **u) {
    (void)u;
    int before = mockprov_request_count(s_mock);
    s_push(OA_TEXT("\"not json\""));
    s_push(OA_TEXT("\"{\\\"n\\\":\""));
    s_push(OA_TEXT("\"{\\\"n\\\":1,\\\"n\\\":2}\""));
    char *chat = s_create("openai-native", "n?");
    json_t *so = s_receipt(chat, "failed");
    assert_string_equal(json_string_value(json_object_get(json_object_get(so, "error"), "code")),
                        "validation_exhausted");
    assert_null(json_object_get(so, "value"));
    json_decref(so);
    assert_int_equal(mockprov_request_count(s_mock) - before, 3);
    /* Each retry saw bounded feedback about the previous text, and still no tools. */
    for (int k = before; k < before + 3; k++) {
        json_t *req = mockprov_request(s_mock, k);
        const json_t *body = json_object_get(req, "body");
        assert_null(json_object_get(body, "tools"));
        assert_non_null(json_object_get(body, "response_format"));
        const char *sent = json_string_value(json_object_get(req, "body_text"));
        if (k > before) {
            assert_non_null(strstr(sent, "Your reply was not accepted"));
            assert_non_null(strstr(sent, "Repairs left"));
        }
        json_decref(req);
    }
    assert_int_equal(
        s_count(chat,
                "structured_output ->> 'rejection' = 'invalid_output' AND role = 'assistant'"),
        3);
    free(chat);
}

static int s_setup(void **state) {
    (void)state;
    s_mock = mockprov_new();
    ASSERT(s_mock);
    snprintf(s_config, sizeof s_config, "/tmp/cf-native-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    fprintf(f,
            "{\"models\":[{\"name\":\"sim-native\",\"provider\":\"sim\",\"model\":\"sim\","
            "\"native_structured_output\":true,\"default\":true},"
            "{\"name\":\"openai-native\",\"provider\":\"openai\",\"model\":\"gpt\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\","
            "\"native_structured_output\":true}]}",
            mockprov_url(s_mock));
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    /* Titles on the sim, so that the mock's scripted replies are the turns' only. */
    const char *env[] = {cfg, "MOCK_KEY=sk-test", "CHATFLEET_TITLE_MODEL=sim-native", NULL};
    cluster_opts_t o = {.name = "test_worker_native", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_cluster);
    mockprov_destroy(&s_mock);
    unlink(s_config);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_native_request_succeeds_with_a_text_value_and_no_tools),
        cmocka_unit_test(test_cli_on_a_terminal_prints_a_native_value_once),
        cmocka_unit_test(test_sim_native_prose_and_invalid_values_exhaust_the_budget),
        cmocka_unit_test(test_openai_native_request_carries_response_format_and_no_tools),
        cmocka_unit_test(test_openai_native_invalid_json_three_times_is_validation_exhausted),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
