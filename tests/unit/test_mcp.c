/*
 * One MCP connection (worker/mcp/mcp.h) against tests/mcp/paged_server.mjs, a real child process
 * over stdio (node, no packages): the handshake reads every page of tools/list; a call gets
 * its result; an oversized result, a server past the deadline, a server that exits mid-call
 * and a command that cannot start each end the call with a bounded error; a timed-out or
 * cancelled call is announced to the server with notifications/cancelled, and a cancelled
 * call's callback never runs; the server restarts after it exited. A server started by the
 * connection (tests/mcp/env_server.mjs) sees exactly its configured environment plus PATH, HOME
 * and LANG, none of the worker's, and in the sandbox (bwrap) no secret file of the worker's:
 * one outside its paths is absent, one inside them reads empty. A malformed entry (env,
 * sandbox, command, headers) is refused naming its field. Exit 77 without node.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "id.h"
#include "mcp.h"
#include "mcpset.h"
#include "mem.h"
#include "sandbox.h"

#define WAIT_MS 20000

static char s_script[600];
static char s_env_script[600];
static char s_scripts_dir[600]; /* tests/mcp: the sandbox shows it read-only */
static char s_secret_dir[64];   /* a "key directory" listed as a server's ro_path */
static char s_secret[128];      /* CHATFLEET_CURVE_CERT: in s_secret_dir */
static char s_public[128];      /* a file beside it that the server may read */
static char s_config_file[64];  /* CHATFLEET_CONFIG: outside every path of the server */

/* What a done callback left, for the test thread. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int runs;
    char *text; /* the result as JSON text */
    bool is_error;
} s_done_t;

static void s_on_done(void *arg, json_t *result, bool is_error) {
    s_done_t *d = arg;
    pthread_mutex_lock(&d->mu);
    d->runs++;
    free(d->text);
    d->text = json_dumps(result, JSON_COMPACT);
    d->is_error = is_error;
    json_decref(result);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mu);
}

static void s_done_init(s_done_t *d) {
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cond, NULL);
}

static void s_done_clear(s_done_t *d) {
    free(d->text);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cond);
}

/* Waits for the callback; fails past WAIT_MS. */
static void s_wait(s_done_t *d) {
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&d->mu);
    while (d->runs == 0) {
        if (pthread_cond_timedwait(&d->cond, &d->mu, &at) != 0) {
            break;
        }
    }
    int runs = d->runs;
    pthread_mutex_unlock(&d->mu);
    assert_int_equal(runs, 1);
}

static mcp_t *s_start(const char *command, const char *const *args) {
    const char *ro[] = {s_scripts_dir, NULL};
    mcp_conf_t conf = {.name = "paged",
                       .command = command,
                       .args = args,
                       .sandbox = {.ro_paths = ro},
                       .call_timeout_ms = 5000};
    mcp_t *m = mcp_new(&conf);
    assert_non_null(m);
    return m;
}

static mcp_t *s_paged(void) {
    const char *args[] = {s_script, NULL};
    return s_start("node", args);
}

/* Waits until the server offers n tools. */
static void s_wait_tools(mcp_t *m, size_t n) {
    int64_t end = id_now_ms() + WAIT_MS;
    size_t have = 0;
    while (id_now_ms() < end) {
        json_t *tools = mcp_tools(m);
        have = json_array_size(tools);
        json_decref(tools);
        if (have == n) {
            return;
        }
        usleep(20 * 1000);
    }
    fail_msg("the server offers %zu tools, not %zu", have, n);
}

/* Calls tool with args (JSON text) and waits for the answer into d. */
static void s_call(mcp_t *m, const char *tool, const char *args, int64_t ms, s_done_t *d) {
    json_t *a = json_loads(args, 0, NULL);
    s_done_init(d);
    (void)mcp_call(m, tool, a, id_now_ms() + ms, s_on_done, d);
    json_decref(a);
    s_wait(d);
    printf("  %s: %s%s\n", tool, d->is_error ? "error " : "", d->text);
}

/* Calls tool and asserts the answer holds want and is (or is not) an error. */
static void s_expect(mcp_t *m, const char *tool, const char *args, int64_t ms, const char *want,
                     bool is_error) {
    s_done_t d;
    s_call(m, tool, args, ms, &d);
    assert_true(d.is_error == is_error);
    assert_non_null(strstr(d.text, want));
    s_done_clear(&d);
}

static void test_every_page_of_tools_list_is_read(void **state) {
    (void)state;
    mcp_t *m = s_paged();
    s_wait_tools(m, 10); /* t1..t5 and five scripted tools, two a page */
    json_t *tools = mcp_tools(m);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tools, 9), "name")),
                        "cancels");
    json_decref(tools);
    mcp_destroy(&m);
    assert_null(m);
}

static void test_a_call_gets_its_result_and_an_oversized_one_is_an_error(void **state) {
    (void)state;
    mcp_t *m = s_paged();
    s_expect(m, "t2", "{\"x\":\"1\"}", 10000, "called t2 with {\\\"x\\\":\\\"1\\\"}", false);
    s_expect(m, "big", "{}", 10000, "bytes (the cap is 65536)", true); /* 100 KB of text */
    mcp_destroy(&m);
}

static void test_a_timed_out_call_is_an_error_and_the_server_hears_of_it(void **state) {
    (void)state;
    mcp_t *m = s_paged();
    s_wait_tools(m, 10);
    s_expect(m, "hang", "{}", 300, "did not answer within", true);
    s_expect(m, "cancels", "{}", 10000, "cancels=1", false);
    mcp_stats_t st;
    mcp_stats(m, &st);
    assert_int_equal(st.timeouts, 1);
    mcp_destroy(&m);
}

static void test_a_cancelled_call_never_ends_and_the_server_hears_of_it(void **state) {
    (void)state;
    mcp_t *m = s_paged();
    s_wait_tools(m, 10);
    s_done_t d;
    s_done_init(&d);
    uint64_t id = mcp_call(m, "hang", NULL, id_now_ms() + 10000, s_on_done, &d);
    mcp_stats_t st = {0};
    int64_t end = id_now_ms() + WAIT_MS;
    while (st.calls == 0 && id_now_ms() < end) { /* written to the server */
        usleep(10 * 1000);
        mcp_stats(m, &st);
    }
    assert_int_equal(st.calls, 1);
    assert_true(mcp_cancel(m, id));
    assert_false(mcp_cancel(m, id)); /* taken once */
    s_expect(m, "cancels", "{}", 10000, "cancels=1", false);
    mcp_destroy(&m);
    assert_int_equal(d.runs, 0); /* not even at shutdown */
    s_done_clear(&d);
}

static void test_a_server_that_exits_mid_call_is_an_error_and_restarts(void **state) {
    (void)state;
    mcp_t *m = s_paged();
    s_expect(m, "exit", "{}", 10000, "failed during the call: the server exited", true);
    s_expect(m, "t1", "{}", 10000, "called t1", false); /* waits for the restart */
    mcp_stats_t st;
    mcp_stats(m, &st);
    assert_int_equal(st.starts, 2);
    assert_int_equal(st.ready, 2);
    mcp_destroy(&m);
}

static void test_a_command_that_cannot_start_ends_calls_at_their_deadline(void **state) {
    (void)state;
    mcp_t *m = s_start("/nonexistent/mcp-server", NULL);
    s_expect(m, "t1", "{}", 300, "is not available: cannot start", true);
    mcp_destroy(&m);
}

/* The env server's report (structuredContent) of a probe of the three test paths, under mode. */
static json_t *s_env_report(sandbox_mode_t mode) {
    const char *env[] = {"GREETING=hello sandbox", "EMPTY=", NULL};
    const char *ro[] = {s_scripts_dir, s_secret_dir, NULL};
    const char *args[] = {s_env_script, NULL};
    mcp_conf_t conf = {.name = "env",
                       .command = "node",
                       .args = args,
                       .sandbox = {.mode = mode, .env = env, .ro_paths = ro},
                       .call_timeout_ms = 5000};
    mcp_t *m = mcp_new(&conf);
    assert_non_null(m);
    char *a = mem_printf("{\"paths\":[\"%s\",\"%s\",\"%s\"]}", s_secret, s_public, s_config_file);
    s_done_t d;
    s_call(m, "probe", a, 10000, &d);
    free(a);
    assert_false(d.is_error);
    /* None of the worker's variables, whatever the mode. */
    assert_null(strstr(d.text, "CHATFLEET_"));
    assert_null(strstr(d.text, "sk-unit-provider-key"));
    assert_null(strstr(d.text, "db-password"));
    json_t *v = json_loads(d.text, 0, NULL);
    json_t *report = json_incref(json_object_get(v, "structuredContent"));
    json_decref(v);
    s_done_clear(&d);
    mcp_destroy(&m);
    assert_non_null(report);
    return report;
}

static const char *s_field(const json_t *report, const char *member, const char *key) {
    return json_string_value(json_object_get(json_object_get(report, member), key));
}

/* Exactly the configured variables plus PATH, HOME (its scratch directory, also its working
 * directory) and LANG; and PWD, which bwrap sets to the working directory. */
static void s_expect_clean_env(const json_t *report) {
    const json_t *env = json_object_get(report, "env");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)env, key, val) {
        printf("  env %s=%s\n", key, json_string_value(val));
        assert_true(!strcmp(key, "GREETING") || !strcmp(key, "EMPTY") || !strcmp(key, "PATH") ||
                    !strcmp(key, "HOME") || !strcmp(key, "LANG") || !strcmp(key, "PWD"));
    }
    const char *pwd = s_field(report, "env", "PWD");
    assert_int_equal(json_object_size(env), pwd ? 6 : 5);
    if (pwd) {
        assert_string_equal(pwd, json_string_value(json_object_get(report, "cwd")));
    }
    assert_string_equal(s_field(report, "env", "GREETING"), "hello sandbox");
    assert_string_equal(s_field(report, "env", "PATH"), SANDBOX_PATH_DEFAULT);
    assert_string_equal(s_field(report, "env", "LANG"), "C.UTF-8");
    assert_non_null(strstr(s_field(report, "env", "HOME"), "/chatfleet-mcp-"));
    assert_string_equal(s_field(report, "env", "HOME"),
                        json_string_value(json_object_get(report, "cwd")));
}

static void test_a_sandboxed_server_sees_only_its_env_and_no_secret_file(void **state) {
    (void)state;
    char why[256];
    if (!sandbox_usable(why, sizeof why)) {
        printf("  the sandbox is not usable here (%s): the environment only\n", why);
    }
    json_t *report = s_env_report(SANDBOX_AUTO);
    s_expect_clean_env(report);
    if (sandbox_usable(NULL, 0)) {
        const char *secret = s_field(report, "files", s_secret);
        const char *config = s_field(report, "files", s_config_file);
        printf("  secret: %s; public: %s; config: %s\n", secret, s_field(report, "files", s_public),
               config);
        /* Masked inside a listed path: /dev/null on a nodev mount, which cannot be opened.
         * Outside every path: absent. */
        assert_string_equal(secret, "EACCES");
        assert_string_equal(s_field(report, "files", s_public), "read 6 bytes: public");
        assert_string_equal(config, "ENOENT");
    }
    json_decref(report);
}

static void test_an_unsandboxed_server_still_gets_a_clean_environment(void **state) {
    (void)state;
    json_t *report = s_env_report(SANDBOX_OFF);
    s_expect_clean_env(report);
    /* The risk of running without the sandbox: the worker's files are the server's. */
    assert_non_null(strstr(s_field(report, "files", s_secret), "SECRET-KEY"));
    json_decref(report);
}

/* mcpset_new on a config file holding text: NULL with err naming want, or a set when want is
 * NULL. */
static void s_config(const char *text, const char *want) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/cf-mcpset-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    char err[256] = "";
    mcpset_t *set = mcpset_new(path, err, sizeof err);
    unlink(path);
    if (!want) {
        assert_non_null(set);
        mcpset_destroy(&set);
        return;
    }
    printf("  %s\n", err);
    assert_null(set);
    assert_non_null(strstr(err, want));
}

static void test_a_malformed_server_entry_is_refused_with_its_field_path(void **state) {
    (void)state;
    s_config("{\"models\":[]}", NULL);
    s_config("{\"mcp_servers\":{\"ok\":{\"url\":\"http://127.0.0.1:1/mcp\"}}}", NULL);
    s_config("{\"mcp_servers\":[]}", "mcp_servers: must be an object");
    s_config("{\"mcp_servers\":{\"Bad_Name\":{\"command\":\"x\"}}}", "mcp_servers.Bad_Name:");
    s_config("{\"mcp_servers\":{\"a\":{}}}", "mcp_servers.a: needs exactly one of command");
    s_config("{\"mcp_servers\":{\"a\":{\"command\":\"x\",\"url\":\"http://h/\"}}}",
             "mcp_servers.a: needs exactly one");
    s_config("{\"mcp_servers\":{\"a\":{\"command\":\"x\",\"args\":[\"y\",3]}}}",
             "mcp_servers.a.args[1]: must be a string");
    s_config("{\"mcp_servers\":{\"a\":{\"command\":\"x\",\"timeout_ms\":0}}}",
             "mcp_servers.a.timeout_ms:");
    s_config("{\"mcp_servers\":{\"a\":{\"url\":\"ftp://h/\"}}}", "mcp_servers.a.url:");
    s_config("{\"mcp_servers\":{\"a\":{\"url\":\"http://h/\",\"headers\":{\"X\":\"a\\r\\nb\"}}}}",
             "mcp_servers.a.headers:");
    s_config("{\"mcp_servers\":{\"a\":{\"url\":\"http://h/\",\"headers\":{\"X Y\":\"1\"}}}}",
             "mcp_servers.a.headers:");
}

static void test_a_malformed_env_or_sandbox_is_refused_with_its_field_path(void **state) {
    (void)state;
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"env\":{\"A_1\":\"v\"},"
             "\"sandbox\":{\"ro_paths\":[\"/srv\"],\"rw_paths\":[],\"network\":true}}}}",
             NULL);
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"env\":{\"FOO-BAR\":\"v\"}}}}",
             "mcp_servers.files.env.FOO-BAR: a variable name must match");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"env\":{\"1X\":\"v\"}}}}",
             "mcp_servers.files.env.1X:");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"env\":{\"FOO\":\"a\\nb\"}}}}",
             "mcp_servers.files.env.FOO: must be a one-line string");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"env\":{\"FOO\":3}}}}",
             "mcp_servers.files.env.FOO: must be a one-line string");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"env\":[]}}}",
             "mcp_servers.files.env: must be an object");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"sandbox\":"
             "{\"ro_paths\":[\"/a\",\"rel\"]}}}}",
             "mcp_servers.files.sandbox.ro_paths[1]: must be an absolute path");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"sandbox\":"
             "{\"rw_paths\":[\"/a/../etc\"]}}}}",
             "mcp_servers.files.sandbox.rw_paths[0]:");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"sandbox\":{\"network\":1}}}}",
             "mcp_servers.files.sandbox.network: must be true or false");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"x\",\"sandbox\":{\"net\":true}}}}",
             "mcp_servers.files.sandbox.net: unknown member");
    s_config("{\"mcp_servers\":{\"files\":{\"command\":\"bin/x\"}}}",
             "mcp_servers.files.command: must be an absolute path or a name");
    s_config("{\"mcp_servers\":{\"web\":{\"url\":\"http://h/\",\"env\":{\"A\":\"b\"}}}}",
             "mcp_servers.web: env and sandbox are for a stdio server");
}

/* The worker's environment as the unit tests pretend it: secrets in variables and files. */
static void s_secrets_setup(void) {
    snprintf(s_secret_dir, sizeof s_secret_dir, "/tmp/cf-mcp-keys.XXXXXX");
    ASSERT(mkdtemp(s_secret_dir));
    snprintf(s_secret, sizeof s_secret, "%s/worker.cert_secret", s_secret_dir);
    snprintf(s_public, sizeof s_public, "%s/public.txt", s_secret_dir);
    snprintf(s_config_file, sizeof s_config_file, "/tmp/cf-mcp-config-%d.json", (int)getpid());
    const char *files[][2] = {
        {s_secret, "SECRET-KEY"}, {s_public, "public"}, {s_config_file, "{}"}};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(files[i][0], "w");
        ASSERT(f);
        fputs(files[i][1], f);
        fclose(f);
    }
    setenv("CHATFLEET_CURVE_CERT", s_secret, 1);
    setenv("CHATFLEET_CONFIG", s_config_file, 1);
    setenv("CHATFLEET_DATABASE_URL", "postgresql://u:db-password@h/db", 1);
    setenv("OPENAI_API_KEY", "sk-unit-provider-key", 1);
}

static void s_secrets_teardown(void) {
    unlink(s_secret);
    unlink(s_public);
    unlink(s_config_file);
    rmdir(s_secret_dir);
}

int main(void) {
    const char *source = getenv("CHATFLEET_SOURCE_DIR");
    if (system("node --version > /dev/null 2>&1") != 0) {
        fprintf(stderr, "node is not installed: skipped\n");
        return 77;
    }
    snprintf(s_script, sizeof s_script, "%s/tests/mcp/paged_server.mjs", source ? source : ".");
    snprintf(s_env_script, sizeof s_env_script, "%s/tests/mcp/env_server.mjs",
             source ? source : ".");
    snprintf(s_scripts_dir, sizeof s_scripts_dir, "%s/tests/mcp", source ? source : ".");
    s_secrets_setup(); /* before any thread: setenv is not thread-safe */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_page_of_tools_list_is_read),
        cmocka_unit_test(test_a_call_gets_its_result_and_an_oversized_one_is_an_error),
        cmocka_unit_test(test_a_timed_out_call_is_an_error_and_the_server_hears_of_it),
        cmocka_unit_test(test_a_cancelled_call_never_ends_and_the_server_hears_of_it),
        cmocka_unit_test(test_a_server_that_exits_mid_call_is_an_error_and_restarts),
        cmocka_unit_test(test_a_command_that_cannot_start_ends_calls_at_their_deadline),
        cmocka_unit_test(test_a_malformed_server_entry_is_refused_with_its_field_path),
        cmocka_unit_test(test_a_malformed_env_or_sandbox_is_refused_with_its_field_path),
        cmocka_unit_test(test_a_sandboxed_server_sees_only_its_env_and_no_secret_file),
        cmocka_unit_test(test_an_unsandboxed_server_still_gets_a_clean_environment),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    s_secrets_teardown();
    return rc;
}
