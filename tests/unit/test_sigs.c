/* sigs (common/base): a raised signal runs the installed handler with the asked flags,
 * SIGPIPE is ignored only when asked, and a blocked signal waits for sigsuspend. raise()
 * returns only after the handler has run, so no test waits. */
#include "sigs.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static volatile sig_atomic_t s_last;
static volatile sig_atomic_t s_count;

static void s_on_signal(int sig) {
    s_last = sig;
    s_count++;
}

/* Puts SIGUSR1, SIGUSR2 and SIGPIPE back to their defaults and clears the record. */
static int s_reset(void **state) {
    (void)state;
    struct sigaction dfl = {0};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGUSR1, &dfl, NULL);
    sigaction(SIGUSR2, &dfl, NULL);
    sigaction(SIGPIPE, &dfl, NULL);
    s_last = 0;
    s_count = 0;
    return 0;
}

static struct sigaction s_current(int sig) {
    struct sigaction now;
    assert_int_equal(sigaction(sig, NULL, &now), 0);
    return now;
}

static void test_a_raised_signal_runs_the_handler_and_sigpipe_is_ignored(void **state) {
    (void)state;
    sigs_install(s_on_signal, (const int[]){SIGUSR1, SIGUSR2, 0}, 0, SIGS_PIPE_IGNORE);
    assert_int_equal(raise(SIGUSR1), 0);
    assert_int_equal(s_last, SIGUSR1);
    assert_int_equal(raise(SIGUSR2), 0);
    assert_int_equal(s_last, SIGUSR2);
    assert_int_equal(s_count, 2);
    assert_true(s_current(SIGPIPE).sa_handler == SIG_IGN);
    assert_int_equal(raise(SIGPIPE), 0); /* the process would end here were it not ignored */
    assert_int_equal(s_count, 2);
}

static void test_the_handler_gets_exactly_the_asked_flags(void **state) {
    (void)state;
    sigs_install(s_on_signal, (const int[]){SIGUSR1, 0}, SA_RESTART, SIGS_PIPE_KEEP);
    struct sigaction now = s_current(SIGUSR1);
    assert_true(now.sa_handler == s_on_signal);
    assert_true(now.sa_flags & SA_RESTART);
    assert_false(now.sa_flags & (SA_RESETHAND | SA_NODEFER | SA_SIGINFO));
    sigs_install(s_on_signal, (const int[]){SIGUSR1, 0}, 0, SIGS_PIPE_KEEP);
    assert_false(s_current(SIGUSR1).sa_flags & SA_RESTART);
    assert_int_equal(raise(SIGUSR1), 0);
    assert_int_equal(raise(SIGUSR1), 0); /* not reset to the default by the first */
    assert_int_equal(s_count, 2);
}

static void test_keep_leaves_sigpipe_as_the_process_had_it(void **state) {
    (void)state;
    sigs_install(s_on_signal, (const int[]){SIGPIPE, 0}, 0, SIGS_PIPE_KEEP);
    sigs_install(s_on_signal, (const int[]){SIGUSR1, 0}, 0, SIGS_PIPE_KEEP);
    assert_true(s_current(SIGPIPE).sa_handler == s_on_signal);
    assert_int_equal(raise(SIGPIPE), 0);
    assert_int_equal(s_last, SIGPIPE);
}

static void test_a_blocked_signal_waits_for_sigsuspend(void **state) {
    (void)state;
    static const int signals[] = {SIGUSR1, SIGUSR2, 0};
    sigs_install(s_on_signal, signals, 0, SIGS_PIPE_KEEP);
    sigset_t old;
    sigs_block(signals, &old);
    assert_int_equal(raise(SIGUSR2), 0);
    assert_int_equal(s_count, 0);
    sigset_t pending;
    assert_int_equal(sigpending(&pending), 0);
    assert_int_equal(sigismember(&pending, SIGUSR2), 1);
    assert_int_equal(sigismember(&pending, SIGUSR1), 0);
    sigsuspend(&old); /* returns once the pending SIGUSR2's handler has run */
    assert_int_equal(s_last, SIGUSR2);
    assert_int_equal(s_count, 1);
    assert_int_equal(sigprocmask(SIG_SETMASK, &old, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_a_raised_signal_runs_the_handler_and_sigpipe_is_ignored,
                               s_reset),
        cmocka_unit_test_setup(test_the_handler_gets_exactly_the_asked_flags, s_reset),
        cmocka_unit_test_setup(test_keep_leaves_sigpipe_as_the_process_had_it, s_reset),
        cmocka_unit_test_setup(test_a_blocked_signal_waits_for_sigsuspend, s_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
