/* The exit statuses and stderr reasons of chatfleet-jsonschema (ARCHITECTURE.md §11), run as a real
 * process from $CHATFLEET_BUILD_DIR/cli/chatfleet-jsonschema. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_bin[1024];
static char s_dir[64];

static int s_setup(void **state) {
    const char *build = getenv("CHATFLEET_BUILD_DIR");
    snprintf(s_bin, sizeof s_bin, "%s/cli/chatfleet-jsonschema", build ? build : ".");
    if (access(s_bin, X_OK) != 0) {
        fprintf(stderr, "missing %s (set CHATFLEET_BUILD_DIR)\n", s_bin);
        return -1;
    }
    snprintf(s_dir, sizeof s_dir, "/tmp/jsonschema-cli-XXXXXX");
    return mkdtemp(s_dir) ? 0 : -1;
}

static int s_teardown(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *s_file(const char *name, const char *text) {
    static char paths[8][128];
    static int next = 0;
    char *path = paths[next++ % 8];
    snprintf(path, 128, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return path;
}

/* Runs the tool with args (NULL-terminated), stdin from input (or /dev/null); returns the exit
 * status and leaves stderr in err. */
static int s_run(const char *input, char *err, size_t errlen, const char *arg, ...) {
    const char *argv[16] = {s_bin};
    int argc = 1;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && argc < 15; a = va_arg(ap, const char *)) {
        argv[argc++] = a;
    }
    va_end(ap);
    char errpath[128];
    snprintf(errpath, sizeof errpath, "%s/stderr", s_dir);
    const char *in = input ? s_file("stdin", input) : "/dev/null";
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd_in = open(in, O_RDONLY);
        int fd_err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fd_out = open("/dev/null", O_WRONLY);
        if (fd_in < 0 || fd_err < 0 || fd_out < 0) {
            _exit(99);
        }
        dup2(fd_in, 0);
        dup2(fd_out, 1);
        dup2(fd_err, 2);
        execv(s_bin, (char *const *)argv);
        _exit(98);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    FILE *f = fopen(errpath, "rb");
    assert_non_null(f);
    size_t n = fread(err, 1, errlen - 1, f);
    err[n] = '\0';
    fclose(f);
    return WEXITSTATUS(status);
}

static const char *SCHEMA = "{\"type\": \"object\", \"required\": [\"n\"],"
                            " \"properties\": {\"n\": {\"type\": \"integer\", \"maximum\": 9}}}";

static void test_valid_instances_exit_0(void **state) {
    char err[4096];
    const char *schema = s_file("schema.json", SCHEMA);
    const char *a = s_file("a.json", "{\"n\": 1}");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, a, NULL), 0);
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, NULL), 0);
    assert_int_equal(s_run("{\"n\": 9}", err, sizeof err, "check", schema, "-", NULL), 0);
}

static void test_invalid_instance_exits_1_with_paths(void **state) {
    char err[4096];
    const char *schema = s_file("schema.json", SCHEMA);
    const char *good = s_file("good.json", "{\"n\": 1}");
    const char *bad = s_file("bad.json", "{\"n\": 10}");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, good, bad, NULL), 1);
    assert_non_null(strstr(err, "bad.json"));
    assert_non_null(strstr(err, "\"/n\""));
    assert_non_null(strstr(err, "/properties/n/maximum"));
    assert_null(strstr(err, "good.json"));
}

/* --native gives the same statuses and reports, and says so when it has no compiler. */
static void test_native_checks_agree_and_need_a_compiler(void **state) {
    char err[4096];
    const char *schema = s_file("schema.json", SCHEMA);
    const char *good = s_file("good.json", "{\"n\": 1}");
    const char *bad = s_file("bad.json", "{\"n\": 10}");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", "--native", schema, good, NULL), 0);
    assert_int_equal(s_run(NULL, err, sizeof err, "check", "--native", schema, good, bad, NULL), 1);
    assert_non_null(strstr(err, "bad.json: invalid at \"/n\""));
    assert_non_null(strstr(err, "/properties/n/maximum"));
    assert_null(strstr(err, "good.json"));
    setenv("CHATFLEET_CC", "/nonexistent/cc", 1);
    assert_int_equal(s_run(NULL, err, sizeof err, "check", "--native", schema, good, NULL), 3);
    unsetenv("CHATFLEET_CC");
    assert_non_null(strstr(err, "no native code: cannot run the C compiler /nonexistent/cc"));
    assert_int_equal(s_run(NULL, err, sizeof err, "check", "--native", NULL), 3);
}

static void test_rejected_schema_exits_2(void **state) {
    char err[4096];
    const char *schema = s_file("ref.json", "{\"properties\": {\"a\": {\"$ref\": \"#\"}}}");
    const char *a = s_file("a.json", "{}");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, a, NULL), 2);
    assert_non_null(strstr(err, "/properties/a/$ref"));
    schema = s_file("fmt.json", "{\"format\": \"colour\"}");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, NULL), 2);
}

static void test_bad_input_exits_3(void **state) {
    char err[4096];
    const char *schema = s_file("schema.json", SCHEMA);
    const char *dup = s_file("dup.json", "{\"n\": 1, \"n\": 2}");
    const char *bad = s_file("bad.json", "{\"n\": 10}");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, dup, NULL), 3);
    assert_non_null(strstr(err, "duplicate"));
    assert_non_null(strstr(err, "\"/n\""));
    /* Malformed input outranks an invalid one. */
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, bad, dup, NULL), 3);
    assert_int_equal(s_run(NULL, err, sizeof err, "check", schema, "/nonexistent/x.json", NULL), 3);
    assert_non_null(strstr(err, "unreadable"));
    const char *broken = s_file("broken.json", "{\"type\": ");
    assert_int_equal(s_run(NULL, err, sizeof err, "check", broken, NULL), 3);
    assert_int_equal(s_run("[1e401]", err, sizeof err, "check", schema, "-", NULL), 3);
    assert_non_null(strstr(err, "magnitude beyond"));
    assert_int_equal(s_run(NULL, err, sizeof err, "verify", schema, NULL), 3);
    assert_int_equal(s_run(NULL, err, sizeof err, NULL), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_instances_exit_0),
        cmocka_unit_test(test_invalid_instance_exits_1_with_paths),
        cmocka_unit_test(test_native_checks_agree_and_need_a_compiler),
        cmocka_unit_test(test_rejected_schema_exits_2),
        cmocka_unit_test(test_bad_input_exits_3),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
