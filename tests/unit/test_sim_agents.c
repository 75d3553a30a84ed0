/*
 * The sim provider's subagent script (simagents.h; worker/README.md, "The sim provider"): its
 * directives as parsed, and the calls of each step of a turn, driven through the provider over
 * histories that a fake worker extends with the tool results it would write: spawn, then the
 * scripted verb, then wait, then the text reply (or the structured submission).
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
#include "id.h"
#include "outformat.h"
#include "provider.h"
#include "sim.h"
#include "simagents.h"

#define MODEL_CONFIG "9c9c9c9c-0000-4000-8000-000000000000"
#define A1           "00000000-0000-4000-8000-000000000001"
#define A2           "00000000-0000-4000-8000-000000000002"
#define A3           "00000000-0000-4000-8000-000000000003"

static json_t *s_json(const char *text) {
    json_error_t err;
    json_t *v = json_loads(text, 0, &err);
    if (!v) {
        fail_msg("bad fixture: %s: %s", err.text, text);
    }
    return v;
}

/* A turn as the worker holds it: the history so far and what is on offer. */
typedef struct {
    json_t *msgs;
    json_t *tools; /* NULL: none described (the sim does not look at them but the finalizer) */
    int64_t chunk_ms;
    unsigned failing; /* bit K set: the fake worker fails the K-th spawn of a batch */
    bool reversed;    /* the fake worker writes a batch's results last call first */
    char finish[16];  /* the finish of the latest step */
} s_turn_t;

static s_turn_t s_turn(const char *prompt) {
    s_turn_t t = {0};
    t.msgs = json_pack("[{s:s, s:[{s:s, s:s}]}]", "role", "user", "content", "type", "text", "text",
                       prompt);
    return t;
}

static void s_turn_free(s_turn_t *t) {
    json_decref(t->msgs);
    json_decref(t->tools);
}

/* One model step: the reply's parts (the caller owns them), its finish in t->finish. */
static json_t *s_step(s_turn_t *t) {
    provider_model_t model = {.provider = "sim"};
    provider_request_t req = {.model = &model,
                              .messages = t->msgs,
                              .tools = t->tools,
                              .attempt = 1,
                              .chunk_ms = t->chunk_ms};
    cancel_t *c = cancel_new();
    provider_result_t r;
    assert_int_equal(provider_generate(&req, c, NULL, NULL, &r), PROVIDER_OK);
    json_t *content = json_incref(r.content);
    snprintf(t->finish, sizeof t->finish, "%s", r.finish);
    provider_result_clear(&r);
    cancel_destroy(&c);
    return content;
}

/* What the fake worker answers to call, the place-th spawn of its batch when it is a spawn. */
static json_t *s_result(const s_turn_t *t, const json_t *call, int place, bool *is_error) {
    const char *name = json_string_value(json_object_get(call, "tool_name"));
    const json_t *args = json_object_get(call, "args");
    *is_error = false;
    if (!strcmp(name, "spawn_agent")) {
        if (t->failing & (1u << place)) {
            *is_error = true;
            return json_pack("{s:s}", "error", "subagent depth limit reached");
        }
        char id[ID_UUID_LEN + 1];
        snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", place);
        return json_pack("{s:s, s:O, s:s, s:s, s:i}", "agent_id", id, "title",
                         json_object_get(args, "title"), "type", "general", "model_config_id",
                         MODEL_CONFIG, "depth", 1);
    }
    if (!strcmp(name, "wait_agent")) {
        return json_pack("{s:[]}", "agents");
    }
    if (!strcmp(name, OUTFORMAT_FINALIZER)) {
        return json_pack("{s:s}", "status", "accepted");
    }
    return json_pack("{s:b}", "ok", 1);
}

/* Appends the assistant row content (stolen) and, as the worker would, one tool row per call. */
static void s_answer(s_turn_t *t, json_t *content) {
    json_array_append_new(t->msgs,
                          json_pack("{s:s, s:o}", "role", "assistant", "content", content));
    size_t n = json_array_size(content);
    json_t *rows = json_array();
    int place = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *call = json_array_get(content, i);
        if (strcmp(json_string_value(json_object_get(call, "type")), "tool-call")) {
            continue;
        }
        place += !strcmp(json_string_value(json_object_get(call, "tool_name")), "spawn_agent");
        bool is_error;
        json_t *result = s_result(t, call, place, &is_error);
        json_array_append_new(rows, json_pack("{s:s, s:[{s:s, s:O, s:O, s:o, s:b}]}", "role",
                                              "tool", "content", "type", "tool-result",
                                              "tool_call_id", json_object_get(call, "tool_call_id"),
                                              "tool_name", json_object_get(call, "tool_name"),
                                              "result", result, "is_error", is_error));
    }
    size_t k = json_array_size(rows);
    for (size_t i = 0; i < k; i++) {
        json_array_append(t->msgs, json_array_get(rows, t->reversed ? k - 1 - i : i));
    }
    json_decref(rows);
}

/* Asserts that content is exactly the calls in expected ([[NAME, ARGS], ...], in order), each
 * with a fresh tool_call_id, and that the step finished with "tool_calls". */
static void s_expect_calls(const s_turn_t *t, const json_t *content, const char *expected) {
    json_t *want = s_json(expected);
    assert_string_equal(t->finish, "tool_calls");
    assert_int_equal(json_array_size(content), json_array_size(want));
    for (size_t i = 0; i < json_array_size(want); i++) {
        const json_t *part = json_array_get(content, i);
        const json_t *w = json_array_get(want, i);
        assert_string_equal(json_string_value(json_object_get(part, "type")), "tool-call");
        assert_string_equal(json_string_value(json_object_get(part, "tool_name")),
                            json_string_value(json_array_get(w, 0)));
        if (!json_equal(json_object_get(part, "args"), json_array_get(w, 1))) {
            char *got = json_dumps(json_object_get(part, "args"), JSON_COMPACT);
            fail_msg("call %zu args: %s, want %s", i, got, expected);
        }
        const char *id = json_string_value(json_object_get(part, "tool_call_id"));
        assert_non_null(id);
        assert_true(id[0] != '\0');
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(
                id, json_string_value(json_object_get(json_array_get(content, j), "tool_call_id")));
        }
    }
    json_decref(want);
}

/* One step expected to call exactly expected; the fake worker answers it. */
static void s_calls_step(s_turn_t *t, const char *expected) {
    json_t *content = s_step(t);
    s_expect_calls(t, content, expected);
    s_answer(t, content);
}

/* One step expected to end the turn with a text that starts with prefix (the whole text when
 * exact); returns how often needle occurs in it. */
static int s_text_step(s_turn_t *t, const char *prefix, bool exact, const char *needle) {
    json_t *content = s_step(t);
    assert_true(t->finish[0] == '\0' || !strcmp(t->finish, "stop"));
    assert_int_equal(json_array_size(content), 1);
    const json_t *part = json_array_get(content, 0);
    assert_string_equal(json_string_value(json_object_get(part, "type")), "text");
    const char *text = json_string_value(json_object_get(part, "text"));
    if (exact) {
        assert_string_equal(text, prefix);
    } else if (strncmp(text, prefix, strlen(prefix)) != 0) {
        fail_msg("reply %s, want it to start with %s", text, prefix);
    }
    int count = 0;
    for (const char *s = needle ? strstr(text, needle) : NULL; s; s = strstr(s + 1, needle)) {
        count++;
    }
    json_decref(content);
    return count;
}

static void test_sim_parses_the_subagent_directives(void **u) {
    (void)u;
    sim_script_t sc;
    char clean[256];
    sim_parse("[sim:spawn 3] look [sim:child slow 200] around [sim:child spawn 1][sim:child-schema]"
              "[sim:nowait][sim:wait-all][sim:agents message]",
              &sc, clean, sizeof clean);
    assert_int_equal(sc.agents.spawn, 3);
    assert_int_equal(sc.agents.children, 2);
    assert_string_equal(sc.agents.child[0], "slow 200");
    assert_string_equal(sc.agents.child[1], "spawn 1");
    assert_true(sc.agents.child_schema);
    assert_true(sc.agents.nowait);
    assert_true(sc.agents.wait_all);
    assert_int_equal(sc.agents.verb, SIMAGENTS_VERB_MESSAGE);
    assert_string_equal(clean, "look  around");
    /* The child's directives are not the parent's: slow stays unset. */
    assert_int_equal(sc.slow_ms, -1);

    /* Defaults and bounds: N defaults to 1, is at least 1 and at most SIM_REPEAT_MAX. */
    sim_parse("[sim:spawn] hi", &sc, clean, sizeof clean);
    assert_int_equal(sc.agents.spawn, 1);
    assert_int_equal(sc.agents.verb, SIMAGENTS_VERB_NONE);
    assert_false(sc.agents.nowait || sc.agents.wait_all || sc.agents.child_schema);
    assert_int_equal(sc.agents.children, 0);
    sim_parse("[sim:spawn 0]", &sc, clean, sizeof clean);
    assert_int_equal(sc.agents.spawn, 1);
    sim_parse("[sim:spawn 999999]", &sc, clean, sizeof clean);
    assert_int_equal(sc.agents.spawn, SIM_REPEAT_MAX);
    sim_parse("hi [sim:tool time]", &sc, clean, sizeof clean);
    assert_int_equal(sc.agents.spawn, 0);

    /* Each verb, and one that is none. */
    const char *verbs[] = {"message", "interrupt", "list", "models", "dance"};
    simagents_verb_t want[] = {SIMAGENTS_VERB_MESSAGE, SIMAGENTS_VERB_INTERRUPT,
                               SIMAGENTS_VERB_LIST, SIMAGENTS_VERB_MODELS, SIMAGENTS_VERB_NONE};
    for (int i = 0; i < 5; i++) {
        char text[64];
        snprintf(text, sizeof text, "[sim:agents %s]", verbs[i]);
        sim_parse(text, &sc, clean, sizeof clean);
        assert_int_equal(sc.agents.verb, want[i]);
    }

    /* At most SIMAGENTS_CHILDREN_MAX child directives are kept, the first ones; an empty one is
     * none. */
    sim_parse("[sim:child ][sim:child a 1][sim:child b][sim:child c][sim:child d][sim:child e]"
              "[sim:child f][sim:child g][sim:child h][sim:child i]",
              &sc, clean, sizeof clean);
    assert_int_equal(sc.agents.children, SIMAGENTS_CHILDREN_MAX);
    assert_string_equal(sc.agents.child[0], "a 1");
    assert_string_equal(sc.agents.child[SIMAGENTS_CHILDREN_MAX - 1], "h");
    assert_string_equal(clean, "");
}

#define SPAWN3                                                                                     \
    "[[\"spawn_agent\",{\"prompt\":\"task 1 of 3: look around\",\"title\":\"task 1 of 3\"}],"      \
    "[\"spawn_agent\",{\"prompt\":\"task 2 of 3: look around\",\"title\":\"task 2 of 3\"}],"       \
    "[\"spawn_agent\",{\"prompt\":\"task 3 of 3: look around\",\"title\":\"task 3 of 3\"}]]"
#define WAIT3 "[[\"wait_agent\",{\"agent_ids\":[\"" A1 "\",\"" A2 "\",\"" A3 "\"]}]]"

/* a → c → d: three spawns in one message, one wait naming them in order, then the report. */
static void test_sim_spawn_script_spawns_three_then_waits_then_reports(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent={\"agents\":[]}", true, NULL);
    s_turn_free(&t);
}

/* The children's prompts carry the [sim:child X] directives as [sim:X], in order; parsed as a
 * child's prompt they script the child. */
static void test_sim_spawn_script_passes_child_directives_in_order(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:child slow 200] look [sim:spawn 3] around [sim:child spawn 1]");
    s_calls_step(&t, "[[\"spawn_agent\",{\"prompt\":\"[sim:slow 200][sim:spawn 1]task 1 of 3: "
                     "look  around\",\"title\":\"task 1 of 3\"}],"
                     "[\"spawn_agent\",{\"prompt\":\"[sim:slow 200][sim:spawn 1]task 2 of 3: "
                     "look  around\",\"title\":\"task 2 of 3\"}],"
                     "[\"spawn_agent\",{\"prompt\":\"[sim:slow 200][sim:spawn 1]task 3 of 3: "
                     "look  around\",\"title\":\"task 3 of 3\"}]]");
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);

    sim_script_t sc;
    char clean[128];
    sim_parse("[sim:slow 200][sim:spawn 1]task 2 of 3: look  around", &sc, clean, sizeof clean);
    assert_int_equal(sc.slow_ms, 200);
    assert_int_equal(sc.agents.spawn, 1);
    assert_string_equal(clean, "task 2 of 3: look  around");
    s_turn_free(&t);
}

/* a → b → c → d with [sim:agents message]: one message_agent per child, then the wait. */
static void test_sim_spawn_script_messages_each_child_before_waiting(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:agents message] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"message_agent\",{\"agent_id\":\"" A1 "\",\"message\":\"more about task "
                     "1\"}],[\"message_agent\",{\"agent_id\":\"" A2 "\",\"message\":\"more about "
                     "task 2\"}],[\"message_agent\",{\"agent_id\":\"" A3 "\",\"message\":\"more "
                     "about task 3\"}]]");
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent={\"agents\":[]}", true, NULL);
    s_turn_free(&t);
}

/* The other verbs: interrupt_agent per child; one list_agents; one list_subagent_models. */
static void test_sim_spawn_script_interrupts_or_lists_before_waiting(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:agents interrupt] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"interrupt_agent\",{\"agent_id\":\"" A1 "\"}],"
                     "[\"interrupt_agent\",{\"agent_id\":\"" A2 "\"}],"
                     "[\"interrupt_agent\",{\"agent_id\":\"" A3 "\"}]]");
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    s_turn_free(&t);

    t = s_turn("[sim:spawn 3][sim:agents list] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"list_agents\",{}]]");
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    s_turn_free(&t);

    t = s_turn("[sim:spawn 3][sim:agents models] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"list_subagent_models\",{}]]");
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    s_turn_free(&t);
}

/* [sim:nowait]: no wait_agent; the report follows the spawns (or the verb's calls). */
static void test_sim_spawn_script_without_wait_reports_at_once(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:nowait] look around");
    s_calls_step(&t, SPAWN3);
    assert_int_equal(s_text_step(&t, "Tool results: spawn_agent={\"agent_id\":\"" A1 "\"", false,
                                 "spawn_agent="),
                     3);
    s_turn_free(&t);

    t = s_turn("[sim:spawn 3][sim:nowait][sim:agents list] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"list_agents\",{}]]");
    s_text_step(&t, "Tool results: list_agents={\"ok\":true}", true, NULL);
    s_turn_free(&t);
}

/* [sim:wait-all]: the wait names no agent ({}: every child of the chat). */
static void test_sim_spawn_script_wait_all_waits_for_every_child(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:wait-all] look around");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"wait_agent\",{}]]");
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    s_turn_free(&t);
}

/* [sim:child-schema]: each spawn asks for a {"n": integer} result. */
static void test_sim_spawn_script_asks_children_for_a_schema(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:child-schema] look around");
#define FORMAT                                                                                     \
    "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"child_result\","    \
    "\"schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"               \
    "\"required\":[\"n\"],\"additionalProperties\":false}}}"
    s_calls_step(&t, "[[\"spawn_agent\",{\"prompt\":\"task 1 of 3: look around\",\"title\":\"task "
                     "1 of 3\"," FORMAT "}],"
                     "[\"spawn_agent\",{\"prompt\":\"task 2 of 3: look around\",\"title\":\"task "
                     "2 of 3\"," FORMAT "}],"
                     "[\"spawn_agent\",{\"prompt\":\"task 3 of 3: look around\",\"title\":\"task "
                     "3 of 3\"," FORMAT "}]]");
#undef FORMAT
    s_calls_step(&t, WAIT3);
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    s_turn_free(&t);
}

/* A failed spawn is neither messaged nor waited for; results are matched to their calls by id
 * (here written last call first), so "task K" stays the K-th call's. When no spawn succeeds
 * there is nothing to wait for and the report follows. */
static void test_sim_spawn_script_addresses_only_successful_spawns(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:agents message] look around");
    t.failing = 1u << 2;
    t.reversed = true;
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, "[[\"message_agent\",{\"agent_id\":\"" A1 "\",\"message\":\"more about task "
                     "1\"}],[\"message_agent\",{\"agent_id\":\"" A3 "\",\"message\":\"more "
                     "about task 3\"}]]");
    s_calls_step(&t, "[[\"wait_agent\",{\"agent_ids\":[\"" A1 "\",\"" A3 "\"]}]]");
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    s_turn_free(&t);

    t = s_turn("[sim:spawn 3][sim:agents interrupt] look around");
    t.failing = (1u << 1) | (1u << 2) | (1u << 3);
    s_calls_step(&t, SPAWN3);
    assert_int_equal(s_text_step(&t, "Tool results: spawn_agent={\"error\":", false, "error"), 3);
    s_turn_free(&t);
}

/* With a structured request open the script runs first, then the sim submits (instead of the
 * report) and ends once the submission is accepted. */
static void test_sim_spawn_script_then_submits_when_structured(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3] look around");
    t.tools = s_json("[{\"name\":\"" OUTFORMAT_FINALIZER "\",\"input_schema\":{\"type\":\"object\","
                     "\"properties\":{\"output\":{\"type\":\"object\",\"properties\":{\"n\":"
                     "{\"type\":\"integer\"}},\"required\":[\"n\"]}}}}]");
    s_calls_step(&t, SPAWN3);
    s_calls_step(&t, WAIT3);
    json_t *content = s_step(&t);
    assert_string_equal(t.finish, "tool_calls");
    assert_int_equal(json_array_size(content), 1);
    const json_t *submit = json_array_get(content, 0);
    assert_string_equal(json_string_value(json_object_get(submit, "tool_name")),
                        OUTFORMAT_FINALIZER);
    json_t *args = s_json(json_string_value(json_object_get(submit, "args_text")));
    assert_true(json_is_integer(json_object_get(json_object_get(args, "output"), "n")));
    json_decref(args);
    s_answer(&t, content);
    s_text_step(&t, "Submitted the answer.", true, NULL);
    s_turn_free(&t);
}

/* [sim:tool] steps come first; the scan starts at the latest user message, so a new prompt
 * starts the script over; without [sim:spawn] nothing calls a subagent tool. */
static void test_sim_spawn_script_follows_tool_steps_and_each_prompt(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:tool time][sim:spawn 1] go");
    s_calls_step(&t, "[[\"time\",{}]]");
    s_calls_step(&t,
                 "[[\"spawn_agent\",{\"prompt\":\"task 1 of 1: go\",\"title\":\"task 1 of 1\"}]]");
    s_calls_step(&t, "[[\"wait_agent\",{\"agent_ids\":[\"" A1 "\"]}]]");
    s_text_step(&t, "Tool results: wait_agent=", false, NULL);
    json_array_append_new(t.msgs, s_json("{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                                         "\"text\":\"done\"}]}"));
    json_array_append_new(t.msgs, s_json("{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                                         "\"text\":\"[sim:spawn 1] again\"}]}"));
    s_calls_step(
        &t, "[[\"spawn_agent\",{\"prompt\":\"task 1 of 1: again\",\"title\":\"task 1 of 1\"}]]");
    s_turn_free(&t);

    t = s_turn("[sim:tool time] go");
    s_calls_step(&t, "[[\"time\",{}]]");
    s_text_step(&t, "Tool results: time={\"ok\":true}", true, NULL);
    s_turn_free(&t);
    t = s_turn("go");
    s_text_step(&t, "Echo: go.", false, NULL);
    s_turn_free(&t);
}

/* A script step takes the model one chunk's time, as a structured step does. */
static void test_sim_spawn_step_takes_one_chunk(void **u) {
    (void)u;
    s_turn_t t = s_turn("[sim:spawn 3][sim:slow 60] look around");
    int64_t t0 = id_now_ms();
    json_t *content = s_step(&t);
    assert_true(id_now_ms() - t0 >= 60);
    assert_int_equal(json_array_size(content), 3);
    json_decref(content);
    s_turn_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_parses_the_subagent_directives),
        cmocka_unit_test(test_sim_spawn_script_spawns_three_then_waits_then_reports),
        cmocka_unit_test(test_sim_spawn_script_passes_child_directives_in_order),
        cmocka_unit_test(test_sim_spawn_script_messages_each_child_before_waiting),
        cmocka_unit_test(test_sim_spawn_script_interrupts_or_lists_before_waiting),
        cmocka_unit_test(test_sim_spawn_script_without_wait_reports_at_once),
        cmocka_unit_test(test_sim_spawn_script_wait_all_waits_for_every_child),
        cmocka_unit_test(test_sim_spawn_script_asks_children_for_a_schema),
        cmocka_unit_test(test_sim_spawn_script_addresses_only_successful_spawns),
        cmocka_unit_test(test_sim_spawn_script_then_submits_when_structured),
        cmocka_unit_test(test_sim_spawn_script_follows_tool_steps_and_each_prompt),
        cmocka_unit_test(test_sim_spawn_step_takes_one_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
