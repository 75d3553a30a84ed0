/* Tests for the host name formats beyond the official suite (which runs in
 * test_jsonschema_suite): the 63-octet label and 253-octet name limits counted on the ASCII
 * (A-label) form, the trailing dot, A-labels in any case, U-labels taken as written, and the
 * Bidi rule across every label of a name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "jsonschema.h"
#include "jsonstrict.h"

/* Does text (UTF-8 without quotes or backslashes) pass {"format": fmt}? */
static bool s_format(const char *fmt, const char *text) {
    char schema_text[64];
    char instance_text[1024];
    snprintf(schema_text, sizeof schema_text, "{\"format\": \"%s\"}", fmt);
    int n = snprintf(instance_text, sizeof instance_text, "\"%s\"", text);
    assert_true(n > 0 && (size_t)n < sizeof instance_text);
    jsonstrict_error_t perr;
    json_t *schema = NULL;
    json_t *instance = NULL;
    assert_int_equal(jsonstrict_parse(schema_text, strlen(schema_text), &jsonstrict_limits_default,
                                      &schema, &perr),
                     0);
    assert_int_equal(
        jsonstrict_parse(instance_text, (size_t)n, &jsonstrict_limits_default, &instance, &perr),
        0);
    jsonschema_t *s = NULL;
    jsonschema_error_t err;
    assert_int_equal(jsonschema_compile(schema, &s, &err), 0);
    jsonschema_result_t r = jsonschema_validate(s, instance, JSONSCHEMA_FAIL_FAST, NULL);
    jsonschema_destroy(&s);
    json_decref(schema);
    json_decref(instance);
    return r == JSONSCHEMA_VALID;
}

/* n copies of "a" then one "ü": its A-label is n + 8 octets ("xn--", n, "-", three digits). */
static void s_label(char *buf, size_t n) {
    memset(buf, 'a', n);
    memcpy(buf + n, "\xc3\xbc", 3);
}

static void test_label_limit_counts_the_a_label_octets(void **state) {
    char at_limit[80];
    char over[80];
    s_label(at_limit, 55); /* xn--a...a-8yf: 63 octets */
    s_label(over, 56);     /* 64 octets, though only 57 characters */
    assert_true(s_format("idn-hostname", at_limit));
    assert_false(s_format("idn-hostname", over));
    const char *alabel_63 = "xn--aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-8yf";
    const char *alabel_64 = "xn--aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-t2f";
    assert_true(s_format("hostname", alabel_63));
    assert_false(s_format("hostname", alabel_64));
    assert_false(s_format("idn-hostname", alabel_64));
}

static void test_name_limit_is_253_octets_of_the_ascii_form(void **state) {
    char a63[64];
    memset(a63, 'a', 63);
    a63[63] = '\0';
    char name[512];
    snprintf(name, sizeof name, "%s.%s.%s.%.61s", a63, a63, a63, a63); /* 253 */
    assert_true(s_format("hostname", name));
    assert_true(s_format("idn-hostname", name));
    snprintf(name, sizeof name, "%s.%s.%s.%.62s", a63, a63, a63, a63); /* 254 */
    assert_false(s_format("hostname", name));
    assert_false(s_format("idn-hostname", name));

    /* 225 characters whose A-labels make 63 + 63 + 63 + 61 + 3 = 253 octets, then 254. */
    char u63[80];
    char u61[80];
    char u62[80];
    s_label(u63, 55);
    s_label(u61, 53);
    s_label(u62, 54);
    snprintf(name, sizeof name, "%s.%s.%s.%s", u63, u63, u63, u61);
    assert_true(s_format("idn-hostname", name));
    snprintf(name, sizeof name, "%s.%s.%s.%s", u63, u63, u63, u62);
    assert_false(s_format("idn-hostname", name));
}

static void test_trailing_dot_and_empty_labels_are_invalid(void **state) {
    assert_false(s_format("hostname", "example.com."));
    assert_false(s_format("idn-hostname", "example.com."));
    assert_false(s_format("idn-hostname", "\xec\x8b\xa4\xeb\xa1\x80\xe3\x80\x82")); /* 실례。 */
    assert_false(s_format("email", "joe@example.com."));
    assert_false(s_format("idn-email", "joe@example.com."));
    assert_false(s_format("hostname", "a..b"));
    assert_true(s_format("hostname", "a.b"));
}

static void test_a_labels_in_any_case_and_reserved_labels(void **state) {
    assert_true(s_format("hostname", "XN--9N2BP8Q.XN--9T4B11YI5A"));
    assert_true(s_format("hostname", "xn--bcher-KVA.de"));
    assert_true(s_format("email", "joe@xn--bcher-kva.de"));
    assert_false(s_format("hostname", "ab--cd.com")); /* "--" in places 3-4 but no A-label */
    assert_false(s_format("hostname", "xn--.com"));
    assert_false(s_format("hostname", "b\xc3\xbc"
                                      "cher.de")); /* U-labels are idn-hostname's */
}

static void test_u_labels_are_checked_as_written(void **state) {
    assert_true(s_format("idn-hostname", "b\xc3\xbc"
                                         "cher.de"));
    /* No UTS #46 mapping: upper case is DISALLOWED in a U-label (RFC 5892). */
    assert_false(s_format("idn-hostname", "B\xc3\xbc"
                                          "cher.de"));
    /* A U-label must be NFC (RFC 5890 §2.3.2.1); an e-mail domain is normalized first. */
    assert_false(s_format("idn-hostname", "cafe\xcc\x81.com"));
    assert_true(s_format("idn-hostname", "caf\xc3\xa9.com"));
    assert_true(s_format("idn-email", "user@cafe\xcc\x81.com"));
    assert_false(s_format("idn-hostname", "\xc3\xbc-")); /* hyphen at the end of a U-label */
}

static void test_bidi_rule_covers_every_label_of_a_bidi_name(void **state) {
    const char *alef = "\xd7\x90"; /* U+05D0, Bidi class R */
    char name[64];
    snprintf(name, sizeof name, "a.%s", alef);
    assert_true(s_format("idn-hostname", name));
    snprintf(name, sizeof name,
             "\xc3\xbc"
             "0.%s",
             alef); /* L first, EN last: fine */
    assert_true(s_format("idn-hostname", name));
    snprintf(name, sizeof name, "0\xc3\xbc.%s", alef); /* EN first in a Bidi name */
    assert_false(s_format("idn-hostname", name));
    assert_true(s_format("idn-hostname", "0\xc3\xbc.com")); /* no RTL label: no Bidi rule */
    /* The same across A-labels in plain "hostname": xn--4db is U+05D0. */
    assert_true(s_format("hostname", "a.xn--4db"));
    assert_false(s_format("hostname", "1a.xn--4db"));
    assert_true(s_format("hostname", "1a.example"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_limit_counts_the_a_label_octets),
        cmocka_unit_test(test_name_limit_is_253_octets_of_the_ascii_form),
        cmocka_unit_test(test_trailing_dot_and_empty_labels_are_invalid),
        cmocka_unit_test(test_a_labels_in_any_case_and_reserved_labels),
        cmocka_unit_test(test_u_labels_are_checked_as_written),
        cmocka_unit_test(test_bidi_rule_covers_every_label_of_a_bidi_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
