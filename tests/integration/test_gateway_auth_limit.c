/*
 * test_gateway_auth_limit: guessing tokens cannot load the database (issue 42, item 4). A
 * gateway with CHATFLEET_AUTH_CHECKS_PER_S=1 and CHATFLEET_AUTH_CHECKS_BURST=5: token checks
 * that would reach the database spend an address's bucket, and past it the address gets 429
 * with a Retry-After; a token that found no user is answered 401 from memory afterwards (no
 * bucket, no query); a token already verified goes on working throughout; the bucket refills.
 * And with CHATFLEET_CHATS_PER_MIN=3, a user's fourth chat in a minute gets 429 with a
 * Retry-After, over REST and over A2A, while another user's first is created.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "db.h"
#include "mem.h"
#include "proc.h"

static cluster_t *s_c;

static int s_setup(void **u) {
    (void)u;
    static const char *const env[] = {
        "CHATFLEET_AUTH_CHECKS_PER_S=1", "CHATFLEET_AUTH_CHECKS_BURST=5",
        "CHATFLEET_AUTH_CACHE_MS=60000", "CHATFLEET_CHATS_PER_MIN=3", NULL};
    cluster_opts_t o = {.name = "test_gateway_auth_limit", .gateways = 1, .env = env};
    s_c = cluster_new(&o);
    return 0;
}

static int s_teardown(void **u) {
    (void)u;
    cluster_destroy(&s_c);
    return 0;
}

/* The status of GET /api/v2/users/me with token; the body into *body when not NULL. */
static long s_me(const char *token, char **body) {
    char *url = mem_printf("%s/api/v2/users/me", cluster_url(s_c, 0));
    proc_http_t r = {0};
    long status = proc_http("GET", url, token, NULL, &r) == 0 ? r.status : -1;
    if (body) {
        *body = r.body ? mem_strdup(r.body) : NULL;
    }
    proc_http_free(&r);
    free(url);
    return status;
}

/* The Retry-After header of that request with token, by curl: its seconds, or -1. */
static long s_retry_after(const char *token) {
    char *cmd = mem_printf("curl -s -o /dev/null -D - -H 'Authorization: Bearer %s'"
                           " %s/api/v2/users/me | tr -d '\\r' | awk 'tolower($1) =="
                           " \"retry-after:\" { print $2 }'",
                           token, cluster_url(s_c, 0));
    FILE *f = popen(cmd, "r");
    free(cmd);
    char line[32] = "";
    if (!f || !fgets(line, sizeof line, f)) {
        line[0] = '\0';
    }
    if (f) {
        pclose(f);
    }
    char *end = NULL;
    long v = strtol(line, &end, 10);
    return end != line ? v : -1;
}

/* s_me with token until the address's bucket (one token a second) lets it be checked: the
 * last status, after 4 s at most. */
static long s_me_refilled(const char *token) {
    long status = 429;
    for (int i = 0; i < 40 && status == 429; i++) {
        status = s_me(token, NULL);
        if (status == 429) {
            usleep(100 * 1000);
        }
    }
    return status;
}

static void test_token_guesses_spend_the_address_bucket_and_known_ones_do_not(void **u) {
    (void)u;
    char *second = cluster_user_add(s_c, false, "second");
    /* One check for the valid token (kept 60 s), then four guesses: the burst is spent. */
    assert_int_equal(s_me(cluster_token(s_c), NULL), 200);
    char bad[64];
    for (int i = 0; i < 4; i++) {
        snprintf(bad, sizeof bad, "guess-%d", i);
        assert_int_equal(s_me(bad, NULL), 401);
    }
    /* A new guess now costs nothing and gets 429 with the wait. */
    char *body = NULL;
    assert_int_equal(s_me("guess-new", &body), 429);
    assert_non_null(body);
    assert_non_null(strstr(body, "Too many requests"));
    free(body);
    long wait = s_retry_after("guess-newer");
    assert_true(wait >= 1 && wait <= 2);
    /* A guess that found nothing is answered from memory: 401, not 429. */
    assert_int_equal(s_me("guess-0", NULL), 401);
    /* A verified token is answered from memory too. */
    assert_int_equal(s_me(cluster_token(s_c), NULL), 200);
    /* A valid token not yet verified needs a check: it waits like any from this address. */
    assert_int_equal(s_me(second, NULL), 429);
    /* One token a second comes back. */
    assert_int_equal(s_me_refilled(second), 200);
    free(second);
}

/* POST /api/v2/chats with token: the status, and the body into *body when not NULL. */
static long s_create(const char *token, char **body) {
    char *url = mem_printf("%s/api/v2/chats", cluster_url(s_c, 0));
    proc_http_t r = {0};
    long status = proc_http("POST", url, token, "{\"content\":[]}", &r) == 0 ? r.status : -1;
    if (body) {
        *body = r.body ? mem_strdup(r.body) : NULL;
    }
    proc_http_free(&r);
    free(url);
    return status;
}

static void test_a_users_chats_per_minute_are_limited_on_every_way_in(void **u) {
    (void)u;
    /* Tokens verified first, so that no check spends the address's bucket below. */
    char *alice = cluster_user_add(s_c, false, "alice");
    char *bob = cluster_user_add(s_c, false, "bob");
    assert_int_equal(s_me_refilled(alice), 200);
    assert_int_equal(s_me(alice, NULL), 200); /* from memory now */
    assert_int_equal(s_me_refilled(bob), 200);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s_create(alice, NULL), 201);
    }
    char *body = NULL;
    assert_int_equal(s_create(alice, &body), 429);
    assert_non_null(strstr(body, "Too many chats created"));
    free(body);
    char *url = mem_printf("%s/a2a", cluster_url(s_c, 0));
    proc_http_t r = {0};
    assert_int_equal(proc_http("POST", url, alice,
                               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\","
                               "\"params\":{\"message\":{\"kind\":\"message\",\"role\":"
                               "\"user\",\"messageId\":\"m1\",\"parts\":[{\"kind\":\"text\","
                               "\"text\":\"hi\"}]}}}",
                               &r),
                     0);
    assert_non_null(strstr(r.body, "-32051"));
    assert_non_null(strstr(r.body, "retryAfterSeconds"));
    proc_http_free(&r);
    free(url);
    assert_int_equal(s_create(bob, NULL), 201);
    int64_t n = 0;
    char *count = NULL;
    PGresult *res = PQexec(cluster_db(s_c), "SELECT count(*) FROM chats");
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        count = mem_strdup(PQgetvalue(res, 0, 0));
        n = strtoll(count, NULL, 10);
    }
    PQclear(res);
    free(count);
    assert_int_equal(n, 4); /* three of alice's and bob's: nothing stored for a refusal */
    free(alice);
    free(bob);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_guesses_spend_the_address_bucket_and_known_ones_do_not),
        cmocka_unit_test(test_a_users_chats_per_minute_are_limited_on_every_way_in),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
