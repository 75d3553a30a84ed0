/*
 * File parts of user messages on each provider's wire (worker/providers/README.md, "What each
 * sends"): the exact request bodies of OpenAI (content parts: image_url and file data URLs),
 * Anthropic (image and document blocks, merged after tool results) and Ollama (raw base64 in
 * images; a PDF, which Ollama does not take, becomes a placeholder text). A file of any other
 * media type is a placeholder on every wire, a text-only message keeps today's body, and the
 * sim ignores file parts. Bodies are read back from the mock server and compared as JSON.
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

#include "cancel.h"
#include "mem.h"
#include "mockprov.h"
#include "provider.h"

/* "\x89PNG\r\n\x1a\n" and "%PDF-1.4", as the history loader hands them over. */
#define S_PNG_B64 "iVBORw0KGgo="
#define S_PDF_B64 "JVBERi0xLjQ="

#define S_TEXT "{\"type\":\"text\",\"text\":\"Compare these.\"}"
#define S_PNG                                                                                      \
    "{\"type\":\"file\",\"file_id\":\"f1\",\"media_type\":\"image/png\","                          \
    "\"name\":\"a.png\",\"data\":\"" S_PNG_B64 "\"}"
#define S_PDF                                                                                      \
    "{\"type\":\"file\",\"file_id\":\"f2\",\"media_type\":\"application/pdf\","                    \
    "\"name\":\"b.pdf\",\"data\":\"" S_PDF_B64 "\"}"
#define S_WAV                                                                                      \
    "{\"type\":\"file\",\"file_id\":\"f3\",\"media_type\":\"audio/wav\","                          \
    "\"name\":\"c.wav\",\"data\":\"UklGRg==\"}"
#define S_SYS         "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Be terse.\"}]}"
#define S_USER(parts) "{\"role\":\"user\",\"content\":[" parts "]}"

#define S_PDF_NOTE "[attachment b.pdf (application/pdf) is not supported by this model]"
#define S_WAV_NOTE "[attachment c.wav (audio/wav) is not supported by this model]"

/* What the tests need of a provider: its name, base path and one plain text reply. */
typedef struct {
    const char *name;
    const char *base_path; /* appended to the mock URL to make base_url */
    const char *type;      /* Content-Type of its stream */
    const char *reply;     /* a whole stream answering "Hi" */
} s_prov_t;

static const s_prov_t s_openai = {
    .name = "openai",
    .base_path = "/v1/",
    .type = "text/event-stream",
    .reply = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},"
             "\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
};

static const s_prov_t s_anthropic = {
    .name = "anthropic",
    .base_path = "",
    .type = "text/event-stream",
    .reply = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"
             "{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n"
             "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
};

static const s_prov_t s_ollama = {
    .name = "ollama",
    .base_path = "",
    .type = "application/x-ndjson",
    .reply = "{\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":true}\n",
};

/* The body p sent for history (a JSON text), read back from mp. New reference. */
static json_t *s_body_sent(const s_prov_t *p, mockprov_t *mp, const char *history) {
    mockprov_reply_t *r = mockprov_reply_new(200, p->type);
    mockprov_reply_body(r, p->reply, 0, 0);
    mockprov_push(mp, &r);
    json_t *msgs = json_loads(history, 0, NULL);
    assert_non_null(msgs);
    char *base = mem_printf("%s%s", mockprov_url(mp), p->base_path);
    provider_model_t model = {
        .name = "m", .provider = p->name, .model = "test-model", .base_url = base};
    provider_request_t req = {.model = &model, .messages = msgs, .attempt = 1};
    cancel_t *cancel = cancel_new();
    provider_result_t out;
    assert_int_equal(provider_generate(&req, cancel, NULL, NULL, &out), PROVIDER_OK);
    provider_result_clear(&out);
    cancel_destroy(&cancel);
    free(base);
    json_decref(msgs);
    int last = mockprov_request_count(mp) - 1;
    json_t *sent = mockprov_request(mp, last);
    json_t *body = json_incref(json_object_get(sent, "body"));
    json_decref(sent);
    return body;
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

static void s_assert_body(const s_prov_t *p, mockprov_t *mp, const char *history,
                          const char *want) {
    json_t *body = s_body_sent(p, mp, history);
    s_assert_json(body, want);
    json_decref(body);
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

#define S_FILES_HISTORY "[" S_SYS "," S_USER(S_TEXT "," S_PNG "," S_PDF) "]"
#define S_OPENAI_HEAD                                                                              \
    "{\"model\":\"test-model\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
#define S_ANTHROPIC_HEAD                                                                           \
    "{\"model\":\"test-model\",\"max_tokens\":8192,\"stream\":true,"                               \
    "\"system\":[{\"type\":\"text\",\"text\":\"Be terse.\"}],"
#define S_OLLAMA_HEAD "{\"model\":\"test-model\",\"stream\":true,"

static void test_openai_sends_files_as_image_url_and_file_parts(void **state) {
    s_assert_body(&s_openai, *state, S_FILES_HISTORY,
                  S_OPENAI_HEAD "\"messages\":[{\"role\":\"system\",\"content\":\"Be terse.\"},"
                                "{\"role\":\"user\",\"content\":[" S_TEXT ","
                                "{\"type\":\"image_url\",\"image_url\":{\"url\":"
                                "\"data:image/png;base64," S_PNG_B64 "\"}},"
                                "{\"type\":\"file\",\"file\":{\"filename\":\"b.pdf\","
                                "\"file_data\":\"data:application/pdf;base64," S_PDF_B64
                                "\"}}]}]}");
}

static void test_anthropic_sends_files_as_image_and_document_blocks(void **state) {
    s_assert_body(&s_anthropic, *state, S_FILES_HISTORY,
                  S_ANTHROPIC_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[" S_TEXT ","
                                   "{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                                   "\"media_type\":\"image/png\",\"data\":\"" S_PNG_B64 "\"}},"
                                   "{\"type\":\"document\",\"source\":{\"type\":\"base64\","
                                   "\"media_type\":\"application/pdf\","
                                   "\"data\":\"" S_PDF_B64 "\"}}]}]}");
}

static void test_ollama_sends_images_raw_and_a_pdf_as_its_placeholder(void **state) {
    s_assert_body(&s_ollama, *state, S_FILES_HISTORY,
                  S_OLLAMA_HEAD "\"messages\":[{\"role\":\"system\",\"content\":\"Be terse.\"},"
                                "{\"role\":\"user\",\"content\":\"Compare these.\\n" S_PDF_NOTE
                                "\",\"images\":[\"" S_PNG_B64 "\"]}]}");
}

/* The guard alone: a PDF first, then text; no images key when there is no image. */
static void test_ollama_pdf_guard_puts_the_placeholder_on_its_own_line(void **state) {
    s_assert_body(&s_ollama, *state,
                  "[" S_USER(S_PDF ",{\"type\":\"text\",\"text\":\"Summarize it.\"}") "]",
                  S_OLLAMA_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"" S_PDF_NOTE
                                "\\nSummarize it.\"}]}");
}

#define S_TEXT_ONLY                                                                                \
    "[" S_SYS "," S_USER("{\"type\":\"text\",\"text\":\"Hello\"},"                                 \
                         "{\"type\":\"text\",\"text\":\" there\"}") "]"

static void test_a_text_only_user_message_keeps_todays_body(void **state) {
    mockprov_t *mp = *state;
    s_assert_body(&s_openai, mp, S_TEXT_ONLY,
                  S_OPENAI_HEAD "\"messages\":[{\"role\":\"system\",\"content\":\"Be terse.\"},"
                                "{\"role\":\"user\",\"content\":\"Hello there\"}]}");
    s_assert_body(&s_anthropic, mp, S_TEXT_ONLY,
                  S_ANTHROPIC_HEAD "\"messages\":[{\"role\":\"user\",\"content\":["
                                   "{\"type\":\"text\",\"text\":\"Hello\"},"
                                   "{\"type\":\"text\",\"text\":\" there\"}]}]}");
    s_assert_body(&s_ollama, mp, S_TEXT_ONLY,
                  S_OLLAMA_HEAD "\"messages\":[{\"role\":\"system\",\"content\":\"Be terse.\"},"
                                "{\"role\":\"user\",\"content\":\"Hello there\"}]}");
}

#define S_WAV_HISTORY "[" S_USER(S_TEXT "," S_WAV) "]"

static void test_a_file_of_another_media_type_is_a_placeholder_on_every_wire(void **state) {
    mockprov_t *mp = *state;
    s_assert_body(&s_openai, mp, S_WAV_HISTORY,
                  S_OPENAI_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[" S_TEXT ","
                                "{\"type\":\"text\",\"text\":\"" S_WAV_NOTE "\"}]}]}");
    s_assert_body(&s_anthropic, mp, S_WAV_HISTORY,
                  "{\"model\":\"test-model\",\"max_tokens\":8192,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":[" S_TEXT ","
                  "{\"type\":\"text\",\"text\":\"" S_WAV_NOTE "\"}]}]}");
    s_assert_body(&s_ollama, mp, S_WAV_HISTORY,
                  S_OLLAMA_HEAD "\"messages\":[{\"role\":\"user\",\"content\":"
                                "\"Compare these.\\n" S_WAV_NOTE "\"}]}");
}

#define S_CALL                                                                                     \
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool-call\",\"tool_call_id\":\"c1\","        \
    "\"tool_name\":\"w\",\"args\":{}}]}"
#define S_RESULT                                                                                   \
    "{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\",\"tool_call_id\":\"c1\","           \
    "\"tool_name\":\"w\",\"result\":\"sunny\"}]}"

/* A user message after tool results joins their user message, tool results first. */
static void test_anthropic_merges_files_after_tool_results(void **state) {
    const char *history =
        "[" S_USER("{\"type\":\"text\",\"text\":\"Weather?\"}") "," S_CALL "," S_RESULT
                                                                "," S_USER(S_TEXT "," S_PNG) "]";
    s_assert_body(&s_anthropic, *state, history,
                  "{\"model\":\"test-model\",\"max_tokens\":8192,\"stream\":true,\"messages\":["
                  "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather?\"}]},"
                  "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"c1\","
                  "\"name\":\"w\",\"input\":{}}]},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                  "\"tool_use_id\":\"c1\",\"content\":\"sunny\"}," S_TEXT ","
                  "{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                  "\"media_type\":\"image/png\",\"data\":\"" S_PNG_B64 "\"}}]}]}");
}

/* The sim's reply to a message with files is its reply to the message's text alone. */
/* The sim names each file it received, with its decoded size, so that cluster tests can see
 * that the model got a file. */
static void test_sim_names_the_files_it_received(void **state) {
    (void)state;
    json_t *msgs = json_loads("[" S_USER(S_PNG "," S_TEXT "," S_PDF) "]", 0, NULL);
    provider_model_t model = {.name = "m", .provider = "sim", .model = "sim"};
    provider_request_t req = {.model = &model, .messages = msgs, .attempt = 1};
    cancel_t *cancel = cancel_new();
    provider_result_t out;
    assert_int_equal(provider_generate(&req, cancel, NULL, NULL, &out), PROVIDER_OK);
    cancel_destroy(&cancel);
    json_decref(msgs);
    const char *text = json_string_value(json_object_get(json_array_get(out.content, 0), "text"));
    assert_non_null(text);
    assert_non_null(strstr(text, "Echo: [file a.png image/png 8 bytes]Compare these. "
                                 "[file b.pdf application/pdf 8 bytes]."));
    provider_result_clear(&out);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, s_setup, s_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_openai_sends_files_as_image_url_and_file_parts),
        T(test_anthropic_sends_files_as_image_and_document_blocks),
        T(test_ollama_sends_images_raw_and_a_pdf_as_its_placeholder),
        T(test_ollama_pdf_guard_puts_the_placeholder_on_its_own_line),
        T(test_a_text_only_user_message_keeps_todays_body),
        T(test_a_file_of_another_media_type_is_a_placeholder_on_every_wire),
        T(test_anthropic_merges_files_after_tool_results),
        cmocka_unit_test(test_sim_names_the_files_it_received),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
