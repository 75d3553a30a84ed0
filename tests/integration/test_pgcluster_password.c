/*
 * test_pgcluster_password: `deploy/pgcluster init DIR --password`, which the quick start uses
 * (issue 42, item 7), makes a PostgreSQL that trusts nobody: every connection, over TCP on
 * loopback and over the unix socket, must give postgres's password (scram-sha-256); the
 * random password and the URL that carries it are 0600; the URL connects.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mem.h"
#include "proc.h"

static char s_dir[64];
static char *s_url;

/* Runs deploy/pgcluster CMD s_dir [FLAG] and returns its stdout without the newline, or NULL. */
static char *s_pgcluster(const char *cmd, const char *flag) {
    char *bin = mem_printf("%s/deploy/pgcluster", getenv("CHATFLEET_SOURCE_DIR"));
    char *argv[] = {bin, (char *)cmd, s_dir, (char *)flag, NULL};
    char *out = proc_output(argv, NULL);
    free(bin);
    if (out) {
        out[strcspn(out, "\n")] = '\0';
    }
    return out;
}

static int s_setup(void **u) {
    (void)u;
    snprintf(s_dir, sizeof s_dir, "/tmp/cfpgpw.XXXXXX");
    if (!getenv("CHATFLEET_SOURCE_DIR") || !mkdtemp(s_dir)) {
        return -1;
    }
    free(s_pgcluster("init", "--password"));
    s_url = s_pgcluster("start", NULL);
    return s_url && strncmp(s_url, "postgresql://", 13) == 0 ? 0 : -1;
}

static int s_teardown(void **u) {
    (void)u;
    free(s_pgcluster("stop", NULL));
    char *argv[] = {"/bin/rm", "-rf", s_dir, NULL};
    free(proc_output(argv, NULL));
    free(s_url);
    return 0;
}

/* Connects with conninfo: NULL when it worked (the connection closed), else libpq's message. */
static char *s_refusal(const char *conninfo) {
    PGconn *c = PQconnectdb(conninfo);
    char *why = PQstatus(c) == CONNECTION_OK ? NULL : mem_strdup(PQerrorMessage(c));
    PQfinish(c);
    return why;
}

static int s_mode(const char *name) {
    char *path = mem_printf("%s/%s", s_dir, name);
    struct stat st;
    int rc = stat(path, &st);
    free(path);
    return rc == 0 ? (int)(st.st_mode & 0777) : -1;
}

static void test_the_url_carries_a_random_password_and_connects(void **u) {
    (void)u;
    const char *colon = strchr(s_url + 13, ':');
    const char *at = strchr(s_url, '@');
    assert_non_null(colon);
    assert_non_null(at);
    assert_true(colon < at);
    assert_int_equal(at - colon - 1, 48); /* 24 random bytes in hex */
    char *why = s_refusal(s_url);
    if (why) {
        fail_msg("the URL did not connect: %s", why);
    }
    assert_int_equal(s_mode("password"), 0600);
    assert_int_equal(s_mode("url"), 0600);
}

static void test_no_connection_is_trusted_without_the_password(void **u) {
    (void)u;
    const char *colon = strchr(s_url + 13, ':');
    const char *at = strchr(s_url, '@');
    char *tcp = mem_printf("%.*s%s", (int)(colon - s_url), s_url, at);
    char *wrong = mem_printf("%.*s:not-the-password%s", (int)(colon - s_url), s_url, at);
    char *port = mem_printf("%s/port", s_dir);
    char *port_text = proc_file_text(port);
    char *sock = mem_printf("%s/run", s_dir);
    char *end = NULL;
    long port_n = strtol(port_text, &end, 10);
    assert_true(end != port_text && port_n > 0 && port_n < 65536);
    char *socket = mem_printf("host=%s port=%ld user=postgres dbname=postgres", sock, port_n);
    const char *const tries[] = {tcp, wrong, socket};
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        char *why = s_refusal(tries[i]);
        if (!why) {
            fail_msg("connected without the password: %s", tries[i]);
        }
        assert_non_null(strstr(why, "password"));
        free(why);
    }
    char *hba_path = mem_printf("%s/data/pg_hba.conf", s_dir);
    char *hba = proc_file_text(hba_path);
    char *save = NULL;
    for (char *line = strtok_r(hba, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] != '#' && strstr(line, "trust")) {
            fail_msg("pg_hba.conf trusts: %s", line);
        }
    }
    free(hba);
    free(hba_path);
    free(tcp);
    free(wrong);
    free(port);
    free(port_text);
    free(sock);
    free(socket);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_url_carries_a_random_password_and_connects),
        cmocka_unit_test(test_no_connection_is_trusted_without_the_password),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
