/* Tests for the strict JSON boundary: each rejection rule with its code, offset and path, and
 * how numbers are carried (int64, plain real, or a text real that keeps its literal). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"

static json_t *s_ok(const char *text) {
    json_t *v = NULL;
    jsonstrict_error_t err;
    int rc = jsonstrict_parse(text, strlen(text), NULL, &v, &err);
    if (rc != 0) {
        print_error("unexpected rejection of %s: %s at %zu (%s)\n", text, err.message, err.offset,
                    err.path);
    }
    assert_int_equal(rc, 0);
    assert_non_null(v);
    return v;
}

static jsonstrict_error_t s_bad_n(const char *text, size_t len, const jsonstrict_limits_t *lim,
                                  jsonstrict_code_t code) {
    json_t *v = (json_t *)1;
    jsonstrict_error_t err;
    int rc = jsonstrict_parse(text, len, lim, &v, &err);
    assert_int_equal(rc, -1);
    assert_null(v);
    if (err.code != code) {
        print_error("%s: got %s (%s), want %s\n", text, jsonstrict_code_name(err.code), err.message,
                    jsonstrict_code_name(code));
    }
    assert_int_equal(err.code, code);
    assert_true(strlen(err.message) > 0);
    return err;
}

static jsonstrict_error_t s_bad(const char *text, jsonstrict_code_t code) {
    return s_bad_n(text, strlen(text), NULL, code);
}

static void test_accepts_plain_values_and_keeps_types(void **state) {
    json_t *v = s_ok(" {\"a\": [1, -2, 1.5, true, false, null, \"x\"], \"b\": {}} ");
    json_t *a = json_object_get(v, "a");
    assert_int_equal(json_array_size(a), 7);
    assert_true(json_is_integer(json_array_get(a, 0)));
    assert_int_equal(json_integer_value(json_array_get(a, 1)), -2);
    assert_true(json_is_real(json_array_get(a, 2)));
    assert_true(json_is_true(json_array_get(a, 3)));
    assert_true(json_is_null(json_array_get(a, 5)));
    assert_string_equal(json_string_value(json_array_get(a, 6)), "x");
    json_decref(v);
}

static void test_decodes_escapes_and_surrogate_pairs(void **state) {
    json_t *v = s_ok("\"a\\n\\u00e9\\ud83d\\ude00\\/\"");
    assert_int_equal(json_string_length(v), 1 + 1 + 2 + 4 + 1);
    assert_memory_equal(json_string_value(v), "a\n\xc3\xa9\xf0\x9f\x98\x80/", 9);
    json_decref(v);
}

static void test_rejects_duplicate_keys_with_path_and_offset(void **state) {
    const char *text = "{\"x\": {\"a\": 1, \"a\": 2}}";
    jsonstrict_error_t err = s_bad(text, JSONSTRICT_E_DUPLICATE_KEY);
    assert_int_equal(err.offset, strstr(text, "\"a\": 2") - text);
    assert_string_equal(err.path, "/x/a");
    /* Keys equal after decoding are duplicates too. */
    s_bad("{\"a\": 1, \"\\u0061\": 2}", JSONSTRICT_E_DUPLICATE_KEY);
}

static void test_rejects_nul_and_unpaired_surrogates(void **state) {
    jsonstrict_error_t err = s_bad("[1, \"a\\u0000\"]", JSONSTRICT_E_NUL);
    assert_string_equal(err.path, "/1");
    s_bad("{\"\\u0000\": 1}", JSONSTRICT_E_NUL);
    s_bad("\"\\ud800\"", JSONSTRICT_E_SURROGATE);
    s_bad("\"\\ud800\\u0041\"", JSONSTRICT_E_SURROGATE);
    s_bad("\"\\udc00\"", JSONSTRICT_E_SURROGATE);
    s_bad_n("\"a\0b\"", 5, NULL, JSONSTRICT_E_SYNTAX); /* a raw NUL is a control character */
}

static void test_rejects_invalid_utf8(void **state) {
    s_bad("\"\xc3\"", JSONSTRICT_E_UTF8);
    s_bad("\"\xc0\xaf\"", JSONSTRICT_E_UTF8);         /* overlong */
    s_bad("\"\xed\xa0\x80\"", JSONSTRICT_E_UTF8);     /* encoded surrogate */
    s_bad("\"\xf4\x90\x80\x80\"", JSONSTRICT_E_UTF8); /* above U+10FFFF */
    s_bad("\"\xff\"", JSONSTRICT_E_UTF8);
    json_decref(s_ok("\"\xf4\x8f\xbf\xbf\xe2\x82\xac\""));
}

static void test_rejects_syntax_errors_and_trailing_data(void **state) {
    s_bad("", JSONSTRICT_E_SYNTAX);
    s_bad("[1,]", JSONSTRICT_E_SYNTAX);
    s_bad("{\"a\" 1}", JSONSTRICT_E_SYNTAX);
    s_bad("01", JSONSTRICT_E_TRAILING);
    s_bad("1.", JSONSTRICT_E_SYNTAX);
    s_bad("NaN", JSONSTRICT_E_SYNTAX);
    s_bad("-Infinity", JSONSTRICT_E_SYNTAX);
    s_bad("\"\\x\"", JSONSTRICT_E_SYNTAX);
    s_bad("\"a\tb\"", JSONSTRICT_E_SYNTAX);
    jsonstrict_error_t err = s_bad("{} {}", JSONSTRICT_E_TRAILING);
    assert_int_equal(err.offset, 3);
    s_bad("\xef\xbb\xbf{}", JSONSTRICT_E_SYNTAX); /* a byte order mark is not JSON */
}

/* A number the boundary takes as a text real: a jansson real holding its literal and its
 * nearest double, printed back by jsonout byte for byte. */
static void s_text_real(const char *lit) {
    json_t *v = s_ok(lit);
    size_t len = 0;
    const char *text = jsonnumber_text(v, &len);
    if (!text) {
        print_error("%s is not a text real\n", lit);
    }
    assert_non_null(text);
    assert_int_equal(len, strlen(lit));
    assert_string_equal(text, lit);
    assert_true(json_is_real(v));
    double d = strtod(lit, NULL);
    d = isinf(d) ? copysign(DBL_MAX, d) : d;
    assert_true(json_real_value(v) == d);
    char *out = jsonout_dumps(v);
    assert_string_equal(out, lit);
    free(out);
    json_decref(v);
}

/* A number the boundary takes as a plain jansson real (its literal is what jsonout prints). */
static void s_plain_real(const char *lit) {
    json_t *v = s_ok(lit);
    if (jsonnumber_text(v, NULL)) {
        print_error("%s is a text real\n", lit);
    }
    assert_null(jsonnumber_text(v, NULL));
    assert_true(json_is_real(v));
    assert_true(json_real_value(v) == strtod(lit, NULL));
    char *out = jsonout_dumps(v);
    assert_string_equal(out, lit);
    free(out);
    json_decref(v);
}

static void test_numbers_keep_their_literal_within_the_magnitude_cap(void **state) {
    /* Beyond 10^+-400 in magnitude: refused, at the literal, whatever its digits. */
    jsonstrict_error_t err = s_bad("[0, 1e401]", JSONSTRICT_E_NUMBER_RANGE);
    assert_string_equal(err.message,
                        "number 1e401 has a magnitude beyond 10^+-400 (the number cap)");
    assert_string_equal(err.path, "/1");
    assert_int_equal(err.offset, 4);
    err = s_bad("{\"a\": {\"b\": -1e-401}}", JSONSTRICT_E_NUMBER_RANGE);
    assert_string_equal(err.path, "/a/b");
    assert_int_equal(err.offset, 12);
    assert_non_null(strstr(err.message, "-1e-401"));
    s_bad("0.99e-400", JSONSTRICT_E_NUMBER_RANGE);
    s_bad("10e400", JSONSTRICT_E_NUMBER_RANGE);
    s_bad("1e99999999999999999999", JSONSTRICT_E_NUMBER_RANGE);
    assert_string_equal(jsonstrict_code_name(JSONSTRICT_E_NUMBER_LENGTH), "number_length");
    assert_string_equal(jsonstrict_code_name(JSONSTRICT_E_NUMBER_RANGE), "number_range");
    assert_string_equal(jsonstrict_code_name(JSONSTRICT_E_NUMBER_RANGE + 1), "unknown");

    /* At the cap, and literals no int64 or double holds: text reals, whose literal is kept.
     * Zero has no magnitude: any exponent is fine. */
    static const char *const text_reals[] = {
        "1e400",
        "9.9e400",
        "-1e400",
        "1e-400",
        "1e300",
        "1.50",
        "-0",
        "1E2",
        "0.00001",
        "12345678910111213141516171819202122232425262728293031",
        "0.10000000000000000001",
        "9223372036854775808",
        "-9223372036854775809",
        "12345678901234567890.0",
        "0e999999",
        "-0.0e-99999",
        "100e-2",
    };
    for (size_t i = 0; i < sizeof text_reals / sizeof text_reals[0]; i++) {
        s_text_real(text_reals[i]);
    }
    /* Literals that are jsonout's text for their double: plain reals. */
    static const char *const plain_reals[] = {"0.5",  "1.0",    "1e+300",
                                              "-0.0", "0.0001", "-2.5e-08",
                                              "0.1",  "5e-324", "0.30000000000000004"};
    for (size_t i = 0; i < sizeof plain_reals / sizeof plain_reals[0]; i++) {
        s_plain_real(plain_reals[i]);
    }
    json_t *v = s_ok("[9223372036854775807, -9223372036854775808, 0, 1e18, 1e-126]");
    assert_true(json_is_integer(json_array_get(v, 0)));
    assert_int_equal(json_integer_value(json_array_get(v, 0)), INT64_MAX);
    assert_int_equal(json_integer_value(json_array_get(v, 1)), INT64_MIN);
    assert_true(json_is_integer(json_array_get(v, 2)));
    assert_true(json_real_value(json_array_get(v, 3)) == 1e18);
    assert_true(json_real_value(json_array_get(v, 4)) == 1e-126);
    char *out = jsonout_dumps(v);
    assert_string_equal(out, "[9223372036854775807,-9223372036854775808,0,1e18,1e-126]");
    free(out);
    json_decref(v);

    /* Stored text: nothing is refused; beyond the cap, a plain real (the nearest double). */
    const char *stored = "[1e401, -1e999, 1e-401, 1.50]";
    assert_int_equal(jsonstrict_parse(stored, strlen(stored), &jsonstrict_limits_stored, &v, &err),
                     0);
    assert_null(jsonnumber_text(json_array_get(v, 0), NULL));
    assert_true(json_real_value(json_array_get(v, 0)) == DBL_MAX);
    assert_true(json_real_value(json_array_get(v, 1)) == -DBL_MAX);
    assert_true(json_real_value(json_array_get(v, 2)) == 0);
    assert_string_equal(jsonnumber_text(json_array_get(v, 3), NULL), "1.50");
    json_decref(v);
}

static void test_caps_at_and_above_bound(void **state) {
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    json_t *v = NULL;
    lim.max_depth = 3;
    assert_int_equal(jsonstrict_parse("[[[1]]]", 7, &lim, &v, NULL), 0);
    json_decref(v);
    jsonstrict_error_t err = s_bad_n("[[[[1]]]]", 9, &lim, JSONSTRICT_E_DEPTH);
    assert_string_equal(err.path, "/0/0/0");

    lim = jsonstrict_limits_default;
    lim.max_items = 2;
    assert_int_equal(jsonstrict_parse("[1,2]", 5, &lim, &v, NULL), 0);
    json_decref(v);
    s_bad_n("[1,2,3]", 7, &lim, JSONSTRICT_E_ITEMS);

    lim = jsonstrict_limits_default;
    lim.max_keys = 2;
    assert_int_equal(jsonstrict_parse("{\"a\":1,\"b\":2}", 13, &lim, &v, NULL), 0);
    json_decref(v);
    s_bad_n("{\"a\":1,\"b\":2,\"c\":3}", 19, &lim, JSONSTRICT_E_KEYS);

    lim = jsonstrict_limits_default;
    lim.max_values = 3;
    assert_int_equal(jsonstrict_parse("[1,2]", 5, &lim, &v, NULL), 0);
    json_decref(v);
    s_bad_n("[1,2,3]", 7, &lim, JSONSTRICT_E_VALUES);

    lim = jsonstrict_limits_default;
    lim.max_string_bytes = 3;
    assert_int_equal(jsonstrict_parse("\"\\u00e9a\"", 9, &lim, &v, NULL), 0);
    json_decref(v);
    s_bad_n("\"\\u00e9ab\"", 10, &lim, JSONSTRICT_E_STRING_LENGTH);
    s_bad_n("{\"abcd\":1}", 10, &lim, JSONSTRICT_E_STRING_LENGTH);

    lim = jsonstrict_limits_default;
    lim.max_number_chars = 4;
    assert_int_equal(jsonstrict_parse("-1.5", 4, &lim, &v, NULL), 0);
    json_decref(v);
    s_bad_n("-1.55", 5, &lim, JSONSTRICT_E_NUMBER_LENGTH);

    lim = jsonstrict_limits_default;
    lim.max_bytes = 4;
    assert_int_equal(jsonstrict_parse("[12]", 4, &lim, &v, NULL), 0);
    json_decref(v);
    s_bad_n("[123]", 5, &lim, JSONSTRICT_E_TOO_LARGE);
}

static void test_path_escapes_pointer_characters(void **state) {
    jsonstrict_error_t err =
        s_bad("{\"a/b\": {\"c~d\": [0, \"\\ud800\"]}}", JSONSTRICT_E_SURROGATE);
    assert_string_equal(err.path, "/a~1b/c~0d/1");
}

static void test_rejects_input_beyond_the_tape_ceiling_whatever_max_bytes(void **state) {
    /* The tape's indexes are 32-bit: input longer than the ceiling is refused before a byte of
     * it is read, even when the caller lifts max_bytes. The mapping is never touched. */
    size_t len = JSONSTRICT_BYTES_CEILING + 1;
    void *big = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (big == MAP_FAILED) {
        skip();
    }
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = SIZE_MAX;
    jsonstrict_error_t err = s_bad_n(big, len, &lim, JSONSTRICT_E_TOO_LARGE);
    assert_int_equal(err.offset, 0);
    char want[JSONSTRICT_MESSAGE_MAX];
    snprintf(want, sizeof want, "input of %zu bytes exceeds the cap of %zu bytes", len,
             JSONSTRICT_BYTES_CEILING);
    assert_string_equal(err.message, want);
    jsontape_t tape = {0};
    assert_int_equal(jsonstrict_parse_tape(big, len, &lim, &tape, &err), -1);
    assert_int_equal(err.code, JSONSTRICT_E_TOO_LARGE);
    assert_int_equal(tape.count, 0);
    munmap(big, len);
}

/* Strings are scanned 8 bytes at a time: whatever byte ends a run of plain ASCII (the closing
 * quote, an escape, a control character, a UTF-8 lead byte, a stray continuation byte) is
 * found at every position of a word and of the byte-by-byte tail, in an exactly sized heap
 * buffer (the sanitizers see any read past it). */
static void test_string_runs_end_at_every_position(void **state) {
    (void)state;
    struct {
        const char *insert;
        const char *decoded; /* NULL: rejected */
        jsonstrict_code_t code;
    } cases[] = {
        {"\\n", "\n", 0},
        {"\\u00e9", "\xc3\xa9", 0},
        {"\xc3\xa9", "\xc3\xa9", 0},
        {"\x01", NULL, JSONSTRICT_E_SYNTAX},
        {"\x80", NULL, JSONSTRICT_E_UTF8},
        {"\x7f", "\x7f", 0},
        {" ", " ", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t before = 0; before <= 17; before++) {
            for (size_t after = 0; after <= 9; after++) {
                static const char as[] = "aaaaaaaaaaaaaaaaaaaaaaaa";
                static const char bs[] = "bbbbbbbbbbbbbbbbbbbbbbbb";
                char text[64];
                char want[64];
                int tn = snprintf(text, sizeof text, "\"%.*s%s%.*s\"", (int)before, as,
                                  cases[c].insert, (int)after, bs);
                int wn = snprintf(want, sizeof want, "%.*s%s%.*s", (int)before, as,
                                  cases[c].decoded ? cases[c].decoded : "", (int)after, bs);
                assert_true(tn > 0 && (size_t)tn < sizeof text);
                assert_true(wn >= 0 && (size_t)wn < sizeof want);
                size_t len = strlen(text);
                char *exact = malloc(len); /* no NUL after the input */
                assert_non_null(exact);
                memcpy(exact, text, len);
                json_t *v = NULL;
                jsonstrict_error_t err;
                int rc = jsonstrict_parse(exact, len, NULL, &v, &err);
                if (cases[c].decoded) {
                    assert_int_equal(rc, 0);
                    assert_string_equal(json_string_value(v), want);
                    json_decref(v);
                } else {
                    assert_int_equal(rc, -1);
                    assert_int_equal(err.code, cases[c].code);
                    assert_int_equal(err.offset, 1 + before);
                }
                exact[len - 1] = 'b'; /* unterminated: the scan runs to the end of the input */
                assert_int_equal(jsonstrict_parse(exact, len, NULL, &v, &err), -1);
                free(exact);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_plain_values_and_keeps_types),
        cmocka_unit_test(test_decodes_escapes_and_surrogate_pairs),
        cmocka_unit_test(test_rejects_duplicate_keys_with_path_and_offset),
        cmocka_unit_test(test_rejects_nul_and_unpaired_surrogates),
        cmocka_unit_test(test_rejects_invalid_utf8),
        cmocka_unit_test(test_rejects_syntax_errors_and_trailing_data),
        cmocka_unit_test(test_numbers_keep_their_literal_within_the_magnitude_cap),
        cmocka_unit_test(test_caps_at_and_above_bound),
        cmocka_unit_test(test_path_escapes_pointer_characters),
        cmocka_unit_test(test_rejects_input_beyond_the_tape_ceiling_whatever_max_bytes),
        cmocka_unit_test(test_string_runs_end_at_every_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
