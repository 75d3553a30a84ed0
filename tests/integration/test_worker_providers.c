/*
 * Each real provider wire format end to end: a cluster (gateway, broker, a worker) whose
 * model configs point openai, anthropic and ollama at the mock provider server. For each
 * provider a plain turn and a structured request: the model answers the finalizer over the
 * provider's own streaming format, and the request ends with a succeeded receipt holding
 * the value; the requests the worker sent carry the finalizer tool and the replayed result.
 * Usage (ARCHITECTURE.md §7.7): each reply's usage priced from the configured prices, the
 * per-chat totals over GET /chats/{id}/usage equal to the sum of the messages and the title
 * call, and the worker's cost counter by model equal to what the messages of that model hold
 * (the title calls are on the sim, counted under its own name). A model per
 * message: a queued message naming another model runs on it (the mock records which wire),
 * and so does an edit; the chat records its last model. A new chat's title call (on the
 * sim) runs beside its first model call: the mock gets the turn's request while the title is
 * still the fallback (ARCHITECTURE.md §7.8).
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
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "id.h"
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
static int s_status_port; /* the worker's /metrics */

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

/* GET path's JSON body (a new reference); fails the test unless 200. */
static json_t *s_get(const char *url) {
    proc_http_t r;
    assert_int_equal(proc_http("GET", url, cluster_token(s_cluster), NULL, &r), 0);
    if (r.status != 200) {
        fail_msg("GET %s: %ld %s", url, r.status, r.body);
    }
    json_t *v = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    return v;
}

/* A chat on model with turns replies of body (each one turn), idle at the end. Returns its id. */
static char *s_chat_turns(const char *model, const char *type, const char *body, int turns) {
    char *chat = NULL;
    for (int t = 0; t < turns; t++) {
        s_push(type, body);
        /* The model is chosen at create; a send keeps the chat's. */
        char *msg = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"turn %d\"}]%s%s%s}", t,
                               chat ? "" : ",\"model\":\"", chat ? "" : model, chat ? "" : "\"");
        if (!chat) {
            json_t *c = s_post("/api/v2/chats", msg);
            chat = mem_strdup(json_string_value(json_object_get(c, "id")));
            json_decref(c);
        } else {
            char url[256];
            snprintf(url, sizeof url, "%s/api/v2/chats/%s/messages", cluster_url(s_cluster, 0),
                     chat);
            proc_http_t r;
            assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), msg, &r), 0);
            assert_int_equal(r.status, 200);
            proc_http_free(&r);
        }
        free(msg);
        char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                             " 'assistant'",
                             chat);
        char want[16];
        snprintf(want, sizeof want, "%d", t + 1);
        assert_true(cluster_wait(s_cluster, q, want, WAIT_MS) >= 0);
        free(q);
        q = mem_printf("SELECT status FROM chats WHERE id = '%s'", chat);
        assert_true(cluster_wait(s_cluster, q, "waiting", WAIT_MS) >= 0);
        free(q);
    }
    return chat;
}

static long long s_num(const json_t *obj, const char *key) {
    return (long long)json_integer_value(json_object_get(obj, key));
}

/* The worker's counter line for model in its /metrics text, or -1. */
static long long s_metric(const char *text, const char *family, const char *model) {
    char needle[160];
    snprintf(needle, sizeof needle, "%s{", family);
    for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) {
        const char *end = strchr(at, '\n');
        char *quoted = mem_printf("model=\"%s\"", model);
        bool mine = end && strstr(at, quoted) && strstr(at, quoted) < end;
        free(quoted);
        if (mine) {
            return strtoll(strchr(at, ' ') + 1, NULL, 10);
        }
    }
    return -1;
}

static void test_usage_is_priced_totalled_per_chat_and_counted_by_model(void **u) {
    (void)u;
    /* anthropic-mock: 3 in, 2 out per reply at 3 and 15 USD per Mtok: 39 micro-USD. */
    char *a = s_chat_turns("anthropic-mock", s_wires[1].type, s_wires[1].text, 2);
    /* openai-mock: 50 prompt tokens of which 40 cached, 5 out, at 2 and 8 (cache reads at the
     * input price): 10 x 2 + 40 x 2 + 5 x 8 = 140. */
    char *o = s_chat_turns(
        "openai-mock", "text/event-stream",
        OA("{\"role\":\"assistant\",\"content\":\"priced\"}", "null") OA(
            "{}", "\"stop\"") "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":50,"
                              "\"completion_tokens\":5,\"prompt_tokens_details\":{"
                              "\"cached_tokens\":40}}}\n\ndata: [DONE]\n\n",
        1);
    const struct {
        const char *chat;
        const char *model;
        long long messages, input, output, cache_read, cost;
    } want[] = {{a, "anthropic-mock", 2, 6, 4, 0, 78}, {o, "openai-mock", 1, 10, 5, 40, 140}};
    for (int i = 0; i < 2; i++) {
        char url[256];
        snprintf(url, sizeof url, "%s/api/v2/chats/%s/usage", cluster_url(s_cluster, 0),
                 want[i].chat);
        json_t *t = s_get(url);
        /* Two models: the chat's replies, and its title call on the sim (unpriced), which
         * wrote no message (a chat_usage row, ARCHITECTURE.md §7.7). */
        json_t *by = json_object_get(t, "by_model");
        assert_int_equal(json_array_size(by), 2);
        json_t *m = json_array_get(by, 0); /* by name: anthropic-mock, openai-mock < sim */
        json_t *title = json_array_get(by, 1);
        assert_string_equal(json_string_value(json_object_get(m, "model")), want[i].model);
        assert_string_equal(json_string_value(json_object_get(title, "model")), "sim");
        assert_int_equal(s_num(m, "messages"), want[i].messages);
        assert_int_equal(s_num(m, "input_tokens"), want[i].input);
        assert_int_equal(s_num(m, "output_tokens"), want[i].output);
        assert_int_equal(s_num(m, "cache_read_tokens"), want[i].cache_read);
        assert_int_equal(s_num(m, "total_cost_micros"), want[i].cost);
        assert_int_equal(s_num(title, "messages"), 0);
        assert_int_equal(s_num(title, "calls"), 1);
        assert_int_equal(s_num(title, "total_cost_micros"), 0);
        char *ti = cluster_sql(s_cluster,
                               "SELECT (usage ->> 'input_tokens') || ':' || (usage ->>"
                               " 'output_tokens') FROM chat_usage WHERE chat_id = '%s' AND kind"
                               " = 'title'",
                               want[i].chat);
        char got[64];
        snprintf(got, sizeof got, "%lld:%lld", s_num(title, "input_tokens"),
                 s_num(title, "output_tokens"));
        assert_string_equal(ti, got);
        free(ti);
        /* The totals are the replies' and the title call's. */
        assert_int_equal(s_num(t, "messages"), want[i].messages);
        assert_int_equal(s_num(t, "calls"), want[i].messages + 1);
        assert_int_equal(s_num(t, "input_tokens"), want[i].input + s_num(title, "input_tokens"));
        assert_int_equal(s_num(t, "output_tokens"), want[i].output + s_num(title, "output_tokens"));
        assert_int_equal(s_num(t, "cache_read_tokens"), want[i].cache_read);
        assert_int_equal(s_num(t, "total_cost_micros"), want[i].cost);
        /* The totals are the sum of the messages' own usage. */
        char *sum = cluster_sql(s_cluster,
                                "SELECT sum((usage ->> 'total_cost_micros')::bigint) || ':' ||"
                                " sum((usage ->> 'input_tokens')::bigint) FROM chat_messages"
                                " WHERE chat_id = '%s'",
                                want[i].chat);
        char expect[64];
        snprintf(expect, sizeof expect, "%lld:%lld", want[i].cost, want[i].input);
        assert_string_equal(sum, expect);
        free(sum);
        json_decref(t);
    }
    /* Each reply's stored usage carries its context size and window. */
    char *ctx = cluster_sql(s_cluster,
                            "SELECT usage ->> 'context_tokens' FROM chat_messages WHERE chat_id ="
                            " '%s' AND role = 'assistant'",
                            o);
    assert_string_equal(ctx, "55"); /* 10 + 40 cached + 5 */
    free(ctx);
    /* The worker counts by model what the messages of that model hold, over every test. */
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", s_status_port);
    const char *models[] = {"anthropic-mock", "openai-mock"};
    for (int i = 0; i < 2; i++) {
        char *db = cluster_sql(s_cluster,
                               "SELECT coalesce(sum((m.usage ->> 'total_cost_micros')::bigint), 0)"
                               " FROM chat_messages m JOIN model_configs c ON c.id ="
                               " m.model_config_id WHERE c.name = '%s'",
                               models[i]);
        long long got = -1;
        for (int64_t end = id_now_ms() + WAIT_MS;
             got != strtoll(db, NULL, 10) && id_now_ms() < end;) {
            proc_http_t r;
            assert_int_equal(proc_http("GET", url, NULL, NULL, &r), 0);
            got = s_metric(r.body, "chatfleet_worker_model_cost_micros_total", models[i]);
            proc_http_free(&r);
            if (got != strtoll(db, NULL, 10)) {
                struct timespec ts = {0, 100 * 1000 * 1000}; /* refreshed once a second */
                nanosleep(&ts, NULL);
            }
        }
        printf("%s: cost counter %lld micro-USD, messages %s\n", models[i], got, db);
        assert_int_equal(got, strtoll(db, NULL, 10));
        free(db);
    }
    free(a);
    free(o);
}

/* METHOD the chat's path with body: the status. */
static long s_call(const char *method, const char *chat, const char *path, const char *body) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s%s", cluster_url(s_cluster, 0), chat, path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, cluster_token(s_cluster), body, &r), 0);
    long status = r.status;
    proc_http_free(&r);
    return status;
}

/* The path of the mock's latest request (caller frees). */
static char *s_last_path(void) {
    json_t *req = mockprov_request(s_mock, mockprov_request_count(s_mock) - 1);
    char *path = mem_strdup(json_string_value(json_object_get(req, "path")));
    json_decref(req);
    return path;
}

static void test_a_message_with_another_model_runs_on_it_and_the_chat_records_it(void **u) {
    (void)u;
    /* The first turn is slow, so that the next message waits in the queue. */
    mockprov_reply_t *r = mockprov_reply_new(200, s_wires[0].type);
    mockprov_reply_chunk(r, s_wires[0].text, 1, 1500);
    mockprov_reply_body(r, s_wires[0].text + 1, 7, 0);
    mockprov_push(s_mock, &r);
    s_push(s_wires[1].type, s_wires[1].text);
    json_t *c = s_post("/api/v2/chats", "{\"content\":[{\"type\":\"text\",\"text\":\"first\"}],"
                                        "\"model\":\"openai-mock\"}");
    char *chat = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    assert_int_equal(
        s_call("POST", chat, "/messages",
               "{\"content\":[{\"type\":\"text\",\"text\":\"x\"}],\"model\":\"nope\"}"),
        400);
    assert_int_equal(s_call("POST", chat, "/messages",
                            "{\"content\":[{\"type\":\"text\",\"text\":\"queued\"}],"
                            "\"model\":\"anthropic-mock\"}"),
                     200);
    char *q = mem_printf("SELECT count(*) || ':' || (SELECT status FROM chats WHERE id = '%s')"
                         " FROM chat_messages WHERE chat_id = '%s' AND role = 'assistant'",
                         chat, chat);
    assert_true(cluster_wait(s_cluster, q, "2:waiting", WAIT_MS) >= 0);
    free(q);
    /* The queued message ran on its own model, which the chat and the rows now record. */
    char *path = s_last_path();
    assert_string_equal(path, "/v1/messages");
    free(path);
    char *rec = cluster_sql(s_cluster,
                            "SELECT (SELECT name FROM model_configs WHERE id = c.model_config_id)"
                            " || ':' || (SELECT string_agg(coalesce(mc.name, '-'), ',' ORDER BY"
                            " m.id) FROM chat_messages m LEFT JOIN model_configs mc ON mc.id ="
                            " m.model_config_id WHERE m.chat_id = c.id AND m.role IN ('user',"
                            " 'assistant')) FROM chats c WHERE c.id = '%s'",
                            chat);
    assert_string_equal(rec,
                        "anthropic-mock:openai-mock,openai-mock,anthropic-mock,anthropic-mock");
    free(rec);
    /* An edit with a model runs on that one. */
    s_push(s_wires[2].type, s_wires[2].text);
    char *mid = cluster_sql(s_cluster,
                            "SELECT min(id) FROM chat_messages WHERE chat_id = '%s' AND role ="
                            " 'user'",
                            chat);
    char *edit_path = mem_printf("/messages/%s", mid);
    assert_int_equal(s_call("PATCH", chat, edit_path,
                            "{\"content\":[{\"type\":\"text\",\"text\":\"edited\"}],"
                            "\"model\":\"ollama-mock\"}"),
                     200);
    q = mem_printf("SELECT (SELECT name FROM model_configs WHERE id = model_config_id) || ':' ||"
                   " status FROM chats WHERE id = '%s'",
                   chat);
    assert_true(cluster_wait(s_cluster, q, "ollama-mock:waiting", WAIT_MS) >= 0);
    free(q);
    path = s_last_path();
    assert_string_equal(path, "/api/chat");
    free(path);
    free(edit_path);
    free(mid);
    free(chat);
}

/* A new chat's title call runs beside its first model call, not before it (ARCHITECTURE.md
 * §7.8): the titles' sim is paced at 400 ms a chunk, so its title takes over a second; the
 * mock must receive the turn's request while the title is still the fallback (before the
 * change, the request came only after the title was written). */
static void test_the_first_model_call_does_not_wait_for_the_title(void **u) {
    (void)u;
    s_push(s_wires[0].type, s_wires[0].text);
    int before = mockprov_request_count(s_mock);
    char chat[ID_UUID_LEN + 1];
    assert_int_equal(
        cluster_create_chat(s_cluster, 0, "[sim:slow 400] Plan a trip to Lisbon", chat), 201);
    assert_int_equal(mockprov_wait_requests(s_mock, before + 1, WAIT_MS), 0);
    char *t = cluster_sql(s_cluster, "SELECT title_source FROM chats WHERE id = '%s'", chat);
    assert_non_null(t);
    assert_string_equal(t, "fallback");
    free(t);
    char *q = mem_printf("SELECT title_source || ':' || title || ':' || status || ':' ||"
                         " (SELECT count(*) FROM chat_messages WHERE chat_id = c.id AND role ="
                         " 'assistant') FROM chats c WHERE id = '%s'",
                         chat);
    assert_true(cluster_wait(s_cluster, q, "generated:Plan a trip to Lisbon:waiting:1", WAIT_MS) >=
                0);
    free(q);
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
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true,"
            "\"prices\":{\"input\":2,\"output\":8}},"
            "{\"name\":\"anthropic-mock\",\"provider\":\"anthropic\",\"model\":\"claude\","
            "\"base_url\":\"%s\",\"api_key_env\":\"MOCK_KEY\",\"context_limit\":200000,"
            "\"prices\":{\"input\":3,\"output\":15,\"cache_read\":0.3}},"
            "{\"name\":\"ollama-mock\",\"provider\":\"ollama\",\"model\":\"llama\","
            "\"base_url\":\"%s\"},{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\"}]}",
            m, m, m);
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    s_status_port = proc_free_port();
    char *listen = mem_printf("CHATFLEET_WORKER_HTTP_LISTEN=127.0.0.1:%d", s_status_port);
    /* Titles on the sim, so that the mock's scripted replies are the turns' only. */
    const char *env[] = {cfg, "MOCK_KEY=sk-test", listen, "CHATFLEET_TITLE_MODEL=sim", NULL};
    cluster_opts_t o = {.name = "test_worker_providers", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    free(listen);
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
        cmocka_unit_test(test_the_first_model_call_does_not_wait_for_the_title),
        cmocka_unit_test(test_usage_is_priced_totalled_per_chat_and_counted_by_model),
        cmocka_unit_test(test_a_message_with_another_model_runs_on_it_and_the_chat_records_it),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
