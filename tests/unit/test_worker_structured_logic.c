/*
 * The worker's pure structured-output pieces: the schema instance generator (every
 * generated value validates; invalid ones do not), request state derived from evidence rows
 * (budget counting, candidate replacement and invalidation, malformed metadata failing
 * closed), batch classification, the step decision, and control rows in the step decision.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "history.h"
#include "jsonstrict.h"
#include "outformat.h"
#include "schemagen.h"
#include "sim.h"
#include "structured.h"

#define S_RID "11111111-2222-4333-8444-555555555555"

static json_t *s_json(const char *text) {
    json_t *v = NULL;
    assert_int_equal(jsonstrict_parse(text, strlen(text), NULL, &v, NULL), 0);
    return v;
}

static jsonschema_t *s_compile(const json_t *schema) {
    jsonschema_t *c = NULL;
    assert_int_equal(jsonschema_compile(schema, &c, NULL), 0);
    return c;
}

static void test_generated_instances_validate_against_their_schemas(void **u) {
    (void)u;
    const char *schemas[] = {
        "{\"type\":\"null\"}",
        "{}",
        "{\"type\":\"boolean\"}",
        "{\"type\":\"integer\",\"minimum\":5,\"maximum\":9,\"multipleOf\":3}",
        "{\"type\":\"integer\",\"exclusiveMinimum\":-2.5,\"exclusiveMaximum\":0}",
        "{\"type\":\"number\",\"exclusiveMinimum\":0.5,\"maximum\":0.75}",
        "{\"type\":\"number\",\"minimum\":0.25,\"multipleOf\":0.25}",
        "{\"type\":\"string\",\"minLength\":12,\"maxLength\":12}",
        "{\"type\":\"string\",\"maxLength\":2}",
        "{\"type\":\"string\",\"format\":\"date-time\"}",
        "{\"type\":\"string\",\"format\":\"email\"}",
        "{\"type\":\"string\",\"format\":\"ipv6\"}",
        "{\"enum\":[\"x\",3,null]}",
        "{\"const\":{\"a\":[1,2]}}",
        "{\"type\":[\"null\",\"string\"],\"minLength\":1}",
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":4,\"uniqueItems\":true}",
        "{\"type\":\"array\",\"items\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],"
        "\"additionalItems\":false}",
        "{\"type\":\"array\",\"maxItems\":0}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"
        "\"object\",\"properties\":{\"c\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},"
        "\"required\":[\"c\"]}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}",
        "{\"type\":\"object\",\"minProperties\":3,\"additionalProperties\":{\"type\":\"integer\"}}",
        "{\"type\":\"object\",\"required\":[\"x\"],\"maxProperties\":1,"
        "\"properties\":{\"y\":{\"type\":\"string\"}}}",
        "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":0,\"minLength\":1},{\"type\":\"integer\"}]"
        "}",
        "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}",
        "{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":7}]}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        json_t *schema = s_json(schemas[i]);
        jsonschema_t *c = s_compile(schema);
        json_t *v = schemagen_valid(schema, c);
        if (!v) {
            fail_msg("no valid instance for %s", schemas[i]);
        }
        json_t *bad = schemagen_invalid(schema, c);
        if (i != 1) { /* {} accepts anything */
            assert_non_null(bad);
            assert_int_equal(jsonschema_validate(c, bad, JSONSCHEMA_FAIL_FAST, NULL),
                             JSONSCHEMA_INVALID);
        } else {
            assert_null(bad);
        }
        json_decref(bad);
        json_decref(v);
        jsonschema_destroy(&c);
        json_decref(schema);
    }
    json_t *null_schema = s_json("{\"type\":\"null\"}");
    json_t *n = schemagen_instance(null_schema, 0);
    assert_true(json_is_null(n));
    json_decref(n);
    json_decref(null_schema);
}

/* An evidence row. */
static json_t *s_row(const char *role, const char *so) {
    json_t *m = s_json(so);
    return json_pack("{s:i, s:s, s:o}", "id", 1, "role", role, "so", m);
}

#define STEP(extra)                                                                                \
    "{\"type\":\"structured-output-step\",\"request_id\":\"" S_RID "\",\"finish\":\"stop\"" extra  \
    "}"
#define CANDIDATE(v)                                                                               \
    "{\"type\":\"structured-output-candidate\",\"request_id\":\"" S_RID                            \
    "\",\"tool_call_id\":\"c\",\"value\":" v "}"

static void test_budget_and_candidate_are_derived_from_rows(void **u) {
    (void)u;
    json_t *ev = json_array();
    structured_state_t st;
    structured_derive(S_RID, ev, &st);
    assert_int_equal(st.steps, 0);
    assert_null(st.candidate);
    assert_int_equal(structured_decide(&st, false, 0), STRUCTURED_CONTINUE);
    structured_state_clear(&st);
    /* text-only, then an invalid submission, then a valid one (JSON null). */
    json_array_append_new(ev, s_row("assistant", STEP(",\"rejection\":\"text_only\"")));
    json_array_append_new(ev, s_row("user", "{\"type\":\"structured-output-feedback\","
                                            "\"request_id\":\"" S_RID "\",\"rejections\":1}"));
    json_array_append_new(ev, s_row("assistant", STEP(",\"rejection\":\"invalid_arguments\"")));
    structured_derive(S_RID, ev, &st);
    assert_int_equal(st.rejections, 2);
    assert_string_equal(st.last_reject, "invalid_arguments");
    assert_false(st.malformed);
    assert_int_equal(structured_decide(&st, false, 0), STRUCTURED_CONTINUE);
    structured_state_clear(&st);
    json_array_append_new(ev, s_row("assistant", STEP("")));
    json_array_append_new(ev, s_row("tool", CANDIDATE("null")));
    structured_derive(S_RID, ev, &st);
    assert_non_null(st.candidate);
    assert_true(json_is_null(st.candidate));
    assert_int_equal(st.steps, 3);
    assert_int_equal(structured_decide(&st, true, 0), STRUCTURED_SUCCEED);
    structured_state_clear(&st);
    /* A later rejected finalizer batch clears the candidate; the third rejection exhausts. */
    json_array_append_new(ev, s_row("assistant", STEP(",\"rejection\":\"invalid_batch\"")));
    structured_derive(S_RID, ev, &st);
    assert_null(st.candidate);
    assert_int_equal(st.rejections, 3);
    assert_int_equal(structured_decide(&st, false, 0), STRUCTURED_EXHAUSTED);
    structured_state_clear(&st);
    json_decref(ev);
}

#define INVALIDATION "{\"type\":\"structured-output-invalidation\",\"request_id\":\"" S_RID "\"}"

/* A stop hook's invalidation (ARCHITECTURE.md §7.10) voids the candidate and records that the
 * request went on once; it is no rejection and resets none; a later submission is the new
 * candidate; a second invalidation is malformed. */
static void test_an_invalidation_voids_the_candidate_once(void **u) {
    (void)u;
    json_t *ev = json_array();
    json_array_append_new(ev, s_row("assistant", STEP(",\"rejection\":\"text_only\"")));
    json_array_append_new(ev, s_row("assistant", STEP("")));
    json_array_append_new(ev, s_row("tool", CANDIDATE("1")));
    structured_state_t st;
    structured_derive(S_RID, ev, &st);
    assert_false(st.continued);
    assert_int_equal(structured_decide(&st, true, 0), STRUCTURED_SUCCEED);
    structured_state_clear(&st);
    json_array_append_new(ev, s_row("user", INVALIDATION));
    structured_derive(S_RID, ev, &st);
    assert_false(st.malformed);
    assert_true(st.continued);
    assert_null(st.candidate); /* the prior candidate cannot close the request */
    assert_int_equal(st.rejections, 1);
    assert_int_equal(st.steps, 2);
    assert_int_equal(structured_decide(&st, false, 0), STRUCTURED_CONTINUE);
    structured_state_clear(&st);
    json_array_append_new(ev, s_row("assistant", STEP("")));
    json_array_append_new(ev, s_row("tool", CANDIDATE("2")));
    structured_derive(S_RID, ev, &st);
    assert_true(st.continued);
    assert_int_equal(json_integer_value(st.candidate), 2);
    assert_int_equal(st.rejections, 1);
    assert_int_equal(structured_decide(&st, true, 0), STRUCTURED_SUCCEED);
    structured_state_clear(&st);
    /* Continued once only: a second invalidation is metadata no worker writes. */
    json_array_append_new(ev, s_row("user", INVALIDATION));
    structured_derive(S_RID, ev, &st);
    assert_true(st.malformed);
    structured_state_clear(&st);
    json_decref(ev);
    /* On another role it is malformed too. */
    ev = json_array();
    json_array_append_new(ev, s_row("assistant", INVALIDATION));
    structured_derive(S_RID, ev, &st);
    assert_true(st.malformed);
    structured_state_clear(&st);
    json_decref(ev);
}

static void test_decisions_at_the_end_of_a_turn(void **u) {
    (void)u;
    structured_state_t st;
    memset(&st, 0, sizeof st);
    st.steps = 1;
    snprintf(st.last_reject, sizeof st.last_reject, "text_only");
    st.rejections = 1;
    assert_int_equal(structured_decide(&st, true, 0), STRUCTURED_FEEDBACK);
    /* The step limit wins over feedback: not_produced. */
    assert_int_equal(structured_decide(&st, true, 1), STRUCTURED_NOT_PRODUCED);
    st.last_reject[0] = '\0';
    snprintf(st.last_finish, sizeof st.last_finish, "refusal");
    assert_int_equal(structured_decide(&st, true, 0), STRUCTURED_NOT_PRODUCED);
    assert_string_equal(structured_decision_name(STRUCTURED_EXHAUSTED), "validation_exhausted");
}

static void test_malformed_or_foreign_metadata_fails_closed(void **u) {
    (void)u;
    const char *bad[] = {
        STEP(",\"rejection\":\"maybe\""),
        "{\"type\":\"structured-output-candidate\",\"request_id\":\"" S_RID "\"}",
        "{\"type\":\"structured-output-step\",\"request_id\":\"99999999-2222-4333-8444-"
        "555555555555\"}",
        "{\"type\":\"something-else\",\"request_id\":\"" S_RID "\"}",
    };
    for (size_t i = 0; i < 4; i++) {
        json_t *ev = json_array();
        json_array_append_new(ev, s_row(i == 1 ? "tool" : "assistant", bad[i]));
        structured_state_t st;
        structured_derive(S_RID, ev, &st);
        assert_true(st.malformed);
        structured_state_clear(&st);
        json_decref(ev);
    }
}

static void test_batches_are_classified(void **u) {
    (void)u;
    struct {
        const char *content;
        const char *finish;
        bool candidate;
        const char *want;
        int finalizers;
    } cases[] = {
        {"[{\"type\":\"text\",\"text\":\"hi\"}]", "stop", false, "text_only", 0},
        {"[{\"type\":\"text\",\"text\":\"done\"}]", "stop", true, NULL, 0},
        {"[{\"type\":\"text\",\"text\":\"no\"}]", "refusal", false, NULL, 0},
        {"[{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"time\"}]", "tool_calls",
         false, NULL, 0},
        {"[{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"" OUTFORMAT_FINALIZER
         "\"}]",
         "tool_calls", false, NULL, 1},
        {"[{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"" OUTFORMAT_FINALIZER
         "\"}]",
         "length", false, "ineligible", 1},
        {"[{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"" OUTFORMAT_FINALIZER
         "\"},{\"type\":\"tool-call\",\"tool_call_id\":\"b\",\"tool_name\":\"time\"}]",
         "tool_calls", false, "invalid_batch", 1},
        {"[{\"type\":\"tool-call\",\"tool_call_id\":\"a\",\"tool_name\":\"" OUTFORMAT_FINALIZER
         "\"},{\"type\":\"tool-call\",\"tool_call_id\":\"b\",\"tool_name\":\"" OUTFORMAT_FINALIZER
         "\"}]",
         "tool_calls", true, "invalid_batch", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *c = s_json(cases[i].content);
        int fin = -1;
        const char *got = structured_classify(c, cases[i].finish, cases[i].candidate, &fin);
        if (cases[i].want) {
            assert_non_null(got);
            assert_string_equal(got, cases[i].want);
        } else {
            assert_null(got);
        }
        assert_int_equal(fin, cases[i].finalizers);
        json_decref(c);
    }
}

static void test_submissions_are_checked_against_the_schema(void **u) {
    (void)u;
    json_t *rf = s_json("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":"
                        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                        "\"required\":[\"n\"]}}}");
    outformat_t *fmt = NULL;
    outformat_error_t oe;
    assert_int_equal(outformat_parse(rf, "response_format", &fmt, &oe), 0);
    char why[STRUCTURED_ERROR_MAX];
    json_t *v = NULL;
    json_t *ok = s_json("{\"output\":{\"n\":3}}");
    assert_int_equal(structured_check(fmt, ok, &v, why, sizeof why), 0);
    assert_int_equal(json_integer_value(json_object_get(v, "n")), 3);
    json_decref(v);
    json_t *wrong = s_json("{\"output\":{\"n\":\"three\"}}");
    assert_int_equal(structured_check(fmt, wrong, &v, why, sizeof why), -1);
    assert_non_null(strstr(why, "/n"));
    json_t *shape = s_json("{\"output\":{\"n\":1},\"extra\":true}");
    assert_int_equal(structured_check(fmt, shape, &v, why, sizeof why), -1);
    assert_non_null(strstr(why, "exactly"));
    /* The tool spec wraps the caller's schema unchanged. */
    json_t *spec = structured_tool_spec(fmt->schema);
    json_t *is = json_object_get(spec, "input_schema");
    assert_true(json_is_false(json_object_get(is, "additionalProperties")));
    assert_true(
        json_equal(json_object_get(json_object_get(is, "properties"), "output"), fmt->schema));
    json_decref(spec);
    json_decref(ok);
    json_decref(wrong);
    json_decref(shape);
    outformat_destroy(&fmt);
    json_decref(rf);
}

static void test_a_stored_format_that_fails_is_a_configuration_error(void **u) {
    (void)u;
    structured_turn_t t;
    char why[STRUCTURED_ERROR_MAX];
    json_t *ev = json_array();
    json_t *dyn = json_array();
    assert_int_equal(structured_turn_open(&t, S_RID,
                                          "{\"type\":\"json_schema\",\"json_schema\":"
                                          "{\"name\":\"n\",\"schema\":{\"type\":"
                                          "\"nonsense\"}}}",
                                          ev, dyn, why, sizeof why),
                     -1);
    structured_turn_close(&t);
    assert_int_equal(structured_turn_open(&t, S_RID, "{\"a\":1,\"a\":2}", ev, dyn, why, sizeof why),
                     -1);
    structured_turn_close(&t);
    const char *good = "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{}}}";
    assert_int_equal(structured_turn_open(&t, S_RID, good, ev, dyn, why, sizeof why), 0);
    structured_turn_close(&t);
    json_array_append_new(dyn, json_pack("{s:s}", "name", OUTFORMAT_FINALIZER));
    assert_int_equal(structured_turn_open(&t, S_RID, good, ev, dyn, why, sizeof why), -1);
    structured_turn_close(&t);
    json_decref(dyn);
    json_decref(ev);
}

static void test_feedback_rows_do_not_start_a_turn(void **u) {
    (void)u;
    json_t *msgs = s_json(
        "[{\"role\":\"user\",\"content\":[]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},"
        "{\"role\":\"user\",\"control\":true,\"content\":[{\"type\":\"text\",\"text\":\"f\"}]}]");
    /* One step so far: with a limit of 1 the turn is at its limit despite the feedback row. */
    assert_int_equal(history_decide(msgs, NULL, 1, 0, NULL), DECIDE_FINISH_TURN);
    assert_int_equal(history_decide(msgs, NULL, 2, 0, NULL), DECIDE_CALL_MODEL);
    json_decref(msgs);
}

static void test_sim_parses_schema_directives(void **u) {
    (void)u;
    sim_script_t sc;
    char clean[128];
    sim_parse("[sim:schema-wrong 2] [sim:schema-text] [sim:schema-siblings] [sim:schema-double 3]"
              " [sim:schema-unsafe] [sim:schema-refuse] [sim:schema-stall-after-candidate] hi",
              &sc, clean, sizeof clean);
    assert_int_equal(sc.schema_wrong, 2);
    assert_int_equal(sc.schema_text, SIM_REPEAT_MAX);
    assert_int_equal(sc.schema_siblings, 1);
    assert_int_equal(sc.schema_double, 3);
    assert_int_equal(sc.schema_unsafe, 1);
    assert_true(sc.schema_refuse);
    assert_true(sc.schema_stall);
    assert_string_equal(clean, "hi");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_instances_validate_against_their_schemas),
        cmocka_unit_test(test_budget_and_candidate_are_derived_from_rows),
        cmocka_unit_test(test_an_invalidation_voids_the_candidate_once),
        cmocka_unit_test(test_decisions_at_the_end_of_a_turn),
        cmocka_unit_test(test_malformed_or_foreign_metadata_fails_closed),
        cmocka_unit_test(test_batches_are_classified),
        cmocka_unit_test(test_submissions_are_checked_against_the_schema),
        cmocka_unit_test(test_a_stored_format_that_fails_is_a_configuration_error),
        cmocka_unit_test(test_feedback_rows_do_not_start_a_turn),
        cmocka_unit_test(test_sim_parses_schema_directives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
