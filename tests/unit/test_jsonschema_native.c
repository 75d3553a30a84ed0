/* Tests for jsonschema_native: the schema's checks compiled to native code give the
 * interpreter's verdict on every instance (names of every length, exact numbers, the shapes
 * it writes out and those it calls back for), and a missing or failing compiler is an error
 * that leaves the schema working. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonschema.h"
#include "jsonstrict.h"

static json_t *s_json(const char *text) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.numbers = JSONSTRICT_NUMBERS_STORABLE;
    if (jsonstrict_parse(text, strlen(text), &lim, &v, &err)) {
        print_error("bad test JSON %s: %s\n", text, err.message);
    }
    assert_non_null(v);
    return v;
}

/* A schema twice: interpreted, and compiled to native code. */
typedef struct {
    jsonschema_t *interp;
    jsonschema_t *native;
} s_pair_t;

static s_pair_t s_pair_of(const json_t *schema) {
    s_pair_t p = {0};
    jsonschema_error_t err;
    assert_int_equal(jsonschema_compile(schema, &p.interp, &err), 0);
    assert_int_equal(jsonschema_compile(schema, &p.native, &err), 0);
    char why[256] = "";
    if (jsonschema_native(p.native, why, sizeof why) != 0) {
        print_error("no native code: %s\n", why);
        fail();
    }
    return p;
}

static s_pair_t s_pair(const char *schema_text) {
    json_t *schema = s_json(schema_text);
    s_pair_t p = s_pair_of(schema);
    json_decref(schema);
    return p;
}

static void s_pair_free(s_pair_t *p) {
    jsonschema_destroy(&p->interp);
    jsonschema_destroy(&p->native);
}

/* The verdict on v, which both forms must give. */
static bool s_verdict_of(const s_pair_t *p, const json_t *v) {
    bool interp = jsonschema_validate(p->interp, v, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
    bool native = jsonschema_validate(p->native, v, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
    if (interp != native) {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        print_error("interpreter says %d, native code %d on %s\n", interp, native, text);
        free(text);
    }
    assert_int_equal(interp, native);
    return native;
}

static bool s_verdict(const s_pair_t *p, const char *instance) {
    json_t *v = s_json(instance);
    bool ok = s_verdict_of(p, v);
    json_decref(v);
    return ok;
}

/* Asserts the verdict on each instance of a NULL-terminated list. */
static void s_expect(const s_pair_t *p, bool want, const char *const *instances) {
    for (size_t i = 0; instances[i]; i++) {
        if (s_verdict(p, instances[i]) != want) {
            print_error("%s: expected %s\n", instances[i], want ? "valid" : "invalid");
            fail();
        }
    }
}

static const char s_letters[] = "abcdefghijklmnopqrstuvwxyz";

/* Every name of length 0..25 is found, and a name differing from it at any one position is
 * not, whichever word of the comparison the difference falls in. */
static void test_names_of_every_length_differ_at_every_position(void **state) {
    (void)state;
    for (int closed = 0; closed <= 1; closed++) {
        json_t *schema = json_object();
        json_t *props = json_object();
        json_t *required = json_array();
        json_t *valid = json_object();
        char name[32];
        for (size_t len = 0; len <= 25; len++) {
            snprintf(name, sizeof name, "%.*s", (int)len, s_letters);
            json_object_set_new(props, name, json_pack("{s:s}", "type", "integer"));
            json_array_append_new(required, json_string(name));
            json_object_set_new(valid, name, json_integer((json_int_t)len));
        }
        json_object_set_new(schema, "properties", props);
        json_object_set_new(schema, "required", required);
        if (closed) {
            json_object_set_new(schema, "additionalProperties", json_false());
        }
        s_pair_t p = s_pair_of(schema);
        assert_true(s_verdict_of(&p, valid));
        for (size_t len = 0; len <= 25; len++) {
            snprintf(name, sizeof name, "%.*s", (int)len, s_letters);
            json_t *wrong_type = json_deep_copy(valid);
            json_object_set_new(wrong_type, name, json_string("x"));
            assert_false(s_verdict_of(&p, wrong_type));
            json_decref(wrong_type);
            for (size_t at = 0; at < len; at++) {
                json_t *renamed = json_deep_copy(valid);
                json_object_del(renamed, name);
                char other[32];
                memcpy(other, name, len + 1);
                other[at] = 'A';
                json_object_set_new(renamed, other, json_integer(0));
                assert_false(s_verdict_of(&p, renamed)); /* required, or closed, fails */
                json_object_set_new(renamed, name, json_integer(1));
                assert_int_equal(s_verdict_of(&p, renamed), !closed);
                json_decref(renamed);
            }
        }
        json_decref(valid);
        json_decref(schema);
        s_pair_free(&p);
    }
}

/* Bounds compare exactly: the native double test hands text reals and integers beyond 2^53
 * back to the interpreter's decimal comparison. */
static void test_numbers_compare_exactly(void **state) {
    (void)state;
    s_pair_t p = s_pair("{\"properties\": {"
                        "\"a\": {\"type\": \"integer\", \"minimum\": -5, \"exclusiveMaximum\": 10},"
                        "\"b\": {\"type\": \"number\", \"maximum\": 1e300},"
                        "\"c\": {\"exclusiveMinimum\": 9007199254740992}}}");
    static const char *const valid[] = {
        "{\"a\": 9}",
        "{\"a\": 9.0}",
        "{\"a\": -5}",
        "{\"a\": -5.0e0}",
        "{\"b\": 1e300}",
        "{\"b\": 0.99999999999999999999e300}",
        "{\"c\": 9007199254740993}",
        "{\"c\": 9007199254740992.5}",
        "{\"c\": \"not a number\"}",
        NULL,
    };
    static const char *const invalid[] = {
        "{\"a\": 10}",
        "{\"a\": 1e1}",
        "{\"a\": 9.5}",
        "{\"a\": -6}",
        "{\"a\": \"9\"}",
        "{\"a\": 9007199254740993}",
        "{\"a\": 9.99999999999999999999e0}",
        "{\"b\": 1.0000000000000001e300}",
        "{\"b\": 2e300}",
        "{\"c\": 9007199254740992}",
        "{\"c\": 9007199254740992.0}",
        NULL,
    };
    s_expect(&p, true, valid);
    s_expect(&p, false, invalid);
    s_pair_free(&p);
}

/* Discriminated anyOf and oneOf, with distinct and with repeated consts. */
static void test_discriminated_branches(void **state) {
    (void)state;
    s_pair_t distinct = s_pair(
        "{\"oneOf\": ["
        "{\"type\": \"object\", \"required\": [\"kind\", \"r\"],"
        " \"properties\": {\"kind\": {\"const\": \"circle\"}, \"r\": {\"type\": \"number\"}}},"
        "{\"type\": \"object\", \"required\": [\"kind\", \"w\"],"
        " \"properties\": {\"kind\": {\"const\": \"a-much-longer-kind-name\"}, \"w\": {}}}]}");
    static const char *const dv[] = {
        "{\"kind\": \"circle\", \"r\": 1}",
        "{\"r\": 1, \"kind\": \"circle\"}",
        "{\"kind\": \"a-much-longer-kind-name\", \"w\": null}",
        NULL,
    };
    static const char *const di[] = {
        "{\"kind\": \"circle\", \"r\": \"1\"}",
        "{\"kind\": \"circlf\", \"r\": 1}",
        "{\"kind\": \"a-much-longer-kind-namf\", \"w\": null}",
        "{\"kind\": 1, \"r\": 1}",
        "{\"r\": 1}",
        "[]",
        NULL,
    };
    s_expect(&distinct, true, dv);
    s_expect(&distinct, false, di);
    s_pair_free(&distinct);
    for (int one = 0; one <= 1; one++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"%s\": ["
                 "{\"type\": \"object\", \"required\": [\"k\"], \"properties\": {\"k\": "
                 "{\"const\": \"x\"}, \"n\": {\"type\": \"integer\"}}},"
                 "{\"type\": \"object\", \"required\": [\"k\"], \"properties\": {\"k\": "
                 "{\"const\": \"x\"}, \"n\": {\"minimum\": 0}}}]}",
                 one ? "oneOf" : "anyOf");
        s_pair_t repeated = s_pair(text);
        assert_int_equal(s_verdict(&repeated, "{\"k\": \"x\", \"n\": 1}"), !one);
        assert_true(s_verdict(&repeated, "{\"k\": \"x\", \"n\": -1}"));
        assert_true(s_verdict(&repeated, "{\"k\": \"x\", \"n\": 0.5}"));
        assert_false(s_verdict(&repeated, "{\"k\": \"x\", \"n\": -0.5}"));
        assert_false(s_verdict(&repeated, "{\"k\": \"y\", \"n\": 1}"));
        s_pair_free(&repeated);
    }
}

/* Arrays: items as one schema and as a list, additionalItems, counts, and the schemas true
 * and false. */
static void test_items_tuples_and_boolean_schemas(void **state) {
    (void)state;
    s_pair_t p = s_pair("{\"properties\": {"
                        "\"t\": {\"items\": [{\"type\": \"string\"}, true, false]},"
                        "\"u\": {\"type\": \"array\", \"items\": [{\"type\": \"integer\"}],"
                        " \"additionalItems\": {\"type\": \"string\"}, \"minItems\": 2},"
                        "\"i\": {\"items\": {\"maxLength\": 2}, \"maxItems\": 3},"
                        "\"f\": false, \"any\": true}}");
    static const char *const valid[] = {
        "{\"t\": []}",
        "{\"t\": [\"a\", {}]}",
        "{\"u\": [1, \"a\", \"b\"]}",
        "{\"i\": [\"ab\", 1, null]}",
        "{\"any\": [1]}",
        "{\"t\": 5, \"i\": {}}",
        NULL,
    };
    static const char *const invalid[] = {
        "{\"t\": [1]}",
        "{\"t\": [\"a\", 1, 2]}",
        "{\"u\": [1]}",
        "{\"u\": [1, 2]}",
        "{\"u\": [\"1\", \"a\"]}",
        "{\"u\": \"x\"}",
        "{\"i\": [\"abc\"]}",
        "{\"i\": [1, 2, 3, 4]}",
        "{\"f\": null}",
        NULL,
    };
    s_expect(&p, true, valid);
    s_expect(&p, false, invalid);
    s_pair_free(&p);
}

/* enum (strings compared in place, other values through the interpreter), allOf, anyOf,
 * oneOf, not and if/then/else, with a type beside them. */
static void test_enums_and_applicators(void **state) {
    (void)state;
    s_pair_t p =
        s_pair("{\"properties\": {"
               "\"e\": {\"enum\": [\"ab\", \"abcdefghij\", 1, [1, {\"x\": null}], {\"y\": 2}]},"
               "\"s\": {\"type\": \"string\", \"enum\": [\"p\", \"q\"]},"
               "\"all\": {\"allOf\": [{\"minimum\": 1}, {\"maximum\": 3}]},"
               "\"any\": {\"type\": \"number\", \"anyOf\": [{\"maximum\": 1}, {\"minimum\": 9}]},"
               "\"one\": {\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]},"
               "\"not\": {\"not\": {\"type\": \"string\"}},"
               "\"if\": {\"if\": {\"minimum\": 10}, \"then\": {\"multipleOf\": 5},"
               " \"else\": {\"type\": \"integer\"}}}}");
    static const char *const valid[] = {
        "{\"e\": \"ab\"}",     "{\"e\": \"abcdefghij\"}",
        "{\"e\": 1.0}",        "{\"e\": [1, {\"x\": null}]}",
        "{\"e\": {\"y\": 2}}", "{\"s\": \"q\"}",
        "{\"all\": 2}",        "{\"all\": \"x\"}",
        "{\"any\": 0}",        "{\"any\": 10}",
        "{\"one\": 1}",        "{\"one\": 2.5}",
        "{\"not\": 1}",        "{\"if\": 15}",
        "{\"if\": 3}",         NULL,
    };
    static const char *const invalid[] = {
        "{\"e\": \"abc\"}",
        "{\"e\": \"abcdefghik\"}",
        "{\"e\": 2}",
        "{\"e\": [1, {\"x\": 0}]}",
        "{\"e\": {\"y\": 3}}",
        "{\"s\": \"r\"}",
        "{\"all\": 4}",
        "{\"any\": 5}",
        "{\"any\": \"x\"}",
        "{\"one\": 3}",
        "{\"one\": 1.5}",
        "{\"not\": \"x\"}",
        "{\"if\": 12}",
        "{\"if\": 3.5}",
        NULL,
    };
    s_expect(&p, true, valid);
    s_expect(&p, false, invalid);
    s_pair_free(&p);
}

/* propertyNames and additionalProperties together, with counts of members; and a name
 * only required mentions, which additionalProperties still checks. */
static void test_property_names_and_others(void **state) {
    (void)state;
    s_pair_t p = s_pair("{\"properties\": {\"m\": {\"type\": \"object\","
                        " \"propertyNames\": {\"maxLength\": 3}, \"minProperties\": 1,"
                        " \"maxProperties\": 2, \"additionalProperties\": {\"type\": \"string\"}},"
                        " \"r\": {\"required\": [\"id\"], \"properties\": {\"x\": {}},"
                        " \"additionalProperties\": {\"type\": \"integer\"}}}}");
    static const char *const valid[] = {
        "{\"m\": {\"abc\": \"1\"}}",
        "{\"m\": {\"a\": \"1\", \"b\": \"2\"}}",
        "{\"r\": {\"id\": 1, \"x\": \"any\"}}",
        NULL,
    };
    static const char *const invalid[] = {
        "{\"m\": {}}",
        "{\"m\": {\"abcd\": \"1\"}}",
        "{\"m\": {\"a\": 1}}",
        "{\"m\": {\"a\": \"1\", \"b\": \"2\", \"c\": \"3\"}}",
        "{\"r\": {\"x\": 1}}",
        "{\"r\": {\"id\": \"1\"}}",
        "{\"r\": {\"id\": 1, \"z\": 1.5}}",
        NULL,
    };
    s_expect(&p, true, valid);
    s_expect(&p, false, invalid);
    s_pair_free(&p);
}

/* The code carries no text of the schema: a name that would break out of a C string or
 * comment compiles, and is matched as bytes. */
static void test_schema_text_never_reaches_the_code(void **state) {
    (void)state;
    const char *schema = "{\"properties\": {\"x\\\"); system(\\\"id\\\"); /*\\n\": "
                         "{\"const\": \"*/ #include <stdio.h>\"}},"
                         " \"required\": [\"x\\\"); system(\\\"id\\\"); /*\\n\"]}";
    s_pair_t p = s_pair(schema);
    char *src = jsonschema_native_source(p.native);
    assert_non_null(src);
    assert_null(strstr(src, "system"));
    assert_null(strstr(src, "<stdio.h>"));
    free(src);
    assert_true(
        s_verdict(&p, "{\"x\\\"); system(\\\"id\\\"); /*\\n\": \"*/ #include <stdio.h>\"}"));
    assert_false(s_verdict(&p, "{\"x\\\"); system(\\\"id\\\"); /*\\n\": \"*/ #include <stdio.\"}"));
    assert_false(s_verdict(&p, "{\"x\": \"*/ #include <stdio.h>\"}"));
    s_pair_free(&p);
}

/* Without a compiler, or with one that fails, jsonschema_native says why and the schema keeps
 * validating with the interpreter. */
static void test_missing_or_failing_compiler_is_an_error(void **state) {
    (void)state;
    json_t *schema = s_json("{\"type\": \"integer\"}");
    jsonschema_t *s = NULL;
    jsonschema_error_t err;
    assert_int_equal(jsonschema_compile(schema, &s, &err), 0);
    char why[256];
    setenv("CHATFLEET_CC", "/nonexistent/cc", 1);
    assert_int_equal(jsonschema_native(s, why, sizeof why), -1);
    assert_non_null(strstr(why, "cannot run the C compiler /nonexistent/cc"));
    setenv("CHATFLEET_CC", "false", 1);
    assert_int_equal(jsonschema_native(s, why, sizeof why), -1);
    assert_non_null(strstr(why, "the C compiler false failed"));
    unsetenv("CHATFLEET_CC");
    json_t *one = json_integer(1);
    json_t *text = json_string("1");
    assert_int_equal(jsonschema_validate(s, one, JSONSCHEMA_FAIL_FAST, NULL), JSONSCHEMA_VALID);
    assert_int_equal(jsonschema_validate(s, text, JSONSCHEMA_FAIL_FAST, NULL), JSONSCHEMA_INVALID);
    json_decref(one);
    json_decref(text);
    json_decref(schema);
    jsonschema_destroy(&s);
}

/* --- the corpus, mutated --- */

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;

static uint32_t s_rand(uint32_t n) {
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (uint32_t)(s_rng % n);
}

/* A value that tends to sit near a schema's edges. */
static json_t *s_random_value(void) {
    static const char *const texts[] = {
        "null",
        "true",
        "0",
        "-1",
        "1.5",
        "180",
        "180.0000000000001",
        "-90",
        "600000",
        "1e300",
        "12345678901234567890",
        "\"\"",
        "\"a\"",
        "\"Point\"",
        "\"LineString\"",
        "\"git\"",
        "\"admin\"",
        "\"x@y.io\"",
        "[]",
        "[1, 2]",
        "[[1, 2], [3, 4]]",
        "{}",
        "{\"type\": \"Point\", \"coordinates\": [1, 2]}",
    };
    return s_json(texts[s_rand(sizeof texts / sizeof texts[0])]);
}

/* Changes one spot of v in place: a member's value replaced, removed or renamed, or an item
 * replaced or added. */
static void s_mutate(json_t *v) {
    for (int depth = 0; depth < 8; depth++) {
        size_t n = json_is_object(v)  ? json_object_size(v)
                   : json_is_array(v) ? json_array_size(v)
                                      : 0;
        if (n == 0) {
            return;
        }
        size_t at = s_rand((uint32_t)n);
        json_t *child = NULL;
        const char *key = NULL;
        if (json_is_object(v)) {
            void *it = json_object_iter(v);
            for (size_t i = 0; i < at; i++) {
                it = json_object_iter_next(v, it);
            }
            key = json_object_iter_key(it);
            child = json_object_iter_value(it);
        } else {
            child = json_array_get(v, at);
        }
        uint32_t what = s_rand(8);
        if (what < 5 && (json_is_object(child) || json_is_array(child))) {
            v = child; /* go deeper */
            continue;
        }
        if (what == 5 && key) {
            json_object_del(v, key);
        } else if (what == 6 && key) {
            json_t *keep = json_incref(child);
            char renamed[64];
            snprintf(renamed, sizeof renamed, "%.*s%c", (int)strlen(key) - 1, key, 'A' + s_rand(3));
            json_object_del(v, key);
            json_object_set_new(v, renamed, keep);
        } else if (what == 6) {
            json_array_append_new(v, s_random_value());
        } else if (key) {
            json_object_set_new(v, key, s_random_value());
        } else {
            json_array_set_new(v, at, s_random_value());
        }
        return;
    }
}

/* Every corpus schema (tests/bench/jsonschema_corpus) agrees with the interpreter on its
 * instances and on thousands of mutations of them. */
static void test_corpus_mutations_agree(void **state) {
    (void)state;
    static const char *const cases[] = {"command", "config", "geo", "order", "user_profile"};
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    assert_non_null(src);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[1024];
        json_error_t jerr;
        snprintf(path, sizeof path, "%s/tests/bench/jsonschema_corpus/%s.schema.json", src,
                 cases[c]);
        json_t *schema = json_load_file(path, 0, &jerr);
        assert_non_null(schema);
        snprintf(path, sizeof path, "%s/tests/bench/jsonschema_corpus/%s.instances.json", src,
                 cases[c]);
        json_t *instances = json_load_file(path, 0, &jerr);
        assert_non_null(instances);
        s_pair_t p = s_pair_of(schema);
        size_t valid = 0;
        size_t total = 0;
        for (int round = 0; round < 300; round++) {
            for (size_t i = 0; i < json_array_size(instances); i++) {
                json_t *v = json_deep_copy(json_array_get(instances, i));
                for (int m = 0; m < round % 4; m++) {
                    s_mutate(v);
                }
                valid += s_verdict_of(&p, v);
                total++;
                json_decref(v);
            }
        }
        /* Both verdicts occur, so the agreement says something. */
        assert_true(valid > 0 && valid < total);
        s_pair_free(&p);
        json_decref(schema);
        json_decref(instances);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_of_every_length_differ_at_every_position),
        cmocka_unit_test(test_numbers_compare_exactly),
        cmocka_unit_test(test_discriminated_branches),
        cmocka_unit_test(test_items_tuples_and_boolean_schemas),
        cmocka_unit_test(test_enums_and_applicators),
        cmocka_unit_test(test_property_names_and_others),
        cmocka_unit_test(test_schema_text_never_reaches_the_code),
        cmocka_unit_test(test_missing_or_failing_compiler_is_an_error),
        cmocka_unit_test(test_corpus_mutations_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
