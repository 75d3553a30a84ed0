/*
 * The summary call of a compaction (provider.h, summary; ARCHITECTURE.md §7.6) on the three
 * network providers: the request asks for a whole response ("stream": false, no tools), and the
 * response, one JSON document cut into small chunks, becomes the reply's text and usage. An
 * error document in a 200 response fails the call. Also the path and header lines each
 * provider's spec (netprovider.h) sends on a streamed and on a summary call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "mem.h"
#include "mockprov.h"
#include "provider.h"

typedef struct {
    const char *name;
    const char *base_path;      /* appended to the mock URL to make base_url */
    const char *reply;          /* a whole response whose text is "The summary." (usage 30/4) */
    const char *error;          /* a whole error document */
    const char *path;           /* the request path */
    const char *stream_headers; /* the headers of a streamed call with key sk-good */
    const char *whole_headers;  /* the headers of a summary call without a key */
} s_prov_t;

static const s_prov_t s_openai = {
    .name = "openai",
    .base_path = "/v1/",
    .reply = "{\n  \"id\": \"c1\",\n  \"object\": \"chat.completion\",\n  \"choices\": [{\n"
             "    \"index\": 0,\n    \"message\": {\"role\": \"assistant\", \"content\": "
             "\"The summary.\"},\n    \"finish_reason\": \"stop\"\n  }],\n  \"usage\": "
             "{\"prompt_tokens\": 30, \"completion_tokens\": 4, \"total_tokens\": 34}\n}\n",
    .error = "{\"error\":{\"message\":\"bad thing\",\"type\":\"invalid_request_error\"}}",
    .path = "/v1/chat/completions",
    .stream_headers = "{\"accept\":\"text/event-stream\",\"authorization\":\"Bearer "
                      "sk-good\",\"content-type\":\"application/json\"}",
    .whole_headers = "{\"accept\":\"application/json\",\"content-type\":\"application/json\"}",
};

static const s_prov_t s_anthropic = {
    .name = "anthropic",
    .base_path = "",
    .reply = "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":"
             "[{\"type\":\"text\",\"text\":\"The \"},{\"type\":\"text\",\"text\":\"summary.\"}],"
             "\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":30,\"output_tokens\":4}}",
    .error = "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
             "\"message\":\"bad thing\"}}",
    .path = "/v1/messages",
    .stream_headers = "{\"accept\":\"text/"
                      "event-stream\",\"anthropic-version\":\"2023-06-01\",\"x-api-key\":\"sk-"
                      "good\",\"content-type\":\"application/json\"}",
    .whole_headers =
        "{\"accept\":\"application/"
        "json\",\"anthropic-version\":\"2023-06-01\",\"content-type\":\"application/json\"}",
};

static const s_prov_t s_ollama = {
    .name = "ollama",
    .base_path = "",
    .reply = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"The summary.\"},"
             "\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":30,\"eval_count\":4}",
    .error = "{\"error\":\"bad thing\"}",
    .path = "/api/chat",
    .stream_headers = "{\"accept\":\"application/x-ndjson\",\"authorization\":\"Bearer "
                      "sk-good\",\"content-type\":\"application/json\"}",
    .whole_headers = "{\"accept\":\"application/x-ndjson\",\"content-type\":\"application/json\"}",
};

static void s_ignore_part(void *ctx, const char *part_json) {
    (void)ctx;
    (void)part_json;
}

/* One call of p (a summary call when summary is set, with key when it is not NULL). */
static provider_rc_t s_call(const s_prov_t *p, mockprov_t *mp, bool summary, const char *key,
                            provider_result_t *out) {
    char *base = mem_printf("%s%s", mockprov_url(mp), p->base_path);
    provider_model_t model = {.name = "m",
                              .provider = p->name,
                              .model = "test-model",
                              .base_url = base,
                              .api_key_env = key ? "MODEL_KEY" : NULL,
                              .api_key = key};
    json_t *msgs = json_pack("[{s:s, s:[{s:s, s:s}]}, {s:s, s:[{s:s, s:s}]}]", "role", "system",
                             "content", "type", "text", "text", "You summarize.", "role", "user",
                             "content", "type", "text", "text", "Summarize the conversation.");
    json_t *tools = json_array();
    provider_request_t req = {
        .model = &model, .messages = msgs, .tools = tools, .attempt = 1, .summary = summary};
    cancel_t *cancel = cancel_new();
    provider_rc_t rc = provider_generate(&req, cancel, s_ignore_part, NULL, out);
    cancel_destroy(&cancel);
    json_decref(tools);
    json_decref(msgs);
    free(base);
    return rc;
}

static provider_rc_t s_summary_call(const s_prov_t *p, mockprov_t *mp, provider_result_t *out) {
    return s_call(p, mp, true, NULL, out);
}

static void s_push(mockprov_t *mp, const char *body) {
    mockprov_reply_t *r = mockprov_reply_new(200, "application/json");
    mockprov_reply_body(r, body, 5, 0); /* 5-byte chunks: the document arrives in pieces */
    mockprov_push(mp, &r);
}

static void s_summary_is_one_whole_response(const s_prov_t *p) {
    mockprov_t *mp = mockprov_new();
    assert_non_null(mp);
    s_push(mp, p->reply);
    provider_result_t out;
    assert_int_equal(s_summary_call(p, mp, &out), PROVIDER_OK);
    /* Text parts only (one per Anthropic text block), which read "The summary.". */
    char *text = mem_strdup("");
    size_t i;
    json_t *part;
    json_array_foreach(out.content, i, part) {
        assert_string_equal(json_string_value(json_object_get(part, "type")), "text");
        char *next = mem_printf("%s%s", text, json_string_value(json_object_get(part, "text")));
        free(text);
        text = next;
    }
    assert_string_equal(text, "The summary.");
    free(text);
    assert_int_equal(json_integer_value(json_object_get(out.usage, "input_tokens")), 30);
    assert_int_equal(json_integer_value(json_object_get(out.usage, "output_tokens")), 4);
    assert_string_equal(out.finish, "stop");
    provider_result_clear(&out);
    json_t *sent = mockprov_request(mp, 0);
    const json_t *body = json_object_get(sent, "body");
    assert_true(json_is_false(json_object_get(body, "stream")));
    assert_null(json_object_get(body, "stream_options"));
    assert_null(json_object_get(body, "tools"));
    assert_non_null(strstr(json_string_value(json_object_get(sent, "body_text")),
                           "Summarize the conversation."));
    json_decref(sent);
    /* An error document in a 200 response fails the call, naming the provider's message
     * (classified as an error event of a stream is: worker/providers/README.md). */
    s_push(mp, p->error);
    assert_int_equal(s_summary_call(p, mp, &out), PROVIDER_ERROR);
    assert_non_null(strstr(out.error, "bad thing"));
    provider_result_clear(&out);
    mockprov_destroy(&mp);
}

static void test_openai_summary_is_one_whole_response(void **u) {
    (void)u;
    s_summary_is_one_whole_response(&s_openai);
}

static void test_anthropic_summary_is_one_whole_response(void **u) {
    (void)u;
    s_summary_is_one_whole_response(&s_anthropic);
}

static void test_ollama_summary_is_one_whole_response(void **u) {
    (void)u;
    s_summary_is_one_whole_response(&s_ollama);
}

/* The headers of a request other than those libcurl adds itself, as one JSON object text. */
static char *s_sent_headers(const json_t *sent) {
    json_t *h = json_deep_copy(json_object_get(sent, "headers"));
    json_object_del(h, "host");
    json_object_del(h, "content-length");
    char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    return text;
}

static void s_assert_headers(const json_t *sent, const char *want_text) {
    json_t *want = json_loads(want_text, 0, NULL);
    assert_non_null(want);
    char *want_sorted = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
    char *got = s_sent_headers(sent);
    assert_string_equal(got, want_sorted);
    free(got);
    free(want_sorted);
    json_decref(want);
}

/* Whatever the reply, a streamed call and a summary call POST to the provider's path with
 * exactly its header lines: the Accept line of each kind, a fixed line (Anthropic's version)
 * and the credential only when a key is set. */
static void s_calls_send_the_specs_path_and_headers(const s_prov_t *p) {
    mockprov_t *mp = mockprov_new();
    assert_non_null(mp);
    for (int summary = 0; summary <= 1; summary++) {
        mockprov_reply_t *r = mockprov_reply_new(400, "application/json");
        mockprov_reply_body(r, p->error, 0, 0);
        mockprov_push(mp, &r);
        provider_result_t out;
        assert_int_equal(s_call(p, mp, summary, summary ? NULL : "sk-good", &out), PROVIDER_ERROR);
        assert_int_equal(out.status, 400);
        provider_result_clear(&out);
        json_t *sent = mockprov_request(mp, summary);
        assert_string_equal(json_string_value(json_object_get(sent, "method")), "POST");
        assert_string_equal(json_string_value(json_object_get(sent, "path")), p->path);
        s_assert_headers(sent, summary ? p->whole_headers : p->stream_headers);
        json_decref(sent);
    }
    mockprov_destroy(&mp);
}

static void test_openai_calls_send_the_specs_path_and_headers(void **u) {
    (void)u;
    s_calls_send_the_specs_path_and_headers(&s_openai);
}

static void test_anthropic_calls_send_the_specs_path_and_headers(void **u) {
    (void)u;
    s_calls_send_the_specs_path_and_headers(&s_anthropic);
}

static void test_ollama_calls_send_the_specs_path_and_headers(void **u) {
    (void)u;
    s_calls_send_the_specs_path_and_headers(&s_ollama);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_summary_is_one_whole_response),
        cmocka_unit_test(test_anthropic_summary_is_one_whole_response),
        cmocka_unit_test(test_ollama_summary_is_one_whole_response),
        cmocka_unit_test(test_openai_calls_send_the_specs_path_and_headers),
        cmocka_unit_test(test_anthropic_calls_send_the_specs_path_and_headers),
        cmocka_unit_test(test_ollama_calls_send_the_specs_path_and_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
