/*
 * console_content_type (api-gateway/rest/console.h): the console serves only plain file names of
 * its own directory with a known extension, so no request can name another file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "console.h"

static void test_plain_names_with_known_extensions_get_their_type(void **u) {
    (void)u;
    assert_string_equal(console_content_type("index.html"), "text/html; charset=utf-8");
    assert_string_equal(console_content_type("app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(console_content_type("style.css"), "text/css; charset=utf-8");
    assert_string_equal(console_content_type("logo_2-b.svg"), "image/svg+xml");
}

static void test_any_other_name_is_refused(void **u) {
    (void)u;
    const char *refused[] = {"",          ".js",      "..",         "../x.js",    "a/b.js",
                             "README.md", "a.js.map", "a b.js",     "%2e%2e.js",  "app.JS",
                             "app.",      "app",      "app.html\n", ".hidden.css"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (console_content_type(refused[i])) {
            fail_msg("\"%s\" was accepted", refused[i]);
        }
    }
    char long_name[80];
    memset(long_name, 'a', 62);
    memcpy(long_name + 62, ".js", 4); /* 65 characters: one past the cap */
    assert_null(console_content_type(long_name));
    memcpy(long_name + 61, ".js", 4); /* 64 characters */
    assert_non_null(console_content_type(long_name));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_names_with_known_extensions_get_their_type),
        cmocka_unit_test(test_any_other_name_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
