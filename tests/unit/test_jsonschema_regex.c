/* Tests for the linear-pattern matcher (jsonschema_linear.c): which patterns take it, and that
 * it answers exactly as PCRE2 does (the other path) on every string over a small alphabet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "schemanode.h"

/* Patterns inside the linear subset (anchored or not). */
static const char *s_linear[] = {
    "^ORD-[0-9]{8}$",
    "^[A-Z]{3}-[0-9]{4}$",
    "^[a-z][a-z0-9-]{0,31}$",
    "^[A-Z_][A-Z0-9_]*$",
    "^/[A-Za-z0-9_./-]*$",
    "^\\+?[0-9 ()-]{7,20}$",
    "^a?b*c+$",
    "a{2,}b",
    "^ab",
    "b$",
    "ab",
    "",
    "^",
    "$",
    "^$",
    "^a{0}b$",
    "^[-a]x{1,3}[a-]$",
    "^\\d\\w\\.\\$$",
    "\\$",
    "^[\\d-]+$",
    "^[[]$",
};

/* Patterns that must stay with PCRE2. */
static const char *s_pcre2_only[] = {
    "^(ab)+$", "a|b",     "^.$", "^\\s$", "^[^a]$", "^a+?$",      "^a{2}?$",
    "^\\bx",   "^[\\s]$", "^é$", "^a{$",  "\\n",    "^x{1,100}$",
};

static js_regex_t *s_compile(const char *src) {
    char err[JSONSCHEMA_MESSAGE_MAX];
    js_regex_t *re = js_regex_compile(src, strlen(src), err, sizeof err);
    if (!re) {
        print_error("pattern %s: %s\n", src, err);
    }
    assert_non_null(re);
    return re;
}

/* Every string of up to 4 symbols from an alphabet with the patterns' characters, a digit, a
 * space and a two-byte UTF-8 character: both paths must agree on each. */
static void s_agree(const char *src) {
    static const char *alphabet[] = {"a", "b", "c", "x", "-", "0", " ",
                                     "_", "/", "$", ".", "[", "A", "\xc3\xa9"};
    const size_t nsym = sizeof alphabet / sizeof alphabet[0];
    js_regex_t *re = s_compile(src);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    char buf[32];
    size_t idx[4];
    for (size_t n = 0; n <= 4; n++) {
        memset(idx, 0, sizeof idx);
        for (;;) {
            size_t len = 0;
            for (size_t k = 0; k < n; k++) {
                size_t l = strlen(alphabet[idx[k]]);
                memcpy(buf + len, alphabet[idx[k]], l);
                len += l;
            }
            int fast = js_regex_match(re, buf, len, md, NULL);
            int slow = js_regex_match_pcre2(re, buf, len, md, NULL);
            if (fast != slow) {
                print_error("pattern %s on \"%.*s\": linear %d, PCRE2 %d\n", src, (int)len, buf,
                            fast, slow);
            }
            assert_int_equal(fast, slow);
            size_t k = 0;
            while (k < n && ++idx[k] == nsym) {
                idx[k++] = 0;
            }
            if (k == n) {
                break;
            }
        }
    }
    pcre2_match_data_free(md);
    js_regex_free(&re);
}

static void test_linear_patterns_agree_with_pcre2(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof s_linear / sizeof s_linear[0]; i++) {
        js_regex_t *re = s_compile(s_linear[i]);
        if (!js_regex_is_linear(re)) {
            print_error("pattern %s should be linear\n", s_linear[i]);
        }
        assert_true(js_regex_is_linear(re));
        js_regex_free(&re);
        s_agree(s_linear[i]);
    }
}

/* A linear pattern runs from a table of numbered states; one whose states are too many (the
 * 7th symbol from the end must be a: 128 states) keeps the bit-parallel loop. Both agree with
 * PCRE2, on short strings and on long ones either side of the answer. */
static void test_state_table_and_its_fallback_agree_with_pcre2(void **state) {
    (void)state;
    js_regex_t *small = s_compile("^ORD-[0-9]{8}$");
    assert_true(js_regex_is_table(small));
    js_regex_free(&small);
    const char *big = "^[ab]*a[ab]{6}$";
    js_regex_t *re = s_compile(big);
    assert_true(js_regex_is_linear(re));
    assert_false(js_regex_is_table(re));
    const char *cases[] = {"abababbbbbbb", "bbbbbabbbbbb", "aaaaaaaaaaaa", "bbbbbbbbbbbb",
                           "abbbbbbb",     "babbbbbb",     "bbbbbbbbab"};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i]);
        assert_int_equal(js_regex_match(re, cases[i], len, md, NULL),
                         js_regex_match_pcre2(re, cases[i], len, md, NULL));
    }
    pcre2_match_data_free(md);
    js_regex_free(&re);
    s_agree(big);
}

static void test_other_patterns_stay_with_pcre2(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof s_pcre2_only / sizeof s_pcre2_only[0]; i++) {
        js_regex_t *re = s_compile(s_pcre2_only[i]);
        if (js_regex_is_linear(re)) {
            print_error("pattern %s should stay with PCRE2\n", s_pcre2_only[i]);
        }
        assert_false(js_regex_is_linear(re));
        js_regex_free(&re);
        s_agree(s_pcre2_only[i]);
    }
}

/* Long exact strings: the 8-digit pattern on 7, 8 and 9 digits, and a bounded repeat at its
 * bounds. */
static void test_linear_bounds(void **state) {
    (void)state;
    js_regex_t *re = s_compile("^ORD-[0-9]{8}$");
    assert_int_equal(js_regex_match(re, "ORD-1234567", 11, NULL, NULL), 0);
    assert_int_equal(js_regex_match(re, "ORD-12345678", 12, NULL, NULL), 1);
    assert_int_equal(js_regex_match(re, "ORD-123456789", 13, NULL, NULL), 0);
    js_regex_free(&re);
    re = s_compile("^[a-z][a-z0-9-]{0,31}$");
    char s[40];
    memset(s, 'k', sizeof s);
    assert_int_equal(js_regex_match(re, s, 32, NULL, NULL), 1);
    assert_int_equal(js_regex_match(re, s, 33, NULL, NULL), 0);
    assert_int_equal(js_regex_match(re, s, 1, NULL, NULL), 1);
    assert_int_equal(js_regex_match(re, s, 0, NULL, NULL), 0);
    js_regex_free(&re);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_patterns_agree_with_pcre2),
        cmocka_unit_test(test_other_patterns_stay_with_pcre2),
        cmocka_unit_test(test_state_table_and_its_fallback_agree_with_pcre2),
        cmocka_unit_test(test_linear_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
