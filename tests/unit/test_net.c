/* chatfleet-net (common/net/): header lines refuse control characters and non-token names
 * (header.h); the egress policy refuses every non-public range, judges an IPv4-mapped address
 * as its IPv4 address, admits the allow-list (over http too) and refuses bad CIDR text, and
 * curl is refused the connect itself (egress.h); Standard Webhooks signatures match the
 * specification's published vector (whsig.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "egress.h"
#include "header.h"
#include "whsig.h"

/* --- header --- */

static void test_header_values_with_control_characters_are_refused_tab_is_not(void **u) {
    (void)u;
    assert_true(header_value_ok("Bearer abc"));
    assert_true(header_value_ok("a\tb"));
    assert_true(header_value_ok(NULL));
    assert_false(header_value_ok("tok\r\nDELETE /admin/all-data HTTP/1.1"));
    assert_false(header_value_ok("a\rb"));
    assert_false(header_value_ok("a\nb"));
    assert_false(header_value_ok("a\x01"));
    assert_false(header_value_ok("a\x1f"));
    assert_false(header_value_ok("a\x7f"));
    /* Text that ends up in a URL or an id holds no tab either. */
    assert_true(header_text_ok("https://example.com/hook"));
    assert_false(header_text_ok("a\tb"));
    assert_false(header_text_ok("a\nb"));
    /* A NUL ends a C string: what a caller holds with an embedded NUL is checked by length
     * where it enters (the JSON layer); here the byte after it is never seen. */
    char nul[] = {'a', '\0', '\r', '\n', '\0'};
    assert_true(header_value_ok(nul));
}

static void test_header_names_must_be_tokens(void **u) {
    (void)u;
    assert_true(header_name_ok("X-A2A-Notification-Token"));
    assert_true(header_name_ok("webhook-signature"));
    assert_true(header_name_ok("!#$%&'*+-.^_`|~09azAZ"));
    assert_false(header_name_ok(""));
    assert_false(header_name_ok(NULL));
    assert_false(header_name_ok("Bad Name"));
    assert_false(header_name_ok("Bad:Name"));
    assert_false(header_name_ok("Bad\r\nName"));
    assert_false(header_name_ok("Bad(Name)"));
}

static void test_header_append_refuses_and_leaves_the_list_as_it_was(void **u) {
    (void)u;
    struct curl_slist *list = NULL;
    assert_int_equal(header_append(&list, "Authorization", "Bearer a\tb"), 0);
    assert_string_equal(list->data, "Authorization: Bearer a\tb");
    struct curl_slist *before = list;
    assert_int_equal(header_append(&list, "X-Token", "x\r\nHost: evil"), -1);
    assert_int_equal(header_append(&list, "X Token", "x"), -1);
    assert_int_equal(header_append(&list, "X-Token", "x\x7f"), -1);
    assert_ptr_equal(list, before);
    assert_null(list->next);
    char *big = malloc(HEADER_LINE_MAX_BYTES + 1);
    memset(big, 'a', HEADER_LINE_MAX_BYTES);
    big[HEADER_LINE_MAX_BYTES] = '\0';
    assert_int_equal(header_append(&list, "X-Big", big), -1);
    free(big);
    assert_int_equal(header_append_line(&list, "X-Line: v"), 0);
    assert_string_equal(list->next->data, "X-Line: v");
    assert_int_equal(header_append_line(&list, "X-Line: v\r\nX-Evil: 1"), -1);
    assert_int_equal(header_append_line(&list, "no colon"), -1);
    curl_slist_free_all(list);
}

/* --- egress --- */

/* Whether a connect to the literal address text is allowed under policy. */
static bool s_ok(const egress_t *policy, const char *text, bool plain) {
    struct sockaddr_storage ss = {0};
    if (strchr(text, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, text, &a->sin6_addr), 1);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, text, &a->sin_addr), 1);
    }
    char why[EGRESS_WHY_MAX] = "";
    bool ok = egress_addr_ok(policy, (struct sockaddr *)&ss, plain, why, sizeof why);
    if (!ok) {
        assert_non_null(strstr(why, "")); /* a refusal always says why */
        assert_true(why[0] != '\0');
    }
    return ok;
}

static void test_every_non_public_range_is_refused_by_default(void **u) {
    (void)u;
    static const char *const refused[] = {"127.0.0.1",
                                          "127.255.255.254",
                                          "10.0.0.1",
                                          "10.255.255.255",
                                          "172.16.0.1",
                                          "172.31.255.255",
                                          "192.168.1.1",
                                          "100.64.0.1",
                                          "100.127.255.255",
                                          "169.254.169.254",
                                          "169.254.0.1",
                                          "224.0.0.1",
                                          "239.255.255.255",
                                          "0.0.0.0",
                                          "0.1.2.3",
                                          "255.255.255.255",
                                          "240.0.0.1",
                                          "192.0.2.1",
                                          "198.51.100.7",
                                          "203.0.113.9",
                                          "198.18.0.1",
                                          "192.0.0.8",
                                          "::1",
                                          "::",
                                          "fc00::1",
                                          "fd00:ec2::254",
                                          "fdff::1",
                                          "fe80::1",
                                          "febf::1",
                                          "ff02::1",
                                          "ff0e::1",
                                          "64:ff9b::7f00:1",
                                          "64:ff9b::808:808",
                                          "2001:db8::1",
                                          "2001:db8:ffff::1",
                                          "::ffff:127.0.0.1",
                                          "::ffff:10.0.0.1",
                                          "::ffff:169.254.169.254",
                                          "::ffff:0.0.0.0",
                                          "::127.0.0.1",
                                          "2002:7f00:1::1",
                                          "2001::1",
                                          "100::1",
                                          "4000::1",
                                          "fec0::1"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (s_ok(NULL, refused[i], false)) {
            fail_msg("%s was allowed", refused[i]);
        }
    }
    static const char *const public[] = {
        "8.8.8.8",     "1.1.1.1",      "93.184.216.34",        "172.32.0.1",    "100.128.0.1",
        "192.169.0.1", "2606:4700::1", "2001:4860:4860::8888", "::ffff:8.8.8.8"};
    for (size_t i = 0; i < sizeof public / sizeof public[0]; i++) {
        if (!s_ok(NULL, public[i], false)) {
            fail_msg("%s was refused", public[i]);
        }
        /* Plain http to a public address needs the allow-list. */
        if (s_ok(NULL, public[i], true)) {
            fail_msg("http to %s was allowed", public[i]);
        }
    }
}

static void test_the_allow_list_admits_inside_over_http_too_and_nothing_outside(void **u) {
    (void)u;
    char why[EGRESS_WHY_MAX];
    egress_t *p = egress_new("127.0.0.0/8, ::1/128,10.1.0.0/16,fd12:3456::/32", why, sizeof why);
    assert_non_null(p);
    assert_true(s_ok(p, "127.0.0.1", true));
    assert_true(s_ok(p, "127.9.9.9", false));
    assert_true(s_ok(p, "::1", true));
    assert_true(s_ok(p, "::ffff:127.0.0.1", true)); /* mapped: judged as its IPv4 address */
    assert_true(s_ok(p, "10.1.200.3", true));
    assert_true(s_ok(p, "fd12:3456:1::9", true));
    assert_false(s_ok(p, "10.2.0.1", false));
    assert_false(s_ok(p, "169.254.169.254", false));
    assert_false(s_ok(p, "fd12:3457::1", false));
    assert_false(s_ok(p, "::2", false));
    assert_false(s_ok(p, "8.8.8.8", true));
    assert_true(s_ok(p, "8.8.8.8", false));
    assert_string_equal(egress_cidrs(p), "127.0.0.0/8, ::1/128,10.1.0.0/16,fd12:3456::/32");
    egress_destroy(&p);
    assert_null(p);
    egress_destroy(&p);
    /* None, and an empty list, is the default policy. */
    p = egress_new("", why, sizeof why);
    assert_non_null(p);
    assert_false(s_ok(p, "127.0.0.1", false));
    egress_destroy(&p);
    p = egress_new("0.0.0.0/0", why, sizeof why);
    assert_true(s_ok(p, "127.0.0.1", true));
    assert_false(s_ok(p, "::1", false));
    egress_destroy(&p);
}

static void test_cidr_text_that_is_not_a_cidr_is_refused_with_the_entry_named(void **u) {
    (void)u;
    static const struct {
        const char *text;
        const char *named;
    } bad[] = {
        {"127.0.0.1", "no /prefix"},    {"127.0.0.0/33", "not a CIDR"},
        {"::1/129", "not a CIDR"},      {"127.0.0.0/", "not a CIDR"},
        {"127.0.0.0/-1", "not a CIDR"}, {"127.0.0.0/+8", "not a CIDR"},
        {"localhost/8", "not a CIDR"},  {"127.0.0.1/8", "bits set"},
        {"10.0.0.0/8,,", "not a CIDR"}, {"10.0.0.0/8;192.168.0.0/16", "not a CIDR"},
        {"300.0.0.0/8", "not a CIDR"},  {"fe80::1/10", "bits set"},
        {"127.0.0.0/8x", "not a CIDR"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[EGRESS_WHY_MAX] = "";
        egress_t *p = egress_new(bad[i].text, why, sizeof why);
        if (p || !strstr(why, bad[i].named)) {
            fail_msg("%s: want a refusal saying \"%s\", got \"%s\"", bad[i].text, bad[i].named,
                     why);
        }
    }
    char many[EGRESS_CIDRS_MAX * 16 + 16] = "";
    for (int i = 0; i <= EGRESS_CIDRS_MAX; i++) {
        size_t n = strlen(many);
        snprintf(many + n, sizeof many - n, "%s10.%d.0.0/16", i ? "," : "", i);
    }
    char why[EGRESS_WHY_MAX] = "";
    assert_null(egress_new(many, why, sizeof why));
    assert_non_null(strstr(why, "more than"));
}

static void test_urls_are_checked_by_scheme_and_every_address_of_their_host(void **u) {
    (void)u;
    char why[EGRESS_WHY_MAX];
    egress_t *lo = egress_new("127.0.0.0/8,::1/128", why, sizeof why);
    assert_int_equal(egress_url_check(NULL, "https://8.8.8.8/hook", why, sizeof why), 0);
    assert_int_equal(egress_url_check(NULL, "https://[2606:4700::1]:8443/h", why, sizeof why), 0);
    assert_int_equal(egress_url_check(NULL, "http://8.8.8.8/hook", why, sizeof why), -1);
    assert_non_null(strstr(why, "https"));
    assert_int_equal(egress_url_check(NULL, "https://127.0.0.1/", why, sizeof why), -1);
    assert_non_null(strstr(why, "loopback"));
    assert_int_equal(egress_url_check(NULL, "https://169.254.169.254/latest", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://[fd00:ec2::254]/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://[::ffff:10.0.0.1]/", why, sizeof why), -1);
    /* Names are resolved: localhost is loopback, refused without the allow-list. */
    assert_int_equal(egress_url_check(NULL, "https://localhost/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(lo, "http://localhost:9/", why, sizeof why), 0);
    assert_int_equal(egress_url_check(lo, "http://127.0.0.1:9/", why, sizeof why), 0);
    assert_int_equal(egress_url_check(lo, "http://[::1]:9/", why, sizeof why), 0);
    /* IPv4 in other spellings is still 127.0.0.1. */
    assert_int_equal(egress_url_check(NULL, "https://2130706433/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://0x7f.1/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://user:pw@8.8.8.8/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "ftp://8.8.8.8/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://a b/", why, sizeof why), -1);
    assert_int_equal(egress_url_check(NULL, "https://no-such-host.invalid/", why, sizeof why), -1);
    assert_non_null(strstr(why, "does not resolve"));
    egress_destroy(&lo);
}

static void test_curl_is_refused_the_connect_itself(void **u) {
    (void)u;
    /* Port 9 on loopback: had the connect been attempted it would fail differently (refused
     * connection), so refused == true proves the policy stopped it before connect(). */
    CURL *h = curl_easy_init();
    egress_call_t call;
    assert_int_equal(egress_curl_apply(NULL, h, "https://127.0.0.1:9/", 2000, &call), 0);
    assert_false(call.plain);
    CURLcode rc = curl_easy_perform(h);
    assert_int_not_equal(rc, CURLE_OK);
    assert_true(call.refused);
    assert_non_null(strstr(call.why, "loopback"));
    curl_easy_cleanup(h);
    /* A name as well: the address it resolves to is what is judged. */
    h = curl_easy_init();
    assert_int_equal(egress_curl_apply(NULL, h, "https://localhost:9/", 2000, &call), 0);
    assert_int_not_equal(curl_easy_perform(h), CURLE_OK);
    assert_true(call.refused);
    curl_easy_cleanup(h);
    /* Plain http to a public address is refused at connect too, without sending. */
    h = curl_easy_init();
    assert_int_equal(egress_curl_apply(NULL, h, "http://8.8.8.8:9/", 2000, &call), 0);
    assert_true(call.plain);
    assert_int_not_equal(curl_easy_perform(h), CURLE_OK);
    assert_true(call.refused);
    assert_non_null(strstr(call.why, "https"));
    curl_easy_cleanup(h);
    h = curl_easy_init();
    assert_int_equal(egress_curl_apply(NULL, h, "gopher://8.8.8.8/", 2000, &call), -1);
    curl_easy_cleanup(h);
}

/* --- whsig --- */

/* The Standard Webhooks specification's test vector (standard-webhooks/standard-webhooks,
 * reproduced by its libraries' tests). */
#define S_VEC_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define S_VEC_ID     "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define S_VEC_TS     1614265330
#define S_VEC_BODY   "{\"test\": 2432232314}"
#define S_VEC_SIG    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

static void test_whsig_reproduces_the_standard_webhooks_vector(void **u) {
    (void)u;
    char sig[WHSIG_SIGNATURE_MAX];
    assert_int_equal(
        whsig_sign(S_VEC_SECRET, S_VEC_ID, S_VEC_TS, S_VEC_BODY, strlen(S_VEC_BODY), sig), 0);
    assert_string_equal(sig, S_VEC_SIG);
    assert_true(
        whsig_verify(S_VEC_SECRET, S_VEC_ID, S_VEC_TS, S_VEC_BODY, strlen(S_VEC_BODY), S_VEC_SIG));
    assert_true(whsig_verify(S_VEC_SECRET, S_VEC_ID, S_VEC_TS, S_VEC_BODY, strlen(S_VEC_BODY),
                             "v1,bm90LXRoaXMtb25l " S_VEC_SIG));
    /* Any change to the id, the time, the body or the key breaks it. */
    assert_false(whsig_verify(S_VEC_SECRET, "msg_other", S_VEC_TS, S_VEC_BODY, strlen(S_VEC_BODY),
                              S_VEC_SIG));
    assert_false(whsig_verify(S_VEC_SECRET, S_VEC_ID, S_VEC_TS + 1, S_VEC_BODY, strlen(S_VEC_BODY),
                              S_VEC_SIG));
    assert_false(whsig_verify(S_VEC_SECRET, S_VEC_ID, S_VEC_TS, "{\"test\": 2432232315}",
                              strlen(S_VEC_BODY), S_VEC_SIG));
    assert_false(whsig_verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSx", S_VEC_ID, S_VEC_TS,
                              S_VEC_BODY, strlen(S_VEC_BODY), S_VEC_SIG));
    assert_false(
        whsig_verify(S_VEC_SECRET, S_VEC_ID, S_VEC_TS, S_VEC_BODY, strlen(S_VEC_BODY), ""));
}

static void test_whsig_secrets_are_new_each_time_and_bad_ones_refused(void **u) {
    (void)u;
    char a[WHSIG_SECRET_MAX];
    char b[WHSIG_SECRET_MAX];
    assert_int_equal(whsig_secret_new(a), 0);
    assert_int_equal(whsig_secret_new(b), 0);
    assert_string_not_equal(a, b);
    assert_memory_equal(a, "whsec_", 6);
    assert_int_equal(strlen(a), 6 + 32); /* base64 of 24 bytes */
    char sig[WHSIG_SIGNATURE_MAX];
    assert_int_equal(whsig_sign(a, "task/STATE", 1, "{}", 2, sig), 0);
    assert_true(whsig_verify(a, "task/STATE", 1, "{}", 2, sig));
    assert_false(whsig_verify(b, "task/STATE", 1, "{}", 2, sig));
    assert_int_equal(whsig_sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "i", 1, "", 0, sig), -1);
    assert_string_equal(sig, "");
    assert_int_equal(whsig_sign("whsec_c2hvcnQ=", "i", 1, "", 0, sig), -1); /* 5 bytes */
    assert_int_equal(whsig_sign("whsec_not base64!", "i", 1, "", 0, sig), -1);
    assert_int_equal(whsig_sign(NULL, "i", 1, "", 0, sig), -1);
    assert_int_equal(whsig_sign(a, "a.b", 1, "", 0, sig), -1);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_values_with_control_characters_are_refused_tab_is_not),
        cmocka_unit_test(test_header_names_must_be_tokens),
        cmocka_unit_test(test_header_append_refuses_and_leaves_the_list_as_it_was),
        cmocka_unit_test(test_every_non_public_range_is_refused_by_default),
        cmocka_unit_test(test_the_allow_list_admits_inside_over_http_too_and_nothing_outside),
        cmocka_unit_test(test_cidr_text_that_is_not_a_cidr_is_refused_with_the_entry_named),
        cmocka_unit_test(test_urls_are_checked_by_scheme_and_every_address_of_their_host),
        cmocka_unit_test(test_curl_is_refused_the_connect_itself),
        cmocka_unit_test(test_whsig_reproduces_the_standard_webhooks_vector),
        cmocka_unit_test(test_whsig_secrets_are_new_each_time_and_bad_ones_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
