/* Tests for the schema compiler and validator beyond the official suite: what is rejected at
 * compile time and where, reports, fail-fast, numbers, regex rewrites and thread safety. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "jsonschema.h"
#include "jsonstrict.h"

static json_t *s_json(const char *text) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    if (jsonstrict_parse(text, strlen(text), &lim, &v, &err)) {
        print_error("bad test JSON %s: %s\n", text, err.message);
    }
    assert_non_null(v);
    return v;
}

static jsonschema_t *s_compile(const char *text) {
    json_t *schema = s_json(text);
    jsonschema_t *s = NULL;
    jsonschema_error_t err;
    int rc = jsonschema_compile(schema, &s, &err);
    if (rc) {
        print_error("schema %s rejected: %s at %s\n", text, err.message, err.schema_path);
    }
    json_decref(schema);
    assert_int_equal(rc, 0);
    return s;
}

static jsonschema_error_t s_reject(const char *text) {
    json_t *schema = s_json(text);
    jsonschema_t *s = (jsonschema_t *)1;
    jsonschema_error_t err;
    int rc = jsonschema_compile(schema, &s, &err);
    json_decref(schema);
    if (rc == 0) {
        print_error("schema %s was accepted\n", text);
    }
    assert_int_equal(rc, -1);
    assert_null(s);
    assert_true(strlen(err.message) > 0);
    return err;
}

static bool s_valid(const jsonschema_t *s, const char *instance) {
    json_t *v = s_json(instance);
    jsonschema_report_t report;
    jsonschema_result_t r = jsonschema_validate(s, v, JSONSCHEMA_ALL_ERRORS, &report);
    jsonschema_result_t fast = jsonschema_validate(s, v, JSONSCHEMA_FAIL_FAST, NULL);
    json_decref(v);
    assert_int_equal(r, fast);
    assert_true(r == JSONSCHEMA_VALID ? report.count == 0 : report.count > 0);
    return r == JSONSCHEMA_VALID;
}

static void test_references_rejected_at_schema_positions_with_path(void **state) {
    jsonschema_error_t err = s_reject("{\"properties\": {\"a\": {\"$ref\": \"#\"}}}");
    assert_string_equal(err.schema_path, "/properties/a/$ref");
    assert_non_null(strstr(err.message, "inline"));
    err = s_reject("{\"items\": [{}, {\"$id\": \"x\"}]}");
    assert_string_equal(err.schema_path, "/items/1/$id");
    s_reject("{\"definitions\": {}}");
    s_reject("{\"$defs\": {}}");
    s_reject("{\"not\": {\"id\": \"x\"}}");
    err = s_reject("{\"properties\": {\"a/b\": {\"allOf\": [{\"$ref\": \"#\"}]}}}");
    assert_string_equal(err.schema_path, "/properties/a~1b/allOf/0/$ref");
}

static void test_reference_names_are_fine_as_data_and_property_names(void **state) {
    jsonschema_t *s = s_compile(
        "{\"properties\": {\"$ref\": {\"type\": \"string\"}, \"definitions\": {}, \"$id\": {}},"
        " \"required\": [\"$ref\"], \"const\": {\"$ref\": \"http://json-schema.org/draft-07/"
        "schema#\", \"$id\": 1}, \"default\": {\"$ref\": \"#\"},"
        " \"enum\": [{\"$ref\": \"http://json-schema.org/draft-07/schema#\", \"$id\": 1}]}");
    assert_true(s_valid(s, "{\"$ref\": \"http://json-schema.org/draft-07/schema#\", \"$id\": 1}"));
    assert_false(s_valid(s, "{\"$ref\": 1}"));
    jsonschema_destroy(&s);
    assert_null(s);
    jsonschema_destroy(&s); /* safe on NULL */
}

static void test_dialect_unknown_keywords_and_formats_rejected(void **state) {
    jsonschema_t *s = s_compile("{\"$schema\": \"http://json-schema.org/draft-07/schema#\"}");
    jsonschema_destroy(&s);
    s_reject("{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\"}");
    s_reject(
        "{\"properties\": {\"a\": {\"$schema\": \"http://json-schema.org/draft-07/schema#\"}}}");
    jsonschema_error_t err = s_reject("{\"properties\": {\"a\": {\"minimun\": 1}}}");
    assert_string_equal(err.schema_path, "/properties/a/minimun");
    err = s_reject("{\"format\": \"color\"}");
    assert_string_equal(err.schema_path, "/format");
    s_reject("{\"type\": \"int\"}");
    s_reject("{\"type\": [\"string\", \"string\"]}");
    s_reject("{\"minLength\": -1}");
    s_reject("{\"minLength\": 1.5}");
    s_reject("{\"multipleOf\": 0}");
    s_reject("{\"required\": [\"a\", \"a\"]}");
    s_reject("{\"allOf\": []}");
    s_reject("{\"title\": 1}");
    s_reject("3");
    s = s_compile("{\"title\": \"t\", \"description\": \"d\", \"default\": 1, \"examples\": [],"
                  " \"$comment\": \"c\", \"readOnly\": true, \"writeOnly\": false,"
                  " \"contentMediaType\": \"application/json\", \"contentEncoding\": \"base64\","
                  " \"minLength\": 2.0}");
    assert_true(s_valid(s, "\"ab\""));
    assert_false(s_valid(s, "\"a\""));
    jsonschema_destroy(&s);
}

static void test_annotations_are_never_applied(void **state) {
    jsonschema_t *s = s_compile("{\"properties\": {\"a\": {\"default\": 5, \"readOnly\": true}},"
                                " \"contentEncoding\": \"base64\"}");
    assert_true(s_valid(s, "{}"));
    assert_true(s_valid(s, "{\"a\": \"not five\"}"));
    json_t *v = s_json("{}");
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_FAIL_FAST, NULL), JSONSCHEMA_VALID);
    assert_int_equal(json_object_size(v), 0); /* no default was filled in */
    json_decref(v);
    jsonschema_destroy(&s);
}

static void test_report_lists_instance_and_schema_paths(void **state) {
    jsonschema_t *s =
        s_compile("{\"type\": \"object\", \"required\": [\"id\"], \"properties\": "
                  "{\"tags\": {\"items\": {\"maxLength\": 2}}, \"n\": {\"minimum\": 0}}}");
    json_t *v = s_json("{\"tags\": [\"ok\", \"long\"], \"n\": -1}");
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, 3);
    assert_false(r.truncated);
    bool saw_tag = false;
    bool saw_n = false;
    bool saw_required = false;
    for (size_t i = 0; i < r.count; i++) {
        if (strcmp(r.items[i].instance_path, "/tags/1") == 0) {
            assert_string_equal(r.items[i].schema_path, "/properties/tags/items/maxLength");
            saw_tag = true;
        } else if (strcmp(r.items[i].instance_path, "/n") == 0) {
            assert_string_equal(r.items[i].schema_path, "/properties/n/minimum");
            saw_n = true;
        } else {
            assert_string_equal(r.items[i].schema_path, "/required");
            assert_non_null(strstr(r.items[i].message, "id"));
            saw_required = true;
        }
    }
    assert_true(saw_tag && saw_n && saw_required);
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_FAIL_FAST, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, 1);
    json_decref(v);
    jsonschema_destroy(&s);
}

/* The path of each failure, wherever it is: deep in arrays and objects, a member name that
 * propertyNames refuses, keys that need RFC 6901 escapes. Paths come from the tape. */
static void test_instance_paths_at_every_depth(void **state) {
    jsonschema_t *s =
        s_compile("{\"properties\": {\"a\": {\"items\": {\"items\": {\"properties\": "
                  "{\"x/y~z\": {\"type\": \"string\"}}}}}, \"m\": {\"propertyNames\": "
                  "{\"maxLength\": 3}}, \"e\": {\"items\": [{}, {\"const\": 1}]}}}");
    json_t *v = s_json("{\"a\": [[], [{}, {\"x/y~z\": 5}]], \"m\": {\"ok\": 1, \"long\": 2}, "
                       "\"e\": [0, 2]}");
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, 3);
    assert_string_equal(r.items[0].instance_path, "/a/1/1/x~1y~0z");
    assert_string_equal(r.items[0].schema_path,
                        "/properties/a/items/items/properties/x~1y~0z/type");
    assert_string_equal(r.items[1].instance_path, "/m/long");
    assert_string_equal(r.items[1].schema_path, "/properties/m/propertyNames/maxLength");
    assert_string_equal(r.items[2].instance_path, "/e/1");
    assert_string_equal(r.items[2].schema_path, "/properties/e/items/1/const");
    json_decref(v);
    jsonschema_destroy(&s);
}

/* A tape holding other values first validates the one at its index, with paths from it. */
static void test_validate_tape_at_an_index(void **state) {
    jsonschema_t *s = s_compile("{\"items\": {\"type\": \"integer\"}}");
    jsontape_t *t = jsontape_new();
    json_t *first = s_json("{\"unrelated\": [true]}");
    json_t *second = s_json("[1, 2.5]");
    assert_int_equal(jsontape_from_json(t, first), 0);
    long at = jsontape_from_json(t, second);
    assert_true(at > 0);
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate_tape(s, t, (uint32_t)at, JSONSCHEMA_ALL_ERRORS, &r),
                     JSONSCHEMA_INVALID);
    assert_int_equal(r.count, 1);
    assert_string_equal(r.items[0].instance_path, "/1");
    /* The object at 0 is valid: items applies to arrays only; its array is never reached. */
    assert_int_equal(jsonschema_validate_tape(s, t, 0, JSONSCHEMA_FAIL_FAST, NULL),
                     JSONSCHEMA_VALID);
    json_decref(first);
    json_decref(second);
    jsontape_destroy(&t);
    jsonschema_destroy(&s);
}

/* Branches told apart by a required string const: the outcome is the same as trying each
 * branch, including duplicates (oneOf then fails), a missing or non-string member, and a
 * non-object. */
static void test_discriminated_branches_keep_their_meaning(void **state) {
    const char *branches =
        "[{\"type\": \"object\", \"required\": [\"kind\"], \"properties\": {\"kind\": "
        "{\"const\": \"a\"}, \"n\": {\"type\": \"integer\"}}}, {\"type\": \"object\", "
        "\"required\": [\"kind\"], \"properties\": {\"kind\": {\"const\": \"b\"}, \"n\": "
        "{\"type\": \"string\"}}}, {\"type\": \"object\", \"required\": [\"kind\"], "
        "\"properties\": {\"kind\": {\"const\": \"b\"}}}]";
    char any[1024];
    char one[1024];
    snprintf(any, sizeof any, "{\"anyOf\": %s}", branches);
    snprintf(one, sizeof one, "{\"oneOf\": %s}", branches);
    jsonschema_t *a = s_compile(any);
    jsonschema_t *o = s_compile(one);
    assert_true(s_valid(a, "{\"kind\": \"a\", \"n\": 1}"));
    assert_true(s_valid(o, "{\"kind\": \"a\", \"n\": 1}"));
    assert_false(s_valid(a, "{\"kind\": \"a\", \"n\": \"x\"}"));
    assert_true(s_valid(a, "{\"kind\": \"b\", \"n\": 1}")); /* the third branch */
    assert_true(s_valid(o, "{\"kind\": \"b\", \"n\": 1}"));
    assert_false(s_valid(o, "{\"kind\": \"b\", \"n\": \"x\"}")); /* second and third */
    assert_true(s_valid(a, "{\"kind\": \"b\", \"n\": \"x\"}"));
    assert_false(s_valid(a, "{\"kind\": \"c\"}"));
    assert_false(s_valid(a, "{\"kind\": 1}"));
    assert_false(s_valid(a, "{\"n\": 1}"));
    assert_false(s_valid(a, "[\"kind\"]"));
    jsonschema_destroy(&a);
    jsonschema_destroy(&o);
    /* Distinct consts: only the branch whose const matches decides. */
    o = s_compile("{\"oneOf\": [{\"type\": \"object\", \"required\": [\"kind\"], \"properties\":"
                  " {\"kind\": {\"const\": \"a\"}, \"n\": {\"type\": \"integer\"}}},"
                  " {\"type\": \"object\", \"required\": [\"kind\"], \"properties\":"
                  " {\"kind\": {\"const\": \"ab\"}}}]}");
    assert_true(s_valid(o, "{\"kind\": \"a\", \"n\": 1}"));
    assert_false(s_valid(o, "{\"kind\": \"a\", \"n\": \"x\"}"));
    assert_true(s_valid(o, "{\"kind\": \"ab\", \"n\": \"x\"}"));
    assert_false(s_valid(o, "{\"kind\": \"b\"}"));
    jsonschema_destroy(&o);
}

/* Bounds a leaf compares as doubles mean what they say exactly: exclusive bounds, integral
 * reals under "integer", integers past 2^53, text reals, and both kinds of lower bound at once;
 * as the whole schema and as an item's (where reporting also runs the leaf's check first). */
static void test_number_bounds_exact_on_every_path(void **state) {
    const struct {
        const char *schema;
        const char *yes[4];
        const char *no[4];
    } cases[] = {
        {"{\"type\": \"number\", \"minimum\": -180, \"maximum\": 180}",
         {"-180", "180.0", "0.5", NULL},
         {"180.0000001", "-181", "\"1\"", NULL}},
        {"{\"exclusiveMinimum\": 0, \"exclusiveMaximum\": 1.5}",
         {"1e-300", "1.4999999999999998", "\"x\"", NULL},
         {"0", "1.5", "-0.0", NULL}},
        {"{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10}",
         {"1", "10.0", "1e1", NULL},
         {"1.5", "0", "11", NULL}},
        {"{\"maximum\": 9007199254740993}",
         {"9007199254740993", "9007199254740992", "-1e300", NULL},
         {"9007199254740994", "9007199254740993.5", "1e300", NULL}},
        {"{\"minimum\": 0.1, \"maximum\": 1e300}",
         {"0.1", "0.10000000000000001", "1e300", NULL},
         {"0.09999999999999999", "1e301",
          "12345678910111213141516171819202122232425262728293031e300", NULL}},
        {"{\"minimum\": 2, \"exclusiveMinimum\": 1}", {"2", "2.5", NULL}, {"1.5", "1", NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char items[256];
        snprintf(items, sizeof items, "{\"items\": %s}", cases[c].schema);
        jsonschema_t *leaf = s_compile(cases[c].schema);
        jsonschema_t *list = s_compile(items);
        for (int want = 0; want < 2; want++) {
            const char *const *values = want ? cases[c].yes : cases[c].no;
            for (size_t i = 0; i < 4 && values[i]; i++) {
                char one[192];
                snprintf(one, sizeof one, "[%s]", values[i]);
                if (s_valid(leaf, values[i]) != (bool)want || s_valid(list, one) != (bool)want) {
                    fail_msg("%s on %s: expected %s", cases[c].schema, values[i],
                             want ? "valid" : "invalid");
                }
            }
        }
        jsonschema_destroy(&leaf);
        jsonschema_destroy(&list);
    }
}

static void test_report_is_bounded_and_marked_truncated(void **state) {
    jsonschema_t *s = s_compile("{\"additionalProperties\": {\"type\": \"string\"}}");
    char buf[4096];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "{");
    for (int i = 0; i < 100; i++) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"k%d\": %d", i ? "," : "", i, i);
    }
    snprintf(buf + n, sizeof buf - n, "}");
    json_t *v = s_json(buf);
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, JSONSCHEMA_ERRORS_MAX);
    assert_true(r.truncated);
    json_decref(v);
    jsonschema_destroy(&s);
}

static void test_numbers_equal_exact_and_decimal_multiples(void **state) {
    jsonschema_t *s = s_compile("{\"enum\": [1, [2.0], {\"a\": 3}]}");
    assert_true(s_valid(s, "1.0"));
    assert_true(s_valid(s, "[2]"));
    assert_true(s_valid(s, "{\"a\": 3.0}"));
    assert_false(s_valid(s, "1.5"));
    jsonschema_destroy(&s);

    s = s_compile("{\"multipleOf\": 0.01}");
    assert_true(s_valid(s, "19.99"));
    assert_true(s_valid(s, "0.07"));
    assert_true(s_valid(s, "-4"));
    assert_false(s_valid(s, "0.075"));
    jsonschema_destroy(&s);
    s = s_compile("{\"multipleOf\": 0.1}");
    assert_true(s_valid(s, "0.3")); /* 0.3 / 0.1 is 2.9999999999999996 in binary */
    jsonschema_destroy(&s);

    s = s_compile("{\"maximum\": 9007199254740992}");
    assert_true(s_valid(s, "9007199254740992"));
    assert_false(s_valid(s, "9007199254740993")); /* equal as doubles, not as integers */
    jsonschema_destroy(&s);
    s = s_compile("{\"exclusiveMinimum\": 9223372036854775806}");
    assert_true(s_valid(s, "9223372036854775807"));
    assert_false(s_valid(s, "9223372036854775806"));
    jsonschema_destroy(&s);

    s = s_compile("{\"type\": \"integer\"}");
    assert_true(s_valid(s, "1.0"));
    assert_true(s_valid(s, "1e20"));
    assert_false(s_valid(s, "1.5"));
    jsonschema_destroy(&s);

    s = s_compile("{\"uniqueItems\": true}");
    assert_false(s_valid(s, "[1, {\"a\": [1.0]}, {\"a\": [1]}]"));
    assert_true(s_valid(s, "[1, \"1\", [1], {\"1\": 1}, true, null]"));
    jsonschema_destroy(&s);
}

static void test_lengths_count_code_points(void **state) {
    jsonschema_t *s = s_compile("{\"minLength\": 2, \"maxLength\": 2}");
    assert_true(s_valid(s, "\"\\u00e9\\ud83d\\ude00\""));
    assert_false(s_valid(s, "\"\\ud83d\\ude00\""));
    assert_false(s_valid(s, "\"abc\""));
    jsonschema_destroy(&s);
}

static void test_patterns_follow_ecma262(void **state) {
    jsonschema_t *s = s_compile("{\"pattern\": \"^\\\\d+$\"}");
    assert_true(s_valid(s, "\"123\""));
    assert_false(s_valid(s, "\"\\u0967\"")); /* DEVANAGARI ONE is not \d in ECMA-262 */
    assert_false(s_valid(s, "\"12\\n\""));   /* $ does not match before a final newline */
    jsonschema_destroy(&s);
    s = s_compile("{\"pattern\": \"^[\\\\S]$\"}");
    assert_true(s_valid(s, "\"x\""));
    assert_false(s_valid(s, "\"\\u2003\"")); /* EM SPACE is \s in ECMA-262 */
    jsonschema_destroy(&s);
    s = s_compile("{\"pattern\": \"^.$\"}");
    assert_true(s_valid(s, "\"\\ud83d\\ude00\""));
    assert_false(s_valid(s, "\"\\u2028\""));
    jsonschema_destroy(&s);
    s = s_compile("{\"pattern\": \"^[[:alpha:]]$\"}"); /* no POSIX classes in ECMA-262 */
    assert_true(s_valid(s, "\"a]\""));
    assert_false(s_valid(s, "\"a\""));
    jsonschema_destroy(&s);
    s = s_compile("{\"pattern\": \"a\"}"); /* unanchored: matches anywhere */
    assert_true(s_valid(s, "\"xxax\""));
    jsonschema_destroy(&s);
    s_reject("{\"pattern\": \"(*LIMIT_MATCH=99999999)a\"}");
    s_reject("{\"pattern\": \"a++\"}");
    s_reject("{\"pattern\": \"(?i)a\"}");
    s_reject("{\"pattern\": \"\\\\Qa\\\\E\"}");
    jsonschema_error_t err = s_reject("{\"patternProperties\": {\"(\": {}}}");
    assert_string_equal(err.schema_path, "/patternProperties/(");
}

static void test_pattern_over_its_limit_is_invalid_not_valid(void **state) {
    jsonschema_t *s = s_compile("{\"pattern\": \"^(a+)+$\"}");
    char buf[128];
    memset(buf, 'a', sizeof buf);
    buf[0] = '"';
    buf[sizeof buf - 3] = 'b';
    buf[sizeof buf - 2] = '"';
    buf[sizeof buf - 1] = '\0';
    json_t *v = s_json(buf);
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, 1);
    assert_non_null(strstr(r.items[0].message, "limit"));
    json_decref(v);
    /* The limit result also counts inside not: it must not turn into a pass. */
    jsonschema_destroy(&s);
    s = s_compile("{\"not\": {\"pattern\": \"^(a+)+$\"}}");
    v = s_json(buf);
    assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_FAIL_FAST, NULL), JSONSCHEMA_INVALID);
    json_decref(v);
    jsonschema_destroy(&s);
}

typedef struct {
    const jsonschema_t *schema;
    int valid;
} s_thread_arg_t;

static void *s_thread(void *p) {
    s_thread_arg_t *arg = p;
    json_t *good = json_pack("{s:s, s:i}", "name", "abc-12", "n", 3);
    json_t *bad = json_pack("{s:s, s:i}", "name", "ABC", "n", 3);
    for (int i = 0; i < 2000; i++) {
        arg->valid +=
            jsonschema_validate(arg->schema, good, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
        arg->valid -=
            jsonschema_validate(arg->schema, bad, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
    }
    json_decref(good);
    json_decref(bad);
    return NULL;
}

static void test_compiled_schema_is_shared_between_threads(void **state) {
    jsonschema_t *s = s_compile("{\"properties\": {\"name\": {\"pattern\": \"^[a-z]+-\\\\d+$\"},"
                                " \"n\": {\"multipleOf\": 3}}, \"required\": [\"name\"]}");
    pthread_t t[4];
    s_thread_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (s_thread_arg_t){.schema = s};
        assert_int_equal(pthread_create(&t[i], NULL, s_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].valid, 2000);
    }
    jsonschema_destroy(&s);
}

/* A schema's numbers are compared as written, however long (ARCHITECTURE.md §8): the
 * compiled schema keeps every literal, and the decimal comparisons see it. */
static void test_schema_numbers_are_compared_as_written(void **u) {
    (void)u;
    jsonschema_t *s = s_compile("{\"const\": 0.10000000000000000001}");
    assert_true(s_valid(s, "0.10000000000000000001"));
    assert_true(s_valid(s, "1.0000000000000000001e-1"));
    assert_false(s_valid(s, "0.1"));
    jsonschema_destroy(&s);
    s = s_compile("{\"maximum\": 18446744073709551615}");
    assert_true(s_valid(s, "18446744073709551615"));
    assert_false(s_valid(s, "18446744073709551616"));
    jsonschema_destroy(&s);
    s = s_compile("{\"enum\": [12345678901234567890123, 1.50]}");
    assert_true(s_valid(s, "12345678901234567890123"));
    assert_true(s_valid(s, "1.5"));
    assert_false(s_valid(s, "12345678901234567890124"));
    jsonschema_destroy(&s);
    /* 10^30 is a multiple of 5^27, written as a double's text or as an integer's. */
    s = s_compile("{\"multipleOf\": 7450580596923828125}");
    assert_true(s_valid(s, "1e+30"));
    assert_true(s_valid(s, "1e30"));
    assert_false(s_valid(s, "1e+26")); /* 5^26 only */
    jsonschema_destroy(&s);
    jsonschema_error_t err = s_reject("{\"multipleOf\": 1.00000000000000000000000000000000000001}");
    assert_non_null(strstr(err.message, "at most 36 significant digits"));
}

/* Names, string consts and string enums are compared by their first 8 bytes in one load and
 * the rest by words: a difference at any position, at every length either side of 8, 16 and
 * 24, is seen, and strings that only share a prefix are told apart. */
static void test_strings_compare_exactly_at_every_length(void **state) {
    (void)state;
    for (size_t n = 0; n <= 25; n++) {
        char name[32] = {0};
        memset(name, 'a', n);
        char text[512];
        snprintf(text, sizeof text,
                 "{\"properties\": {\"%s\": {\"type\": \"integer\"}, \"k\": {\"const\": \"%s\"},"
                 " \"e\": {\"enum\": [\"%s\", 1, \"%sa\"]}}}",
                 name, name, name, name);
        jsonschema_t *s = s_compile(text);
        char inst[256];
        snprintf(inst, sizeof inst, "{\"%s\": \"x\"}", name);
        assert_false(s_valid(s, inst));
        snprintf(inst, sizeof inst, "{\"k\": \"%s\", \"e\": \"%s\"}", name, name);
        assert_true(s_valid(s, inst));
        assert_true(s_valid(s, "{\"e\": 1.0}"));
        for (size_t at = 0; at < n; at++) {
            char other[32];
            memcpy(other, name, n + 1);
            other[at] = 'b';
            snprintf(inst, sizeof inst, "{\"%s\": \"x\"}", other);
            assert_true(s_valid(s, inst)); /* not the property: no type applies */
            snprintf(inst, sizeof inst, "{\"k\": \"%s\"}", other);
            assert_false(s_valid(s, inst));
            snprintf(inst, sizeof inst, "{\"e\": \"%s\"}", other);
            assert_false(s_valid(s, inst));
        }
        snprintf(inst, sizeof inst, "{\"k\": \"%sa\"}", name); /* one byte longer */
        assert_false(s_valid(s, inst));
        if (n > 0) {
            snprintf(inst, sizeof inst, "{\"k\": \"%.*s\"}", (int)n - 1, name); /* shorter */
            assert_false(s_valid(s, inst));
        }
        jsonschema_destroy(&s);
    }
}

/* A string const under a type that no string has matches nothing, as a property, a root and
 * an anyOf branch. */
static void test_string_const_keeps_its_type(void **state) {
    (void)state;
    jsonschema_t *s =
        s_compile("{\"properties\": {\"x\": {\"type\": \"integer\", \"const\": \"a\"},"
                  " \"y\": {\"type\": [\"string\", \"null\"], \"const\": \"a\"}}}");
    assert_false(s_valid(s, "{\"x\": \"a\"}"));
    assert_false(s_valid(s, "{\"x\": 1}"));
    assert_true(s_valid(s, "{\"y\": \"a\"}"));
    assert_false(s_valid(s, "{\"y\": null}"));
    jsonschema_destroy(&s);
    s = s_compile("{\"type\": \"integer\", \"const\": \"a\"}");
    assert_false(s_valid(s, "\"a\""));
    jsonschema_destroy(&s);
    s = s_compile("{\"anyOf\": [{\"type\": \"object\", \"required\": [\"k\"], \"properties\":"
                  " {\"k\": {\"type\": \"number\", \"const\": \"p\"}}}, {\"type\": \"object\","
                  " \"required\": [\"k\"], \"properties\": {\"k\": {\"const\": \"q\"}}}]}");
    assert_false(s_valid(s, "{\"k\": \"p\"}"));
    assert_true(s_valid(s, "{\"k\": \"q\"}"));
    jsonschema_destroy(&s);
}

/* Numeric bounds keep their node's type, and a bound with multipleOf is checked by both, as a
 * property (the quick test) and as a root (the visit). */
static void test_numeric_bounds_keep_their_type(void **state) {
    (void)state;
    jsonschema_t *s = s_compile("{\"properties\": {\"s\": {\"type\": \"string\", \"minimum\": 0},"
                                " \"i\": {\"type\": \"integer\", \"maximum\": 10},"
                                " \"m\": {\"type\": \"number\", \"exclusiveMinimum\": 0,"
                                " \"multipleOf\": 0.01}}}");
    assert_false(s_valid(s, "{\"s\": 5}"));
    assert_true(s_valid(s, "{\"s\": \"5\"}"));
    assert_false(s_valid(s, "{\"i\": 5.5}"));
    assert_true(s_valid(s, "{\"i\": 5.0}"));
    assert_false(s_valid(s, "{\"i\": 11}"));
    assert_true(s_valid(s, "{\"m\": 19.99}"));
    assert_false(s_valid(s, "{\"m\": 19.995}"));
    assert_false(s_valid(s, "{\"m\": 0}"));
    assert_false(s_valid(s, "{\"m\": -0.01}"));
    assert_true(s_valid(s, "{\"m\": 12345678901234567890.01}")); /* a text real: exact */
    assert_false(s_valid(s, "{\"m\": 12345678901234567890.001}"));
    jsonschema_destroy(&s);
    s = s_compile("{\"type\": \"string\", \"minimum\": 0}");
    assert_false(s_valid(s, "5"));
    jsonschema_destroy(&s);
    /* Numbers the bounds cannot take as doubles (a text real, an integer past 2^53) are
     * compared exactly, and a failure is reported once, fail-fast. */
    s = s_compile("{\"items\": {\"type\": \"integer\", \"minimum\": 1}}");
    const char *bad[] = {"[-0]", "[0.0e5]", "[-9007199254740993]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *v = s_json(bad[i]);
        jsonschema_report_t report;
        assert_int_equal(jsonschema_validate(s, v, JSONSCHEMA_FAIL_FAST, &report),
                         JSONSCHEMA_INVALID);
        assert_int_equal(report.count, 1);
        assert_string_equal(report.items[0].schema_path, "/items/minimum");
        json_decref(v);
    }
    jsonschema_destroy(&s);
}

/* An enum beside other keywords keeps them, beside a type keeps it, and compares strings,
 * numbers and structures by JSON equality. */
static void test_enum_keeps_the_keywords_beside_it(void **state) {
    (void)state;
    jsonschema_t *s =
        s_compile("{\"properties\": {\"a\": {\"enum\": [[1, 2], [1]], \"items\":"
                  " {\"maximum\": 1}}, \"t\": {\"type\": \"string\", \"enum\": [\"x\", 1]},"
                  " \"n\": {\"enum\": [\"x\", 1.5, {\"k\": [true]}]}}}");
    assert_true(s_valid(s, "{\"a\": [1]}"));
    assert_false(s_valid(s, "{\"a\": [1, 2]}")); /* in the enum, but an item is over 1 */
    assert_false(s_valid(s, "{\"a\": [2]}"));
    assert_true(s_valid(s, "{\"t\": \"x\"}"));
    assert_false(s_valid(s, "{\"t\": 1}")); /* in the enum, not a string */
    assert_false(s_valid(s, "{\"t\": \"y\"}"));
    assert_true(s_valid(s, "{\"n\": 1.50}"));
    assert_true(s_valid(s, "{\"n\": 15e-1}"));
    assert_true(s_valid(s, "{\"n\": {\"k\": [true]}}"));
    assert_false(s_valid(s, "{\"n\": {\"k\": [false]}}"));
    assert_false(s_valid(s, "{\"n\": \"X\"}"));
    jsonschema_destroy(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_numbers_are_compared_as_written),
        cmocka_unit_test(test_references_rejected_at_schema_positions_with_path),
        cmocka_unit_test(test_reference_names_are_fine_as_data_and_property_names),
        cmocka_unit_test(test_dialect_unknown_keywords_and_formats_rejected),
        cmocka_unit_test(test_annotations_are_never_applied),
        cmocka_unit_test(test_report_lists_instance_and_schema_paths),
        cmocka_unit_test(test_instance_paths_at_every_depth),
        cmocka_unit_test(test_validate_tape_at_an_index),
        cmocka_unit_test(test_discriminated_branches_keep_their_meaning),
        cmocka_unit_test(test_number_bounds_exact_on_every_path),
        cmocka_unit_test(test_report_is_bounded_and_marked_truncated),
        cmocka_unit_test(test_numbers_equal_exact_and_decimal_multiples),
        cmocka_unit_test(test_lengths_count_code_points),
        cmocka_unit_test(test_patterns_follow_ecma262),
        cmocka_unit_test(test_pattern_over_its_limit_is_invalid_not_valid),
        cmocka_unit_test(test_compiled_schema_is_shared_between_threads),
        cmocka_unit_test(test_strings_compare_exactly_at_every_length),
        cmocka_unit_test(test_string_const_keeps_its_type),
        cmocka_unit_test(test_numeric_bounds_keep_their_type),
        cmocka_unit_test(test_enum_keeps_the_keywords_beside_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
