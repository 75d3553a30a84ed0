/* dynbuf and hex (common/base): the cap is hard and exact, appends past it change nothing,
 * the bytes stay NUL-terminated, consuming a prefix gives its room back, and hex reads and
 * writes every digit. */
#include "dynbuf.h"
#include "hex.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_dynbuf_fills_exactly_to_its_cap_and_refuses_one_byte_more(void **state) {
    (void)state;
    dynbuf_t b;
    dynbuf_init(&b, 10);
    assert_string_equal(dynbuf_str(&b), "");
    assert_int_equal(dynbuf_add(&b, "hello", 5), 0);
    assert_int_equal(dynbuf_addf(&b, "%d%s", 12, "345"), 0);
    assert_int_equal(b.len, 10);
    assert_string_equal(dynbuf_str(&b), "hello12345");
    assert_int_equal(dynbuf_add(&b, "x", 1), -1);
    assert_int_equal(dynbuf_addf(&b, "%s", "y"), -1);
    assert_int_equal(b.len, 10);
    assert_string_equal(dynbuf_str(&b), "hello12345");
    dynbuf_free(&b);
}

static void test_dynbuf_refuses_a_whole_append_that_would_pass_the_cap(void **state) {
    (void)state;
    dynbuf_t b;
    dynbuf_init(&b, 8);
    assert_int_equal(dynbuf_add(&b, "abcd", 4), 0);
    assert_int_equal(dynbuf_add(&b, "efghi", 5), -1); /* 9 > 8: nothing of it lands */
    assert_string_equal(dynbuf_str(&b), "abcd");
    assert_int_equal(dynbuf_add(&b, "efgh", 4), 0);
    assert_string_equal(dynbuf_str(&b), "abcdefgh");
    dynbuf_free(&b);
}

static void test_dynbuf_grows_across_many_appends_and_hands_its_bytes_over(void **state) {
    (void)state;
    dynbuf_t b;
    dynbuf_init(&b, 100000);
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(dynbuf_add(&b, "0123456789", 10), 0);
    }
    assert_int_equal(b.len, 100000);
    assert_int_equal(dynbuf_add(&b, "", 0), 0); /* nothing at the cap still fits */
    assert_int_equal(dynbuf_add(&b, "!", 1), -1);
    assert_memory_equal(dynbuf_str(&b) + 99990, "0123456789", 11);
    char *taken = dynbuf_take(&b);
    assert_non_null(taken);
    assert_int_equal(strlen(taken), 100000);
    free(taken);
    assert_int_equal(b.len, 0);
    assert_string_equal(dynbuf_str(&b), "");
    assert_int_equal(dynbuf_add(&b, "again", 5), 0); /* the cap outlives take */
    dynbuf_reset(&b);
    assert_string_equal(dynbuf_str(&b), "");
    dynbuf_free(&b);
}

static void test_dynbuf_consume_drops_a_prefix_and_frees_its_room_under_the_cap(void **state) {
    (void)state;
    dynbuf_t b;
    dynbuf_init(&b, 8);
    dynbuf_consume(&b, 0); /* nothing to drop while empty */
    assert_string_equal(dynbuf_str(&b), "");
    assert_int_equal(dynbuf_add(&b, "line1\nli", 8), 0);
    assert_int_equal(dynbuf_add(&b, "n", 1), -1); /* full */
    dynbuf_consume(&b, 6);
    assert_int_equal(b.len, 2);
    assert_string_equal(dynbuf_str(&b), "li"); /* the rest moved to the front, NUL-terminated */
    assert_int_equal(dynbuf_add(&b, "ne2\n", 4), 0); /* the dropped bytes' room is back */
    assert_string_equal(dynbuf_str(&b), "line2\n");
    assert_int_equal(dynbuf_add(&b, "abc", 3), -1); /* 6 + 3 > 8: the cap still holds */
    dynbuf_consume(&b, b.len);
    assert_int_equal(b.len, 0);
    assert_string_equal(dynbuf_str(&b), "");
    assert_int_equal(dynbuf_add(&b, "12345678", 8), 0);
    assert_string_equal(dynbuf_str(&b), "12345678");
    dynbuf_free(&b);
}

static void test_hex_reads_every_digit_and_refuses_the_rest(void **state) {
    (void)state;
    const char *digits = "0123456789abcdefABCDEF";
    const int values[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                          11, 12, 13, 14, 15, 10, 11, 12, 13, 14, 15};
    for (size_t i = 0; digits[i]; i++) {
        assert_int_equal(hex_digit(digits[i]), values[i]);
    }
    const char *not_digits = "gG/:@`xX \n";
    for (size_t i = 0; not_digits[i]; i++) {
        assert_int_equal(hex_digit(not_digits[i]), -1);
    }
    assert_int_equal(hex_digit(0), -1);
    assert_int_equal(hex_digit(0xff), -1);
}

static void test_hex_writes_lower_case_pairs_with_a_nul(void **state) {
    (void)state;
    const unsigned char in[] = {0x00, 0x0f, 0xa5, 0xff};
    char out[9];
    memset(out, 'z', sizeof out);
    hex_encode(in, sizeof in, out);
    assert_string_equal(out, "000fa5ff");
    hex_encode(in, 0, out);
    assert_string_equal(out, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynbuf_fills_exactly_to_its_cap_and_refuses_one_byte_more),
        cmocka_unit_test(test_dynbuf_refuses_a_whole_append_that_would_pass_the_cap),
        cmocka_unit_test(test_dynbuf_grows_across_many_appends_and_hands_its_bytes_over),
        cmocka_unit_test(test_dynbuf_consume_drops_a_prefix_and_frees_its_room_under_the_cap),
        cmocka_unit_test(test_hex_reads_every_digit_and_refuses_the_rest),
        cmocka_unit_test(test_hex_writes_lower_case_pairs_with_a_nul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
