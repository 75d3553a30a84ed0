/* The multi-host partition test (tests/netns/partition-test) as a ctest test: a worker host
 * cut off past its lease has its chats taken over and completed by the other worker, and
 * every write it attempts after healing is rejected. The script does the work and prints
 * its figures; this program runs it on this build and maps its exit status: 0 passes, 77
 * (no network namespaces on this machine) is a cmocka skip, anything else fails.
 *
 * A skip must never read as a pass: cmocka counts a skipped test as not failed, so main
 * then exits 77 as well. ctest shows that as "Not Run" once the test has the property
 * SKIP_RETURN_CODE 77 (tests/CMakeLists.txt), and as a failure until then. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARTITION_SKIP_STATUS 77

static bool s_skipped;

static void test_partitioned_worker_is_fenced_and_its_chats_taken_over(void **u) {
    (void)u;
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    const char *build = getenv("CHATFLEET_BUILD_DIR");
    if (!src || !build) {
        fail_msg("CHATFLEET_SOURCE_DIR and CHATFLEET_BUILD_DIR must be set (ctest sets them)");
    }
    char script[4096];
    int n = snprintf(script, sizeof script, "%s/tests/netns/partition-test", src);
    assert_true(n > 0 && (size_t)n < sizeof script);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(script, script, build, (char *)NULL);
        perror("exec partition-test");
        _exit(127);
    }
    int status = 0;
    pid_t w;
    do {
        w = waitpid(pid, &status, 0);
    } while (w < 0 && errno == EINTR);
    assert_int_equal(w, pid);
    assert_true(WIFEXITED(status));
    int rc = WEXITSTATUS(status);
    if (rc == PARTITION_SKIP_STATUS) {
        printf("SKIPPED: this machine cannot create network namespaces (needs root and "
               "iproute2); the partition test did not run\n");
        s_skipped = true;
        skip();
    }
    if (rc != 0) {
        fail_msg("tests/netns/partition-test exited with status %d (its output is above)", rc);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partitioned_worker_is_fenced_and_its_chats_taken_over),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed ? failed : s_skipped ? PARTITION_SKIP_STATUS : 0;
}
