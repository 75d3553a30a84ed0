/* jsonout writes reals in their shortest round-trip form, keeps reals reals, prints a text
 * real's literal byte for byte, and produces text the strict boundary accepts back unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"

/* The jansson value the boundary makes of one number literal (jsonnumber.h). */
static json_t *s_number(const char *lit, size_t len) {
    json_t *v = jsonstrict_load_stored(lit, len);
    assert_non_null(v);
    return v;
}

static void s_expect(json_t *v, const char *want) {
    char *got = jsonout_dumps(v);
    assert_string_equal(got, want);
    json_t *back = NULL;
    jsonstrict_error_t err;
    /* Read back at the boundary (the default caps), the text is the same value and prints the
     * same. */
    assert_int_equal(jsonstrict_parse(got, strlen(got), NULL, &back, &err), 0);
    assert_true(json_equal(back, v));
    char *again = jsonout_dumps(back);
    assert_string_equal(again, want);
    free(again);
    json_decref(back);
    free(got);
    json_decref(v);
}

static void test_reals_are_shortest_and_stay_reals(void **u) {
    (void)u;
    s_expect(json_real(0.1), "0.1");
    s_expect(json_real(1.0), "1.0");
    s_expect(json_real(-2.5e-8), "-2.5e-08");
    s_expect(json_real(1e300), "1e+300");
    s_expect(json_real(0.30000000000000004), "0.30000000000000004");
    s_expect(json_real(5e-324), "5e-324");
}

/* A text real (jsonnumber.h) prints as its literal, byte for byte, wherever it is; a copy by
 * jsonnumber_deep_copy keeps it, and json_deep_copy makes it the plain real of its double. */
static void test_text_reals_print_their_literal(void **u) {
    (void)u;
    static const char *const lits[] = {
        "1e300",
        "1.50",
        "-0",
        "1E2",
        "0.00001",
        "12345678910111213141516171819202122232425262728293031",
        "0.10000000000000000001",
        "9223372036854775808",
        "1e400",
        "-1e-400",
    };
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        json_t *v = s_number(lits[i], strlen(lits[i]));
        assert_non_null(jsonnumber_text(v, NULL));
        json_t *copy = jsonnumber_deep_copy(v);
        s_expect(v, lits[i]);
        s_expect(copy, lits[i]);
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "a", s_number("1.50", 4));
    json_object_set_new(doc, "b", json_pack("[O]", json_object_get(doc, "a")));
    json_t *plain = json_deep_copy(doc);
    s_expect(doc, "{\"a\":1.50,\"b\":[1.50]}");
    s_expect(plain, "{\"a\":1.5,\"b\":[1.5]}");
    /* Plain numbers stay as they were. */
    s_expect(s_number("0.5", 3), "0.5");
    s_expect(s_number("-7", 2), "-7");
}

static void test_other_values_are_exact(void **u) {
    (void)u;
    s_expect(json_integer(9007199254740993LL), "9007199254740993");
    s_expect(json_pack("{s:s,s:[b,n,i]}", "k\"\n", "v\\\xc3\xa9", "a", 1, 7),
             "{\"k\\\"\\n\":\"v\\\\\xc3\xa9\",\"a\":[true,null,7]}");
    s_expect(json_pack("{s:{s:f}}", "outer", "inner", 0.1), "{\"outer\":{\"inner\":0.1}}");
}

/* Strings and keys are escaped byte for byte as jansson's json_dumps escapes them (jsonout
 * writes them itself): every control character, quote, backslash, a NUL inside a value, and
 * UTF-8 of every length; as a value and as a key. */
static void test_strings_are_escaped_as_jansson_escapes_them(void **u) {
    (void)u;
    char all[160];
    size_t n = 0;
    for (int c = 1; c < 0x80; c++) {
        all[n++] = (char)c;
    }
    const char *utf8 = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8/";
    memcpy(all + n, utf8, strlen(utf8));
    n += strlen(utf8);
    json_t *values[] = {json_stringn(all, n), json_stringn("a\0b", 3), json_string("")};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char *want = json_dumps(values[i], JSON_ENCODE_ANY | JSON_COMPACT);
        char *got = jsonout_dumps(values[i]);
        assert_string_equal(got, want);
        free(got);
        free(want);
        json_t *obj = json_object();
        json_object_set(obj, json_string_value(values[i]), values[i]);
        want = json_dumps(obj, JSON_COMPACT);
        got = jsonout_dumps(obj);
        assert_string_equal(got, want);
        free(got);
        free(want);
        json_decref(obj);
        json_decref(values[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reals_are_shortest_and_stay_reals),
        cmocka_unit_test(test_text_reals_print_their_literal),
        cmocka_unit_test(test_other_values_are_exact),
        cmocka_unit_test(test_strings_are_escaped_as_jansson_escapes_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
