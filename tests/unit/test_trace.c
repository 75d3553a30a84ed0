/* trace (common/base): a traceparent is read strictly (version, lengths, lowercase hex, no
 * all-zero id, version ff refused, a later version's extra fields allowed), written back as
 * version 00, and a request without a valid one gets a new random trace. */
#include "trace.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

static void test_valid_traceparents_are_read(void **state) {
    (void)state;
    trace_ctx_t t;
    assert_int_equal(trace_parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &t), 0);
    assert_string_equal(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_string_equal(t.span_id, "00f067aa0ba902b7");
    assert_int_equal(t.flags, 1);
    char out[TRACE_PARENT_LEN + 1];
    trace_format(&t, out);
    assert_string_equal(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /* A later version may carry more fields; it is written back as 00. */
    assert_int_equal(
        trace_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra", &t), 0);
    assert_int_equal(t.flags, 0);
}

static void test_invalid_traceparents_are_refused(void **state) {
    (void)state;
    const char *bad[] = {
        NULL,
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",    /* short */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", /* 00 with more */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* version ff */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero span id */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* uppercase */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* separator */
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",   /* not hex */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  /* no dash after */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        trace_ctx_t t = {.flags = 7};
        assert_int_equal(trace_parse(bad[i], &t), -1);
        assert_int_equal(t.flags, 7); /* untouched */
    }
}

static void test_a_missing_or_bad_header_starts_a_new_trace(void **state) {
    (void)state;
    char a[TRACE_PARENT_LEN + 1], b[TRACE_PARENT_LEN + 1];
    const char *given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    assert_true(trace_from_header(given, a));
    assert_string_equal(a, given);
    assert_false(trace_from_header(NULL, a));
    assert_false(trace_from_header("garbage", b));
    trace_ctx_t ta, tb;
    assert_int_equal(trace_parse(a, &ta), 0);
    assert_int_equal(trace_parse(b, &tb), 0);
    assert_string_not_equal(ta.trace_id, tb.trace_id);
    assert_int_equal(ta.flags, 1);
    char span[TRACE_SPAN_HEX + 1];
    assert_int_equal(trace_span_id(span), 0);
    assert_int_equal(strlen(span), TRACE_SPAN_HEX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_traceparents_are_read),
        cmocka_unit_test(test_invalid_traceparents_are_refused),
        cmocka_unit_test(test_a_missing_or_bad_header_starts_a_new_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
