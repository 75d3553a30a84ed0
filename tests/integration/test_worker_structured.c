/*
 * Structured output through the worker end to end (issue 7 items 2, 3 and 5): real
 * processes (the fixture's PostgreSQL, chatfleet-broker, chatfleet-gateway and two
 * chatfleet-worker processes with the sim provider) and short leases. Object, array, scalar
 * and null results; repairs and their budget (invalid values, text-only answers, finalizer
 * with siblings, two finalizers, arguments refused at the strict boundary); refusal; the step
 * limit; provider and configuration failures; kill -9 between the candidate commit and the
 * receipt; REST and SSE showing the same receipt; and a randomized run with worker kills
 * (CHATFLEET_STRUCTURED_TURNS turns, default 50; e.g. 200 for a longer run).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "clusterlog.h"
#include "id.h"
#include "jsonschema.h"
#include "jsonstrict.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"
#include "testdb.h"

#define S_LEASE_STALE_MS 3000
#define S_POLL_MS        500
#define S_TURN_MS        15000 /* deadline of one turn */
#define S_NWORKERS       2

static cluster_t *s_cluster;

/* --- Harness. --- */

static int64_t s_wait_value(const char *sql, const char *want, int64_t timeout_ms) {
    return clusterlog_expect(s_cluster, sql, want, timeout_ms);
}

static int64_t s_wait_status(const char *chat, const char *status, int64_t timeout_ms) {
    return clusterlog_expect_status(s_cluster, chat, status, timeout_ms);
}

static json_t *s_post(const char *chat, const char *what, const char *body, long want) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/%s", cluster_url(s_cluster, 0), chat, what);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    if (r.status != want) {
        fail_msg("POST %s: want %ld, got %ld: %s", what, want, r.status, r.body);
    }
    json_t *v = r.body[0] ? json_loads(r.body, 0, NULL) : json_null();
    proc_http_free(&r);
    return v;
}

/* Waits until someone other than worker_id owns the chat; returns the ms it took. */
static int64_t s_wait_new_owner(const char *chat, const char *worker_id, int64_t timeout_ms) {
    char *q = mem_printf("SELECT (worker_id IS NOT NULL AND worker_id <> '%s')::text FROM chats"
                         " WHERE id = '%s'",
                         worker_id, chat);
    int64_t ms = s_wait_value(q, "true", timeout_ms);
    free(q);
    return ms;
}

/* --- Structured helpers. --- */

#define S_OBJECT_SCHEMA                                                                            \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":3},"         \
    "\"population\":{\"type\":\"integer\",\"minimum\":1},\"tags\":{\"type\":\"array\","            \
    "\"items\":{\"enum\":[\"a\",\"b\"]},\"minItems\":2}},\"required\":[\"city\",\"population\"],"  \
    "\"additionalProperties\":false}"
#define S_ARRAY_SCHEMA                                                                             \
    "{\"type\":\"array\",\"items\":{\"type\":\"number\",\"exclusiveMinimum\":0.5,"                 \
    "\"maximum\":10},\"minItems\":3,\"uniqueItems\":true}"
#define S_SCALAR_SCHEMA "{\"type\":\"string\",\"format\":\"date\"}"
#define S_NULL_SCHEMA   "{\"type\":\"null\"}"

/* Creates a chat whose first message asks for schema; rid receives its request UUID. */
static char *s_create_structured(const char *text, const char *schema, const char *dynamic_tools,
                                 char rid[ID_UUID_LEN + 1]) {
    char *body =
        mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"response_format\":"
                   "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"answer\","
                   "\"schema\":%s}}%s%s}",
                   text, schema, dynamic_tools ? ",\"dynamic_tools\":" : "",
                   dynamic_tools ? dynamic_tools : "");
    char url[128];
    snprintf(url, sizeof url, "%s/api/v2/chats", cluster_url(s_cluster, 0));
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    free(body);
    if (r.status != 201) {
        fail_msg("create: %ld %s", r.status, r.body);
    }
    json_t *c = json_loads(r.body, 0, NULL);
    char *id = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    proc_http_free(&r);
    char *v =
        cluster_sql(s_cluster,
                    "SELECT structured_output_request_id FROM chat_messages WHERE chat_id = '%s'"
                    " AND role = 'user' ORDER BY id DESC LIMIT 1",
                    id);
    assert_non_null(v);
    snprintf(rid, ID_UUID_LEN + 1, "%s", v);
    free(v);
    return id;
}

/* Waits until exactly one receipt closes rid and returns its structured_output. */
static json_t *s_receipt(const char *rid, int64_t timeout_ms) {
    char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE structured_output_request_id ="
                         " '%s' AND structured_output ->> 'type' = 'structured-output-outcome'",
                         rid);
    s_wait_value(q, "1", timeout_ms);
    free(q);
    char *v = cluster_sql(s_cluster,
                          "SELECT structured_output::text FROM chat_messages WHERE"
                          " structured_output_request_id = '%s' AND structured_output ->> 'type' ="
                          " 'structured-output-outcome'",
                          rid);
    json_t *so = json_loads(v, 0, NULL);
    free(v);
    assert_non_null(so);
    return so;
}

static int s_count(const char *fmt, const char *a) {
    char *v = cluster_sql(s_cluster, fmt, a);
    int n = v ? (int)strtol(v, NULL, 10) : -1;
    free(v);
    return n;
}

static int s_rejections(const char *rid) {
    return s_count("SELECT count(*) FROM chat_messages WHERE structured_output_request_id = '%s'"
                   " AND structured_output ->> 'type' = 'structured-output-step'"
                   " AND structured_output::jsonb ? 'rejection'",
                   rid);
}

static bool s_validates(const char *schema, const json_t *value) {
    json_t *doc = NULL;
    assert_int_equal(jsonstrict_parse(schema, strlen(schema), NULL, &doc, NULL), 0);
    jsonschema_t *c = NULL;
    assert_int_equal(jsonschema_compile(doc, &c, NULL), 0);
    bool ok = jsonschema_validate(c, value, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
    jsonschema_destroy(&c);
    json_decref(doc);
    return ok;
}

static void s_assert_outcome(const json_t *so, const char *status, const char *code) {
    assert_string_equal(json_string_value(json_object_get(so, "status")), status);
    if (code) {
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(so, "error"), "code")), code);
    } else {
        assert_null(json_object_get(json_object_get(so, "error"), "code"));
    }
}

/* Runs one structured turn to its receipt: the receipt, with the chat in want_status. */
static json_t *s_turn(const char *text, const char *schema, const char *want_status,
                      char rid[ID_UUID_LEN + 1]) {
    char *chat = s_create_structured(text, schema, NULL, rid);
    json_t *so = s_receipt(rid, S_TURN_MS);
    s_wait_status(chat, want_status, S_TURN_MS);
    free(chat);
    return so;
}

/* --- Results. --- */

static void test_object_array_scalar_and_null_results_succeed(void **u) {
    (void)u;
    const char *schemas[] = {S_OBJECT_SCHEMA, S_ARRAY_SCHEMA, S_SCALAR_SCHEMA, S_NULL_SCHEMA};
    for (size_t i = 0; i < 4; i++) {
        char rid[ID_UUID_LEN + 1];
        int64_t t0 = id_now_ms();
        json_t *so = s_turn("answer it", schemas[i], "waiting", rid);
        s_assert_outcome(so, "succeeded", NULL);
        json_t *v = json_object_get(so, "value");
        assert_non_null(v);
        assert_true(s_validates(schemas[i], v));
        assert_string_equal(json_string_value(json_object_get(so, "request_id")), rid);
        assert_int_equal(s_rejections(rid), 0);
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("schema %zu: succeeded in %lld ms with %s\n", i, (long long)(id_now_ms() - t0),
               text);
        free(text);
        if (i == 3) {
            assert_true(json_is_null(v));
        }
        json_decref(so);
    }
}

static void test_invalid_values_are_repaired_within_the_budget(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-wrong 2] answer", S_OBJECT_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "succeeded", NULL);
    assert_true(s_validates(S_OBJECT_SCHEMA, json_object_get(so, "value")));
    assert_int_equal(s_rejections(rid), 2);
    /* The model was told what was wrong: the validator's issue, bounded. */
    char *err = cluster_sql(s_cluster,
                            "SELECT content -> 0 -> 'result' ->> 'error' FROM chat_messages m WHERE"
                            " m.chat_id = (SELECT chat_id FROM chat_messages WHERE"
                            " structured_output_request_id = '%s' LIMIT 1) AND role = 'tool'"
                            " ORDER BY id LIMIT 1",
                            rid);
    assert_non_null(err);
    assert_non_null(strstr(err, "output does not match the schema"));
    printf("invalid twice then valid: rejections 2, first feedback: %s\n", err);
    free(err);
    json_decref(so);
}

static void test_third_invalid_value_exhausts_the_budget(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-wrong 3] answer", S_ARRAY_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "failed", "validation_exhausted");
    assert_null(json_object_get(so, "value"));
    assert_int_equal(s_rejections(rid), 3);
    json_decref(so);
}

static void test_text_only_answers_get_feedback_then_exhaust(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-text 1] answer", S_SCALAR_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "succeeded", NULL);
    assert_int_equal(s_rejections(rid), 1);
    assert_int_equal(s_count("SELECT count(*) FROM chat_messages WHERE"
                             " structured_output_request_id = '%s' AND role = 'user' AND"
                             " visibility = 'model'",
                             rid),
                     1);
    json_decref(so);
    so = s_turn("[sim:schema-text] answer", S_SCALAR_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "failed", "validation_exhausted");
    assert_int_equal(s_rejections(rid), 3);
    /* Feedback after the first two rejections only. */
    assert_int_equal(s_count("SELECT count(*) FROM chat_messages WHERE"
                             " structured_output_request_id = '%s' AND structured_output ->> 'type'"
                             " = 'structured-output-feedback'",
                             rid),
                     2);
    json_decref(so);
}

static void test_finalizer_with_siblings_is_refused_and_nothing_runs(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-siblings] answer", S_OBJECT_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "succeeded", NULL);
    assert_int_equal(s_rejections(rid), 1);
    /* The sibling `time` call was answered with an error, not run. */
    char *r =
        cluster_sql(s_cluster,
                    "SELECT content -> 0 ->> 'is_error' FROM chat_messages WHERE chat_id ="
                    " (SELECT chat_id FROM chat_messages WHERE structured_output_request_id ="
                    " '%s' LIMIT 1) AND role = 'tool' AND content -> 0 ->> 'tool_name' = 'time'",
                    rid);
    assert_non_null(r);
    assert_string_equal(r, "true");
    free(r);
    json_decref(so);
}

static void test_two_finalizer_calls_are_refused(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-double 2] answer", S_NULL_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "succeeded", NULL);
    assert_true(json_is_null(json_object_get(so, "value")));
    assert_int_equal(s_rejections(rid), 2);
    json_decref(so);
}

static void test_unsafe_arguments_are_never_stored(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-unsafe] answer", S_NULL_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "succeeded", NULL);
    assert_int_equal(s_rejections(rid), 1);
    char *meta = cluster_sql(s_cluster,
                             "SELECT structured_output -> 'rejected_calls' -> 0 ->> 'reason' FROM"
                             " chat_messages WHERE structured_output_request_id = '%s' AND"
                             " structured_output::jsonb ? 'rejected_calls'",
                             rid);
    assert_non_null(meta);
    assert_non_null(strstr(meta, "duplicate_key"));
    /* The stored call holds the placeholder, never the raw bytes. */
    char *args = cluster_sql(s_cluster,
                             "SELECT content -> 0 -> 'args' ::text FROM chat_messages WHERE"
                             " structured_output_request_id = '%s' AND structured_output::jsonb"
                             " ? 'rejected_calls'",
                             rid);
    assert_string_equal(args, "{}");
    printf("unsafe arguments: placeholder %s stored, reason: %s\n", args, meta);
    free(args);
    free(meta);
    json_decref(so);
}

static void test_refusal_fails_not_produced(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-refuse] answer", S_OBJECT_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "failed", "not_produced");
    json_decref(so);
}

static void test_truncated_submission_is_never_a_candidate(void **u) {
    (void)u;
    /* The first attempt ends with a complete, valid submission but finish "length": it is
     * rejected as ineligible; the next, untruncated one succeeds. */
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:schema-truncate 1] answer", S_OBJECT_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "succeeded", NULL);
    assert_int_equal(s_rejections(rid), 1);
    char *why = cluster_sql(s_cluster,
                            "SELECT structured_output ->> 'rejection' || '/' ||"
                            " (structured_output ->> 'finish') FROM chat_messages WHERE"
                            " structured_output_request_id = '%s' AND structured_output ->>"
                            " 'type' = 'structured-output-step' ORDER BY id LIMIT 1",
                            rid);
    assert_non_null(why);
    assert_string_equal(why, "ineligible/length");
    free(why);
    json_decref(so);
}

static void test_step_limit_without_candidate_fails_not_produced(void **u) {
    (void)u;
    /* CHATFLEET_MAX_STEPS_PER_TURN=8 on the workers. */
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:tool time x20] answer", S_OBJECT_SCHEMA, "waiting", rid);
    s_assert_outcome(so, "failed", "not_produced");
    assert_int_equal(s_rejections(rid), 0);
    json_decref(so);
}

static void test_provider_failure_fails_generation_failed(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    json_t *so = s_turn("[sim:fail 400] answer", S_OBJECT_SCHEMA, "error", rid);
    s_assert_outcome(so, "failed", "generation_failed");
    json_decref(so);
}

static void test_broken_stored_format_fails_configuration_error(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    char *chat = s_create_structured("[sim:dynamic ask] answer", S_OBJECT_SCHEMA,
                                     "[{\"name\":\"ask\",\"description\":\"Ask\","
                                     "\"input_schema\":{\"type\":\"object\"}}]",
                                     rid);
    s_wait_status(chat, "requires_action", S_TURN_MS);
    /* Recovered metadata is untrusted: a stored schema that no longer compiles. */
    char *q = mem_printf(
        "UPDATE chat_messages SET structured_output = jsonb_set(structured_output::jsonb,"
        " '{response_format,json_schema,schema}', '{\"type\":\"nonsense\"}')"
        " WHERE structured_output_request_id = '%s' AND role = 'user'",
        rid);
    char e[200];
    assert_int_equal(testdb_try(cluster_db(s_cluster), q, e, sizeof e), 0);
    free(q);
    char *call =
        cluster_sql(s_cluster,
                    "SELECT content -> 0 ->> 'tool_call_id' FROM chat_messages"
                    " WHERE chat_id = '%s' AND role = 'assistant' ORDER BY id DESC LIMIT 1",
                    chat);
    char *body = mem_printf("{\"results\":[{\"tool_call_id\":\"%s\",\"output\":1}]}", call);
    json_decref(s_post(chat, "tool-results", body, 204));
    json_t *so = s_receipt(rid, S_TURN_MS);
    s_assert_outcome(so, "failed", "configuration_error");
    s_wait_status(chat, "error", S_TURN_MS);
    json_decref(so);
    free(body);
    free(call);
    free(chat);
}

/* --- Crash safety. --- */

static void test_kill_9_after_the_candidate_gives_one_receipt(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    char *chat = s_create_structured("[sim:schema-stall-after-candidate] answer", S_OBJECT_SCHEMA,
                                     NULL, rid);
    /* The candidate is committed and the next step's model call (which stalls) began. */
    char *q = mem_printf("SELECT (EXISTS (SELECT 1 FROM chat_messages WHERE"
                         " structured_output_request_id = '%s' AND structured_output ->> 'type'"
                         " = 'structured-output-candidate') AND generation_attempt >= 1)::text"
                         " FROM chats WHERE id = '%s'",
                         rid, chat);
    s_wait_value(q, "true", S_TURN_MS);
    free(q);
    char *owner = cluster_sql(s_cluster, "SELECT worker_id FROM chats WHERE id = '%s'", chat);
    int i = clusterlog_worker_of(s_cluster, S_NWORKERS, owner);
    assert_true(i >= 0);
    assert_int_equal(s_count("SELECT count(*) FROM chat_messages WHERE"
                             " structured_output_request_id = '%s' AND structured_output ->>"
                             " 'type' = 'structured-output-outcome'",
                             rid),
                     0);
    int64_t t0 = id_now_ms();
    assert_true(cluster_pid(s_cluster, CLUSTER_WORKER, i) > 0);
    cluster_signal(s_cluster, CLUSTER_WORKER, i, SIGKILL);
    s_wait_new_owner(chat, owner, S_LEASE_STALE_MS + S_POLL_MS + 3000);
    json_t *so = s_receipt(rid, S_TURN_MS);
    s_wait_status(chat, "waiting", S_TURN_MS);
    s_assert_outcome(so, "succeeded", NULL);
    assert_true(s_validates(S_OBJECT_SCHEMA, json_object_get(so, "value")));
    /* One candidate, one receipt; the takeover did not submit again. */
    assert_int_equal(s_count("SELECT count(*) FROM chat_messages WHERE"
                             " structured_output_request_id = '%s' AND structured_output ->>"
                             " 'type' = 'structured-output-candidate'",
                             rid),
                     1);
    printf("kill -9 after the candidate: one receipt %lld ms after the kill\n",
           (long long)(id_now_ms() - t0));
    clusterlog_worker_start(s_cluster, i);
    json_decref(so);
    free(owner);
    free(chat);
}

/* --- REST and SSE. --- */

typedef struct {
    const char *rid;
} s_match_t;

static int s_is_receipt(json_t *event, void *arg) {
    s_match_t *m = arg;
    json_t *so = json_object_get(json_object_get(json_object_get(event, "data"), "message"),
                                 "structured_output");
    return so && !strcmp(json_string_value(json_object_get(so, "request_id")), m->rid);
}

static void test_rest_and_stream_show_the_same_receipt(void **u) {
    (void)u;
    char rid[ID_UUID_LEN + 1];
    char *chat = s_create_structured("[sim:slow 30] answer", S_OBJECT_SCHEMA, NULL, rid);
    json_t *so = s_receipt(rid, S_TURN_MS);
    json_decref(so);
    s_wait_status(chat, "waiting", S_TURN_MS);
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream", cluster_url(s_cluster, 0), chat);
    sse_t *sse = sse_open(url, cluster_token(s_cluster), 0);
    assert_non_null(sse);
    /* A second structured request, sent while the stream is open. */
    json_t *sent = s_post(chat, "messages",
                          "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}],"
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                          "{\"name\":\"n\",\"schema\":" S_ARRAY_SCHEMA "}}}",
                          200);
    json_decref(sent);
    char *rid2 =
        cluster_sql(s_cluster,
                    "SELECT structured_output_request_id FROM chat_messages WHERE chat_id ="
                    " '%s' AND role = 'user' ORDER BY id DESC LIMIT 1",
                    chat);
    s_match_t m = {rid2};
    int at = sse_wait(sse, 0, "message", s_is_receipt, &m, S_TURN_MS);
    assert_true(at >= 0);
    json_t *live = json_object_get(json_object_get(sse_get(sse, at), "data"), "message");
    char path[256];
    snprintf(path, sizeof path, "%s/api/v2/chats/%s/messages", cluster_url(s_cluster, 0), chat);
    proc_http_t r;
    assert_int_equal(proc_http("GET", path, cluster_token(s_cluster), NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *listing = json_loads(r.body, 0, NULL);
    proc_http_free(&r);
    json_t *rest = NULL;
    size_t i;
    json_t *msg;
    json_array_foreach(json_object_get(listing, "messages"), i, msg) {
        json_t *x = json_object_get(msg, "structured_output");
        if (x && !strcmp(json_string_value(json_object_get(x, "request_id")), rid2)) {
            rest = msg;
        }
    }
    assert_non_null(rest);
    assert_true(json_equal(json_object_get(rest, "structured_output"),
                           json_object_get(live, "structured_output")));
    assert_true(json_equal(json_object_get(rest, "content"), json_object_get(live, "content")));
    s_assert_outcome(json_object_get(rest, "structured_output"), "succeeded", NULL);
    /* Internal metadata never reaches clients: no candidate or step rows expose it. */
    int exposed = 0;
    json_array_foreach(json_object_get(listing, "messages"), i, msg) {
        json_t *x = json_object_get(msg, "structured_output");
        exposed += x && !json_object_get(x, "status");
    }
    assert_int_equal(exposed, 0);
    json_decref(listing);
    sse_close(&sse);
    free(rid2);
    free(chat);
}

/* --- Randomized. --- */

typedef struct {
    const char *directive;
    const char *status;
    const char *code;
} s_script_t;

static const s_script_t s_scripts[] = {
    {"", "succeeded", NULL},
    {"[sim:schema-wrong 1]", "succeeded", NULL},
    {"[sim:schema-wrong 2]", "succeeded", NULL},
    {"[sim:schema-wrong 3]", "failed", "validation_exhausted"},
    {"[sim:schema-text 1]", "succeeded", NULL},
    {"[sim:schema-siblings]", "succeeded", NULL},
    {"[sim:schema-double]", "succeeded", NULL},
    {"[sim:schema-unsafe]", "succeeded", NULL},
    {"[sim:schema-refuse]", "failed", "not_produced"},
    {"[sim:tool time]", "succeeded", NULL},
};

static const char *const s_schemas[] = {S_OBJECT_SCHEMA, S_ARRAY_SCHEMA, S_SCALAR_SCHEMA,
                                        S_NULL_SCHEMA};

#define S_RANDOM_CHATS 10

static void s_send(const char *chat, const char *text, const char *schema) {
    char *body =
        mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"response_format\":"
                   "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"r\","
                   "\"schema\":%s}}}",
                   text, schema);
    json_decref(s_post(chat, "messages", body, 200));
    free(body);
}

static void test_random_turns_with_worker_kills_one_receipt_each(void **u) {
    (void)u;
    const char *env = getenv("CHATFLEET_STRUCTURED_TURNS");
    int turns = env ? (int)strtol(env, NULL, 10) : 50;
    turns = turns < S_RANDOM_CHATS ? S_RANDOM_CHATS : turns;
    unsigned seed = (unsigned)id_now_ms();
    printf("random: %d turns over %d chats, seed %u\n", turns, S_RANDOM_CHATS, seed);
    srand(seed);
    char *chats[S_RANDOM_CHATS];
    int *script = mem_calloc((size_t)turns, sizeof *script);
    int *schema = mem_calloc((size_t)turns, sizeof *schema);
    for (int t = 0; t < turns; t++) {
        script[t] = rand() % (int)(sizeof s_scripts / sizeof s_scripts[0]);
        schema[t] = rand() % 4;
        char text[128];
        /* Slow enough that kills land mid-turn. */
        snprintf(text, sizeof text, "%s [sim:slow 120] turn %d", s_scripts[script[t]].directive, t);
        if (t < S_RANDOM_CHATS) {
            char rid[ID_UUID_LEN + 1];
            chats[t] = s_create_structured(text, s_schemas[schema[t]], NULL, rid);
        } else {
            s_send(chats[t % S_RANDOM_CHATS], text, s_schemas[schema[t]]);
        }
    }
    int kills = 0;
    int64_t t0 = id_now_ms();
    for (int k = 0; k < 3; k++) {
        struct timespec ts = {0, (long)(200 + rand() % 600) * 1000 * 1000}; /* kill pacing */
        nanosleep(&ts, NULL);
        int w = rand() % S_NWORKERS;
        cluster_signal(s_cluster, CLUSTER_WORKER, w, SIGKILL);
        clusterlog_worker_start(s_cluster, w);
        kills++;
    }
    char *q = mem_printf("SELECT count(*) FROM chat_messages WHERE structured_output ->> 'type' ="
                         " 'structured-output-outcome' AND chat_id IN (SELECT chat_id FROM"
                         " chat_messages WHERE content::text LIKE '%%sim:slow 120%%')");
    char want[16];
    snprintf(want, sizeof want, "%d", turns);
    s_wait_value(q, want, 100000);
    free(q);
    int64_t took = id_now_ms() - t0;
    /* Each turn's request: exactly one receipt, with the outcome its script implies and a
     * value that validates. */
    int ok = 0;
    for (int t = 0; t < turns; t++) {
        char like[64];
        snprintf(like, sizeof like, "turn %d\"", t);
        char *sql = mem_printf("SELECT structured_output_request_id FROM chat_messages WHERE"
                               " role = 'user' AND content::text LIKE '%%%s%%'",
                               like);
        char *rid = cluster_sql(s_cluster, "%s", sql);
        free(sql);
        assert_non_null(rid);
        json_t *so = s_receipt(rid, 1000);
        s_assert_outcome(so, s_scripts[script[t]].status, s_scripts[script[t]].code);
        if (!strcmp(s_scripts[script[t]].status, "succeeded")) {
            assert_true(s_validates(s_schemas[schema[t]], json_object_get(so, "value")));
        }
        ok++;
        json_decref(so);
        free(rid);
    }
    printf("random: %d/%d requests with exactly one receipt of the expected outcome after %d"
           " kills, all in %lld ms\n",
           ok, turns, kills, (long long)took);
    for (int c = 0; c < S_RANDOM_CHATS; c++) {
        free(chats[c]);
    }
    free(script);
    free(schema);
}

/* --- Setup. --- */

static int s_setup(void **state) {
    (void)state;
    /* The harness's defaults are this test's leases (stale 3 s, heartbeat 1 s, acquire poll
     * 500 ms); the rest is what these turns need. The gateway keeps its default stream poll. */
    const char *env[] = {"CHATFLEET_STREAM_POLL_MS=10000",
                         "CHATFLEET_WORKER_RETRY_BASE_MS=20",
                         "CHATFLEET_WORKER_RETRY_MAX_MS=100",
                         "CHATFLEET_MAX_GENERATION_RETRIES=3",
                         "CHATFLEET_REQUIRES_ACTION_DEADLINE_MS=60000",
                         "CHATFLEET_MAX_STEPS_PER_TURN=8",
                         "CHATFLEET_LOG=info",
                         NULL};
    cluster_opts_t o = {
        .name = "test_worker_structured", .gateways = 1, .workers = S_NWORKERS, .env = env};
    s_cluster = cluster_new(&o);
    for (int i = 0; i < S_NWORKERS; i++) {
        clusterlog_worker_ready(s_cluster, i);
    }
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    /* A clean SIGTERM shutdown is part of the contract. */
    return cluster_destroy(&s_cluster) == 0 ? 0 : -1;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_object_array_scalar_and_null_results_succeed),
        cmocka_unit_test(test_invalid_values_are_repaired_within_the_budget),
        cmocka_unit_test(test_third_invalid_value_exhausts_the_budget),
        cmocka_unit_test(test_text_only_answers_get_feedback_then_exhaust),
        cmocka_unit_test(test_finalizer_with_siblings_is_refused_and_nothing_runs),
        cmocka_unit_test(test_two_finalizer_calls_are_refused),
        cmocka_unit_test(test_unsafe_arguments_are_never_stored),
        cmocka_unit_test(test_refusal_fails_not_produced),
        cmocka_unit_test(test_truncated_submission_is_never_a_candidate),
        cmocka_unit_test(test_step_limit_without_candidate_fails_not_produced),
        cmocka_unit_test(test_provider_failure_fails_generation_failed),
        cmocka_unit_test(test_broken_stored_format_fails_configuration_error),
        cmocka_unit_test(test_kill_9_after_the_candidate_gives_one_receipt),
        cmocka_unit_test(test_rest_and_stream_show_the_same_receipt),
        cmocka_unit_test(test_random_turns_with_worker_kills_one_receipt_each),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
