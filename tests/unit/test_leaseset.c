/* The worker's lease set (worker/lease/leaseset.h): thousands of leases added and removed in any
 * order; a duplicate is ignored; a lease is known by its chat and its runner together; a
 * snapshot holds exactly the leases present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "leaseset.h"
#include "mem.h"

#define S_N 5000

static void s_ids(int i, char chat[ID_UUID_LEN + 1], char runner[ID_UUID_LEN + 1]) {
    snprintf(chat, ID_UUID_LEN + 1, "00000000-0000-4000-8000-%012d", i);
    snprintf(runner, ID_UUID_LEN + 1, "11111111-0000-4000-8000-%012d", i);
}

/* Every lease of the snapshot is one of those marked present, each once, and all are there. */
static void s_check_snapshot(leaseset_t *set, const bool *present) {
    lease_t *leases = NULL;
    size_t n = leaseset_snapshot(set, &leases);
    size_t want = 0;
    for (int i = 0; i < S_N; i++) {
        want += present[i];
    }
    assert_int_equal(n, want);
    assert_int_equal(leaseset_size(set), want);
    bool *seen = mem_calloc(S_N, sizeof *seen);
    for (size_t k = 0; k < n; k++) {
        char *end = NULL;
        long i = strtol(leases[k].chat_id + 24, &end, 10);
        assert_true(end && *end == '\0' && i >= 0 && i < S_N && present[i] && !seen[i]);
        char chat[ID_UUID_LEN + 1], runner[ID_UUID_LEN + 1];
        s_ids((int)i, chat, runner);
        assert_string_equal(leases[k].runner_id, runner);
        seen[i] = true;
    }
    free(seen);
    free(leases);
}

static void test_leases_come_and_go_in_any_order(void **u) {
    (void)u;
    leaseset_t *set = leaseset_new();
    bool *present = mem_calloc(S_N, sizeof *present);
    char chat[ID_UUID_LEN + 1], runner[ID_UUID_LEN + 1];
    for (int i = 0; i < S_N; i++) {
        s_ids(i, chat, runner);
        leaseset_add(set, chat, runner);
        leaseset_add(set, chat, runner); /* a duplicate is ignored */
        present[i] = true;
    }
    s_check_snapshot(set, present);
    /* Remove every third from the middle out, so removals move the last lease into gaps. */
    for (int i = 1; i < S_N; i += 3) {
        s_ids(i, chat, runner);
        assert_true(leaseset_remove(set, chat, runner));
        assert_false(leaseset_remove(set, chat, runner));
        present[i] = false;
    }
    s_check_snapshot(set, present);
    for (int i = 0; i < S_N; i++) {
        s_ids(i, chat, runner);
        assert_int_equal(leaseset_has(set, chat, runner), present[i]);
    }
    /* The same chat under another runner is another lease. */
    s_ids(0, chat, runner);
    runner[0] = '2';
    assert_false(leaseset_has(set, chat, runner));
    assert_false(leaseset_remove(set, chat, runner));
    leaseset_add(set, chat, runner);
    assert_true(leaseset_has(set, chat, runner));
    assert_true(leaseset_remove(set, chat, runner));
    /* Remove all that remain, last first and then first first. */
    for (int i = S_N - 1; i >= 0; i -= 2) {
        s_ids(i, chat, runner);
        assert_int_equal(leaseset_remove(set, chat, runner), present[i]);
        present[i] = false;
    }
    s_check_snapshot(set, present);
    for (int i = 0; i < S_N; i++) {
        s_ids(i, chat, runner);
        assert_int_equal(leaseset_remove(set, chat, runner), present[i]);
        present[i] = false;
    }
    s_check_snapshot(set, present);
    free(present);
    leaseset_destroy(&set);
    assert_null(set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leases_come_and_go_in_any_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
