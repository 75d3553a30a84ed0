/*
 * The network providers on their real wire formats, against the in-process mock server:
 * streams cut at arbitrary byte boundaries (mid-line, mid-UTF-8, CRLF framing) give the same
 * parts; tool-call argument deltas are accumulated and parsed strictly; tool results and
 * Anthropic thinking signatures are replayed in the next request; usage is read; 429 (with
 * retry-after in seconds and as an HTTP-date) and 503 are retryable and 400 is not; an error
 * event inside a 200 stream and a stream that ends before its terminator are errors; a
 * cancelled call returns within a bounded time. Also the SSE/NDJSON splitter on its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anthropic.h"
#include "httpstream.h"
#include "id.h"
#include "mem.h"
#include "mockprov.h"
#include "ollama.h"
#include "openai.h"
#include "usage.h"

#define CANCEL_BOUND_MS 1000 /* a cancelled call must return this soon */
#define CANCEL_DELAY_MS 200  /* the stream has been idle this long when it is cancelled */

/* --- Fixtures: one reply of each kind per provider, in its own wire format. --- */

typedef struct {
    const char *name;
    const char *path;      /* the request path the provider must use */
    const char *base_path; /* appended to the mock URL to make base_url */
    const char *type;      /* Content-Type of a stream */
    const char *text;      /* "Héllo, wörld 日本", usage 11/4 */
    const char *tool;      /* get_weather {"city":"Paris"} in fragments */
    const char *midstream; /* some text, then an error event */
    const char *truncated; /* some text, no terminator */
    const char *err_body;  /* the provider's HTTP error body, message "bad thing" */
} s_prov_t;

#define OA_CHUNK(delta, finish)                                                                    \
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","     \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"logprobs\":null,\"finish_reason\":" finish    \
    "}]}\n\n"

static const s_prov_t s_openai = {
    .name = "openai",
    .path = "/v1/chat/completions",
    .base_path = "/v1/",
    .type = "text/event-stream",
    .text = ": keep-alive\n\n" OA_CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
        OA_CHUNK("{\"content\":\"Héllo, \"}", "null") OA_CHUNK("{\"content\":\"wörld 日本\"}",
                                                               "null")
            OA_CHUNK("{}", "\"stop\"") "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_"
                                       "tokens\":11,\"completion_tokens\":4,\"total_tokens\":15}}"
                                       "\n\ndata: [DONE]\n\n",
    .tool = OA_CHUNK("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,"
                     "\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_"
                     "weather\",\"arguments\":\"\"}}]}",
                     "null") OA_CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{"
                                      "\"arguments\":\"{\\\"\"}}]}",
                                      "null")
        OA_CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"city\"}}]}", "null")
            OA_CHUNK(
                "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\":\\\"Pa\"}}]}",
                "null")
                OA_CHUNK(
                    "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ris\\\"}\"}}]}",
                    "null") OA_CHUNK("{}", "\"tool_calls\"") "data: [DONE]\n\n",
    .midstream = OA_CHUNK("{\"content\":\"Hi\"}", "null") "data: {\"error\":{\"message\":\"boom\","
                                                          "\"type\":\"server_error\",\"param\":"
                                                          "null,\"code\":null}}\n\n",
    .truncated = OA_CHUNK("{\"content\":\"Hi\"}", "null") OA_CHUNK("{\"content\":\" th\"}", "null"),
    .err_body = "{\"error\":{\"message\":\"bad thing\",\"type\":\"invalid_request_error\","
                "\"param\":null,\"code\":null}}",
};

#define AN_EV(name, data) "event: " name "\ndata: " data "\n\n"
#define AN_START                                                                                   \
    AN_EV("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":"   \
                           "\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\","    \
                           "\"stop_reason\":null,\"usage\":{\"input_tokens\":11,"                  \
                           "\"output_tokens\":1}}}")
#define AN_DELTA(i, delta)                                                                         \
    AN_EV("content_block_delta",                                                                   \
          "{\"type\":\"content_block_delta\",\"index\":" i ",\"delta\":" delta "}")
#define AN_STOP(i) AN_EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":" i "}")
#define AN_END(reason, out)                                                                        \
    AN_EV("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"" reason      \
                           "\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":" out "}}")    \
    AN_EV("message_stop", "{\"type\":\"message_stop\"}")

static const s_prov_t s_anthropic = {
    .name = "anthropic",
    .path = "/v1/messages",
    .base_path = "",
    .type = "text/event-stream",
    .text = AN_START AN_EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                                  "\"content_block\":{\"type\":\"text\","
                                                  "\"text\":\"\"}}")
        AN_EV("ping", "{\"type\": \"ping\"}")
            AN_DELTA("0", "{\"type\":\"text_delta\",\"text\":\"Héllo, \"}")
                AN_DELTA("0", "{\"type\":\"text_delta\",\"text\":\"wörld 日本\"}") AN_STOP("0")
                    AN_END("end_turn", "4"),
    .tool = AN_START AN_EV(
        "content_block_start",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\","
        "\"id\":\"call_1\",\"name\":\"get_weather\",\"caller\":{\"type\":\"direct\"},"
        "\"input\":{}}}") AN_DELTA("0", "{\"type\":\"input_json_delta\",\"partial_json\":\"\"}")
        AN_DELTA("0", "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"ci\"}")
            AN_DELTA("0", "{\"type\":\"input_json_delta\",\"partial_json\":\"ty\\\": \\\"Pa\"}")
                AN_DELTA("0", "{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}")
                    AN_STOP("0") AN_END("tool_use", "9"),
    .midstream = AN_START AN_EV("error", "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_"
                                         "error\",\"message\":\"Overloaded\"}}"),
    .truncated = AN_START AN_EV("content_block_start",
                                "{\"type\":\"content_block_start\",\"index\":0,"
                                "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
        AN_DELTA("0", "{\"type\":\"text_delta\",\"text\":\"Hi\"}"),
    .err_body = "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
                "\"bad thing\"},\"request_id\":\"req_1\"}",
};

#define OL_LINE(msg, tail)                                                                         \
    "{\"model\":\"m\",\"created_at\":\"2025-07-07T20:22:19.184789Z\",\"message\":{\"role\":"       \
    "\"assistant\"," msg "}," tail "}\n"

static const s_prov_t s_ollama = {
    .name = "ollama",
    .path = "/api/chat",
    .base_path = "",
    .type = "application/x-ndjson",
    .text = OL_LINE("\"content\":\"Héllo, \"", "\"done\":false")
        OL_LINE("\"content\":\"wörld 日本\"", "\"done\":false")
            OL_LINE("\"content\":\"\"", "\"done_reason\":\"stop\",\"done\":true,\"total_duration\":"
                                        "182242375,\"prompt_eval_count\":11,\"eval_count\":4"),
    .tool = OL_LINE("\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"get_weather\","
                    "\"arguments\":{\"city\":\"Paris\"}}}]",
                    "\"done\":false")
        OL_LINE("\"content\":\"\"", "\"done_reason\":\"stop\",\"done\":true,"
                                    "\"prompt_eval_count\":20,\"eval_count\":9"),
    .midstream = OL_LINE("\"content\":\"Hi\"", "\"done\":false") "{\"error\":\"an error was "
                                                                 "encountered while running the "
                                                                 "model\"}\n",
    .truncated = OL_LINE("\"content\":\"Hi\"", "\"done\":false"),
    .err_body = "{\"error\":\"bad thing\"}",
};

/* --- Helpers. --- */

typedef struct {
    json_t *parts;    /* every streamed part, parsed */
    cancel_t *cancel; /* when not NULL: set CANCEL_DELAY_MS after the first part */
    pthread_t canceller;
    bool started;
    _Atomic int64_t cancelled_at;
    bool seen;            /* a part has arrived */
    size_t held_at_first; /* httpstream_request_bytes_held() when the first part arrived */
} s_sink_t;

/* Cancels from another thread while the stream sits idle, as the manager would. */
static void *s_cancel_later(void *arg) {
    s_sink_t *sink = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = CANCEL_DELAY_MS * 1000000L};
    nanosleep(&ts, NULL);
    sink->cancelled_at = id_now_ms();
    cancel_set(sink->cancel);
    return NULL;
}

static void s_on_part(void *ctx, const char *part_json) {
    s_sink_t *sink = ctx;
    if (!sink->seen) {
        sink->seen = true;
        sink->held_at_first = httpstream_request_bytes_held();
    }
    json_t *p = json_loads(part_json, 0, NULL);
    assert_non_null(p);
    json_array_append_new(sink->parts, p);
    if (sink->cancel && !sink->started) {
        sink->started = true;
        assert_int_equal(pthread_create(&sink->canceller, NULL, s_cancel_later, sink), 0);
    }
}

static json_t *s_history(void) {
    /* The result holds 0.1 so that the replay shows the shortest form (jsonout). */
    return json_loads(
        "[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Be terse.\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather in Paris?\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"reasoning\",\"text\":\"User wants "
        "weather.\",\"signature\":\"sig-abc\"},{\"type\":\"text\",\"text\":\"Checking.\"},"
        "{\"type\":\"tool-call\",\"tool_call_id\":\"call_1\",\"tool_name\":\"get_weather\","
        "\"args\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\",\"tool_call_id\":\"call_1\","
        "\"tool_name\":\"get_weather\",\"result\":{\"temp_c\":0.1},\"is_error\":false}]}]",
        0, NULL);
}

static json_t *s_tools(void) {
    return json_loads("[{\"name\":\"get_weather\",\"description\":\"Current weather\","
                      "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":"
                      "{\"type\":\"string\"}},\"required\":[\"city\"]}}]",
                      0, NULL);
}

static json_t *s_user(const char *text) {
    return json_pack("[{s:s, s:[{s:s, s:s}]}]", "role", "user", "content", "type", "text", "text",
                     text);
}

/* Runs one call of provider p against mp with messages; the sink collects the parts. */
static provider_rc_t s_call(const s_prov_t *p, mockprov_t *mp, const json_t *messages,
                            s_sink_t *sink, provider_result_t *out) {
    char *base = mem_printf("%s%s", mockprov_url(mp), p->base_path);
    provider_model_t model = {.name = "m",
                              .provider = p->name,
                              .model = "test-model",
                              .base_url = base,
                              .api_key = "sk-test"};
    json_t *tools = s_tools();
    provider_request_t req = {.model = &model, .messages = messages, .tools = tools, .attempt = 1};
    cancel_t *cancel = sink->cancel ? cancel_ref(sink->cancel) : cancel_new();
    provider_rc_t rc = provider_generate(&req, cancel, s_on_part, sink, out);
    cancel_destroy(&cancel);
    json_decref(tools);
    free(base);
    return rc;
}

static void s_push(mockprov_t *mp, int status, const char *type, const char *body, size_t piece,
                   int delay_ms) {
    mockprov_reply_t *r = mockprov_reply_new(status, type);
    mockprov_reply_body(r, body, piece, delay_ms);
    mockprov_push(mp, &r);
}

/* body with every LF turned into CRLF (caller frees). */
static char *s_crlf(const char *body) {
    char *out = mem_alloc(strlen(body) * 2 + 1);
    size_t n = 0;
    for (const char *c = body; *c; c++) {
        if (*c == '\n') {
            out[n++] = '\r';
        }
        out[n++] = *c;
    }
    out[n] = '\0';
    return out;
}

/* The text of the streamed text parts, concatenated (caller frees). */
static char *s_streamed_text(const json_t *parts) {
    char *acc = mem_strdup("");
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        if (!strcmp(json_string_value(json_object_get(p, "type")), "text")) {
            char *next = mem_printf("%s%s", acc, json_string_value(json_object_get(p, "text")));
            free(acc);
            acc = next;
        }
    }
    return acc;
}

static void s_assert_json(const json_t *got, const char *want_text) {
    json_t *want = json_loads(want_text, 0, NULL);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(stderr, "got:  %s\nwant: %s\n", g ? g : "(null)", want_text);
        free(g);
    }
    assert_true(json_equal(got, want));
    json_decref(want);
}

static int s_setup(void **state) {
    *state = mockprov_new();
    return *state ? 0 : -1;
}

static int s_teardown(void **state) {
    mockprov_t *mp = *state;
    mockprov_destroy(&mp);
    return 0;
}

/* --- Behaviour common to the three providers. --- */

static void s_text_streamed_in_tiny_chunks(const s_prov_t *p, mockprov_t *mp) {
    static const size_t pieces[] = {1, 2, 3, 7, 64};
    char *crlf = s_crlf(p->text);
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0] * 2; k++) {
        const char *body = k % 2 ? crlf : p->text;
        s_push(mp, 200, p->type, body, pieces[k / 2], pieces[k / 2] < 4 ? 0 : 1);
        s_sink_t sink = {.parts = json_array()};
        provider_result_t out;
        json_t *msgs = s_user("hi");
        assert_int_equal(s_call(p, mp, msgs, &sink, &out), PROVIDER_OK);
        json_decref(msgs);
        char *streamed = s_streamed_text(sink.parts);
        assert_string_equal(streamed, "Héllo, wörld 日本");
        free(streamed);
        s_assert_json(out.content, "[{\"type\":\"text\",\"text\":\"Héllo, wörld 日本\"}]");
        s_assert_json(out.usage, "{\"input_tokens\":11,\"output_tokens\":4}");
        provider_result_clear(&out);
        json_decref(sink.parts);
    }
    free(crlf);
    json_t *req = mockprov_request(mp, 0);
    assert_string_equal(json_string_value(json_object_get(req, "path")), p->path);
    assert_string_equal(json_string_value(json_object_get(req, "method")), "POST");
    json_decref(req);
}

static void s_tool_call_with_argument_deltas(const s_prov_t *p, mockprov_t *mp) {
    s_push(mp, 200, p->type, p->tool, 5, 0);
    s_sink_t sink = {.parts = json_array()};
    provider_result_t out;
    json_t *msgs = s_user("Weather in Paris?");
    assert_int_equal(s_call(p, mp, msgs, &sink, &out), PROVIDER_OK);
    json_decref(msgs);
    assert_int_equal(json_array_size(out.content), 1);
    json_t *call = json_array_get(out.content, 0);
    assert_string_equal(json_string_value(json_object_get(call, "type")), "tool-call");
    assert_string_equal(json_string_value(json_object_get(call, "tool_name")), "get_weather");
    /* The raw argument bytes, unparsed: the generation task screens them (provider.h). */
    json_t *args = json_loads(json_string_value(json_object_get(call, "args_text")), 0, NULL);
    s_assert_json(args, "{\"city\":\"Paris\"}");
    json_decref(args);
    assert_null(json_object_get(call, "args"));
    const char *id = json_string_value(json_object_get(call, "tool_call_id"));
    /* Ollama sends no id: one is made up, unique per call. */
    assert_true(!strcmp(id, "call_1") || (!strcmp(p->name, "ollama") && strlen(id) > 20));
    /* The call is streamed whole, once. */
    assert_int_equal(json_array_size(sink.parts), 1);
    assert_true(json_equal(json_array_get(sink.parts, 0), call));
    /* The tools on offer went out in the provider's shape. */
    json_t *req = mockprov_request(mp, 0);
    json_t *tool = json_array_get(json_object_get(json_object_get(req, "body"), "tools"), 0);
    json_t *fn = strcmp(p->name, "anthropic") ? json_object_get(tool, "function") : tool;
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(fn, "description")), "Current weather");
    const char *schema_key = strcmp(p->name, "anthropic") ? "parameters" : "input_schema";
    s_assert_json(json_object_get(fn, schema_key),
                  "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                  "\"required\":[\"city\"]}");
    json_decref(req);
    provider_result_clear(&out);
    json_decref(sink.parts);
}

static void s_http_failures_are_classified(const s_prov_t *p, mockprov_t *mp) {
    char date[64];
    time_t later = time(NULL) + 3;
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&later, &tm));
    struct {
        int status;
        const char *retry_after;
        bool retryable;
        int64_t min_ms;
        int64_t max_ms;
    } cases[] = {
        {429, "2", true, 2000, 2000}, {429, date, true, 1000, 4000}, {503, NULL, true, -1, -1},
        {529, NULL, true, -1, -1},    {400, NULL, false, -1, -1},    {401, NULL, false, -1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mockprov_reply_t *r = mockprov_reply_new(cases[i].status, "application/json");
        if (cases[i].retry_after) {
            mockprov_reply_header(r, "retry-after", cases[i].retry_after);
        }
        mockprov_reply_body(r, p->err_body, 0, 0);
        mockprov_push(mp, &r);
        s_sink_t sink = {.parts = json_array()};
        provider_result_t out;
        json_t *msgs = s_user("hi");
        assert_int_equal(s_call(p, mp, msgs, &sink, &out), PROVIDER_ERROR);
        json_decref(msgs);
        assert_int_equal(out.status, cases[i].status);
        assert_int_equal(out.retryable, cases[i].retryable);
        assert_true(out.retry_after_ms >= cases[i].min_ms);
        assert_true(out.retry_after_ms <= cases[i].max_ms);
        assert_non_null(strstr(out.error, "bad thing"));
        assert_null(out.content);
        assert_int_equal(json_array_size(sink.parts), 0);
        json_decref(sink.parts);
    }
}

static void s_error_event_mid_stream_fails_the_call(const s_prov_t *p, mockprov_t *mp) {
    s_push(mp, 200, p->type, p->midstream, 4, 0);
    s_sink_t sink = {.parts = json_array()};
    provider_result_t out;
    json_t *msgs = s_user("hi");
    assert_int_equal(s_call(p, mp, msgs, &sink, &out), PROVIDER_ERROR);
    json_decref(msgs);
    assert_int_equal(out.status, 0);
    assert_true(out.retryable);
    assert_non_null(strstr(out.error, "error in the stream"));
    assert_null(out.content);
    json_decref(sink.parts);
}

static void s_truncated_stream_is_a_retryable_error(const s_prov_t *p, mockprov_t *mp) {
    for (int drop = 0; drop < 2; drop++) {
        mockprov_reply_t *r = mockprov_reply_new(200, p->type);
        mockprov_reply_body(r, p->truncated, 3, 0);
        if (drop) {
            mockprov_reply_abort(r); /* the connection is cut instead of ended */
        }
        mockprov_push(mp, &r);
        s_sink_t sink = {.parts = json_array()};
        provider_result_t out;
        json_t *msgs = s_user("hi");
        assert_int_equal(s_call(p, mp, msgs, &sink, &out), PROVIDER_ERROR);
        json_decref(msgs);
        assert_int_equal(out.status, 0);
        assert_true(out.retryable);
        assert_non_null(strstr(out.error, drop ? "network" : "truncated"));
        assert_true(json_array_size(sink.parts) >= 1); /* what came is still streamed */
        assert_null(out.content);
        json_decref(sink.parts);
    }
}

static void s_cancel_mid_stream_returns_promptly(const s_prov_t *p, mockprov_t *mp) {
    mockprov_reply_t *r = mockprov_reply_new(200, p->type);
    mockprov_reply_body(r, p->truncated, 0, 0);
    mockprov_reply_hold(r, 20000);
    mockprov_push(mp, &r);
    s_sink_t sink = {.parts = json_array(), .cancel = cancel_new()};
    provider_result_t out;
    json_t *msgs = s_user("hi");
    provider_rc_t rc = s_call(p, mp, msgs, &sink, &out);
    int64_t took = id_now_ms() - sink.cancelled_at;
    json_decref(msgs);
    assert_true(sink.started);
    assert_int_equal(pthread_join(sink.canceller, NULL), 0);
    assert_int_equal(rc, PROVIDER_CANCELLED);
    assert_true(sink.cancelled_at > 0);
    fprintf(stderr, "%s: cancelled mid-stream, returned after %lld ms\n", p->name, (long long)took);
    assert_true(took < CANCEL_BOUND_MS);
    assert_null(out.content);
    cancel_destroy(&sink.cancel);
    json_decref(sink.parts);
}

static void s_history_is_replayed_in_wire_shape(const s_prov_t *p, mockprov_t *mp,
                                                const char *want_messages) {
    s_push(mp, 200, p->type, p->text, 0, 0);
    s_sink_t sink = {.parts = json_array()};
    provider_result_t out;
    json_t *msgs = s_history();
    assert_int_equal(s_call(p, mp, msgs, &sink, &out), PROVIDER_OK);
    json_decref(msgs);
    json_t *req = mockprov_request(mp, 0);
    json_t *body = json_object_get(req, "body");
    assert_string_equal(json_string_value(json_object_get(body, "model")), "test-model");
    assert_true(json_is_true(json_object_get(body, "stream")));
    s_assert_json(json_object_get(body, "messages"), want_messages);
    /* The text as sent keeps the shortest form of 0.1 (jsonout, not json_dumps). */
    assert_non_null(strstr(json_string_value(json_object_get(req, "body_text")), "0.1"));
    assert_null(strstr(json_string_value(json_object_get(req, "body_text")), "0.1000"));
    json_decref(req);
    provider_result_clear(&out);
    json_decref(sink.parts);
}

#define PER_PROVIDER(fn)                                                                           \
    static void test_openai_##fn(void **state) {                                                   \
        s_##fn(&s_openai, *state);                                                                 \
    }                                                                                              \
    static void test_anthropic_##fn(void **state) {                                                \
        s_##fn(&s_anthropic, *state);                                                              \
    }                                                                                              \
    static void test_ollama_##fn(void **state) {                                                   \
        s_##fn(&s_ollama, *state);                                                                 \
    }

PER_PROVIDER(text_streamed_in_tiny_chunks)
PER_PROVIDER(tool_call_with_argument_deltas)
PER_PROVIDER(http_failures_are_classified)
PER_PROVIDER(error_event_mid_stream_fails_the_call)
PER_PROVIDER(truncated_stream_is_a_retryable_error)
PER_PROVIDER(cancel_mid_stream_returns_promptly)

/* --- Request wire format, per provider. --- */

static void test_openai_request_has_bearer_roles_tool_calls_and_results(void **state) {
    mockprov_t *mp = *state;
    s_history_is_replayed_in_wire_shape(
        &s_openai, mp,
        "[{\"role\":\"system\",\"content\":\"Be terse.\"},"
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"tool_calls\":[{\"id\":\"call_1\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"{\\\"temp_c\\\":0.1}\"}]");
    json_t *req = mockprov_request(mp, 0);
    json_t *h = json_object_get(req, "headers");
    assert_string_equal(json_string_value(json_object_get(h, "authorization")), "Bearer sk-test");
    assert_string_equal(json_string_value(json_object_get(h, "content-type")), "application/json");
    s_assert_json(json_object_get(json_object_get(req, "body"), "stream_options"),
                  "{\"include_usage\":true}");
    json_decref(req);
}

static void test_anthropic_request_has_key_version_system_and_tool_results(void **state) {
    mockprov_t *mp = *state;
    s_history_is_replayed_in_wire_shape(
        &s_anthropic, mp,
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather in Paris?\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"User wants "
        "weather.\",\"signature\":\"sig-abc\"},{\"type\":\"text\",\"text\":\"Checking.\"},"
        "{\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":\"get_weather\","
        "\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"call_1\","
        "\"content\":\"{\\\"temp_c\\\":0.1}\"}]}]");
    json_t *req = mockprov_request(mp, 0);
    json_t *h = json_object_get(req, "headers");
    assert_string_equal(json_string_value(json_object_get(h, "x-api-key")), "sk-test");
    assert_string_equal(json_string_value(json_object_get(h, "anthropic-version")), "2023-06-01");
    assert_null(json_object_get(h, "authorization"));
    json_t *body = json_object_get(req, "body");
    s_assert_json(json_object_get(body, "system"), "[{\"type\":\"text\",\"text\":\"Be terse.\"}]");
    assert_int_equal(json_integer_value(json_object_get(body, "max_tokens")), ANTHROPIC_MAX_TOKENS);
    json_decref(req);
}

static void test_ollama_request_has_tool_calls_as_objects_and_tool_names(void **state) {
    mockprov_t *mp = *state;
    s_history_is_replayed_in_wire_shape(
        &s_ollama, mp,
        "[{\"role\":\"system\",\"content\":\"Be terse.\"},"
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"tool_calls\":[{\"id\":\"call_1\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}],"
        "\"thinking\":\"User wants weather.\"},"
        "{\"role\":\"tool\",\"tool_name\":\"get_weather\",\"tool_call_id\":\"call_1\","
        "\"content\":\"{\\\"temp_c\\\":0.1}\"}]");
}

/* --- Provider specifics. --- */

static void test_anthropic_thinking_keeps_its_signature_and_is_replayed(void **state) {
    mockprov_t *mp = *state;
    /* From the SDK fixture, padding spaces included (worker/providers/README.md). */
    const char *body =
        AN_START AN_EV("content_block_start",
                       "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
                       "\"thinking\",\"thinking\":\"\",\"signature\":\"\"}  }")
            AN_DELTA("0", "{\"type\":\"thinking_delta\",\"thinking\":\"Simple educ\"}             ")
                AN_DELTA("0", "{\"type\":\"thinking_delta\",\"thinking\":\"ation.\"}") AN_DELTA(
                    "0", "{\"type\":\"signature_delta\",\"signature\":\"c3ludGhldGlj\"} ")
                    AN_EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0  }")
                        AN_EV("content_block_start",
                              "{\"type\":\"content_block_start\",\"index\":1,"
                              "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
                            AN_DELTA("1", "{\"type\":\"text_delta\",\"text\":\"Answer.\"}")
                                AN_STOP("1") AN_END("end_turn", "12");
    s_push(mp, 200, "text/event-stream", body, 3, 0);
    s_sink_t sink = {.parts = json_array()};
    provider_result_t out;
    json_t *msgs = s_user("Explain.");
    assert_int_equal(s_call(&s_anthropic, mp, msgs, &sink, &out), PROVIDER_OK);
    s_assert_json(out.content,
                  "[{\"type\":\"reasoning\",\"text\":\"Simple education.\","
                  "\"signature\":\"c3ludGhldGlj\"},{\"type\":\"text\",\"text\":\"Answer.\"}]");
    s_assert_json(json_array_get(sink.parts, 0), "{\"type\":\"reasoning\",\"text\":\"Simple "
                                                 "education.\",\"signature\":\"c3ludGhldGlj\"}");
    s_assert_json(out.usage, "{\"input_tokens\":11,\"output_tokens\":12}");
    /* The next step sends the block back unchanged, before the text. */
    json_array_append_new(msgs,
                          json_pack("{s:s, s:O}", "role", "assistant", "content", out.content));
    json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role", "user", "content",
                                          "type", "text", "text", "More."));
    provider_result_clear(&out);
    s_push(mp, 200, "text/event-stream", s_anthropic.text, 0, 0);
    assert_int_equal(s_call(&s_anthropic, mp, msgs, &sink, &out), PROVIDER_OK);
    json_t *req = mockprov_request(mp, 1);
    s_assert_json(json_array_get(json_object_get(json_object_get(req, "body"), "messages"), 1),
                  "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
                  "\"Simple education.\",\"signature\":\"c3ludGhldGlj\"},"
                  "{\"type\":\"text\",\"text\":\"Answer.\"}]}");
    json_decref(req);
    json_decref(msgs);
    provider_result_clear(&out);
    json_decref(sink.parts);
}

static void test_openai_invalid_tool_arguments_keep_the_raw_text(void **state) {
    mockprov_t *mp = *state;
    const char *body = OA_CHUNK(
        "{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",\"function\":{"
        "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": Par\"}}]}",
        "null") OA_CHUNK("{\"tool_calls\":[{\"index\":1,\"id\":\"call_10\",\"type\":\"function\","
                         "\"function\":{\"name\":\"get_time\",\"arguments\":\"\"}}]}",
                         "null") OA_CHUNK("{}", "\"tool_calls\"") "data: [DONE]\n\n";
    s_push(mp, 200, "text/event-stream", body, 2, 0);
    s_sink_t sink = {.parts = json_array()};
    provider_result_t out;
    json_t *msgs = s_user("hi");
    assert_int_equal(s_call(&s_openai, mp, msgs, &sink, &out), PROVIDER_OK);
    json_decref(msgs);
    s_assert_json(out.content, "[{\"type\":\"tool-call\",\"tool_call_id\":\"call_9\","
                               "\"tool_name\":\"get_weather\","
                               "\"args_text\":\"{\\\"city\\\": Par\"},"
                               "{\"type\":\"tool-call\",\"tool_call_id\":\"call_10\","
                               "\"tool_name\":\"get_time\",\"args_text\":\"{}\"}]");
    assert_null(out.usage); /* the stream sent no usage chunk */
    provider_result_clear(&out);
    json_decref(sink.parts);
}

/* --- The splitter. --- */

typedef struct {
    char log[2048];
    size_t len;
} s_events_t;

static httpstream_verdict_t s_log_event(void *ctx, const char *event, const char *data,
                                        size_t len) {
    s_events_t *e = ctx;
    int n = snprintf(e->log + e->len, sizeof e->log - e->len, "[%s|%.*s]", event, (int)len, data);
    assert_true(n > 0 && (size_t)n < sizeof e->log - e->len);
    e->len += (size_t)n;
    return HTTPSTREAM_CONTINUE;
}

static void test_httpstream_sse_gives_the_same_events_at_every_split_point(void **state) {
    (void)state;
    const char *in = ": comment\r\nevent: a\r\ndata: x\r\ndata:y\r\n\r\nid: 7\nretry: 3\n"
                     "data:  two spaces é\n\nevent: lone\n\ndata: cr\r\rdata\n\nfoo: bar\n"
                     "data: {\"k\":1}\n\ndata: dropped at EOF";
    const char *want = "[a|x\ny][| two spaces é][|cr][|][|{\"k\":1}]";
    size_t n = strlen(in);
    for (size_t cut = 0; cut <= n; cut++) {
        s_events_t e = {0};
        httpstream_t *s = httpstream_new(HTTPSTREAM_SSE, 256, s_log_event, &e);
        assert_int_equal(httpstream_feed(s, in, cut), HTTPSTREAM_CONTINUE);
        assert_int_equal(httpstream_feed(s, in + cut, n - cut), HTTPSTREAM_CONTINUE);
        assert_int_equal(httpstream_finish(s), HTTPSTREAM_CONTINUE);
        assert_string_equal(e.log, want);
        httpstream_destroy(&s);
        assert_null(s);
    }
    s_events_t e = {0};
    httpstream_t *s = httpstream_new(HTTPSTREAM_SSE, 256, s_log_event, &e);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(httpstream_feed(s, in + i, 1), HTTPSTREAM_CONTINUE);
    }
    assert_string_equal(e.log, want);
    httpstream_destroy(&s);
}

static void test_httpstream_ndjson_lines_and_the_last_line_without_newline(void **state) {
    (void)state;
    const char *in = "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}";
    s_events_t e = {0};
    httpstream_t *s = httpstream_new(HTTPSTREAM_NDJSON, 64, s_log_event, &e);
    for (size_t i = 0; in[i]; i++) {
        assert_int_equal(httpstream_feed(s, in + i, 1), HTTPSTREAM_CONTINUE);
    }
    assert_string_equal(e.log, "[|{\"a\":1}][|{\"b\":2}]");
    assert_int_equal(httpstream_finish(s), HTTPSTREAM_CONTINUE);
    assert_string_equal(e.log, "[|{\"a\":1}][|{\"b\":2}][|{\"c\":3}]");
    httpstream_destroy(&s);
}

static void test_httpstream_a_line_over_the_cap_is_an_error(void **state) {
    (void)state;
    s_events_t e = {0};
    httpstream_t *s = httpstream_new(HTTPSTREAM_SSE, 16, s_log_event, &e);
    assert_int_equal(httpstream_feed(s, "data: 0123456789\n", 17), HTTPSTREAM_CONTINUE);
    assert_int_equal(httpstream_feed(s, "data: 0123456789", 16), HTTPSTREAM_CONTINUE);
    assert_int_equal(httpstream_feed(s, "x", 1), -1);
    assert_int_equal(httpstream_feed(s, "\n\n", 2), -1); /* sticky */
    assert_int_equal(e.len, 0);
    httpstream_destroy(&s);
}

static void test_httpstream_retry_after_in_seconds_or_as_an_http_date(void **state) {
    (void)state;
    int64_t now = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */
    assert_int_equal(httpstream_retry_after_ms("2", now), 2000);
    assert_int_equal(httpstream_retry_after_ms(" 1.5 ", now), 1500);
    assert_int_equal(httpstream_retry_after_ms("0", now), 0);
    assert_int_equal(httpstream_retry_after_ms("Wed, 21 Oct 2015 07:28:30 GMT", now), 30000);
    assert_int_equal(httpstream_retry_after_ms("Wed, 21 Oct 2015 07:27:00 GMT", now), 0);
    assert_int_equal(httpstream_retry_after_ms("99999999", now), HTTPSTREAM_RETRY_AFTER_MAX_MS);
    assert_int_equal(httpstream_retry_after_ms("soon", now), -1);
    assert_int_equal(httpstream_retry_after_ms("-3", now), -1);
    assert_int_equal(httpstream_retry_after_ms("3s", now), -1);
}

/* Native constrained decoding: with native_schema set and no tools, each provider puts the
 * schema in its own field (ARCHITECTURE.md §8, "Native provider modes") and offers no tools. */
static void s_native_schema_in_the_provider_field(const s_prov_t *p, mockprov_t *mp,
                                                  const char *field, const char *want) {
    s_push(mp, 200, p->type, p->text, 0, 0);
    char *base = mem_printf("%s%s", mockprov_url(mp), p->base_path);
    provider_model_t model = {.name = "m",
                              .provider = p->name,
                              .model = "test-model",
                              .base_url = base,
                              .api_key = "sk-test"};
    json_t *schema =
        json_loads("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}", 0, NULL);
    json_t *msgs = s_user("n?");
    json_t *tools = json_array();
    provider_request_t req = {.model = &model,
                              .messages = msgs,
                              .tools = tools,
                              .attempt = 1,
                              .native_schema = schema,
                              .native_name = "answer"};
    s_sink_t sink = {.parts = json_array()};
    cancel_t *cancel = cancel_new();
    provider_result_t out;
    assert_int_equal(provider_generate(&req, cancel, s_on_part, &sink, &out), PROVIDER_OK);
    provider_result_clear(&out);
    cancel_destroy(&cancel);
    json_t *sent = mockprov_request(mp, 0);
    const json_t *body = json_object_get(sent, "body");
    s_assert_json(json_object_get(body, field), want);
    assert_null(json_object_get(body, "tools"));
    json_decref(sent);
    json_decref(sink.parts);
    json_decref(tools);
    json_decref(msgs);
    json_decref(schema);
    free(base);
}

/* One call of provider p with base_url and key (from api_key_env MODEL_KEY); its result. */
static provider_rc_t s_call_with(const s_prov_t *p, const char *base, const char *key,
                                 provider_result_t *out) {
    provider_model_t model = {.name = "keyed-model",
                              .provider = p->name,
                              .model = "test-model",
                              .base_url = base,
                              .api_key_env = "MODEL_KEY",
                              .api_key = key};
    json_t *messages = s_user("hi");
    provider_request_t req = {.model = &model, .messages = messages, .attempt = 1};
    cancel_t *cancel = cancel_new();
    s_sink_t sink = {.parts = json_array()};
    provider_rc_t rc = provider_generate(&req, cancel, s_on_part, &sink, out);
    cancel_destroy(&cancel);
    json_decref(sink.parts);
    json_decref(messages);
    return rc;
}

/* A key with a control character would inject headers: every provider refuses it before
 * sending anything, with a non-retryable error naming the model and its api_key_env (never
 * the key); the same provider with a good key still sends it in its credential header. */
static void test_a_key_with_a_control_byte_is_refused_before_any_request(void **state) {
    mockprov_t *mp = *state;
    const s_prov_t *provs[] = {&s_openai, &s_anthropic, &s_ollama};
    const char *bad[] = {"sk-test\r\nX-Injected: 1", "sk-\ttest", "sk-test\x7f"};
    for (size_t i = 0; i < sizeof provs / sizeof provs[0]; i++) {
        char *base = mem_printf("%s%s", mockprov_url(mp), provs[i]->base_path);
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            provider_result_t out;
            assert_int_equal(s_call_with(provs[i], base, bad[k], &out), PROVIDER_ERROR);
            assert_false(out.retryable);
            assert_non_null(strstr(out.error, "control character"));
            assert_non_null(strstr(out.error, provs[i]->name));
            assert_non_null(strstr(out.error, "MODEL_KEY"));
            assert_non_null(strstr(out.error, "keyed-model"));
            assert_null(strstr(out.error, "sk-"));
            provider_result_clear(&out);
        }
        free(base);
    }
    assert_int_equal(mockprov_request_count(mp), 0);
    /* Good keys go through the same builder and arrive in each provider's header. */
    const char *header[] = {"authorization", "x-api-key", "authorization"};
    const char *want[] = {"Bearer sk-good", "sk-good", "Bearer sk-good"};
    for (size_t i = 0; i < sizeof provs / sizeof provs[0]; i++) {
        s_push(mp, 200, provs[i]->type, provs[i]->text, 0, 0);
        char *base = mem_printf("%s%s", mockprov_url(mp), provs[i]->base_path);
        provider_result_t out;
        assert_int_equal(s_call_with(provs[i], base, "sk-good", &out), PROVIDER_OK);
        provider_result_clear(&out);
        json_t *sent = mockprov_request(mp, (int)i);
        const json_t *h = json_object_get(sent, "headers");
        assert_string_equal(json_string_value(json_object_get(h, header[i])), want[i]);
        assert_string_equal(json_string_value(json_object_get(h, "content-type")),
                            "application/json");
        assert_null(json_object_get(h, "x-injected"));
        json_decref(sent);
        free(base);
    }
}

/* A base_url with a control character (one stored before the gateway refused it) never
 * reaches libcurl: the call fails unsent, non-retryable, saying the URL is refused. */
static void test_a_base_url_with_a_control_character_is_refused_unsent(void **state) {
    mockprov_t *mp = *state;
    const s_prov_t *provs[] = {&s_openai, &s_anthropic, &s_ollama};
    for (size_t i = 0; i < sizeof provs / sizeof provs[0]; i++) {
        char *base = mem_printf("%s%s\r\nX-Injected: 1", mockprov_url(mp), provs[i]->base_path);
        provider_result_t out;
        assert_int_equal(s_call_with(provs[i], base, "sk-good", &out), PROVIDER_ERROR);
        assert_false(out.retryable);
        assert_non_null(strstr(out.error, "request refused"));
        assert_non_null(strstr(out.error, "base_url"));
        provider_result_clear(&out);
        free(base);
    }
    assert_int_equal(mockprov_request_count(mp), 0);
}

static void test_openai_native_schema_is_response_format_json_schema(void **state) {
    s_native_schema_in_the_provider_field(
        &s_openai, *state, "response_format",
        "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"answer\",\"schema\":{\"type\":"
        "\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}}}");
}

static void test_anthropic_native_schema_is_output_config_format(void **state) {
    s_native_schema_in_the_provider_field(
        &s_anthropic, *state, "output_config",
        "{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\",\"properties\":"
        "{\"n\":{\"type\":\"integer\"}}}}}");
}

static void test_ollama_native_schema_is_format(void **state) {
    s_native_schema_in_the_provider_field(
        &s_ollama, *state, "format",
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}");
}

static void test_no_native_schema_adds_no_native_field(void **state) {
    mockprov_t *mp = *state;
    s_push(mp, 200, s_openai.type, s_openai.text, 0, 0);
    s_sink_t sink = {.parts = json_array()};
    provider_result_t out;
    json_t *msgs = s_user("hi");
    assert_int_equal(s_call(&s_openai, mp, msgs, &sink, &out), PROVIDER_OK);
    provider_result_clear(&out);
    json_t *sent = mockprov_request(mp, 0);
    assert_null(json_object_get(json_object_get(sent, "body"), "response_format"));
    json_decref(sent);
    json_decref(msgs);
    json_decref(sink.parts);
}

/* Each provider's own usage fields, as its wire reports them, in the stored shape
 * (worker/providers/usage.h); then the context size and cost the worker stamps. */
static void test_each_provider_reports_its_own_usage_fields(void **state) {
    mockprov_t *mp = *state;
    const char *oa = OA_CHUNK(
        "{\"content\":\"Hi\"}",
        "\"stop\"") "data: {\"id\":\"c1\","
                    "\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":30,"
                    "\"prompt_tokens_details\":{\"cached_tokens\":100,\"audio_tokens\":0},"
                    "\"completion_tokens_details\":{\"reasoning_tokens\":12}}}\n\ndata: [DONE]\n\n";
    const char *an =
        AN_EV("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
                               "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
                               "\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":200,"
                               "\"cache_read_input_tokens\":1000,\"output_tokens\":1}}}")
            AN_EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                         "\"content_block\":{\"type\":\"thinking\",\"thinking\":"
                                         "\"\",\"signature\":\"\"}}")
                AN_DELTA("0", "{\"type\":\"thinking_delta\",\"thinking\":\"Hmm.\"}")
                    AN_DELTA("0", "{\"type\":\"signature_delta\",\"signature\":\"c2ln\"}")
                        AN_STOP("0") AN_END("end_turn", "40");
    const char *ol = OL_LINE("\"content\":\"Hi\"", "\"done_reason\":\"stop\",\"done\":true,"
                                                   "\"prompt_eval_count\":26,\"eval_count\":7");
    const struct {
        const s_prov_t *p;
        const char *body;
        const char *want;
    } cases[] = {
        {&s_openai, oa,
         "{\"input_tokens\":20,\"output_tokens\":30,\"cache_read_tokens\":100,"
         "\"reasoning_tokens\":12}"},
        {&s_anthropic, an,
         "{\"input_tokens\":5,\"output_tokens\":40,\"cache_read_tokens\":1000,"
         "\"cache_creation_tokens\":200}"},
        {&s_ollama, ol, "{\"input_tokens\":26,\"output_tokens\":7}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_push(mp, 200, cases[i].p->type, cases[i].body, 5, 0);
        s_sink_t sink = {.parts = json_array()};
        provider_result_t out;
        json_t *msgs = s_user("hi");
        assert_int_equal(s_call(cases[i].p, mp, msgs, &sink, &out), PROVIDER_OK);
        s_assert_json(out.usage, cases[i].want);
        if (i == 0) {
            /* 20 x 2.5 + 30 x 10 + 100 x 1.25 micro-USD; the whole prompt plus the reply. */
            json_t *prices =
                json_pack("{s:f, s:f, s:f}", "input", 2.5, "output", 10.0, "cache_read", 1.25);
            json_t *priced = usage_priced(out.usage, prices, 128000);
            s_assert_json(priced, "{\"input_tokens\":20,\"output_tokens\":30,\"cache_read_tokens\":"
                                  "100,\"reasoning_tokens\":12,\"context_tokens\":150,"
                                  "\"context_limit\":128000,\"total_cost_micros\":475}");
            json_decref(priced);
            json_decref(prices);
        }
        json_decref(msgs);
        provider_result_clear(&out);
        json_decref(sink.parts);
    }
}

/* A stream that lasts a minute must not hold its request (ARCHITECTURE.md §6.5): the body is
 * released once sent and answered, also one over 64 KiB (which libcurl sends from the
 * caller's buffer, not from a copy), and that body still arrives whole. */
static void test_a_streaming_call_releases_its_request_body_once_answered(void **state) {
    mockprov_t *mp = *state;
    size_t sizes[] = {2, 200 * 1024};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        char *text = mem_alloc(sizes[k] + 1);
        memset(text, 'a', sizes[k]);
        text[sizes[k]] = '\0';
        mockprov_reply_t *r = mockprov_reply_new(200, s_openai.type);
        mockprov_reply_body(r, s_openai.text, 16, 20); /* a slow stream of small pieces */
        mockprov_push(mp, &r);
        s_sink_t sink = {.parts = json_array()};
        provider_result_t out;
        json_t *msgs = s_user(text);
        assert_int_equal(s_call(&s_openai, mp, msgs, &sink, &out), PROVIDER_OK);
        assert_true(sink.seen);
        assert_int_equal(sink.held_at_first, 0);
        assert_int_equal(httpstream_request_bytes_held(), 0);
        json_t *req = mockprov_request(mp, (int)k);
        json_t *sent = json_object_get(
            json_array_get(json_object_get(json_object_get(req, "body"), "messages"), 0),
            "content");
        assert_string_equal(json_string_value(sent), text);
        json_decref(req);
        json_decref(msgs);
        provider_result_clear(&out);
        json_decref(sink.parts);
        free(text);
    }
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, s_setup, s_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_httpstream_sse_gives_the_same_events_at_every_split_point),
        cmocka_unit_test(test_httpstream_ndjson_lines_and_the_last_line_without_newline),
        cmocka_unit_test(test_httpstream_a_line_over_the_cap_is_an_error),
        cmocka_unit_test(test_httpstream_retry_after_in_seconds_or_as_an_http_date),
        T(test_openai_text_streamed_in_tiny_chunks),
        T(test_each_provider_reports_its_own_usage_fields),
        T(test_anthropic_text_streamed_in_tiny_chunks),
        T(test_ollama_text_streamed_in_tiny_chunks),
        T(test_openai_tool_call_with_argument_deltas),
        T(test_anthropic_tool_call_with_argument_deltas),
        T(test_ollama_tool_call_with_argument_deltas),
        T(test_openai_request_has_bearer_roles_tool_calls_and_results),
        T(test_anthropic_request_has_key_version_system_and_tool_results),
        T(test_ollama_request_has_tool_calls_as_objects_and_tool_names),
        T(test_openai_http_failures_are_classified),
        T(test_anthropic_http_failures_are_classified),
        T(test_ollama_http_failures_are_classified),
        T(test_openai_error_event_mid_stream_fails_the_call),
        T(test_anthropic_error_event_mid_stream_fails_the_call),
        T(test_ollama_error_event_mid_stream_fails_the_call),
        T(test_openai_truncated_stream_is_a_retryable_error),
        T(test_anthropic_truncated_stream_is_a_retryable_error),
        T(test_ollama_truncated_stream_is_a_retryable_error),
        T(test_openai_cancel_mid_stream_returns_promptly),
        T(test_anthropic_cancel_mid_stream_returns_promptly),
        T(test_ollama_cancel_mid_stream_returns_promptly),
        T(test_anthropic_thinking_keeps_its_signature_and_is_replayed),
        T(test_openai_invalid_tool_arguments_keep_the_raw_text),
        T(test_openai_native_schema_is_response_format_json_schema),
        T(test_anthropic_native_schema_is_output_config_format),
        T(test_ollama_native_schema_is_format),
        T(test_no_native_schema_adds_no_native_field),
        T(test_a_key_with_a_control_byte_is_refused_before_any_request),
        T(test_a_base_url_with_a_control_character_is_refused_unsent),
        T(test_a_streaming_call_releases_its_request_body_once_answered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
