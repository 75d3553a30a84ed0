/*
 * Manual compaction end to end (ARCHITECTURE.md §7.6): a cluster of real processes whose default
 * model is the mock OpenAI server (its real streaming wire), plus the sim. POST /compact from W,
 * E0 and E1 leads to one summary call and one CommitStep of the compressed triplet (model-only
 * summary boundary, visible chat_summarized call and result with source "manual"), the trailing
 * unanswered user rows replayed after it, and the marker cleared; the next turn's prompt holds
 * the summary and not the rows before it. The marker is one-shot: interrupt, edit and a failed
 * summary clear it, and a marker left with nothing to compact finishes the turn. A worker killed
 * -9 during the summary call leaves exactly one triplet after the takeover.
 *
 * Automatic compaction, on a second cluster whose worker has a compaction model override: a
 * reply's usage over the binding trigger compacts before the next model call (source
 * "automatic", the summary on the override) and the turn goes on on the pruned prompt; a first
 * reply after the summary still over it is the terminal error; the override trigger binds
 * when the chat trigger is off; the owner's threshold, set through PUT /chats/config/user-
 * compaction-thresholds/{model}, wins over the model's; kill -9 during
 * an automatic summary leaves one triplet.
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
#include "mem.h"
#include "mockprov.h"
#include "proc.h"
#include "sse.h"

#define WAIT_MS 20000

static cluster_t *s_cluster;
static mockprov_t *s_mock;
static char s_config[256];

/* --- The mock's replies (OpenAI Chat Completions streams). --- */

#define OA_CHUNK(delta, finish)                                                                    \
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","      \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":" finish "}]}\n\n"

/* A reply whose text is text (no quotes or backslashes), its first byte after delay_ms; its
 * last chunk reports prompt_tokens (and 10 completion tokens) as usage, none when < 0. */
static void s_push_reply(const char *text, int delay_ms, int prompt_tokens) {
    char usage[160] = "";
    if (prompt_tokens >= 0) {
        snprintf(usage, sizeof usage,
                 "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,"
                 "\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
                 "\"completion_tokens\":10}}\n\n",
                 prompt_tokens);
    }
    char *body = mem_printf(OA_CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
                                OA_CHUNK("{\"content\":\"%s\"}", "null")
                                    OA_CHUNK("{}", "\"stop\"") "%sdata: [DONE]\n\n",
                            text, usage);
    mockprov_reply_t *r = mockprov_reply_new(200, "text/event-stream");
    mockprov_reply_chunk(r, body, 7, delay_ms);
    mockprov_reply_body(r, body + 7, 7, 0); /* 7-byte chunks: cuts fall mid-line */
    mockprov_push(s_mock, &r);
    free(body);
}

static void s_push_text(const char *text, int delay_ms) {
    s_push_reply(text, delay_ms, -1);
}

/* The answer to a summary call: one whole chat.completion document (the summary request is
 * not streamed), its first byte after delay_ms. Its usage is over every automatic trigger
 * here: a summary's own usage must never count as the chat's context size. */
static void s_push_summary(const char *text, int delay_ms) {
    char *body = mem_printf("{\"id\":\"s\",\"object\":\"chat.completion\",\"choices\":[{"
                            "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                            "\"%s\"},\"finish_reason\":\"stop\"}],\"usage\":{"
                            "\"prompt_tokens\":50000,\"completion_tokens\":3}}",
                            text);
    mockprov_reply_t *r = mockprov_reply_new(200, "application/json");
    mockprov_reply_chunk(r, body, 5, delay_ms);
    mockprov_reply_body(r, body + 5, 5, 0);
    mockprov_push(s_mock, &r);
    free(body);
}

/* A non-retryable failure (400), after delay_ms. */
static void s_push_error(int delay_ms) {
    const char *body = "{\"error\":{\"message\":\"scripted\",\"type\":\"invalid_request_error\"}}";
    mockprov_reply_t *r = mockprov_reply_new(400, "application/json");
    mockprov_reply_chunk(r, body, strlen(body), delay_ms);
    mockprov_push(s_mock, &r);
}

/* The body text of the mock's request index (caller frees). */
static char *s_request(int index) {
    json_t *req = mockprov_request(s_mock, index);
    assert_non_null(req);
    char *text = mem_strdup(json_string_value(json_object_get(req, "body_text")));
    json_decref(req);
    return text;
}

static bool s_has(const char *hay, const char *needle) {
    return strstr(hay, needle) != NULL;
}

/* --- The gateway and the database. --- */

static long s_http(const char *method, const char *chat, const char *path, const char *body) {
    char url[512];
    snprintf(url, sizeof url, "%s/api/v2/chats%s%s%s", cluster_url(s_cluster, 0), chat ? "/" : "",
             chat ? chat : "", path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, cluster_token(s_cluster), body, &r), 0);
    long status = r.status;
    proc_http_free(&r);
    return status;
}

static void s_wait_chat(const char *chat, const char *expr, const char *want) {
    char *q = mem_printf("SELECT %s FROM chats WHERE id = '%s'", expr, chat);
    if (cluster_wait(s_cluster, q, want, WAIT_MS) < 0) {
        char *got = cluster_sql(s_cluster, "%s", q);
        fail_msg("chat %s: %s is %s, not %s", chat, expr, got ? got : "(none)", want);
    }
    free(q);
}

/* Waits until the chat is idle in status with no compaction request and no owner. */
static void s_wait_idle(const char *chat, const char *status) {
    s_wait_chat(chat,
                "status || ':' || (compaction_requested_at IS NULL) || ':' || (worker_id IS NULL)",
                status[0] == 'w' ? "waiting:true:true" : "error:true:true");
}

static long s_count(const char *chat, const char *where) {
    char *n = cluster_sql(
        s_cluster, "SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND %s", chat, where);
    assert_non_null(n);
    long v = strtol(n, NULL, 10);
    free(n);
    return v;
}

static char *s_create(const char *model, const char *text) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"model\":\"%s\"}",
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

static long s_send(const char *chat, const char *text) {
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    long status = s_http("POST", chat, "/messages", body);
    free(body);
    return status;
}

/* A chat on the mock with one finished turn: "q1" answered "a1". */
static char *s_chat_with_turn(const char *q1, const char *a1) {
    s_push_text(a1, 0);
    char *chat = s_create("mock", q1);
    s_wait_idle(chat, "waiting");
    return chat;
}

/* The triplet's rows: the boundary, the visible call and result, all with source. */
static void s_assert_triplet(const char *chat, const char *summary, const char *source) {
    char *like = mem_printf("role = 'user' AND visibility = 'model' AND compressed AND content"
                            " -> 0 ->> 'text' LIKE '%%%s%%'",
                            summary);
    assert_int_equal(s_count(chat, like), 1);
    free(like);
    assert_int_equal(s_count(chat, "compressed"), 3);
    char *call = mem_printf("role = 'assistant' AND visibility = 'user' AND compressed AND"
                            " content -> 0 ->> 'tool_name' = 'chat_summarized' AND"
                            " content -> 0 -> 'args' ->> 'source' = '%s'",
                            source);
    assert_int_equal(s_count(chat, call), 1);
    free(call);
    /* The result answers that very call. */
    char *result = mem_printf("role = 'tool' AND visibility = 'user' AND compressed AND"
                              " content -> 0 -> 'result' ->> 'source' = '%s' AND"
                              " content -> 0 ->> 'tool_call_id' IN (SELECT a.content -> 0 ->>"
                              " 'tool_call_id' FROM chat_messages a WHERE a.chat_id ="
                              " chat_messages.chat_id AND a.role = 'assistant' AND"
                              " a.compressed)",
                              source);
    assert_int_equal(s_count(chat, result), 1);
    free(result);
}

static void s_assert_one_triplet(const char *chat, const char *summary) {
    s_assert_triplet(chat, summary, "manual");
}

/* --- Tests. --- */

static void test_compaction_from_waiting_summarizes_and_the_next_prompt_is_pruned(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("alpha question", "alpha answer");
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-W", 0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_idle(chat, "waiting");
    s_assert_one_triplet(chat, "SUMMARY-W");
    /* One summary call and no assistant follow-up. */
    assert_int_equal(mockprov_request_count(s_mock) - before, 1);
    assert_int_equal(s_count(chat, "role = 'assistant' AND NOT compressed"), 1);
    char *sum = s_request(before);
    assert_true(s_has(sum, "alpha question") && s_has(sum, "alpha answer"));
    assert_true(s_has(sum, "Summarize the conversation above"));
    assert_false(s_has(sum, "\"tools\""));
    assert_true(s_has(sum, "\"stream\":false"));
    free(sum);
    /* Nothing is left to compact. */
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 409);
    /* The next turn sees the summary, not the rows before the boundary, and no summary call
     * replays. */
    s_push_text("beta answer", 0);
    assert_int_equal(s_send(chat, "beta question"), 200);
    s_wait_chat(chat,
                "(SELECT count(*) FROM chat_messages WHERE chat_id = chats.id"
                " AND content::text LIKE '%beta answer%')",
                "1");
    s_wait_idle(chat, "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 2);
    char *next = s_request(before + 1);
    assert_true(s_has(next, "SUMMARY-W") && s_has(next, "beta question"));
    assert_false(s_has(next, "alpha question") || s_has(next, "alpha answer"));
    assert_false(s_has(next, "Summarize the conversation above"));
    free(next);
    assert_int_equal(s_count(chat, "compressed"), 3);
    free(chat);
}

static void test_compaction_from_error_replays_the_unanswered_message(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("gamma question", "gamma answer");
    s_push_error(0);
    assert_int_equal(s_send(chat, "doomed question"), 200);
    s_wait_idle(chat, "error");
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-E0", 0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_idle(chat, "waiting");
    s_wait_chat(chat, "last_error IS NULL", "t");
    s_assert_one_triplet(chat, "SUMMARY-E0");
    /* The unanswered message is not summarized but replayed verbatim after the triplet. */
    char *sum = s_request(before);
    assert_true(s_has(sum, "gamma answer"));
    assert_false(s_has(sum, "doomed question"));
    free(sum);
    assert_int_equal(s_count(chat, "role = 'user' AND visibility = 'model' AND NOT compressed AND"
                                   " content -> 0 ->> 'text' = 'doomed question' AND id > (SELECT"
                                   " max(id) FROM chat_messages WHERE compressed AND chat_id ="
                                   " chat_messages.chat_id)"),
                     1);
    /* The turn finished without an answer to it (the history is complete after a boundary). */
    assert_int_equal(mockprov_request_count(s_mock) - before, 1);
    s_push_text("delta answer", 0);
    assert_int_equal(s_send(chat, "delta question"), 200);
    assert_int_equal(mockprov_wait_requests(s_mock, before + 2, WAIT_MS), 0);
    s_wait_idle(chat, "waiting");
    char *next = s_request(before + 1);
    assert_true(s_has(next, "SUMMARY-E0") && s_has(next, "doomed question"));
    assert_true(s_has(next, "delta question"));
    assert_false(s_has(next, "gamma question") || s_has(next, "gamma answer"));
    free(next);
    free(chat);
}

static void test_compaction_from_e1_keeps_the_queue_and_runs_it_after(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("eps question", "eps answer");
    s_push_error(1500); /* fails while a message waits in the queue: E1 */
    assert_int_equal(s_send(chat, "failing question"), 200);
    s_wait_chat(chat, "status", "running");
    assert_int_equal(s_send(chat, "queued question"), 200);
    s_wait_chat(chat,
                "status || ':' || (SELECT count(*) FROM chat_queued_messages"
                " WHERE chat_id = chats.id)",
                "error:1");
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-E1", 0);
    s_push_text("queued answer", 0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_chat(chat,
                "(SELECT count(*) FROM chat_messages WHERE chat_id = chats.id"
                " AND content::text LIKE '%queued answer%')",
                "1");
    s_wait_idle(chat, "waiting");
    s_assert_one_triplet(chat, "SUMMARY-E1");
    assert_int_equal(mockprov_request_count(s_mock) - before, 2);
    char *sum = s_request(before);
    assert_true(s_has(sum, "eps answer"));
    assert_false(s_has(sum, "queued question"));
    free(sum);
    /* The queued message ran after the compaction, on the pruned prompt. */
    char *next = s_request(before + 1);
    assert_true(s_has(next, "SUMMARY-E1") && s_has(next, "queued question"));
    assert_true(s_has(next, "failing question")); /* replayed */
    assert_false(s_has(next, "eps question") || s_has(next, "eps answer"));
    free(next);
    assert_int_equal(s_count(chat, "role = 'user' AND visibility = 'both' AND content -> 0 ->>"
                                   " 'text' = 'queued question' AND id > (SELECT max(id) FROM"
                                   " chat_messages WHERE compressed AND chat_id ="
                                   " chat_messages.chat_id)"),
                     1);
    free(chat);
}

/* A compaction whose summary call is held, then ended by a user move: the marker is cleared,
 * no triplet is written, and the next turn is an ordinary model call. */
static void s_held_then(const char *move) {
    char *chat = s_chat_with_turn("zeta question", "zeta answer");
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-LOST", 4000);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    assert_int_equal(mockprov_wait_requests(s_mock, before + 1, WAIT_MS), 0);
    s_push_text("after answer", 0);
    if (!strcmp(move, "interrupt")) {
        assert_int_equal(s_http("POST", chat, "/interrupt", "{}"), 200);
        s_wait_idle(chat, "waiting");
        assert_int_equal(s_send(chat, "after question"), 200);
    } else {
        char *mid = cluster_sql(s_cluster,
                                "SELECT min(id) FROM chat_messages WHERE chat_id = '%s'"
                                " AND role = 'user'",
                                chat);
        char *path = mem_printf("/messages/%s", mid);
        assert_int_equal(s_http("PATCH", chat, path,
                                "{\"content\":[{\"type\":\"text\",\"text\":\"after question\"}]}"),
                         200);
        free(path);
        free(mid);
    }
    s_wait_chat(chat,
                "(SELECT count(*) FROM chat_messages WHERE chat_id = chats.id"
                " AND content::text LIKE '%after answer%')",
                "1");
    s_wait_idle(chat, "waiting");
    assert_int_equal(s_count(chat, "compressed"), 0);
    /* Not a single part of the summary call became a message. */
    assert_int_equal(s_count(chat, "content::text LIKE '%compaction%'"), 0);
    assert_int_equal(mockprov_request_count(s_mock) - before, 2);
    char *next = s_request(before + 1);
    assert_false(s_has(next, "Summarize the conversation above"));
    assert_true(s_has(next, "after question"));
    free(next);
    free(chat);
}

static void test_interrupt_clears_the_compaction_request(void **u) {
    (void)u;
    s_held_then("interrupt");
}

static void test_edit_clears_the_compaction_request(void **u) {
    (void)u;
    s_held_then("edit");
}

static void test_a_failed_summary_clears_the_request_and_the_next_turn_is_plain(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("eta question", "eta answer");
    int before = mockprov_request_count(s_mock);
    s_push_error(0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_idle(chat, "error");
    assert_int_equal(s_count(chat, "compressed"), 0);
    s_push_text("theta answer", 0);
    assert_int_equal(s_send(chat, "theta question"), 200);
    s_wait_chat(chat,
                "(SELECT count(*) FROM chat_messages WHERE chat_id = chats.id"
                " AND content::text LIKE '%theta answer%')",
                "1");
    s_wait_idle(chat, "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 2);
    char *next = s_request(before + 1);
    assert_false(s_has(next, "Summarize the conversation above"));
    assert_true(s_has(next, "eta answer") && s_has(next, "theta question"));
    free(next);
    assert_int_equal(s_count(chat, "compressed"), 0);
    free(chat);
}

/* The endpoint refuses an empty compaction, so a marker with nothing left to compact is set
 * here the way RequestCompaction sets it (a new snapshot and history version, running), on a
 * chat that was just compacted: the turn finishes without a model call and clears it. */
static void test_a_request_with_nothing_to_compact_finishes_and_clears(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("iota question", "iota answer");
    s_push_summary("SUMMARY-I", 0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_idle(chat, "waiting");
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 409);
    int before = mockprov_request_count(s_mock);
    char *ok = cluster_sql(s_cluster,
                           "UPDATE chats SET snapshot_version = snapshot_version + 1,"
                           " history_version = snapshot_version + 1, generation_attempt = 0,"
                           " status = 'running', compaction_requested_at = now()"
                           " WHERE id = '%s' RETURNING 'ok'",
                           chat);
    assert_string_equal(ok, "ok");
    free(ok);
    s_wait_idle(chat, "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 0);
    assert_int_equal(s_count(chat, "compressed"), 3);
    free(chat);
}

static void test_sim_answers_a_summary_request(void **u) {
    (void)u;
    char *chat = s_create("sim", "kappa question");
    s_wait_idle(chat, "waiting");
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_idle(chat, "waiting");
    s_assert_one_triplet(chat, "Summary of 3 messages: user: kappa question;");
    free(chat);
}

static void test_worker_killed_during_the_summary_leaves_one_triplet(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("lambda question", "lambda answer");
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-DEAD", 30000);
    s_push_summary("SUMMARY-K", 0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    assert_int_equal(mockprov_wait_requests(s_mock, before + 1, WAIT_MS), 0);
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGKILL);
    cluster_start(s_cluster, CLUSTER_WORKER, 0);
    s_wait_idle(chat, "waiting");
    s_assert_one_triplet(chat, "SUMMARY-K");
    assert_int_equal(s_count(chat, "content::text LIKE '%SUMMARY-DEAD%'"), 0);
    assert_int_equal(mockprov_request_count(s_mock) - before, 2);
    char *second = s_request(before + 1);
    assert_true(s_has(second, "Summarize the conversation above"));
    free(second);
    free(chat);
}

/* A message_part event whose part is the compaction's progress, stamped manual. */
static int s_is_progress(json_t *ev, void *ctx) {
    (void)ctx;
    const json_t *part =
        json_object_get(json_object_get(json_object_get(ev, "data"), "message_part"), "part");
    const char *type = json_string_value(json_object_get(part, "type"));
    const char *status = json_string_value(json_object_get(part, "status"));
    const char *source = json_string_value(json_object_get(part, "source"));
    return type && status && source && !strcmp(type, "compaction") &&
           !strcmp(status, "Summarizing...") && !strcmp(source, "manual");
}

/* A visible message event holding the chat_summarized call or result, stamped manual. */
static int s_is_summarized(json_t *ev, void *ctx) {
    char *text = json_dumps(json_object_get(ev, "data"), JSON_COMPACT);
    int ok = text && strstr(text, "\"chat_summarized\"") && strstr(text, "\"source\":\"manual\"") &&
             strstr(text, ctx);
    free(text);
    return ok;
}

static void test_a_stream_sees_the_progress_part_then_the_visible_pair(void **u) {
    (void)u;
    char *chat = s_chat_with_turn("mu question", "mu answer");
    char url[512];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(s_cluster, 0), chat);
    sse_t *s = sse_open(url, cluster_token(s_cluster), 0);
    assert_non_null(s);
    s_push_summary("SUMMARY-S", 1500);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    int at = sse_wait(s, 0, "message_part", s_is_progress, NULL, WAIT_MS);
    assert_true(at >= 0);
    assert_true(sse_wait(s, at, "message", s_is_summarized, "tool-call", WAIT_MS) >= 0);
    assert_true(sse_wait(s, at, "message", s_is_summarized, "tool-result", WAIT_MS) >= 0);
    s_wait_idle(chat, "waiting");
    /* The summary's own text never reached the stream as a part. */
    for (int i = 0; i < sse_count(s); i++) {
        char *text = json_dumps(sse_get(s, i), JSON_COMPACT);
        json_t *ev = sse_get(s, i);
        if (!strcmp(json_string_value(json_object_get(ev, "event")), "message_part")) {
            assert_null(strstr(text, "SUMMARY-S"));
        }
        free(text);
    }
    sse_close(&s);
    free(chat);
}

/* --- Automatic compaction: "auto" has a window of 1000 and threshold 50 (the chat trigger at
 * 500, below the override's 800); "autoorg" has its chat trigger off (100) and a window of
 * 10000, so the override trigger binds (80% of mockcompact's 1000). --- */

/* A chat on model with one finished turn whose reply reported prompt_tokens + 10. */
static char *s_auto_chat(const char *model, const char *q1, int prompt_tokens) {
    s_push_reply("first answer", 0, prompt_tokens);
    char *chat = s_create(model, q1);
    s_wait_idle(chat, "waiting");
    return chat;
}

/* Sends text and waits until the chat is idle again in status. The message is in history
 * once: twice after an automatic compaction replayed it (§7.6), which can happen before the
 * first look. */
static void s_turn(const char *chat, const char *text, const char *status) {
    assert_int_equal(s_send(chat, text), 200);
    char *q = mem_printf("(SELECT count(*) FROM chat_messages WHERE chat_id = chats.id AND"
                         " content -> 0 ->> 'text' = '%s') >= 1",
                         text);
    s_wait_chat(chat, q, "t");
    free(q);
    s_wait_idle(chat, status);
}

/* The trigger the chat's one summary recorded: threshold and the windows. */
static void s_assert_trigger(const char *chat, const char *want) {
    char *got = cluster_sql(s_cluster,
                            "SELECT concat_ws(':', r ->> 'threshold_percent',"
                            " r ->> 'trigger_context_limit_tokens', r ->> 'context_limit_tokens',"
                            " r ->> 'summary_model') FROM (SELECT content -> 0 -> 'result' AS r"
                            " FROM chat_messages WHERE chat_id = '%s' AND role = 'tool' AND"
                            " compressed) t",
                            chat);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_usage_over_the_threshold_compacts_then_the_turn_goes_on_pruned(void **u) {
    (void)u;
    char *chat = s_auto_chat("auto", "nu question", 600);
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-AUTO", 0);
    s_push_reply("xi answer", 0, 100);
    s_turn(chat, "xi question", "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 2);
    s_assert_triplet(chat, "SUMMARY-AUTO", "automatic");
    s_assert_trigger(chat, "50:1000:1000:mockcompact");
    /* The summary ran on the override, over the rows before the unanswered message. */
    char *sum = s_request(before);
    assert_true(s_has(sum, "nu question") && s_has(sum, "first answer"));
    assert_true(s_has(sum, "Summarize the conversation above") && s_has(sum, "gpt-compact"));
    assert_false(s_has(sum, "xi question"));
    free(sum);
    /* The turn went on, on the chat's model and the pruned prompt: the summary, the message
     * verbatim, none of the rows before. */
    char *next = s_request(before + 1);
    assert_true(s_has(next, "SUMMARY-AUTO") && s_has(next, "xi question"));
    assert_true(s_has(next, "gpt-auto"));
    assert_false(s_has(next, "nu question") || s_has(next, "first answer"));
    free(next);
    assert_int_equal(s_count(chat, "role = 'user' AND visibility = 'model' AND NOT compressed AND"
                                   " content -> 0 ->> 'text' = 'xi question'"),
                     1);
    assert_int_equal(s_count(chat, "role = 'assistant' AND NOT compressed"), 2);
    /* The next turn reads the reply's usage (110), not the summary's: no compaction. */
    s_push_reply("omicron answer", 0, 120);
    s_turn(chat, "omicron question", "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 3);
    assert_int_equal(s_count(chat, "compressed"), 3);
    free(chat);
}

static void test_still_over_the_limit_after_a_summary_is_a_terminal_error(void **u) {
    (void)u;
    char *chat = s_auto_chat("auto", "pi question", 700);
    s_push_summary("SUMMARY-OVER", 0);
    s_push_reply("rho answer", 0, 900);
    s_turn(chat, "rho question", "waiting");
    s_assert_triplet(chat, "SUMMARY-OVER", "automatic");
    int before = mockprov_request_count(s_mock);
    s_turn(chat, "sigma question", "error");
    s_wait_chat(chat, "last_error ->> 'kind'", "context_limit");
    s_wait_chat(chat, "last_error ->> 'message' LIKE '%owner''s compaction threshold%'", "t");
    /* Neither a second summary nor a model call. */
    assert_int_equal(mockprov_request_count(s_mock) - before, 0);
    assert_int_equal(s_count(chat, "compressed"), 3);
    /* A manual compaction from the error recovers the chat. */
    s_push_summary("SUMMARY-RECOVER", 0);
    assert_int_equal(s_http("POST", chat, "/compact", "{}"), 200);
    s_wait_idle(chat, "waiting");
    assert_int_equal(s_count(chat, "compressed"), 6);
    free(chat);
}

static void test_the_override_trigger_binds_below_a_disabled_chat_trigger(void **u) {
    (void)u;
    char *chat = s_auto_chat("autoorg", "tau question", 700);
    int before = mockprov_request_count(s_mock);
    s_push_reply("upsilon answer", 0, 850); /* 710 < 800: no compaction yet */
    s_turn(chat, "upsilon question", "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 1);
    s_push_summary("SUMMARY-ORG", 0);
    s_push_reply("phi answer", 0, 100);
    s_turn(chat, "phi question", "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 3);
    s_assert_triplet(chat, "SUMMARY-ORG", "automatic");
    s_assert_trigger(chat, "80:1000:10000:mockcompact");
    free(chat);
}

static void test_the_owner_threshold_wins_over_the_model_threshold(void **u) {
    (void)u;
    char *chat = s_auto_chat("auto", "chi question", 600);
    const char *path = "/config/user-compaction-thresholds/auto";
    assert_int_equal(s_http("PUT", NULL, path, "{\"threshold_percent\":101}"), 400);
    assert_int_equal(s_http("PUT", NULL, "/config/user-compaction-thresholds/nope",
                            "{\"threshold_percent\":90}"),
                     404);
    assert_int_equal(s_http("PUT", NULL, path, "{\"threshold_percent\":90}"), 200);
    int before = mockprov_request_count(s_mock);
    s_push_reply("psi answer", 0, 600); /* 610 < 900 */
    s_turn(chat, "psi question", "waiting");
    assert_int_equal(mockprov_request_count(s_mock) - before, 1);
    assert_int_equal(s_http("PUT", NULL, path, "{\"threshold_percent\":10}"), 200);
    char *got = cluster_sql(s_cluster, "SELECT threshold_percent FROM user_compaction_thresholds");
    assert_string_equal(got, "10");
    free(got);
    s_push_summary("SUMMARY-OWNER", 0);
    s_push_reply("omega answer", 0, 100);
    s_turn(chat, "omega question", "waiting");
    s_assert_trigger(chat, "10:1000:1000:mockcompact");
    assert_int_equal(s_http("DELETE", NULL, path, NULL), 204);
    got = cluster_sql(s_cluster, "SELECT count(*) FROM user_compaction_thresholds");
    assert_string_equal(got, "0");
    free(got);
    free(chat);
}

static void test_worker_killed_during_an_automatic_summary_leaves_one_triplet(void **u) {
    (void)u;
    char *chat = s_auto_chat("auto", "kill question", 600);
    int before = mockprov_request_count(s_mock);
    s_push_summary("SUMMARY-DEAD", 30000);
    s_push_summary("SUMMARY-AK", 0);
    s_push_reply("after kill answer", 0, 100);
    assert_int_equal(s_send(chat, "after kill question"), 200);
    assert_int_equal(mockprov_wait_requests(s_mock, before + 1, WAIT_MS), 0);
    cluster_signal(s_cluster, CLUSTER_WORKER, 0, SIGKILL);
    cluster_start(s_cluster, CLUSTER_WORKER, 0);
    s_wait_chat(chat,
                "(SELECT count(*) FROM chat_messages WHERE chat_id = chats.id"
                " AND content::text LIKE '%after kill answer%')",
                "1");
    s_wait_idle(chat, "waiting");
    s_assert_triplet(chat, "SUMMARY-AK", "automatic");
    assert_int_equal(s_count(chat, "content::text LIKE '%SUMMARY-DEAD%'"), 0);
    assert_int_equal(mockprov_request_count(s_mock) - before, 3);
    free(chat);
}

/* A cluster whose worker has env_extra (a "K=V" or NULL) besides the models file. */
static int s_start(const char *env_extra) {
    s_mock = mockprov_new();
    ASSERT(s_mock);
    snprintf(s_config, sizeof s_config, "/tmp/cf-compaction-%d.json", (int)getpid());
    FILE *f = fopen(s_config, "w");
    ASSERT(f);
    fprintf(f,
            "{\"models\":[{\"name\":\"mock\",\"provider\":\"openai\",\"model\":\"gpt\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"default\":true},"
            "{\"name\":\"auto\",\"provider\":\"openai\",\"model\":\"gpt-auto\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"context_limit\":1000,"
            "\"compression_threshold\":50},"
            "{\"name\":\"autoorg\",\"provider\":\"openai\",\"model\":\"gpt-org\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"context_limit\":10000,"
            "\"compression_threshold\":100},"
            "{\"name\":\"mockcompact\",\"provider\":\"openai\",\"model\":\"gpt-compact\","
            "\"base_url\":\"%s/v1\",\"api_key_env\":\"MOCK_KEY\",\"context_limit\":1000},"
            "{\"name\":\"sim\",\"provider\":\"sim\",\"model\":\"sim\"}]}",
            mockprov_url(s_mock), mockprov_url(s_mock), mockprov_url(s_mock), mockprov_url(s_mock));
    fclose(f);
    char *cfg = mem_printf("CHATFLEET_CONFIG=%s", s_config);
    /* Titles on the sim, so that the mock's scripted replies are the turns' only. */
    const char *env[] = {cfg, "MOCK_KEY=sk-test", "CHATFLEET_TITLE_MODEL=sim", env_extra, NULL};
    cluster_opts_t o = {.name = "test_worker_compaction", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    free(cfg);
    return 0;
}

static int s_setup(void **state) {
    (void)state;
    return s_start(NULL);
}

/* The automatic group: summaries run on the override, mockcompact (ARCHITECTURE.md §7.6). */
static int s_setup_auto(void **state) {
    (void)state;
    return s_start("CHATFLEET_COMPACTION_MODEL=mockcompact");
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
        cmocka_unit_test(test_compaction_from_waiting_summarizes_and_the_next_prompt_is_pruned),
        cmocka_unit_test(test_compaction_from_error_replays_the_unanswered_message),
        cmocka_unit_test(test_compaction_from_e1_keeps_the_queue_and_runs_it_after),
        cmocka_unit_test(test_interrupt_clears_the_compaction_request),
        cmocka_unit_test(test_edit_clears_the_compaction_request),
        cmocka_unit_test(test_a_failed_summary_clears_the_request_and_the_next_turn_is_plain),
        cmocka_unit_test(test_a_request_with_nothing_to_compact_finishes_and_clears),
        cmocka_unit_test(test_sim_answers_a_summary_request),
        cmocka_unit_test(test_a_stream_sees_the_progress_part_then_the_visible_pair),
        cmocka_unit_test(test_worker_killed_during_the_summary_leaves_one_triplet),
    };
    const struct CMUnitTest automatic[] = {
        cmocka_unit_test(test_usage_over_the_threshold_compacts_then_the_turn_goes_on_pruned),
        cmocka_unit_test(test_still_over_the_limit_after_a_summary_is_a_terminal_error),
        cmocka_unit_test(test_the_override_trigger_binds_below_a_disabled_chat_trigger),
        cmocka_unit_test(test_the_owner_threshold_wins_over_the_model_threshold),
        cmocka_unit_test(test_worker_killed_during_an_automatic_summary_leaves_one_triplet),
    };
    int failed = cmocka_run_group_tests(tests, s_setup, s_teardown);
    return failed + cmocka_run_group_tests(automatic, s_setup_auto, s_teardown);
}
