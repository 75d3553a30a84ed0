/*
 * The CI-sized chaos run (issue 8 item 1): a private PostgreSQL, the broker, two gateways and
 * three workers under a seeded schedule of kill -9, SIGSTOP, broker, PostgreSQL and gateway
 * faults while concurrent clients drive a mixed workload; then (issue 14) 300 slow turns in
 * flight together while workers are killed and stopped, on workers capped at 6 connections;
 * then every invariant of tests/chaos/README.md holds and is printed with its counts, the
 * slow turns' (each answered once, none stale, every chat waiting, one receipt each) and the
 * workers' connections (never above 3 x 6 in pg_stat_activity) among them, and (issue 36) the
 * subagent turns' agent waits (each resumed at most once, exactly once while its call stands,
 * with every named child's final answer and value).
 * CHATFLEET_CHAOS_SEED reproduces a run; CHATFLEET_CHAOS_SECONDS, CHATFLEET_CHAOS_SLOW_TURNS
 * and CHATFLEET_CHAOS_SLOW_SECONDS resize it (the longer command is in the README).
 *
 * tests/CMakeLists.txt builds only tests/integration/test_*.c, so the harness's modules
 * are compiled into this translation unit rather than duplicated or moved into the support
 * library (they are one harness, not shared support).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "../chaos/agentcheck.c"
#include "../chaos/chaos.c"
#include "../chaos/hookcheck.c"
#include "../chaos/ledger.c"

/* The CI size: about 80 s in all on two cores, plain or under ASan; the slow phase holds
 * hundreds of slow turns in flight (issue 14). */
#define TEST_CHAOS_SECONDS    45
#define TEST_CHAOS_CHATS      6
#define TEST_CHAOS_SLOW_TURNS 300

static void test_chaos_run_keeps_every_invariant(void **u) {
    (void)u;
    chaos_config_t cfg = chaos_config_from_env(TEST_CHAOS_SECONDS, TEST_CHAOS_CHATS,
                                               TEST_CHAOS_SLOW_TURNS, "test_chaos");
    int failed = chaos_run(&cfg);
    if (failed) {
        fail_msg("%d invariants failed (seed %u; rerun with CHATFLEET_CHAOS_SEED=%u)", failed,
                 cfg.seed, cfg.seed);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chaos_run_keeps_every_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
