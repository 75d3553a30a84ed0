/*
 * The worker's pure logic: the runner's event-processing rules in order, the generation
 * step's decision over a history, the sim provider's directives and its cancellation, and
 * the partial an interrupted episode leaves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "compaction.h"
#include "generation.h"
#include "history.h"
#include "id.h"
#include "runner.h"
#include "sim.h"
#include "title.h"

#define CHAT "2b1f6a8e-54c4-4c57-9b43-5f1f3c9d2a10"
#define W1   "11111111-1111-4111-8111-111111111111"
#define R1   "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
#define R2   "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"

static hint_update_t s_ev(int64_t snap, const char *runner, int64_t hv, const char *status) {
    hint_update_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.chat_id, sizeof e.chat_id, "%s", CHAT);
    snprintf(e.worker_id, sizeof e.worker_id, "%s", runner[0] ? W1 : "");
    snprintf(e.runner_id, sizeof e.runner_id, "%s", runner);
    snprintf(e.status, sizeof e.status, "%s", status);
    e.snapshot_version = snap;
    e.history_version = hv;
    return e;
}

static void test_runner_follows_the_event_processing_rules_in_order(void **u) {
    (void)u;
    runner_t *r = runner_new(CHAT, W1, R1);
    runner_action_t a;
    hint_update_t e = s_ev(5, R1, 4, "running");
    runner_on_event(r, &e, &a);
    assert_true(a.spawn);
    assert_int_equal(a.spawn_kind, TASK_GENERATION);
    assert_string_equal(a.status, "running");
    assert_int_equal(a.history_version, 4);
    runner_set_active(r, 7);
    /* 1: stale or duplicate snapshot. */
    runner_on_event(r, &e, &a);
    assert_true(a.ignored);
    /* 3: same history and status (a retry-state or attempt change): keep working. */
    e = s_ev(6, R1, 4, "running");
    runner_on_event(r, &e, &a);
    assert_false(a.spawn || a.cancel || a.cleanup);
    /* 4 + 7: a new history version cancels the active task and spawns a new step. */
    e = s_ev(8, R1, 8, "running");
    runner_on_event(r, &e, &a);
    assert_true(a.cancel);
    assert_int_equal(a.cancel_id, 7);
    assert_true(a.spawn);
    assert_int_equal(a.spawn_kind, TASK_GENERATION);
    runner_set_active(r, 9);
    /* 8: interrupting. */
    e = s_ev(9, R1, 8, "interrupting");
    runner_on_event(r, &e, &a);
    assert_true(a.cancel);
    assert_int_equal(a.spawn_kind, TASK_INTERRUPT);
    runner_set_active(r, 10);
    runner_task_ended(r, 10);
    assert_int_equal(runner_active(r), 0);
    /* 9: requires_action. */
    e = s_ev(10, R1, 9, "requires_action");
    runner_on_event(r, &e, &a);
    assert_false(a.cancel);
    assert_int_equal(a.spawn_kind, TASK_DEADLINE);
    /* 10: waiting -> abandon; 6: archived -> abandon. */
    e = s_ev(11, R1, 10, "waiting");
    runner_on_event(r, &e, &a);
    assert_int_equal(a.spawn_kind, TASK_ABANDON);
    assert_string_equal(a.status, "");
    e = s_ev(12, R1, 10, "running");
    e.archived = true;
    runner_on_event(r, &e, &a);
    assert_int_equal(a.spawn_kind, TASK_ABANDON);
    /* 2: another runner (or nobody) owns the chat: clean up, spawn nothing. */
    e = s_ev(13, R2, 10, "running");
    runner_on_event(r, &e, &a);
    assert_true(a.cleanup);
    assert_false(a.spawn);
    e = s_ev(14, "", 10, "running");
    runner_on_event(r, &e, &a);
    assert_true(a.cleanup);
    runner_destroy(&r);
    assert_null(r);
}

static json_t *s_msgs(const char *text) {
    json_error_t err;
    json_t *v = json_loads(text, 0, &err);
    if (!v) {
        fail_msg("bad fixture: %s", err.text);
    }
    return v;
}

/* ARCHITECTURE.md §7.6: the request is checked after the tool guards and before completeness;
 * a boundary followed only by replayed (model-only) user rows asks for no reply. */
static void test_decide_compaction_after_the_guards_and_the_boundary_completes(void **u) {
    (void)u;
    json_t *m = s_msgs("[{\"role\":\"user\",\"content\":[]},{\"role\":\"assistant\",\"content\":["
                       "{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"time\"}]}]");
    assert_int_equal(history_decide(m, NULL, 10, HISTORY_COMPACTION_REQUESTED, NULL),
                     DECIDE_RUN_LOCAL);
    json_array_append_new(m, s_msgs("{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\","
                                    "\"tool_call_id\":\"a\",\"result\":1}]}"));
    assert_int_equal(history_decide(m, NULL, 10, 0, NULL), DECIDE_CALL_MODEL);
    assert_int_equal(history_decide(m, NULL, 10, HISTORY_COMPACTION_REQUESTED, NULL),
                     DECIDE_COMPACT);
    json_decref(m);
    /* Nothing after the boundary to summarize: the turn finishes (and the marker goes). */
    m = s_msgs("[{\"role\":\"user\",\"model_only\":true,\"compressed\":true,\"content\":[]},"
               "{\"role\":\"user\",\"model_only\":true,\"content\":[]}]");
    assert_int_equal(history_decide(m, NULL, 10, HISTORY_COMPACTION_REQUESTED, NULL),
                     DECIDE_FINISH_TURN);
    assert_int_equal(history_decide(m, NULL, 10, 0, NULL), DECIDE_FINISH_TURN);
    /* After an automatic summary the turn it interrupted goes on. */
    assert_int_equal(history_decide(m, NULL, 10, HISTORY_RESUME_AFTER_SUMMARY, NULL),
                     DECIDE_CALL_MODEL);
    /* A visible user row after it asks for a reply; a control row does too. */
    json_array_append_new(m, s_msgs("{\"role\":\"user\",\"content\":[]}"));
    assert_int_equal(history_decide(m, NULL, 10, 0, NULL), DECIDE_CALL_MODEL);
    json_decref(m);
    m = s_msgs("[{\"role\":\"user\",\"model_only\":true,\"compressed\":true,\"content\":[]},"
               "{\"role\":\"user\",\"model_only\":true,\"control\":true,\"content\":[]}]");
    assert_int_equal(history_decide(m, NULL, 10, 0, NULL), DECIDE_CALL_MODEL);
    json_decref(m);
}

/* ARCHITECTURE.md §7.6: the binding trigger, and the gate over the latest usage. */
static void test_compaction_trigger_binds_the_lower_point_and_gates_on_the_latest_usage(void **u) {
    (void)u;
    compaction_trigger_t t = compaction_trigger(1000, 50, 2000); /* 500 vs 1600: chat binds */
    assert_false(t.override_binds);
    assert_int_equal(t.trigger_limit, 1000);
    t = compaction_trigger(1000, 90, 1000); /* 900 vs 800: the override binds */
    assert_true(t.override_binds);
    assert_int_equal(t.threshold_percent, 80);
    assert_false(compaction_trigger(1000, 80, 1000).override_binds); /* a tie */
    t = compaction_trigger(1000, 100, 2000); /* chat off, override beyond the window */
    assert_int_equal(t.trigger_limit, 0);
    assert_int_equal(compaction_trigger(0, 50, 1000).trigger_limit, 0); /* unknown window */
    t = compaction_trigger(1000, 50, -1);
    int64_t tokens = 0;
    json_t *m = s_msgs("[{\"role\":\"user\",\"content\":[]},{\"role\":\"assistant\",\"content\":[],"
                       "\"usage\":{\"input_tokens\":480,\"output_tokens\":10}}]");
    assert_int_equal(compaction_gate(m, NULL, &t, &tokens), COMPACTION_GATE_NONE);
    assert_int_equal(tokens, 490);
    json_array_append_new(m, s_msgs("{\"role\":\"assistant\",\"content\":[],\"usage\":{"
                                    "\"input_tokens\":495,\"output_tokens\":5}}"));
    assert_int_equal(compaction_gate(m, NULL, &t, &tokens), COMPACTION_GATE_RUN);
    /* A compressed row's usage (a summary's) is never the chat's context size. */
    json_array_append_new(m, s_msgs("{\"role\":\"assistant\",\"compressed\":true,\"content\":[],"
                                    "\"usage\":{\"input_tokens\":1}}"));
    assert_int_equal(compaction_gate(m, NULL, &t, &tokens), COMPACTION_GATE_RUN);
    json_decref(m);
    /* The first reply after a summary under the same trigger, still over: the error; under
     * another trigger, or with threshold 0, compact again. */
    json_t *sum = s_msgs("{\"threshold_percent\":50,\"trigger_context_limit_tokens\":1000}");
    m = s_msgs("[{\"role\":\"user\",\"compressed\":true,\"model_only\":true,\"content\":[]},"
               "{\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":600}}]");
    assert_int_equal(compaction_gate(m, sum, &t, &tokens), COMPACTION_GATE_OVER_LIMIT);
    compaction_trigger_t other = compaction_trigger(1000, 40, -1);
    assert_int_equal(compaction_gate(m, sum, &other, &tokens), COMPACTION_GATE_RUN);
    compaction_trigger_t always = compaction_trigger(1000, 0, -1);
    assert_int_equal(compaction_gate(m, sum, &always, &tokens), COMPACTION_GATE_RUN);
    json_array_append_new(m, s_msgs("{\"role\":\"assistant\",\"content\":[],\"usage\":{"
                                    "\"input_tokens\":700}}"));
    assert_int_equal(compaction_gate(m, sum, &t, &tokens), COMPACTION_GATE_RUN);
    char *e = compaction_over_limit_error(&t, 700);
    assert_non_null(strstr(e, "\"kind\":\"context_limit\""));
    assert_non_null(strstr(e, "owner's compaction threshold"));
    free(e);
    json_decref(m);
    json_decref(sum);
}

static void test_decide_covers_every_branch(void **u) {
    (void)u;
    json_t *dyn = s_msgs("[{\"name\":\"ask\"}]");
    json_t *pending = NULL;
    json_t *m = s_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]");
    assert_int_equal(history_decide(m, dyn, 10, 0, &pending), DECIDE_CALL_MODEL);
    assert_null(pending);
    json_decref(m);
    m = s_msgs("[{\"role\":\"user\",\"content\":[]},"
               "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]");
    assert_int_equal(history_decide(m, dyn, 10, 0, NULL), DECIDE_FINISH_TURN);
    json_decref(m);
    m = s_msgs("[{\"role\":\"user\",\"content\":[]},{\"role\":\"assistant\",\"content\":["
               "{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"time\"},"
               "{\"type\":\"tool-call\",\"tool_call_id\":\"b\",\"tool_name\":\"ask\"}]}]");
    assert_int_equal(history_decide(m, dyn, 10, 0, &pending), DECIDE_RUN_LOCAL);
    assert_int_equal(json_array_size(pending), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(pending, 0), "tool_name")),
                        "time");
    json_decref(pending);
    json_array_append_new(m, s_msgs("{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\","
                                    "\"tool_call_id\":\"a\",\"result\":1}]}"));
    assert_int_equal(history_decide(m, dyn, 10, 0, NULL), DECIDE_REQUIRES_ACTION);
    json_array_append_new(m, s_msgs("{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\","
                                    "\"tool_call_id\":\"b\",\"result\":2}]}"));
    assert_int_equal(history_decide(m, dyn, 10, 0, NULL), DECIDE_CALL_MODEL);
    /* The step limit: one assistant response already counts against max_steps = 1. */
    assert_int_equal(history_decide(m, dyn, 1, 0, NULL), DECIDE_FINISH_TURN);
    json_decref(m);
    json_decref(dyn);
}

/* Subagent calls: spawn_agent and the other tools run as local calls; wait_agent waits only
 * once nothing else is pending, and a client's call goes first. */
static void test_decide_waits_for_agents_only_when_nothing_else_is_pending(void **u) {
    (void)u;
    json_t *dyn = s_msgs("[{\"name\":\"ask\"}]");
    json_t *pending = NULL;
    json_t *m =
        s_msgs("[{\"role\":\"user\",\"content\":[]},{\"role\":\"assistant\",\"content\":["
               "{\"type\":\"tool-call\",\"tool_call_id\":\"s\",\"tool_name\":\"spawn_agent\"},"
               "{\"type\":\"tool-call\",\"tool_call_id\":\"w\",\"tool_name\":\"wait_agent\"},"
               "{\"type\":\"tool-call\",\"tool_call_id\":\"d\",\"tool_name\":\"ask\"}]}]");
    assert_int_equal(history_decide(m, dyn, 10, 0, &pending), DECIDE_RUN_LOCAL);
    assert_int_equal(json_array_size(pending), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(pending, 0), "tool_name")),
                        "spawn_agent");
    json_decref(pending);
    json_array_append_new(m, s_msgs("{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\","
                                    "\"tool_call_id\":\"s\",\"result\":{}}]}"));
    assert_int_equal(history_decide(m, dyn, 10, 0, NULL), DECIDE_REQUIRES_ACTION);
    json_array_append_new(m, s_msgs("{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\","
                                    "\"tool_call_id\":\"d\",\"result\":{}}]}"));
    assert_int_equal(history_decide(m, dyn, 10, 0, NULL), DECIDE_AGENT_WAIT);
    assert_string_equal(history_decision_name(DECIDE_AGENT_WAIT), "agent_wait");
    json_array_append_new(m, s_msgs("{\"role\":\"tool\",\"content\":[{\"type\":\"tool-result\","
                                    "\"tool_call_id\":\"w\",\"result\":{}}]}"));
    assert_int_equal(history_decide(m, dyn, 10, 0, NULL), DECIDE_CALL_MODEL);
    json_decref(m);
    json_decref(dyn);
}

/* The tool rows a reply's batch writes, as one array of their parts. */
static json_t *s_answered(json_t *content, const json_t *dyn) {
    batch_t *b = batch_new();
    const char *rejection = NULL;
    bool candidate = false;
    batch_reply(b, content, "tool_calls", NULL, NULL, dyn, NULL, &rejection, &candidate);
    int n = 0;
    const cs_message_t *rows = batch_rows(b, &n);
    json_t *parts = json_array();
    for (int i = 0; i < n; i++) {
        if (!strcmp(rows[i].role, "tool")) {
            json_t *row = json_loads(rows[i].content, 0, NULL);
            json_array_extend(parts, row);
            json_decref(row);
        }
    }
    batch_destroy(&b);
    return parts;
}

/* A reply's subagent calls are left for the next step, which has a connection; a wait_agent
 * beside a client's call is refused at once (the chat cannot wait for both). */
static void
test_a_reply_leaves_agent_calls_pending_and_refuses_a_wait_beside_a_client_call(void **u) {
    (void)u;
    json_t *dyn = s_msgs("[{\"name\":\"ask\"}]");
    json_t *content =
        s_msgs("[{\"type\":\"tool-call\",\"tool_call_id\":\"s\",\"tool_name\":\"spawn_agent\","
               "\"args\":{\"prompt\":\"x\"}},{\"type\":\"tool-call\",\"tool_call_id\":\"w\","
               "\"tool_name\":\"wait_agent\",\"args\":{}}]");
    json_t *parts = s_answered(content, dyn);
    assert_int_equal(json_array_size(parts), 0);
    json_decref(parts);
    json_array_append_new(content, s_msgs("{\"type\":\"tool-call\",\"tool_call_id\":\"d\","
                                          "\"tool_name\":\"ask\",\"args\":{}}"));
    parts = s_answered(content, dyn);
    assert_int_equal(json_array_size(parts), 1);
    json_t *p = json_array_get(parts, 0);
    assert_string_equal(json_string_value(json_object_get(p, "tool_call_id")), "w");
    assert_true(json_is_true(json_object_get(p, "is_error")));
    char *text = json_dumps(json_object_get(p, "result"), 0);
    assert_non_null(strstr(text, "cannot wait beside client tool calls"));
    free(text);
    json_decref(parts);
    json_decref(content);
    json_decref(dyn);
}

static void test_sim_parses_directives_and_strips_them(void **u) {
    (void)u;
    sim_script_t s;
    char clean[128];
    sim_parse("[sim:tool time x3] what [sim:fail 503 x2 retry-after 40] now [sim:slow 50]", &s,
              clean, sizeof clean);
    assert_string_equal(s.tool, "time");
    assert_int_equal(s.tool_steps, 3);
    assert_int_equal(s.fail_status, 503);
    assert_int_equal(s.fail_attempts, 2);
    assert_int_equal(s.retry_after, 40);
    assert_int_equal(s.slow_ms, 50);
    assert_false(s.stall);
    assert_string_equal(clean, "what  now");
    assert_false(s.clock);
    sim_parse("[sim:stall][sim:dynamic ask][sim:words 3][sim:clock]", &s, clean, sizeof clean);
    assert_true(s.clock);
    assert_true(s.stall);
    assert_string_equal(s.dynamic, "ask");
    assert_int_equal(s.words, 3);
    assert_string_equal(clean, "");
}

typedef struct {
    int parts;
} s_count_t;

static void s_count(void *ctx, const char *json) {
    (void)json;
    ((s_count_t *)ctx)->parts++;
}

static void test_sim_is_deterministic_and_fails_as_scripted(void **u) {
    (void)u;
    provider_model_t model = {.provider = "sim"};
    json_t *m = s_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                       "\"hello [sim:words 4] [sim:fail 429 x1]\"}]}]");
    provider_request_t req = {.model = &model, .messages = m, .attempt = 1};
    cancel_t *c = cancel_new();
    provider_result_t r;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_ERROR);
    assert_int_equal(r.status, 429);
    assert_true(r.retryable);
    provider_result_clear(&r);
    req.attempt = 2;
    s_count_t n = {0};
    assert_int_equal(provider_generate(&req, c, s_count, &n, &r), PROVIDER_OK);
    char *first = json_dumps(r.content, JSON_COMPACT);
    provider_result_clear(&r);
    assert_int_equal(n.parts, 6); /* "Echo:", "hello.", and four filler words */
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_OK);
    char *second = json_dumps(r.content, JSON_COMPACT);
    assert_string_equal(first, second);
    assert_non_null(strstr(first, "Echo: hello."));
    free(first);
    free(second);
    provider_result_clear(&r);
    json_decref(m);
    m = s_msgs(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"[sim:fail 400]\"}]}]");
    req.messages = m;
    req.attempt = 1;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_ERROR);
    assert_false(r.retryable);
    provider_result_clear(&r);
    json_decref(m);
    cancel_destroy(&c);
}

/* The parts' texts as the worker got them, in order. */
typedef struct {
    char texts[16][64];
    int n;
} s_texts_t;

static void s_keep_text(void *ctx, const char *json) {
    s_texts_t *t = ctx;
    json_t *p = json_loads(json, 0, NULL);
    const char *text = json_string_value(json_object_get(p, "text"));
    if (text && t->n < 16) {
        snprintf(t->texts[t->n++], sizeof t->texts[0], "%s", text);
    }
    json_decref(p);
}

/* [sim:clock]: every text part starts with "@MICROS@ ", the monotonic clock when it was handed
 * over (within the call, in order); the reply's message keeps the plain text. */
static void test_sim_clock_stamps_each_text_part_as_it_is_sent(void **u) {
    (void)u;
    provider_model_t model = {.provider = "sim"};
    json_t *m = s_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                       "\"hi [sim:words 3] [sim:slow 5] [sim:clock]\"}]}]");
    provider_request_t req = {.model = &model, .messages = m, .attempt = 1};
    cancel_t *c = cancel_new();
    provider_result_t r;
    s_texts_t t = {0};
    int64_t before = id_now_us();
    assert_int_equal(provider_generate(&req, c, s_keep_text, &t, &r), PROVIDER_OK);
    int64_t after = id_now_us();
    assert_int_equal(t.n, 5); /* "Echo:", "hi.", and three filler words */
    int64_t last = before;
    for (int i = 0; i < t.n; i++) {
        long long at = 0;
        int used = 0;
        assert_int_equal(sscanf(t.texts[i], "@%lld@ %n", &at, &used), 1);
        assert_true(used > 0 && t.texts[i][used] != '\0' && t.texts[i][used] != '@');
        assert_true(at >= last && at <= after);
        last = at;
    }
    assert_true(last - before >= 4 * 5000); /* paced 5 ms apart */
    char *content = json_dumps(r.content, JSON_COMPACT);
    assert_null(strchr(content, '@'));
    assert_non_null(strstr(content, "Echo: hi."));
    free(content);
    provider_result_clear(&r);
    json_decref(m);
    cancel_destroy(&c);
}

/* [sim:usage N] scripts the reply's input tokens; a title call answers {"title": the first
 * six words}, and its scripted failures. */
static void test_sim_scripts_usage_and_answers_titles(void **u) {
    (void)u;
    provider_model_t model = {.provider = "sim"};
    json_t *m = s_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                       "\"[sim:usage 900] one two three four five six seven\"}]}]");
    provider_request_t req = {.model = &model, .messages = m, .attempt = 1};
    cancel_t *c = cancel_new();
    provider_result_t r;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_OK);
    assert_int_equal(json_integer_value(json_object_get(r.usage, "input_tokens")), 900);
    provider_result_clear(&r);
    req.title = true;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_OK);
    outformat_t *fmt = title_format_new();
    char reason[200];
    char *title = title_from_reply(fmt, r.content, r.finish, reason, sizeof reason);
    assert_string_equal(title, "one two three four five six");
    free(title);
    provider_result_clear(&r);
    json_decref(m);
    m = s_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
               "\"[sim:title-invalid] hi\"}]}]");
    req.messages = m;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_OK);
    assert_null(title_from_reply(fmt, r.content, r.finish, reason, sizeof reason));
    assert_non_null(strstr(reason, "title"));
    provider_result_clear(&r);
    json_decref(m);
    m = s_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
               "\"[sim:title-fail] hi\"}]}]");
    req.messages = m;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_ERROR);
    assert_int_equal(r.status, 400);
    provider_result_clear(&r);
    json_decref(m);
    outformat_destroy(&fmt);
    cancel_destroy(&c);
}

typedef struct {
    cancel_t *cancel;
    provider_rc_t rc;
    int64_t ms;
} s_stall_t;

static void *s_stall(void *arg) {
    s_stall_t *s = arg;
    provider_model_t model = {.provider = "sim"};
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                           "\"[sim:stall]\"}]}]",
                           0, NULL);
    provider_request_t req = {.model = &model, .messages = m, .attempt = 1};
    provider_result_t r;
    int64_t t0 = id_now_ms();
    s->rc = provider_generate(&req, s->cancel, NULL, NULL, &r);
    s->ms = id_now_ms() - t0;
    json_decref(m);
    return NULL;
}

static void test_sim_stall_ends_promptly_when_cancelled(void **u) {
    (void)u;
    s_stall_t s = {.cancel = cancel_new()};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, s_stall, &s), 0);
    /* The stall only ends by cancellation; wait until the thread is inside it. */
    assert_false(cancel_wait_ms(s.cancel, 100));
    cancel_set(s.cancel);
    pthread_join(t, NULL);
    assert_int_equal(s.rc, PROVIDER_CANCELLED);
    assert_true(s.ms < 1000);
    cancel_destroy(&s.cancel);
}

static void test_partial_merges_text_deltas(void **u) {
    (void)u;
    const char *parts[] = {
        "{\"type\":\"text\",\"text\":\"Hel\"}",
        "{\"type\":\"text\",\"text\":\"lo\"}",
        "{\"type\":\"tool-call\",\"tool_call_id\":\"c\",\"tool_name\":\"time\"}",
        "{\"type\":\"text\",\"text\":\"!\"}",
    };
    char *s = generation_partial(parts, 4);
    assert_string_equal(s, "[{\"type\":\"text\",\"text\":\"Hello\"},{\"type\":\"tool-call\","
                           "\"tool_call_id\":\"c\",\"tool_name\":\"time\"},"
                           "{\"type\":\"text\",\"text\":\"!\"}]");
    free(s);
    /* Nothing left (no part, or none that parses): no content at all. */
    const char *junk[] = {"not json", "[1]"};
    assert_null(generation_partial(junk, 2));
    assert_null(generation_partial(NULL, 0));
}

static void test_partial_keeps_numbers_as_written(void **u) {
    (void)u;
    /* The partial is stored as written here: 0.1 must stay 0.1 (not 0.10000000000000001),
     * 2.0 a real, and 1e-7, 1.50 and a bignum their literals (jsonstrict.h, the number
     * policy), as jsonout writes every JSON the system stores. */
    const char *parts[] = {
        "{\"type\":\"text\",\"text\":\"x\"}",
        "{\"type\":\"tool-call\",\"tool_call_id\":\"c\",\"tool_name\":\"f\","
        "\"args\":{\"p\":0.1,\"q\":2.0,\"r\":1e-7,\"s\":1.50,\"t\":123456789012345678901234}}",
    };
    char *s = generation_partial(parts, 2);
    assert_string_equal(s, "[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"tool-call\","
                           "\"tool_call_id\":\"c\",\"tool_name\":\"f\",\"args\":{\"p\":0.1,"
                           "\"q\":2.0,\"r\":1e-7,\"s\":1.50,\"t\":123456789012345678901234}}]");
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runner_follows_the_event_processing_rules_in_order),
        cmocka_unit_test(
            test_compaction_trigger_binds_the_lower_point_and_gates_on_the_latest_usage),
        cmocka_unit_test(test_decide_covers_every_branch),
        cmocka_unit_test(test_decide_waits_for_agents_only_when_nothing_else_is_pending),
        cmocka_unit_test(
            test_a_reply_leaves_agent_calls_pending_and_refuses_a_wait_beside_a_client_call),
        cmocka_unit_test(test_decide_compaction_after_the_guards_and_the_boundary_completes),
        cmocka_unit_test(test_sim_parses_directives_and_strips_them),
        cmocka_unit_test(test_sim_clock_stamps_each_text_part_as_it_is_sent),
        cmocka_unit_test(test_sim_is_deterministic_and_fails_as_scripted),
        cmocka_unit_test(test_sim_scripts_usage_and_answers_titles),
        cmocka_unit_test(test_sim_stall_ends_promptly_when_cancelled),
        cmocka_unit_test(test_partial_merges_text_deltas),
        cmocka_unit_test(test_partial_keeps_numbers_as_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
