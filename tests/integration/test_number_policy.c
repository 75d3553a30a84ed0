/*
 * The number policy end to end (issue 15, item 4, "every accepted input readable back"): real
 * processes (the fixture's PostgreSQL, chatfleet-broker, chatfleet-gateway, one
 * chatfleet-worker with the sim provider). For generated numbers (edges: huge, tiny, negative
 * zero, int64 limits, the 2^63 and 128-character limits; then seeded random doubles) sent as a
 * dynamic tool schema, a tool result and a response_format schema, each is either refused with
 * a 400 naming the exact field, or stored and then read back over REST (GET messages, GET chat
 * list), SSE (the chat stream) and by the worker (the turn completes, the chat not in error).
 * PostgreSQL's own jsonb text of every number is checked against jsonstrict_pgnumeric_text, and
 * a row written before the policy (1e300 stored directly) still reads everywhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "clusterlog.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"

#define S_TURN_MS 15000 /* deadline of one turn */
#define S_RANDOM  12    /* seeded random doubles besides the edges */
#define S_SEED    0x2545F4914F6CDD1DULL
#define S_LIT_MAX 64

static cluster_t *s_cluster;

/* The edges, then S_RANDOM seeded doubles in their shortest text. */
static int s_literals(char lits[][S_LIT_MAX], int cap) {
    static const char *const edges[] = {
        "1e19",
        "1e300",
        "1e-300",
        "-0",
        "-0.0",
        "1e-126",
        "-1e-126",
        "1e-127",
        "5e-324",
        "1e308",
        "1.0",
        "1e18",
        "0.1",
        "1e22",
        "0e-1000",
        "1.5e-125",
        "9.223372036854775e18",
        "9.223372036854776e18",
        "9223372036854775807",
        "-9223372036854775808",
        "1.7976931348623157e308",
        "2.2250738585072014e-308",
    };
    int n = 0;
    for (size_t i = 0; i < sizeof edges / sizeof edges[0] && n < cap; i++) {
        snprintf(lits[n++], S_LIT_MAX, "%s", edges[i]);
    }
    uint64_t x = S_SEED;
    while (n < cap && n < (int)(sizeof edges / sizeof edges[0]) + S_RANDOM) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* A mantissa of 1 to 17 digits at an exponent spread over the double range. */
        char lit[S_LIT_MAX];
        snprintf(lit, sizeof lit, "%.*e", (int)(x % 17), (double)(x >> 11) * 0x1p-53);
        char *e = strchr(lit, 'e');
        snprintf(e, sizeof lit - (size_t)(e - lit), "e%d", (int)((x >> 20) % 640) - 330);
        double d = strtod(lit, NULL);
        if (d == 0 || d > 1e300) {
            continue;
        }
        jsonout_real(d, lits[n++]);
    }
    return n;
}

/* Whether the boundary accepts the literal (the policy under test, as the gateway runs it). */
static bool s_accepted(const char *lit) {
    json_t *v = NULL;
    bool ok = jsonstrict_parse(lit, strlen(lit), NULL, &v, NULL) == 0;
    json_decref(v);
    return ok;
}

static proc_http_t s_http(const char *method, const char *path, const char *body) {
    char url[512];
    snprintf(url, sizeof url, "%s/api/v2/%s", cluster_url(s_cluster, 0), path);
    proc_http_t r;
    assert_int_equal(proc_http(method, url, cluster_token(s_cluster), body, &r), 0);
    return r;
}

/* A 400 whose first validation names exactly field. */
static void s_assert_refused(proc_http_t *r, const char *lit, const char *field) {
    if (r->status != 400) {
        fail_msg("%s: want 400 naming %s, got %ld: %s", lit, field, r->status, r->body);
    }
    json_t *b = json_loads(r->body, 0, NULL);
    json_t *v = json_array_get(json_object_get(b, "validations"), 0);
    const char *got = json_string_value(json_object_get(v, "field"));
    if (!got || strcmp(got, field) != 0) {
        fail_msg("%s: want field %s, got %s", lit, field, r->body);
    }
    assert_non_null(strstr(json_string_value(json_object_get(v, "detail")), "PostgreSQL"));
    json_decref(b);
}

/* Every read of the chat: GET messages and the chat list answer 200 with the number in them
 * (as some number), the stream replays its messages, the chat is not in error. */
static void s_assert_readable(const char *chat, const char *lit, int min_messages) {
    char path[160];
    snprintf(path, sizeof path, "chats/%s/messages?limit=100", chat);
    proc_http_t r = s_http("GET", path, NULL);
    if (r.status != 200) {
        fail_msg("%s: GET messages %ld: %s", lit, r.status, r.body);
    }
    /* The gateway's answer reads with the CLI's rule (the stored-text reading). */
    json_t *v = NULL;
    assert_int_equal(jsonstrict_parse(r.body, strlen(r.body), &jsonstrict_limits_stored, &v, NULL),
                     0);
    json_decref(v);
    proc_http_free(&r);
    r = s_http("GET", "chats?limit=100", NULL);
    if (r.status != 200) {
        fail_msg("%s: GET chats %ld: %s", lit, r.status, r.body);
    }
    proc_http_free(&r);
    r = s_http("GET", path, NULL);
    proc_http_free(&r);
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream?after_id=0", cluster_url(s_cluster, 0),
             chat);
    sse_t *sse = sse_open(url, cluster_token(s_cluster), 0);
    int from = 0;
    for (int i = 0; i < min_messages; i++) {
        int at = sse_wait(sse, from, "message", NULL, NULL, 5000);
        if (at < 0) {
            fail_msg("%s: the stream gave %d of %d messages", lit, i, min_messages);
        }
        from = at + 1;
    }
    sse_close(&sse);
    char *status = cluster_sql(s_cluster, "SELECT status FROM chats WHERE id = '%s'", chat);
    assert_non_null(status);
    if (!strcmp(status, "error")) {
        fail_msg("%s: the chat went to error", lit);
    }
    free(status);
}

static char *s_chat_id(proc_http_t *r) {
    json_t *c = json_loads(r->body, 0, NULL);
    char *id = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    return id;
}

/* PostgreSQL's jsonb text of every literal is the one the policy models. */
static void test_postgres_numeric_text_is_the_modelled_one(void **u) {
    (void)u;
    char lits[64][S_LIT_MAX];
    int n = s_literals(lits, 64);
    for (int i = 0; i < n; i++) {
        char *pg = cluster_sql(s_cluster, "SELECT ('[%s]'::jsonb) ->> 0", lits[i]);
        assert_non_null(pg);
        char model[2048];
        size_t len = jsonstrict_pgnumeric_text(lits[i], strlen(lits[i]), model, sizeof model);
        assert_true(len < sizeof model);
        if (strcmp(pg, model) != 0) {
            fail_msg("%s: PostgreSQL %s, model %s", lits[i], pg, model);
        }
        free(pg);
    }
}

/* A dynamic tool schema, then a tool result, carrying each number. */
static void test_tool_schemas_and_results_are_refused_or_read_back(void **u) {
    (void)u;
    char lits[64][S_LIT_MAX];
    int n = s_literals(lits, 64);
    int refused = 0;
    int stored = 0;
    for (int i = 0; i < n; i++) {
        const char *lit = lits[i];
        bool ok = s_accepted(lit);
        char *body = mem_printf(
            "{\"content\":[{\"type\":\"text\",\"text\":\"[sim:dynamic ask] n\"}],"
            "\"dynamic_tools\":[{\"name\":\"ask\",\"description\":\"Ask\",\"input_schema\":"
            "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"default\":%s}}}}]}",
            lit);
        proc_http_t r = s_http("POST", "chats", body);
        free(body);
        if (!ok) {
            s_assert_refused(&r, lit, "dynamic_tools[0].input_schema.properties.n.default");
            proc_http_free(&r);
            refused++;
            continue;
        }
        if (r.status != 201) {
            fail_msg("%s: create %ld: %s", lit, r.status, r.body);
        }
        char *chat = s_chat_id(&r);
        proc_http_free(&r);
        clusterlog_expect_status(s_cluster, chat, "requires_action", S_TURN_MS);
        char *call = cluster_sql(s_cluster,
                                 "SELECT content -> 0 ->> 'tool_call_id' FROM chat_messages"
                                 " WHERE chat_id = '%s' AND role = 'assistant' ORDER BY id DESC"
                                 " LIMIT 1",
                                 chat);
        assert_non_null(call);
        /* A refused result first (the huge one), then the result carrying the number. */
        char path[160];
        snprintf(path, sizeof path, "chats/%s/tool-results", chat);
        body =
            mem_printf("{\"results\":[{\"tool_call_id\":\"%s\",\"output\":{\"n\":1e300}}]}", call);
        r = s_http("POST", path, body);
        s_assert_refused(&r, "1e300", "results[0].output.n");
        proc_http_free(&r);
        free(body);
        body = mem_printf("{\"results\":[{\"tool_call_id\":\"%s\",\"output\":{\"n\":%s}}]}", call,
                          lit);
        r = s_http("POST", path, body);
        if (r.status != 204) {
            fail_msg("%s: tool-results %ld: %s", lit, r.status, r.body);
        }
        proc_http_free(&r);
        free(body);
        free(call);
        clusterlog_expect_status(s_cluster, chat, "waiting", S_TURN_MS);
        s_assert_readable(chat, lit, 3);
        free(chat);
        stored++;
    }
    printf("tool schemas and results: %d numbers stored and read back, %d refused\n", stored,
           refused);
    assert_true(stored > 5 && refused > 5);
}

/* A response_format schema carrying each number; the structured turn ends with a receipt. */
static void test_response_format_is_refused_or_read_back(void **u) {
    (void)u;
    char lits[64][S_LIT_MAX];
    int n = s_literals(lits, 64);
    for (int i = 0; i < n; i++) {
        const char *lit = lits[i];
        char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"a number\"}],"
                                "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                                "{\"name\":\"n\",\"schema\":{\"type\":\"number\",\"examples\":"
                                "[%s]}}}}",
                                lit);
        proc_http_t r = s_http("POST", "chats", body);
        free(body);
        if (!s_accepted(lit)) {
            s_assert_refused(&r, lit, "response_format.json_schema.schema.examples[0]");
            proc_http_free(&r);
            continue;
        }
        if (r.status != 201) {
            fail_msg("%s: create %ld: %s", lit, r.status, r.body);
        }
        char *chat = s_chat_id(&r);
        proc_http_free(&r);
        char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND"
                             " structured_output ->> 'type' = 'structured-output-outcome'",
                             chat);
        clusterlog_expect(s_cluster, q, "1", S_TURN_MS);
        free(q);
        s_assert_readable(chat, lit, 2);
        free(chat);
    }
}

/* A row written before the policy: 1e300 in a stored tool result, given back by PostgreSQL
 * as a 301-digit integer, reads over REST and SSE, and the worker runs the next turn on it. */
static void test_legacy_row_with_a_huge_number_still_reads(void **u) {
    (void)u;
    proc_http_t r =
        s_http("POST", "chats",
               "{\"content\":[{\"type\":\"text\",\"text\":\"[sim:dynamic ask] n\"}],"
               "\"dynamic_tools\":[{\"name\":\"ask\",\"description\":\"Ask\",\"input_schema\":"
               "{\"type\":\"object\"}}]}");
    assert_int_equal(r.status, 201);
    char *chat = s_chat_id(&r);
    proc_http_free(&r);
    clusterlog_expect_status(s_cluster, chat, "requires_action", S_TURN_MS);
    char *call = cluster_sql(s_cluster,
                             "SELECT content -> 0 ->> 'tool_call_id' FROM chat_messages"
                             " WHERE chat_id = '%s' AND role = 'assistant' ORDER BY id DESC"
                             " LIMIT 1",
                             chat);
    char path[160];
    snprintf(path, sizeof path, "chats/%s/tool-results", chat);
    char *body = mem_printf("{\"results\":[{\"tool_call_id\":\"%s\",\"output\":{\"n\":1}}]}", call);
    r = s_http("POST", path, body);
    assert_int_equal(r.status, 204);
    proc_http_free(&r);
    free(body);
    free(call);
    clusterlog_expect_status(s_cluster, chat, "waiting", S_TURN_MS);
    /* Written as some path before the policy would have: bypassing the triggers. */
    char *done = cluster_sql(
        s_cluster,
        "BEGIN; SET LOCAL session_replication_role = replica;"
        " UPDATE chat_messages SET content = replace(content::text, '\"n\": 1', "
        "'\"n\": 1e300, \"tiny\": 1e-300')::jsonb WHERE chat_id = '%s'"
        " AND content::text LIKE '%%\"n\": 1%%'; COMMIT; SELECT count(*) FROM chat_messages"
        " WHERE chat_id = '%s' AND length(content::text) > 500",
        chat, chat);
    assert_non_null(done);
    assert_string_equal(done, "1");
    free(done);
    s_assert_readable(chat, "legacy 1e300", 3);
    snprintf(path, sizeof path, "chats/%s/messages", chat);
    r = s_http("POST", path, "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}");
    if (r.status != 200) {
        fail_msg("send: %ld %s", r.status, r.body);
    }
    proc_http_free(&r);
    char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE chat_id = '%s' AND role ="
                         " 'assistant'",
                         chat);
    clusterlog_expect(s_cluster, q, "3", S_TURN_MS);
    free(q);
    clusterlog_expect_status(s_cluster, chat, "waiting", S_TURN_MS);
    s_assert_readable(chat, "legacy 1e300", 5);
    free(chat);
}

static int s_setup(void **state) {
    (void)state;
    const char *env[] = {"CHATFLEET_STREAM_POLL_MS=1000", "CHATFLEET_LOG=info", NULL};
    cluster_opts_t o = {.name = "test_number_policy", .gateways = 1, .workers = 1, .env = env};
    s_cluster = cluster_new(&o);
    clusterlog_worker_ready(s_cluster, 0);
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    return cluster_destroy(&s_cluster) == 0 ? 0 : -1;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_postgres_numeric_text_is_the_modelled_one),
        cmocka_unit_test(test_tool_schemas_and_results_are_refused_or_read_back),
        cmocka_unit_test(test_response_format_is_refused_or_read_back),
        cmocka_unit_test(test_legacy_row_with_a_huge_number_still_reads),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
