/*
 * Each real provider wire format end to end: a cluster (gateway, broker, a worker) whose
 * model configs point openai, anthropic and ollama at the mock provider server. For each
 * provider a plain turn and a structured request: the model answers the finalizer over the
 * provider's own streaming format, and the request ends with a succeeded receipt holding
 * the value; the requests the worker sent carry the finalizer tool and the replayed result.
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

/* The finalizer call and a final text, in each provider's streaming format. */
#define OA(delta, finish)                                                                          \
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","      \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":" finish "}]}\n\n"
#define AN(name, data) "event: " name "\ndata: " data "\n\n"
#define AN_START                                                                                   \
    AN("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":"          \
                        "\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{"            \
                        "\"input_tokens\":3,\"output_tokens\":1}}}")
#define AN_END(reason)                                                                             \
    AN("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"" reason         \
                        "\"},\"usage\":{\"output_tokens\":2}}")                                    \
    AN("message_stop", "{\"type\":\"message_stop\"}")
#define OL(msg, tail) "{\"model\":\"m\",\"message\":{\"role\":\"assistant\"," msg "}," tail "}\n"

typedef struct {
    const char *model; /* config name */
    const char *type;  /* Content-Type of the stream */
    const char *call;  /* the finalizer call with {"output":{"n":42}} */
    const char *text;  /* a plain text answer "done" */
    const char *path;  /* the request path the provider uses */
} wire_t;

static const wire_t s_wires[] = {
    {"openai-mock", "text/event-stream",
     OA("{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_f\",\"type\":"
        "\"function\",\"function\":{\"name\":\"submit_structured_output\",\"arguments\":\"\"}}]}",
        "null") OA("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
                   "\"{\\\"output\\\":{\\\"n\\\":42}}\"}}]}",
                   "null") OA("{}", "\"tool_calls\"") "data: [DONE]\n\n",
     OA("{\"role\":\"assistant\",\"content\":\"done\"}", "null")
         OA("{}", "\"stop\"") "data: [DONE]\n\n",
     "/v1/chat/completions"},
    {"anthropic-mock", "text/event-stream",
     AN_START AN("content_block_start",
                 "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
                 "\"tool_use\",\"id\":\"call_f\",\"name\":\"submit_structured_output\","
                 "\"input\":{}}}")
         AN("content_block_delta",
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
            "\"input_json_delta\",\"partial_json\":\"{\\\"output\\\":{\\\"n\\\":42}}\"}}")
             AN("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
                 AN_END("tool_use"),
     AN_START AN("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
         AN("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{"
                                   "\"type\":\"text_delta\",\"text\":\"done\"}}")
             AN("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
                 AN_END("end_turn"),
     "/v1/messages"},
    {"ollama-mock", "application/x-ndjson",
     OL("\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"submit_structured_output\","
        "\"arguments\":{\"output\":{\"n\":42}}}}]",
        "\"done\":false") OL("\"content\":\"\"", "\"done_reason\":\"stop\",\"done\":true"),
     OL("\"content\":\"done\"", "\"done\":false")
         OL("\"content\":\"\"", "\"done_reason\":\"stop\",\"done\":true"),
     "/api/chat"},
};

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static char s_config[256];

static void s_push(const char *type, const char *body) {
    mockprov_reply_t *r = mockprov_reply_new(200, type);
    mockprov_reply_body(r, body, 7, 0); /* 7-byte chunks: cuts fall mid-line */
    mockprov_push(s_mock, &r);
}

static json_t *s_post(const char *path, const char *body) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), path);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    if (r.status != 201) {
        fail_msg("POST %s: %ld %s", path, r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    return v;
}

static void test_each_wire_format_answers_text_and_structured_requests(void **u) {
    (void)u;
    for (size_t i = 0; i < sizeof s_wires / sizeof s_wires[0]; i++) {
        const wire_t *w = &s_wires[i];
        int before = mockprov_request_count(s_mock);
        /* A plain turn. */
        s_push(w->type, w->text);
        char *body = mem_printf(
            "{\"content\":[{\"type\":\"text\",\"text\":\"hello\"}],\"model\":\"%s\"}", w->model);
        json_t *c = s_post("/api/v2/chats", body);
        free(body);
        char *q = mem_printf("SELECT status FROM chats WHERE id = '%s'",
                             json_string_value(json_object_get(c, "id")));
        if (cluster_wait(s_cluster, q, "waiting", WAIT_MS) < 0) {
            fail_msg("%s: the plain turn did not finish", w->model);
        }
        free(q);
        char *text =
            cluster_sql(s_cluster,
                        "SELECT content->0->>'text' FROM chat_messages WHERE chat_id = '%s'"
                        " AND role = 'assistant' ORDER BY id DESC LIMIT 1",
                        json_string_value(json_object_get(c, "id")));
        assert_non_null(text);
        assert_string_equal(text, "done");
        free(text);
        json_decref(c);
        /* A structured request: the finalizer call, then the ending. */
        s_push(w->type, w->call);
        s_push(w->type, w->text);
        body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"n?\"}],\"model\":\"%s\","
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                          "\"name\":\"n\",\"schema\":{\"type\":\"object\",\"required\":[\"n\"],"
                          "\"properties\":{\"n\":{\"type\":\"integer\"}}}}}}",
                          w->model);
        c = s_post("/api/v2/chats", body);
        free(body);
        const char *chat = json_string_value(json_object_get(c, "id"));
        q = mem_printf("SELECT structured_output ->> 'status' FROM chat_messages WHERE chat_id ="
                       " '%s' AND structured_output ->> 'type' = 'structured-output-outcome'",
                       chat);
        if (cluster_wait(s_cluster, q, "succeeded", WAIT_MS) < 0) {
            fail_msg("%s: no succeeded receipt", w->model);
        }
        free(q);
        q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
        if (cluster_wait(s_cluster, q, "waiting", WAIT_MS) < 0) {
            fail_msg("%s: the structured turn did not finish", w->model);
        }
        free(q);
        char *n = cluster_sql(s_cluster,
                              "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND"
                              " structured_output ->> 'type' = 'structured-output-outcome'",
                              chat);
        assert_non_null(n);
        assert_string_equal(n, "1"); /* exactly one receipt */
        free(n);
        char *value = cluster_sql(s_cluster,
                                  "SELECT structured_output -> 'value' ->> 'n' FROM chat_messages"
                                  " WHERE chat_id = '%s' AND structured_output ->> 'type' ="
                                  " 'structured-output-outcome'",
                                  chat);
        assert_string_equal(value, "42");
        free(value);
        json_decref(c);
        /* What went over the wire: three requests on the provider's path, the finalizer
         * offered in the structured ones and its result replayed in the last. */
        assert_int_equal(mockprov_request_count(s_mock) - before, 3);
        for (int k = before; k < before + 3; k++) {
            json_t *req = mockprov_request(s_mock, k);
            assert_string_equal(json_string_value(json_object_get(req, "path")), w->path);
            const char *sent = json_string_value(json_object_get(req, "body_text"));
            assert_non_null(sent);
            if (k > before) {
                assert_non_null(strstr(sent, "submit_structured_output"));
            }
            if (k == before + 2) {
                assert_non_null(strstr(sent, "call_f") ? strstr(sent, "call_f")
                                                       : strstr(sent, "42"));
            }
            json_decref(req);
        }
        printf("%s: plain turn and structured request answered over its wire format\n", w->model);
    }
}

static int s_setup(void **state) {
    (void)state;
    s_mock = mockprov_new();
    ASSERT(s_mock);
    const char *m = mockprov_url(s_mock);
    snprintf(s_config, sizeof s_config, "/tmp/cf-providers-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    fprintf(f,
            "{\"models\":[{\"name\":\"openai-mock\",\"provider\":\"openai\",\"model\":\"gpt\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true},"
            "{\"name\":\"anthropic-mock\",\"provider\":\"anthropic\",\"model\":\"claude\","
            "\"base_url\":\"%s\",\"api_key_env\":\"MOCK_KEY\"},"
            "{\"name\":\"ollama-mock\",\"provider\":\"ollama\",\"model\":\"llama\","
            "\"base_url\":\"%s\"}]}",
            m, m, m);
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    const char *env[] = {cfg, "MOCK_KEY=sk-test", NULL};
    cluster_opts_t o = {.name = "test_worker_providers", .gateways = 1, .workers = 1, .env = env};
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
        cmocka_unit_test(test_each_wire_format_answers_text_and_structured_requests),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
