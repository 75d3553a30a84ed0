/*
 * Tests for jsontape (the flat document) and for the strict parser that fills it: the layout,
 * the jansson conversions, equality and value hashes, reuse after jsontape_clear, and
 * jsonstrict_parse_tape agreeing with jsonstrict_parse on values and on every error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "textbuf.h"
#include "jsontape.h"

/* The jansson value the boundary makes of one number literal (jsonnumber.h). */
static json_t *s_number(const char *lit, size_t len) {
    json_t *v = jsonstrict_load_stored(lit, len);
    assert_non_null(v);
    return v;
}

/* Limits wide enough for every document here (the caps have their own tests). Numbers are read
 * as stored text is (no number cap, so no number error): the number rule itself is
 * test_jsonstrict_numbers's. */
static const jsonstrict_limits_t s_wide = {1 << 24, 64,      1 << 20, 1 << 20,
                                           1 << 20, 1 << 20, 128,     JSONSTRICT_NUMBERS_NEAREST};

static void s_parse_tape(jsontape_t *t, const char *text) {
    jsonstrict_error_t err;
    int rc = jsonstrict_parse_tape(text, strlen(text), &s_wide, t, &err);
    if (rc != 0) {
        print_error("unexpected rejection of %s: %s at %zu (%s)\n", text, err.message, err.offset,
                    err.path);
    }
    assert_int_equal(rc, 0);
    assert_true(t->count > 0);
}

/* Every entry's next is past it and inside the tape, a container's children end exactly at
 * its next and number its size, and a string's bytes are NUL-terminated in the arena. */
static void s_check_structure(const jsontape_t *t) {
    for (uint32_t i = 0; i < t->count; i++) {
        const jsontape_entry_t *e = jsontape_at(t, i);
        assert_true(e->next > i);
        assert_true(e->next <= t->count);
        if (e->type == JSONTAPE_ARRAY || e->type == JSONTAPE_OBJECT) {
            uint32_t n = 0;
            uint32_t k = i + 1;
            while (k < e->next) {
                if (e->type == JSONTAPE_OBJECT) {
                    assert_int_equal(jsontape_at(t, k)->type, JSONTAPE_STRING);
                    k++;
                }
                k = jsontape_at(t, k)->next;
                n++;
            }
            assert_int_equal(k, e->next);
            assert_int_equal(n, e->size);
        } else {
            assert_int_equal(e->next, i + 1);
        }
        if (e->type == JSONTAPE_STRING) {
            assert_true(e->u.s.off + e->size < t->bytes_len);
            assert_int_equal(jsontape_str(t, e)[e->size], '\0');
            assert_int_equal(e->hash, jsontape_hash(jsontape_str(t, e), e->size));
        }
    }
}

/* --- layout --- */

static void test_layout_next_skips_children_and_strings_carry_hash_and_chars(void **state) {
    jsontape_t t = {0};
    /* é is 2 bytes, € 3 and U+1F600 4 (escaped as a surrogate pair): 9 bytes, 3 code points. */
    s_parse_tape(&t, "{\"a\": [1, {\"b\": null}], \"c\": \"\xc3\xa9\xe2\x82\xac\\ud83d\\ude00\", "
                     "\"d\": {}, \"e\": [true, false, 2.5]}");
    static const struct {
        jsontape_type_t type;
        uint32_t size;
        uint32_t next;
    } want[] = {
        {JSONTAPE_OBJECT, 4, 16}, /* 0 */
        {JSONTAPE_STRING, 1, 2},  /* 1 "a" */
        {JSONTAPE_ARRAY, 2, 7},   /* 2 */
        {JSONTAPE_INTEGER, 0, 4}, /* 3 */
        {JSONTAPE_OBJECT, 1, 7},  /* 4 */
        {JSONTAPE_STRING, 1, 6},  /* 5 "b" */
        {JSONTAPE_NULL, 0, 7},    /* 6 */
        {JSONTAPE_STRING, 1, 8},  /* 7 "c" */
        {JSONTAPE_STRING, 9, 9},  /* 8 */
        {JSONTAPE_STRING, 1, 10}, /* 9 "d" */
        {JSONTAPE_OBJECT, 0, 11}, /* 10 */
        {JSONTAPE_STRING, 1, 12}, /* 11 "e" */
        {JSONTAPE_ARRAY, 3, 16},  /* 12 */
        {JSONTAPE_TRUE, 0, 14},   /* 13 */
        {JSONTAPE_FALSE, 0, 15},  /* 14 */
        {JSONTAPE_REAL, 0, 16},   /* 15 */
    };
    assert_int_equal(t.count, sizeof want / sizeof want[0]);
    for (uint32_t i = 0; i < t.count; i++) {
        const jsontape_entry_t *e = jsontape_at(&t, i);
        assert_int_equal(e->type, want[i].type);
        assert_int_equal(e->size, want[i].size);
        assert_int_equal(e->next, want[i].next);
        if (e->type != JSONTAPE_STRING) {
            assert_int_equal(e->hash, 0);
        }
    }
    s_check_structure(&t);
    assert_int_equal(jsontape_at(&t, 3)->u.i, 1);
    assert_true(jsontape_at(&t, 15)->u.d == 2.5);
    const jsontape_entry_t *s = jsontape_at(&t, 8);
    assert_memory_equal(jsontape_str(&t, s), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    assert_int_equal(s->u.s.chars, 3);
    assert_int_equal(s->hash, jsontape_hash("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9));
    assert_string_equal(jsontape_str(&t, jsontape_at(&t, 5)), "b");
    assert_int_equal(jsontape_at(&t, 5)->u.s.chars, 1);

    /* The same document built by hand has the same entries. */
    jsontape_t *h = jsontape_new();
    uint32_t root = jsontape_open(h, JSONTAPE_OBJECT);
    jsontape_add_string(h, "a", 1);
    uint32_t arr = jsontape_open(h, JSONTAPE_ARRAY);
    jsontape_add_integer(h, 1);
    uint32_t inner = jsontape_open(h, JSONTAPE_OBJECT);
    jsontape_add_string(h, "b", 1);
    jsontape_add_literal(h, JSONTAPE_NULL);
    jsontape_close(h, inner, 1);
    jsontape_close(h, arr, 2);
    jsontape_add_string(h, "c", 1);
    jsontape_add_string(h, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    jsontape_add_string(h, "d", 1);
    jsontape_close(h, jsontape_open(h, JSONTAPE_OBJECT), 0);
    jsontape_add_string(h, "e", 1);
    uint32_t arr2 = jsontape_open(h, JSONTAPE_ARRAY);
    jsontape_add_literal(h, JSONTAPE_TRUE);
    jsontape_add_literal(h, JSONTAPE_FALSE);
    jsontape_add_real(h, 2.5);
    jsontape_close(h, arr2, 3);
    jsontape_close(h, root, 4);
    assert_int_equal(h->count, t.count);
    for (uint32_t i = 0; i < t.count; i++) {
        const jsontape_entry_t *a = jsontape_at(&t, i);
        const jsontape_entry_t *b = jsontape_at(h, i);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->size, b->size);
        assert_int_equal(a->next, b->next);
        assert_int_equal(a->hash, b->hash);
    }
    assert_true(jsontape_equal(&t, 0, h, 0));
    jsontape_destroy(&h);
    assert_null(h);
    jsontape_destroy(&h); /* safe on NULL */
    free(t.entries);
    free(t.bytes);
}

/* --- jansson --- */

static void test_from_json_then_to_json_gives_an_equal_value(void **state) {
    json_error_t jerr;
    json_t *v =
        json_loads("{\"name\": \"caf\\u00e9 \\ud83d\\ude00\", \"n\": [0, -1, 9223372036854775807, "
                   "-9223372036854775808, 1.5, -0.0, 1e300, 5e-324], \"empty\": {}, "
                   "\"none\": [], \"flags\": [true, false, null], \"deep\": {\"a\": {\"b\": "
                   "[[{\"c\": \"d\"}], {}]}}, \"z\": \"\"}",
                   0, &jerr);
    assert_non_null(v);
    /* A string with a NUL inside: jansson allows it (json_stringn), and so does the tape. */
    json_object_set_new(v, "nul", json_stringn("a\0b", 3));
    jsontape_t *t = jsontape_new();
    jsontape_add_integer(t, 42); /* from_json appends: the value starts where the tape ended */
    long at = jsontape_from_json(t, v);
    assert_int_equal(at, 1);
    json_t *back = jsontape_to_json(t, (uint32_t)at);
    assert_non_null(back);
    assert_true(json_equal(v, back));
    assert_int_equal(json_string_length(json_object_get(back, "nul")), 3);
    assert_true(json_is_integer(json_array_get(json_object_get(back, "n"), 0)));
    assert_true(json_is_real(json_array_get(json_object_get(back, "n"), 4)));
    /* Member order is jansson's insertion order, both ways. */
    const char *key = NULL;
    json_t *m = NULL;
    const char *order[] = {"name", "n", "empty", "none", "flags", "deep", "z", "nul"};
    size_t i = 0;
    json_object_foreach(back, key, m) {
        assert_string_equal(key, order[i++]);
    }
    json_t *one = jsontape_to_json(t, 0);
    assert_int_equal(json_integer_value(one), 42);
    json_decref(one);
    json_decref(back);
    json_decref(v);
    jsontape_destroy(&t);
}

/* A text real (jsonnumber.h) goes to the tape as its literal, flagged integral when its value
 * is, with its nearest double; and comes back a text real of the same literal. */
static void test_text_reals_keep_their_literal_both_ways(void **state) {
    static const struct {
        const char *lit;
        uint8_t flags;
    } nums[] = {
        {"1.50", JSONTAPE_F_TEXT},
        {"1E2", JSONTAPE_F_TEXT | JSONTAPE_F_INTEGRAL},
        {"-0", JSONTAPE_F_TEXT | JSONTAPE_F_INTEGRAL},
        {"1e400", JSONTAPE_F_TEXT | JSONTAPE_F_INTEGRAL},
        {"1.5e-400", JSONTAPE_F_TEXT},
        {"12345678910111213141516171819202122232425262728293031.000",
         JSONTAPE_F_TEXT | JSONTAPE_F_INTEGRAL},
        {"0.5", 0},
    };
    json_t *v = json_array();
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        json_array_append_new(v, s_number(nums[i].lit, strlen(nums[i].lit)));
    }
    jsontape_t *t = jsontape_new();
    assert_int_equal(jsontape_from_json(t, v), 0);
    jsontape_t direct = {0};
    char *text = jsonout_dumps(v);
    s_parse_tape(&direct, text);
    for (uint32_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const jsontape_entry_t *e = jsontape_at(t, i + 1);
        assert_int_equal(e->type, JSONTAPE_REAL);
        assert_int_equal(e->flags, nums[i].flags);
        assert_int_equal(jsontape_is_integral(e), (nums[i].flags & JSONTAPE_F_INTEGRAL) != 0);
        jsontape_num_t n = jsontape_num(t, e);
        double d = strtod(nums[i].lit, NULL);
        d = isinf(d) ? copysign(DBL_MAX, d) : d;
        assert_memory_equal(&n.d, &d, sizeof d);
        if (nums[i].flags) {
            assert_int_equal(e->size, strlen(nums[i].lit));
            assert_string_equal(n.text, nums[i].lit);
        } else {
            assert_null(n.text);
        }
        /* The parser makes the same entry from jsonout's text of the value. */
        const jsontape_entry_t *p = jsontape_at(&direct, i + 1);
        assert_int_equal(p->flags, e->flags);
        assert_int_equal(p->size, e->size);
        assert_memory_equal(&p->u.d, &e->u.d, sizeof d);
    }
    json_t *back = jsontape_to_json(t, 0);
    char *again = jsonout_dumps(back);
    assert_string_equal(again, text);
    assert_string_equal(jsonnumber_text(json_array_get(back, 0), NULL), "1.50");
    /* A hand-built entry is the same. */
    jsontape_t *h = jsontape_new();
    jsontape_add_text_real(h, "1E2", 3, 100.0, true);
    assert_true(jsontape_equal(h, 0, t, 2));
    assert_int_equal(jsontape_at(h, 0)->flags, JSONTAPE_F_TEXT | JSONTAPE_F_INTEGRAL);
    assert_string_equal(jsontape_num(h, jsontape_at(h, 0)).text, "1E2");
    jsontape_destroy(&h);
    free(again);
    free(text);
    json_decref(back);
    json_decref(v);
    free(direct.entries);
    free(direct.bytes);
    jsontape_destroy(&t);
}

/* --- equality and hashes --- */

static void s_expect_equal(const char *a, const char *b, bool want) {
    jsontape_t ta = {0};
    jsontape_t tb = {0};
    s_parse_tape(&ta, a);
    s_parse_tape(&tb, b);
    bool eq = jsontape_equal(&ta, 0, &tb, 0);
    if (eq != want) {
        print_error("%s vs %s: equal %d, want %d\n", a, b, eq, want);
    }
    assert_true(eq == want);
    assert_true(jsontape_equal(&tb, 0, &ta, 0) == want);
    if (want) {
        assert_int_equal(jsontape_value_hash(&ta, 0), jsontape_value_hash(&tb, 0));
    }
    free(ta.entries);
    free(ta.bytes);
    free(tb.entries);
    free(tb.bytes);
}

static void test_equal_and_value_hash_follow_json_equality(void **state) {
    s_expect_equal("1", "1.0", true);
    s_expect_equal("1", "1e0", true);
    s_expect_equal("-0.0", "0", true);
    s_expect_equal("-0.0", "0.0", true);
    s_expect_equal("1", "2", false);
    s_expect_equal("0.5", "0.25", false);
    s_expect_equal("{\"a\": 1, \"b\": [1, 2]}", "{\"b\": [1, 2.0], \"a\": 1}", true);
    s_expect_equal("{\"a\": 1}", "{\"a\": 1, \"b\": 2}", false);
    s_expect_equal("{\"a\": 1}", "{\"b\": 1}", false);
    s_expect_equal("[1, 2]", "[2, 1]", false);
    s_expect_equal("[1, 2]", "[1, 2, 3]", false);
    s_expect_equal("{\"x\": {\"y\": [{\"z\": 1, \"w\": null}]}}",
                   "{\"x\": {\"y\": [{\"w\": null, \"z\": 1.0}]}}", true);
    s_expect_equal("{\"x\": {\"y\": [{\"z\": 1}]}}", "{\"x\": {\"y\": [{\"z\": 2}]}}", false);
    s_expect_equal("\"a\"", "\"\\u0061\"", true);
    s_expect_equal("\"a\"", "\"b\"", false);
    s_expect_equal("\"1\"", "1", false);
    s_expect_equal("null", "false", false);
    s_expect_equal("true", "true", true);
    s_expect_equal("{}", "[]", false);
    s_expect_equal("[]", "[]", true);
    /* Every number is worth its decimal value: an int64 and a double beyond 2^53 are compared
     * exactly, and a double is worth its shortest text (what jsonout prints), not its binary
     * value: -9.223372036854776e18 is -9223372036854776000, not -2^63. */
    s_expect_equal("9007199254740993", "9007199254740992.0", false);
    s_expect_equal("9007199254740992", "9007199254740992.0", true);
    s_expect_equal("9223372036854775807", "9.223372036854776e18", false);
    s_expect_equal("-9223372036854775808", "-9.223372036854776e18", false);
    s_expect_equal("-9223372036854776000", "-9.223372036854776e18", true);
    s_expect_equal("4611686018427387904", "4.611686018427388e+18", false); /* 2^62 */
    s_expect_equal("4611686018427388000", "4.611686018427388e+18", true);
    s_expect_equal("9200000000000000000", "9.2e18", true);
    s_expect_equal("[9200000000000000000]", "[9.2e18]", true);
    s_expect_equal("1e19", "1e19", true);
    s_expect_equal("1e19", "10000000000000000000", true);
    s_expect_equal("1e19", "9223372036854775807", false);
    /* Text reals: any spelling of one value, and digits a double cannot hold. */
    s_expect_equal("1.5", "1.50", true);
    s_expect_equal("1.5", "15e-1", true);
    s_expect_equal("1.50", "0.15e1", true);
    s_expect_equal("1", "1.000", true);
    s_expect_equal("1", "100e-2", true);
    s_expect_equal("-0", "0", true);
    s_expect_equal("-0", "-0.0", true);
    s_expect_equal("1e300", "1e+300", true);
    char big[320] = "1";
    memset(big + 1, '0', 300);
    s_expect_equal("1e300", big, true);
    s_expect_equal("1e+300", big, true);
    s_expect_equal("0.1", "0.10000000000000000001", false);
    s_expect_equal("9223372036854775808", "9223372036854775807", false);
    s_expect_equal("9223372036854775808", "9.223372036854775808e18", true);
    s_expect_equal("12345678910111213141516171819202122232425262728293031",
                   "1.2345678910111213141516171819202122232425262728293031e52", true);
    s_expect_equal("12345678910111213141516171819202122232425262728293031",
                   "12345678910111213141516171819202122232425262728293030", false);
    s_expect_equal("{\"a\": [1e300, 1.50]}", "{\"a\": [1e+300, 1.5]}", true);
    s_expect_equal("{\"a\": [1e400]}", "{\"a\": [1.7976931348623157e308]}", false);
}

static void test_equal_compares_values_across_tapes_at_any_index(void **state) {
    jsontape_t a = {0};
    jsontape_t b = {0};
    s_parse_tape(&a, "[5, {\"k\": [1, 2], \"j\": \"s\"}, \"tail\"]");
    s_parse_tape(&b, "{\"j\": \"s\", \"k\": [1.0, 2]}");
    assert_int_equal(jsontape_at(&a, 2)->type, JSONTAPE_OBJECT);
    assert_true(jsontape_equal(&a, 2, &b, 0));
    assert_int_equal(jsontape_value_hash(&a, 2), jsontape_value_hash(&b, 0));
    assert_false(jsontape_equal(&a, 0, &b, 0));
    /* "k"'s array in each: a[4] and b[4]. */
    assert_true(jsontape_equal(&a, 4, &b, 4));
    assert_true(jsontape_equal(&a, 3, &b, 3)); /* the key "k" */
    free(a.entries);
    free(a.bytes);
    free(b.entries);
    free(b.bytes);
}

static void test_clear_keeps_memory_for_the_next_document(void **state) {
    jsontape_t *t = jsontape_new();
    char big[4096];
    size_t n = 0;
    n += (size_t)snprintf(big + n, sizeof big - n, "[");
    for (int i = 0; i < 200; i++) {
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"s%d\"", i ? "," : "", i);
    }
    snprintf(big + n, sizeof big - n, "]");
    s_parse_tape(t, big);
    assert_int_equal(t->count, 201);
    const jsontape_entry_t *entries = t->entries;
    const char *bytes = t->bytes;
    size_t cap = t->cap;
    jsontape_clear(t);
    assert_int_equal(t->count, 0);
    assert_int_equal(t->bytes_len, 0);
    assert_int_equal(t->cap, cap);
    s_parse_tape(t, "{\"a\": \"b\"}");
    assert_ptr_equal(t->entries, entries); /* no reallocation */
    assert_ptr_equal(t->bytes, bytes);
    assert_int_equal(t->count, 3);
    assert_string_equal(jsontape_str(t, jsontape_at(t, 2)), "b");
    s_check_structure(t);
    /* A failed parse leaves the tape empty, whatever it held. */
    jsonstrict_error_t err;
    assert_int_equal(jsonstrict_parse_tape("[1, 2, x]", 9, NULL, t, &err), -1);
    assert_int_equal(t->count, 0);
    assert_int_equal(t->bytes_len, 0);
    /* The parse clears the tape first: the root is entry 0 however the tape was left. */
    jsontape_add_integer(t, 7);
    assert_int_equal(jsonstrict_parse_tape("[true]", 6, NULL, t, NULL), 0);
    assert_int_equal(t->count, 2);
    assert_int_equal(jsontape_at(t, 0)->type, JSONTAPE_ARRAY);
    jsontape_destroy(&t);
}

/* --- the parser: the tape against the jansson values --- */

/* Whether hay[0..n) holds needle[0..k) (memmem is a GNU extension). */
static bool s_contains(const char *hay, size_t n, const char *needle, size_t k) {
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(hay + i, needle, k) == 0) {
            return true;
        }
    }
    return false;
}

/* parse_tape and parse (then from_json) give the same entries, one by one. */
static void s_agree(const char *text, size_t len, const jsonstrict_limits_t *lim) {
    jsontape_t direct = {0};
    jsontape_t via = {0};
    jsonstrict_error_t err;
    json_t *v = NULL;
    int rc = jsonstrict_parse(text, len, lim, &v, &err);
    if (rc != 0) {
        print_error("unexpected rejection: %s at %zu (%s)\n", err.message, err.offset, err.path);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(jsonstrict_parse_tape(text, len, lim, &direct, &err), 0);
    assert_int_equal(jsontape_from_json(&via, v), 0);
    assert_int_equal(direct.count, via.count);
    assert_true(jsontape_equal(&direct, 0, &via, 0));
    for (uint32_t i = 0; i < direct.count; i++) {
        const jsontape_entry_t *a = jsontape_at(&direct, i);
        const jsontape_entry_t *b = jsontape_at(&via, i);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->flags, b->flags);
        assert_int_equal(a->size, b->size);
        assert_int_equal(a->next, b->next);
        assert_int_equal(a->hash, b->hash); /* a text real's literal offset, for one */
        if (a->flags & JSONTAPE_F_TEXT) {
            jsontape_num_t na = jsontape_num(&direct, a);
            jsontape_num_t nb = jsontape_num(&via, b);
            assert_int_equal(na.len, a->size);
            assert_int_equal(nb.len, na.len);
            assert_memory_equal(na.text, nb.text, na.len + 1);   /* the NUL too */
            assert_true(s_contains(text, len, na.text, na.len)); /* as the input has it */
        }
        if (a->type == JSONTAPE_STRING) {
            assert_int_equal(a->u.s.chars, b->u.s.chars);
            assert_memory_equal(jsontape_str(&direct, a), jsontape_str(&via, b), a->size);
        } else if (a->type == JSONTAPE_INTEGER) {
            assert_true(a->u.i == b->u.i);
        } else if (a->type == JSONTAPE_REAL) {
            assert_memory_equal(&a->u.d, &b->u.d, sizeof a->u.d); /* -0.0 too */
        }
    }
    s_check_structure(&direct);
    json_decref(v);
    free(direct.entries);
    free(direct.bytes);
    free(via.entries);
    free(via.bytes);
}

static void test_parse_tape_agrees_with_parse_on_a_corpus(void **state) {
    static const char *docs[] = {
        "0",
        "-0",
        "-0.0",
        "\"\"",
        "null",
        "[]",
        "{}",
        " [ 1 , [ ] , { } , \"x\" ] ",
        "{\"a\": [1, -2, 1.5, true, false, null, \"x\"], \"b\": {}}",
        "[0.1, 1.5e3, 1E-22, 12e-24, 100.000, 0.000123, 1e22, 1e23, 123456789012345, "
        "1234567890123456, 1234567890123456789, -999999999999999999, 9.99, -15.24, 0e99999, "
        "1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 0.30000000000000004]",
        "[9223372036854775807, -9223372036854775808, 12345678901234567000.0]",
        /* text reals: literals no int64 or shortest double text holds, kept as written */
        "[9223372036854775808, -9223372036854775809, 0.10000000000000000001, 1e300, 1.50, -0, "
        "1E2, 0.00001, 1e400, -1e-400, 12345678910111213141516171819202122232425262728293031]",
        "{\"a\": {\"b\": [1.0e0, 1e+300, 0.5, 5e-1]}, \"c\": 100e-2, \"d\": -0.0, \"e\": 9.2e18}",
        "\"a\\n\\u00e9\\ud83d\\ude00\\/\\\"\\\\\\b\\f\\r\\t\"",
        "{\"\\u00e9\": 1, \"e\\u0301\": 2, \"a/b\": {\"c~d\": []}}",
        /* raw UTF-8 of two, three and four bytes beside ASCII and escapes: characters are
         * counted while scanning, and must agree with a count of the decoded bytes */
        "[\"\xc3\xa9t\xc3\xa9\", \"\xe2\x82\xac 5\", "
        "\"\xf0\x9f\x98\x80\\u00e9\\n\xf0\x9f\x98\x80\"]",
        "{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,"
        "\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16,\"k17\":17,"
        "\"k18\":{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,"
        "\"k9\":9,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16,"
        "\"k17\":17,\"k18\":18},\"k19\":19}",
        "[[[[[[[[[[[[[[[[[[[[\"deep\"]]]]]]]]]]]]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        s_agree(docs[i], strlen(docs[i]), &s_wide);
    }
    /* The benchmark corpus, when the test runs from the build tree (ctest sets the source). */
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    if (!src) {
        return;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/bench/jsonschema_corpus", src);
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t files = 0;
    struct dirent *e = NULL;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".json") != 0) {
            continue;
        }
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char *text = malloc(1 << 20);
        assert_non_null(text);
        size_t len = fread(text, 1, 1 << 20, f);
        fclose(f);
        s_agree(text, len, &s_wide);
        free(text);
        files++;
    }
    closedir(d);
    assert_true(files >= 2);
}

static void s_same_error(const char *text, size_t len, const jsonstrict_limits_t *lim,
                         jsonstrict_code_t code) {
    jsontape_t t = {0};
    jsontape_add_integer(&t, 1); /* to see that a failure leaves it empty */
    jsonstrict_error_t a;
    jsonstrict_error_t b;
    json_t *v = NULL;
    assert_int_equal(jsonstrict_parse(text, len, lim, &v, &a), -1);
    assert_null(v);
    assert_int_equal(jsonstrict_parse_tape(text, len, lim, &t, &b), -1);
    if (a.code != code) {
        print_error("%s: got %s, want %s\n", text, jsonstrict_code_name(a.code),
                    jsonstrict_code_name(code));
    }
    assert_int_equal(a.code, code);
    assert_int_equal(b.code, a.code);
    assert_int_equal(b.offset, a.offset);
    assert_string_equal(b.path, a.path);
    assert_string_equal(b.message, a.message);
    assert_int_equal(t.count, 0);
    assert_int_equal(t.bytes_len, 0);
    free(t.entries);
    free(t.bytes);
}

static void test_parse_tape_errors_match_parse_errors(void **state) {
    static const struct {
        const char *text;
        jsonstrict_code_t code;
    } bad[] = {
        {"", JSONSTRICT_E_SYNTAX},
        {"[1,]", JSONSTRICT_E_SYNTAX},
        {"{\"a\" 1}", JSONSTRICT_E_SYNTAX},
        {"{\"a\": 1,}", JSONSTRICT_E_SYNTAX},
        {"{\"a\": 1 x}", JSONSTRICT_E_SYNTAX},
        {"[1 2]", JSONSTRICT_E_SYNTAX},
        {"01", JSONSTRICT_E_TRAILING},
        {"{} {}", JSONSTRICT_E_TRAILING},
        {"1.", JSONSTRICT_E_SYNTAX},
        {"-", JSONSTRICT_E_SYNTAX},
        {"1e+", JSONSTRICT_E_SYNTAX},
        {"NaN", JSONSTRICT_E_SYNTAX},
        {"[-Infinity]", JSONSTRICT_E_SYNTAX},
        {"tru", JSONSTRICT_E_SYNTAX},
        {"\"abc", JSONSTRICT_E_SYNTAX},
        {"{\"x\": [\"\\x\"]}", JSONSTRICT_E_SYNTAX},
        {"{\"x\": \"a\tb\"}", JSONSTRICT_E_SYNTAX},
        {"[\"\\u12\"]", JSONSTRICT_E_SYNTAX},
        {"{\"a\": {\"b\": \"\xc3\"}}", JSONSTRICT_E_UTF8},
        {"[\"ok\", \"\xed\xa0\x80\"]", JSONSTRICT_E_UTF8},
        {"{\"\xff\": 1}", JSONSTRICT_E_UTF8},
        {"[\"\\ud800\"]", JSONSTRICT_E_SURROGATE},
        {"{\"k\": \"\\udc00\"}", JSONSTRICT_E_SURROGATE},
        {"[1, \"a\\u0000\"]", JSONSTRICT_E_NUL},
        {"{\"\\u0000\": 1}", JSONSTRICT_E_NUL},
        {"{\"x\": {\"a\": 1, \"a\": 2}}", JSONSTRICT_E_DUPLICATE_KEY},
        {"{\"a\": 1, \"\\u0061\": 2}", JSONSTRICT_E_DUPLICATE_KEY},
        {"{\"a/b\": {\"c~d\": [0, \"\\ud800\"]}}", JSONSTRICT_E_SURROGATE},
        {"[1e401]", JSONSTRICT_E_NUMBER_RANGE},
        {"{\"n\": -1e-401}", JSONSTRICT_E_NUMBER_RANGE},
        {"[0, 0.99e-400]", JSONSTRICT_E_NUMBER_RANGE},
        {"{\"a\": [1.5, {\"b\": 12345678910111213141516171819202122232425e380}]}",
         JSONSTRICT_E_NUMBER_RANGE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_same_error(bad[i].text, strlen(bad[i].text), NULL, bad[i].code);
    }
    s_same_error("\"a\0b\"", 5, NULL, JSONSTRICT_E_SYNTAX);
    char deep[5 * JSONSTRICT_MAX_DEPTH_DEFAULT + 8]; /* ({"": or [) per level */
    size_t n = 0;
    for (int i = 0; i <= JSONSTRICT_MAX_DEPTH_DEFAULT; i++) {
        deep[n++] = i % 2 ? '[' : '{';
        if (i % 2 == 0) {
            memcpy(deep + n, "\"\":", 3);
            n += 3;
        }
    }
    s_same_error(deep, n, NULL, JSONSTRICT_E_DEPTH);
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_items = 2;
    s_same_error("{\"a\": [1, 2, 3]}", 16, &lim, JSONSTRICT_E_ITEMS);
    lim = jsonstrict_limits_default;
    lim.max_keys = 2;
    s_same_error("{\"a\":1,\"b\":2,\"c\":3}", 19, &lim, JSONSTRICT_E_KEYS);
    lim = jsonstrict_limits_default;
    lim.max_values = 3;
    s_same_error("[1,[2]]", 7, &lim, JSONSTRICT_E_VALUES);
    lim = jsonstrict_limits_default;
    lim.max_string_bytes = 3;
    s_same_error("{\"abcd\":1}", 10, &lim, JSONSTRICT_E_STRING_LENGTH);
    lim = jsonstrict_limits_default;
    lim.max_number_chars = 4;
    s_same_error("[-1.55]", 7, &lim, JSONSTRICT_E_NUMBER_LENGTH);
    char longer[JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT + 8] = "[0,1.";
    memset(longer + 5, '1', JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT - 1);
    memcpy(longer + 4 + JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT, "]", 2);
    s_same_error(longer, strlen(longer), NULL, JSONSTRICT_E_NUMBER_LENGTH);
    lim = jsonstrict_limits_default;
    lim.max_bytes = 4;
    s_same_error("[123]", 5, &lim, JSONSTRICT_E_TOO_LARGE);
}

/* --- duplicate keys in big objects --- */

static void test_duplicate_key_found_in_an_object_of_5000_members(void **state) {
    textbuf_t t = {0};
    textbuf_add(&t, "{\"outer\": {");
    for (int i = 0; i < 5000; i++) {
        textbuf_add(&t, "%s\"k%d\": %d", i ? ", " : "", i, i);
    }
    size_t at = t.len + 2; /* the opening quote of the second "k1234" */
    textbuf_add(&t, ", \"k1234\": 0}}");
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = t.len;
    lim.max_keys = 10000;
    lim.max_values = 20000;
    jsontape_t tape = {0};
    jsonstrict_error_t err;
    assert_int_equal(jsonstrict_parse_tape(t.p, t.len, &lim, &tape, &err), -1);
    assert_int_equal(err.code, JSONSTRICT_E_DUPLICATE_KEY);
    assert_int_equal(err.offset, at);
    assert_string_equal(err.path, "/outer/k1234");
    assert_int_equal(tape.count, 0);
    s_same_error(t.p, t.len, &lim, JSONSTRICT_E_DUPLICATE_KEY);

    /* Without the repeated key the same object is accepted whole. */
    t.len = at - 2;
    textbuf_add(&t, "}}");
    lim.max_bytes = t.len;
    assert_int_equal(jsonstrict_parse_tape(t.p, t.len, &lim, &tape, &err), 0);
    assert_int_equal(tape.count, 3 + 2 * 5000); /* root, "outer", its object, members */
    assert_int_equal(jsontape_at(&tape, 2)->size, 5000);
    s_agree(t.p, t.len, &lim);
    free(t.p);
    free(tape.entries);
    free(tape.bytes);
}

/* jsontape_hash("c039716") == jsontape_hash("c178428"), and likewise for "key-0229846" and
 * "key-0273787" (found by search): keys whose hashes collide are still told apart by their
 * bytes, and a real duplicate among them is still found, both in a small object (scanned) and
 * in a big one (the key table). */
static void test_keys_with_equal_hashes_are_told_apart(void **state) {
    assert_int_equal(jsontape_hash("c039716", 7), jsontape_hash("c178428", 7));
    assert_int_equal(jsontape_hash("key-0229846", 11), jsontape_hash("key-0273787", 11));
    jsontape_t tape = {0};
    s_parse_tape(&tape, "{\"c039716\": 1, \"c178428\": 2}");
    textbuf_t t = {0};
    textbuf_add(&t, "{");
    for (int i = 0; i < 40; i++) {
        textbuf_add(&t, "\"f%d\": 0, ", i);
    }
    textbuf_add(&t, "\"key-0229846\": 1, \"c039716\": 1, \"key-0273787\": 2, \"c178428\": 2}");
    s_parse_tape(&tape, t.p);
    s_agree(t.p, t.len, &s_wide);
    t.p[t.len - 1] = ',';
    size_t at = t.len + 1;
    textbuf_add(&t, " \"key-0273787\": 3}");
    jsonstrict_error_t err;
    assert_int_equal(jsonstrict_parse_tape(t.p, t.len, &s_wide, &tape, &err), -1);
    assert_int_equal(err.code, JSONSTRICT_E_DUPLICATE_KEY);
    assert_int_equal(err.offset, at);
    assert_string_equal(err.path, "/key-0273787");
    const char *dup = "{\"c039716\": 1, \"c178428\": 2, \"c039716\": 3}";
    s_same_error(dup, strlen(dup), NULL, JSONSTRICT_E_DUPLICATE_KEY);
    free(t.p);
    free(tape.entries);
    free(tape.bytes);
}

/* Big objects side by side and inside one another keep their keys apart: the same key in two
 * objects is no duplicate, and a duplicate in the outer object after a big inner one has closed
 * (the table emptied of the inner keys, not of the outer) is still found. */
static void test_big_objects_nested_and_side_by_side_keep_their_keys_apart(void **state) {
    textbuf_t t = {0};
    textbuf_add(&t, "[");
    for (int o = 0; o < 3; o++) {
        textbuf_add(&t, "%s{", o ? ", " : "");
        for (int i = 0; i < 30; i++) {
            textbuf_add(&t, "%s\"k%d\": ", i ? ", " : "", i);
            if (i == 20) {
                textbuf_add(&t, "{");
                for (int j = 0; j < 25; j++) {
                    textbuf_add(&t, "%s\"k%d\": %d", j ? ", " : "", j, j);
                }
                textbuf_add(&t, "}");
            } else {
                textbuf_add(&t, "%d", i);
            }
        }
        textbuf_add(&t, "}");
    }
    textbuf_add(&t, "]");
    s_agree(t.p, t.len, &s_wide);

    /* Repeat an early key of the last outer object, after its inner object has closed. */
    t.len -= 2;
    size_t at = t.len + 2;
    textbuf_add(&t, ", \"k3\": 0}]");
    jsontape_t tape = {0};
    jsonstrict_error_t err;
    assert_int_equal(jsonstrict_parse_tape(t.p, t.len, &s_wide, &tape, &err), -1);
    assert_int_equal(err.code, JSONSTRICT_E_DUPLICATE_KEY);
    assert_int_equal(err.offset, at);
    assert_string_equal(err.path, "/2/k3");
    s_same_error(t.p, t.len, &s_wide, JSONSTRICT_E_DUPLICATE_KEY);
    free(t.p);
    free(tape.entries);
    free(tape.bytes);
}

/* The pointer of every entry, values and member names, escaped per RFC 6901, from the root
 * and from an inner value, and truncated (NUL-terminated) when the buffer is short. */
static void test_pointer_names_every_entry(void **state) {
    (void)state;
    jsontape_t *t = jsontape_new();
    s_parse_tape(t, "{\"a\": [1, {\"b/c\": true, \"~\": [null, \"x\"]}], \"d\": {}}");
    static const char *want[] = {"",          "/a",        "/a",      "/a/0",    "/a/1",
                                 "/a/1/b~1c", "/a/1/b~1c", "/a/1/~0", "/a/1/~0", "/a/1/~0/0",
                                 "/a/1/~0/1", "/d",        "/d"};
    assert_int_equal(t->count, sizeof want / sizeof want[0]);
    char out[64];
    for (uint32_t i = 0; i < t->count; i++) {
        jsontape_pointer(t, 0, i, out, sizeof out);
        assert_string_equal(out, want[i]);
    }
    jsontape_pointer(t, 4, 10, out, sizeof out); /* from the inner object {"b/c": ...} */
    assert_string_equal(out, "/~0/1");
    jsontape_pointer(t, 0, 10, out, 10); /* "/a/1/~0/1" and its NUL fit exactly */
    assert_string_equal(out, "/a/1/~0/1");
    jsontape_pointer(t, 0, 10, out, 9);
    assert_string_equal(out, "/a/1/...");
    jsontape_pointer(t, 0, 10, out, 5);
    assert_string_equal(out, "/...");
    jsontape_pointer(t, 0, 10, out, 3);
    assert_string_equal(out, ""); /* no room for the marker: nothing that could mislead */
    jsontape_destroy(&t);
}

/* Items are unique unless two are JSON-equal: 1 and 1.0, objects in another order. */
static void test_unique_uses_json_equality(void **state) {
    (void)state;
    static const struct {
        const char *text;
        bool unique;
    } cases[] = {
        {"[]", true},
        {"[1]", true},
        {"[1, 2, \"1\", true, null, [1], {\"a\": 1}]", true},
        {"[1, 1.0]", false},
        {"[{\"a\": 1, \"b\": 2}, {\"b\": 2, \"a\": 1}]", false},
        {"[[1, 2], [2, 1]]", true},
        {"[0, -0.0]", false},
        {"[9007199254740993, 9007199254740992.0]", true},
    };
    jsontape_t *t = jsontape_new();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_parse_tape(t, cases[i].text);
        if (jsontape_unique(t, 0) != cases[i].unique) {
            print_error("%s\n", cases[i].text);
        }
        assert_int_equal(jsontape_unique(t, 0), cases[i].unique);
    }
    jsontape_destroy(&t);
}

/* A string is copied into the arena and hashed in one pass, by its ends when it is 4 to 16
 * bytes: at every length up to 40, its bytes, NUL and JSONTAPE_PAD zeros are there, and its
 * hash is jsontape_hash of the same bytes wherever they lie. */
static void test_strings_copied_and_hashed_at_every_length(void **state) {
    (void)state;
    char src[64];
    char moved[72];
    for (size_t i = 0; i < sizeof src; i++) {
        src[i] = (char)('a' + (i * 7) % 26);
    }
    jsontape_t *t = jsontape_new();
    for (size_t len = 0; len <= 40; len++) {
        uint32_t at = jsontape_add_string(t, src + 1, len);
        const jsontape_entry_t *e = jsontape_at(t, at);
        const char *bytes = jsontape_str(t, e);
        assert_memory_equal(bytes, src + 1, len);
        for (size_t z = 0; z < JSONTAPE_PAD; z++) {
            assert_int_equal(bytes[len + z], '\0');
        }
        assert_int_equal(e->hash, jsontape_hash(src + 1, len));
        memcpy(moved + 3, src + 1, len);
        assert_int_equal(e->hash, jsontape_hash(moved + 3, len));
        if (len > 0) {
            char other[64];
            memcpy(other, src + 1, len);
            other[len - 1] ^= 1; /* the last byte counts, at every length */
            assert_int_not_equal(e->hash, jsontape_hash(other, len));
        }
    }
    jsontape_destroy(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_next_skips_children_and_strings_carry_hash_and_chars),
        cmocka_unit_test(test_from_json_then_to_json_gives_an_equal_value),
        cmocka_unit_test(test_text_reals_keep_their_literal_both_ways),
        cmocka_unit_test(test_equal_and_value_hash_follow_json_equality),
        cmocka_unit_test(test_equal_compares_values_across_tapes_at_any_index),
        cmocka_unit_test(test_clear_keeps_memory_for_the_next_document),
        cmocka_unit_test(test_parse_tape_agrees_with_parse_on_a_corpus),
        cmocka_unit_test(test_parse_tape_errors_match_parse_errors),
        cmocka_unit_test(test_duplicate_key_found_in_an_object_of_5000_members),
        cmocka_unit_test(test_keys_with_equal_hashes_are_told_apart),
        cmocka_unit_test(test_big_objects_nested_and_side_by_side_keep_their_keys_apart),
        cmocka_unit_test(test_pointer_names_every_entry),
        cmocka_unit_test(test_unique_uses_json_equality),
        cmocka_unit_test(test_strings_copied_and_hashed_at_every_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
