/* config_redact_url: every form of a libpq password is hidden, everything else kept (the TLS
 * parameters in particular: ARCHITECTURE.md §1.1, "Transport security"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "config.h"

static void s_check(const char *url, const char *want) {
    char out[1024];
    config_redact_url(url, out, sizeof out);
    assert_string_equal(out, want);
}

static void test_url_user_password_is_hidden(void **u) {
    (void)u;
    s_check("postgresql://app:s3cret@db:5432/chatfleet?sslmode=verify-full&sslrootcert=/x/ca.pem",
            "postgresql://app:***@db:5432/chatfleet?sslmode=verify-full&sslrootcert=/x/ca.pem");
}

static void test_url_without_password_is_unchanged(void **u) {
    (void)u;
    s_check("postgresql://app@db:5432/chatfleet?sslmode=verify-full",
            "postgresql://app@db:5432/chatfleet?sslmode=verify-full");
    /* A port's colon is not a password, and an @ in a parameter is not a user. */
    s_check("postgresql://db:5432/chatfleet?application_name=a@b",
            "postgresql://db:5432/chatfleet?application_name=a@b");
}

static void test_password_parameter_is_hidden(void **u) {
    (void)u;
    s_check("postgresql://app@db/chatfleet?password=s3cret&sslmode=verify-full",
            "postgresql://app@db/chatfleet?password=***&sslmode=verify-full");
    s_check("postgresql://app@db/chatfleet?sslmode=require&password=s3cret",
            "postgresql://app@db/chatfleet?sslmode=require&password=***");
    /* Only the parameter itself: a name that merely ends in "password=" stays. */
    s_check("postgresql://db/c?xpassword=1", "postgresql://db/c?xpassword=1");
}

static void test_keyword_form_password_is_hidden(void **u) {
    (void)u;
    s_check("host=db dbname=chatfleet password=s3cret sslmode=verify-full",
            "host=db dbname=chatfleet password=*** sslmode=verify-full");
    s_check("host=db password='s3 c\\'ret' sslmode=verify-full",
            "host=db password=*** sslmode=verify-full");
}

/* A buffer too small for the whole text cuts it, never overruns, and still hides. */
static void test_small_buffer_is_cut_safely(void **u) {
    (void)u;
    char out[24];
    config_redact_url("postgresql://a:b@db/c?password=s3cret", out, sizeof out);
    assert_string_equal(out, "postgresql://a:***@db/c");
    char tiny[8];
    config_redact_url("host=db password=s3cret", tiny, sizeof tiny);
    assert_string_equal(tiny, "host=db");
    /* Empty values and many of them grow the text: never past the buffer. */
    char many[64];
    config_redact_url("postgresql://a:@db/c?password=&password=&password=&password=", many,
                      sizeof many);
    assert_string_equal(many, "postgresql://a:***@db/c?password=***&password=***&password=***&");
    char edge[21];
    config_redact_url("host=db password=s3cret x", edge, sizeof edge);
    assert_string_equal(edge, "host=db password=***");
    /* Cut inside the user:password part: still no byte of the password. */
    char mid[20];
    config_redact_url("postgresql://a:verylongsecret@db/c", mid, sizeof mid);
    assert_string_equal(mid, "postgresql://a:***@");
    assert_null(strstr(mid, "very"));
}

static void test_unset_is_named(void **u) {
    (void)u;
    s_check(NULL, "(unset)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_user_password_is_hidden),
        cmocka_unit_test(test_url_without_password_is_unchanged),
        cmocka_unit_test(test_password_parameter_is_hidden),
        cmocka_unit_test(test_keyword_form_password_is_hidden),
        cmocka_unit_test(test_small_buffer_is_cut_safely),
        cmocka_unit_test(test_unset_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
