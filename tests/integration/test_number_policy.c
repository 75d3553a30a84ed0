/*
 * The number policy end to end (issue 15, item 4, "every accepted input readable back"; issue
 * 41, item 1, "a JSON number is carried exactly"): real processes (the fixture's PostgreSQL,
 * chatfleet-broker, chatfleet-gateway, one chatfleet-worker with the sim provider). For
 * generated numbers (edges: bignums, 1e300, spellings a double would change (1.50, 1E2, -0),
 * int64 limits, the magnitude and 128-character caps; then seeded random doubles) sent as a
 * dynamic tool schema, a tool result and a response_format schema, each is either refused with
 * a 400 naming the exact field (only beyond the caps), or stored and then read back byte for
 * byte: its literal, exactly as sent, in GET messages, the chat (its dynamic tools), the chat
 * list, SSE (the chat stream) and the receipt, and the worker runs on it (the turn completes,
 * the chat not in error).
 * The same numbers go through A2A (POST /a2a): as the structured-output extension's schema,
 * both as schemaJson text and as the legacy schema object, whose succeeded turn gives the number
 * back as the task's artifact (GetTask) and the receipt (REST, SSE); and in data parts, which
 * A2A refuses whatever they hold. Message content cannot carry a number at all (only text parts
 * with type and text, gateway_content): that is asserted as a refusal naming the part.
 * A row written before the policy (1e300 as PostgreSQL's jsonb gave it back, a 301-digit
 * integer) still reads everywhere.
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

#include "a2a.h"
#include "a2a_task.h"
#include "cluster.h"
#include "clusterlog.h"
#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mem.h"
#include "proc.h"
#include "sse.h"

#define S_TURN_MS 15000 /* deadline of one turn */
#define S_RANDOM  12    /* seeded random doubles besides the edges */
#define S_SEED    0x2545F4914F6CDD1DULL
#define S_LIT_MAX 80

static cluster_t *s_cluster;

/* The edges, then S_RANDOM seeded doubles in their shortest text. */
static int s_literals(char lits[][S_LIT_MAX], int cap) {
    static const char *const edges[] = {
        "12345678910111213141516171819202122232425262728293031",
        "-98249283749234923498293171823948729348710298301928331",
        "972783798187987123879878123.188781371",
        "1E2",
        "1.50",
        "0.00001",
        "1e400",
        "1e401",
        "-1e-401",
        "1234567890123456789012345678901234567890123456789012345678901",
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

/* A 400 whose first validation names exactly field, with detail in its detail. */
static void s_assert_invalid(proc_http_t *r, const char *lit, const char *field,
                             const char *detail) {
    if (r->status != 400) {
        fail_msg("%s: want 400 naming %s, got %ld: %s", lit, field, r->status, r->body);
    }
    json_t *b = json_loads(r->body, 0, NULL);
    json_t *v = json_array_get(json_object_get(b, "validations"), 0);
    const char *got = json_string_value(json_object_get(v, "field"));
    if (!got || strcmp(got, field) != 0) {
        fail_msg("%s: want field %s, got %s", lit, field, r->body);
    }
    const char *d = json_string_value(json_object_get(v, "detail"));
    if (!d || !strstr(d, detail)) {
        fail_msg("%s: want \"%s\" in the detail, got %s", lit, detail, r->body);
    }
    json_decref(b);
}

/* A 400 naming exactly field, refused by the number policy (a cap). */
static void s_assert_refused(proc_http_t *r, const char *lit, const char *field) {
    s_assert_invalid(r, lit, field, "cap");
}

/* Whether text holds "key":lit followed by a delimiter: the number exactly as sent. */
static bool s_has_literal(const char *text, const char *key, const char *lit) {
    char *want = mem_printf("\"%s\":%s", key, lit);
    bool found = false;
    for (const char *at = strstr(text, want); at && !found; at = strstr(at + 1, want)) {
        char next = at[strlen(want)];
        found = next == ',' || next == '}' || next == ']';
    }
    free(want);
    return found;
}

/* GET messages of chat holds "key":lit byte for byte. */
static void s_assert_messages_hold(const char *chat, const char *key, const char *lit) {
    char path[160];
    snprintf(path, sizeof path, "chats/%s/messages?limit=100", chat);
    proc_http_t r = s_http("GET", path, NULL);
    assert_int_equal(r.status, 200);
    if (!s_has_literal(r.body, key, lit)) {
        fail_msg("%s: GET messages does not hold \"%s\":%s byte for byte: %s", lit, key, lit,
                 r.body);
    }
    proc_http_free(&r);
}

/* The chat stream's replay of chat holds "key":lit byte for byte in one of its events. */
static void s_assert_stream_holds(const char *chat, const char *key, const char *lit) {
    char url[256];
    snprintf(url, sizeof url, "%s/api/v2/chats/%s/stream?after_id=0", cluster_url(s_cluster, 0),
             chat);
    sse_t *sse = sse_open(url, cluster_token(s_cluster), 0);
    bool found = false;
    for (int from = 0; !found;) {
        int at = sse_wait(sse, from, "message", NULL, NULL, 5000);
        if (at < 0) {
            break;
        }
        const char *raw = json_string_value(json_object_get(sse_get(sse, at), "raw"));
        found = raw && s_has_literal(raw, key, lit);
        from = at + 1;
    }
    sse_close(&sse);
    if (!found) {
        fail_msg("%s: no stream event holds \"%s\":%s byte for byte", lit, key, lit);
    }
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
    json_t *c = jsonstrict_load_stored(r->body, strlen(r->body));
    char *id = mem_strdup(json_string_value(json_object_get(c, "id")));
    json_decref(c);
    return id;
}

/* Whether v (read as stored text, so a number keeps its literal) is the number lit exactly as
 * it was sent. */
static bool s_same_number(const json_t *v, const char *lit) {
    char *text = jsonout_dumps(v);
    bool same = json_is_number(v) && !strcmp(text, lit);
    free(text);
    return same;
}

/* Whether a double holds lit's value exactly as its shortest form (what a protobuf-value
 * answer can carry unchanged). */
static bool s_fits_double(const char *lit) {
    json_t *v = NULL;
    assert_int_equal(jsonstrict_parse(lit, strlen(lit), NULL, &v, NULL), 0);
    bool fits = jsonnumber_fits_double(v);
    json_decref(v);
    return fits;
}

/* How many of lits the boundary refuses (those beyond the caps). */
static int s_refused(char lits[][S_LIT_MAX], int n) {
    int refused = 0;
    for (int i = 0; i < n; i++) {
        refused += !s_accepted(lits[i]);
    }
    return refused;
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
        /* A refused result first (beyond the cap), then the result carrying the number. */
        char path[160];
        snprintf(path, sizeof path, "chats/%s/tool-results", chat);
        body =
            mem_printf("{\"results\":[{\"tool_call_id\":\"%s\",\"output\":{\"n\":1e401}}]}", call);
        r = s_http("POST", path, body);
        s_assert_refused(&r, "1e401", "results[0].output.n");
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
        /* The tool result and the dynamic tool's schema give the number back as sent. */
        s_assert_messages_hold(chat, "n", lit);
        s_assert_stream_holds(chat, "n", lit);
        snprintf(path, sizeof path, "chats/%s", chat);
        r = s_http("GET", path, NULL);
        if (r.status != 200 || !s_has_literal(r.body, "default", lit)) {
            fail_msg("%s: GET chat does not hold the tool schema's default as sent: %s", lit,
                     r.body);
        }
        proc_http_free(&r);
        free(chat);
        stored++;
    }
    printf("tool schemas and results: %d numbers stored and read back, %d refused\n", stored,
           refused);
    assert_true(stored > 5);
    assert_int_equal(refused, s_refused(lits, n));
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

/* The bytes of a base64 text (the raw part of a json-utf8 artifact); NULL when it is not
 * base64. The caller frees. */
static char *s_unbase64(const char *b64) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = strlen(b64);
    char *out = mem_alloc(len / 4 * 3 + 1);
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len && b64[i] != '='; i++) {
        const char *c = strchr(tab, b64[i]);
        if (!c || !*c) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)(c - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = '\0';
    return out;
}

static int64_t s_count_chats(void) {
    char *n = cluster_sql(s_cluster, "SELECT count(*) FROM chats");
    assert_non_null(n);
    int64_t v = strtoll(n, NULL, 10);
    free(n);
    return v;
}

/* One JSON-RPC call to the A2A endpoint: its answer, always HTTP 200, read as the CLI reads
 * the gateway's answers (stored text). The caller decrefs. */
static json_t *s_rpc(const char *body) {
    char url[512];
    snprintf(url, sizeof url, "%s%s", cluster_url(s_cluster, 0), A2A_RPC_PATH);
    proc_http_t r;
    assert_int_equal(proc_http("POST", url, cluster_token(s_cluster), body, &r), 0);
    if (r.status != 200) {
        fail_msg("a2a: HTTP %ld: %s", r.status, r.body);
    }
    json_t *v = NULL;
    jsonstrict_error_t err;
    if (jsonstrict_parse(r.body, strlen(r.body), &jsonstrict_limits_stored, &v, &err) != 0) {
        fail_msg("a2a: unreadable answer (%s): %s", err.message, r.body);
    }
    proc_http_free(&r);
    return v;
}

/* A JSON-RPC error answer with code and id (NULL: a null id); its data, borrowed from rpc. */
static json_t *s_rpc_error(json_t *rpc, const char *lit, int code, json_t *id) {
    json_t *e = json_object_get(rpc, "error");
    json_t *got_id = json_object_get(rpc, "id");
    if (!e || json_integer_value(json_object_get(e, "code")) != code ||
        json_object_get(rpc, "result") || !(id ? json_equal(got_id, id) : json_is_null(got_id))) {
        char *t = jsonout_dumps(rpc);
        fail_msg("%s: want JSON-RPC error %d, got %s", lit, code, t);
    }
    return json_object_get(e, "data");
}

/* Invalid params (-32602) whose data names exactly field, with detail in its detail. */
static void s_assert_rpc_invalid(json_t *rpc, const char *lit, const char *field,
                                 const char *detail) {
    json_t *id = json_integer(7);
    json_t *data = s_rpc_error(rpc, lit, -32602, id);
    json_decref(id);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(rpc, "error"), "message")),
        "Invalid params");
    const char *f = json_string_value(json_object_get(data, "field"));
    const char *d = json_string_value(json_object_get(data, "detail"));
    if (!f || strcmp(f, field) != 0 || !d || !strstr(d, detail)) {
        char *t = jsonout_dumps(rpc);
        fail_msg("%s: want field %s and \"%s\" in the detail, got %s", lit, field, detail, t);
    }
}

/* A schemaJson whose number the policy refuses: the extension fails the task (an invalid
 * schema never reaches a model), and the failed task names the field and says why in its
 * metadata (ARCHITECTURE.md §8, "A2A"). */
static void s_assert_task_refused(json_t *rpc, const char *lit, const char *field,
                                  const char *detail) {
    json_t *task = json_object_get(json_object_get(rpc, "result"), "task");
    const char *state =
        json_string_value(json_object_get(json_object_get(task, "status"), "state"));
    json_t *so = json_object_get(json_object_get(task, "metadata"), "kediStructuredOutput");
    const char *code = json_string_value(json_object_get(so, "code"));
    const char *f = json_string_value(json_object_get(so, "field"));
    const char *d = json_string_value(json_object_get(so, "detail"));
    if (!state || strcmp(state, "TASK_STATE_FAILED") || !code || strcmp(code, "invalid_schema") ||
        !f || strcmp(f, field) || !d || !strstr(d, detail)) {
        char *t = jsonout_dumps(rpc);
        fail_msg("%s: want a failed task naming %s with \"%s\", got %s", lit, field, detail, t);
    }
}

/* A number the policy refuses anywhere in the JSON-RPC request: the endpoint parses the whole
 * request at the boundary (a2a_rpc); the request is valid JSON, so the answer is Invalid
 * params (-32602) with the request's id, naming the field like the REST 400s, with the
 * policy's reason and the byte offset of the literal in the request in its detail. */
static void s_assert_rpc_refused(json_t *rpc, const char *lit, const char *body, size_t at,
                                 const char *field) {
    char where[48];
    snprintf(where, sizeof where, "(at byte %zu)", at);
    assert_int_equal(strncmp(body + at, lit, strlen(lit)), 0);
    s_assert_rpc_invalid(rpc, lit, field, "cap");
    s_assert_rpc_invalid(rpc, lit, field, where);
}

#define S_A2A_MESSAGE                                                                              \
    "\"message\":{\"messageId\":\"m-number\",\"role\":\"ROLE_USER\",\"parts\":[{\"text\":"         \
    "\"a number\"}],\"extensions\":[\"" A2A_EXTENSION_URI "\"]}"

#define S_EXACT_DOUBLE_MAX 9007199254740992.0 /* 2^53: every integer up to it is a double */

static int s_exact_big; /* values beyond 2^53 a double holds exactly, checked completed */

/* The task of a succeeded structured turn whose value must be lit: one artifact in the
 * request's encoding holding exactly that number. A protobuf-value answer is a double, so an
 * integer a double would change (9223372036854775807) must be a failed task with
 * result_not_representable instead, and one a double holds exactly, however large (1e18, which
 * PostgreSQL gives back as the integer 1000000000000000000, or -2^63), a completed task
 * (ARCHITECTURE.md §8, "refusing values a double would change"). */
static void s_assert_task_value(json_t *task, const char *lit, bool raw) {
    const char *state =
        json_string_value(json_object_get(json_object_get(task, "status"), "state"));
    const char *code = json_string_value(json_object_get(
        json_object_get(json_object_get(task, "metadata"), "kediStructuredOutput"), "code"));
    bool refused_ok = state && code && !strcmp(state, "TASK_STATE_FAILED") &&
                      !strcmp(code, "result_not_representable");
    double d = strtod(lit, NULL);
    bool changes = !s_fits_double(lit);
    if (!changes && (d > S_EXACT_DOUBLE_MAX || d < -S_EXACT_DOUBLE_MAX)) {
        s_exact_big++; /* beyond 2^53 and exact: must complete like the rest */
    }
    char *t = jsonout_dumps(task);
    if (!raw && changes) {
        if (!refused_ok) {
            fail_msg("%s: want a failed task, result_not_representable: %s", lit, t);
        }
        free(t);
        return;
    }
    json_t *arts = json_object_get(task, "artifacts");
    json_t *part = json_array_get(json_object_get(json_array_get(arts, 0), "parts"), 0);
    if (!state || strcmp(state, "TASK_STATE_COMPLETED") || json_array_size(arts) != 1 ||
        strcmp(json_string_value(json_object_get(json_array_get(arts, 0), "name")),
               A2A_ARTIFACT_NAME)) {
        fail_msg("%s: want a completed task with one artifact: %s", lit, t);
    }
    json_t *v = NULL;
    if (raw) {
        /* The raw JSON is the literal as sent, and passes the strict boundary again. */
        char *text = s_unbase64(json_string_value(json_object_get(part, "raw")));
        if (!text || strcmp(text, lit) || jsonstrict_parse(text, strlen(text), NULL, &v, NULL)) {
            fail_msg("%s: the raw artifact is not the literal as sent: %s", lit, t);
        }
        free(text);
    } else {
        v = json_incref(json_object_get(part, "data"));
    }
    if (!s_same_number(v, lit)) {
        fail_msg("%s: the artifact's value is not the number: %s", lit, t);
    }
    json_decref(v);
    free(t);
}

/* The receipt over REST (GET messages) holds the number as its value, unless the turn could
 * not give it (a protobuf-value answer that a double would change still succeeded there). */
static void s_assert_receipt_value(const char *chat, const char *lit) {
    char path[160];
    snprintf(path, sizeof path, "chats/%s/messages?limit=100", chat);
    proc_http_t r = s_http("GET", path, NULL);
    assert_int_equal(r.status, 200);
    json_t *b = NULL;
    assert_int_equal(jsonstrict_parse(r.body, strlen(r.body), &jsonstrict_limits_stored, &b, NULL),
                     0);
    size_t i;
    json_t *m;
    int receipts = 0;
    json_array_foreach(json_object_get(b, "messages"), i, m) {
        json_t *so = json_object_get(m, "structured_output");
        if (!so) {
            continue;
        }
        receipts++;
        if (strcmp(json_string_value(json_object_get(so, "status")), "succeeded") ||
            !s_same_number(json_object_get(so, "value"), lit)) {
            fail_msg("%s: the receipt is not the number: %s", lit, r.body);
        }
    }
    if (receipts != 1) {
        fail_msg("%s: want one receipt, got %d: %s", lit, receipts, r.body);
    }
    json_decref(b);
    proc_http_free(&r);
}

/* A2A's structured-output extension with each number in the schema, {"const": n}: as
 * schemaJson text (json-utf8 results) and as the legacy schema object (protobuf-value
 * results). Refused before anything is written, or the turn runs (the sim answers the const,
 * so the number travels schema -> worker -> receipt -> artifact) and reads back over SendMessage,
 * GetTask, REST and SSE. */
static void test_a2a_structured_output_schemas_are_refused_or_read_back(void **u) {
    (void)u;
    char lits[64][S_LIT_MAX];
    int n = s_literals(lits, 64);
    int stored = 0;
    int refused = 0;
    for (int i = 0; i < n; i++) {
        const char *lit = lits[i];
        for (int legacy = 0; legacy < 2; legacy++) {
            const char *enc = legacy ? "protobuf-value" : "json-utf8";
            char *body = mem_printf(
                "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"SendMessage\",\"params\":"
                "{" S_A2A_MESSAGE ",\"configuration\":{\"acceptedOutputModes\":"
                "[\"application/json\"]},\"metadata\":{\"kediStructuredOutput\":{\"version\":1,"
                "\"resultEncoding\":\"%s\","
                "%s%s%s}}}}",
                enc, legacy ? "\"schema\":{\"const\":" : "\"schemaJson\":\"{\\\"const\\\":", lit,
                legacy ? "}" : "}\"");
            int64_t chats = s_count_chats();
            json_t *rpc = s_rpc(body);
            if (!s_accepted(lit)) {
                if (legacy) {
                    s_assert_rpc_refused(
                        rpc, lit, body,
                        (size_t)(strstr(body, "{\"const\":") - body + strlen("{\"const\":")),
                        "params.metadata.kediStructuredOutput.schema.const");
                } else {
                    s_assert_task_refused(rpc, lit,
                                          "params.metadata.kediStructuredOutput.schemaJson",
                                          "not a JSON schema document: ");
                    s_assert_task_refused(rpc, lit,
                                          "params.metadata.kediStructuredOutput.schemaJson", "cap");
                }
                assert_int_equal(s_count_chats(), chats);
                json_decref(rpc);
                free(body);
                refused++;
                continue;
            }
            json_t *task = json_object_get(json_object_get(rpc, "result"), "task");
            const char *tid = json_string_value(json_object_get(task, "id"));
            const char *chat = json_string_value(json_object_get(task, "contextId"));
            if (!tid || !chat) {
                char *t = jsonout_dumps(rpc);
                fail_msg("%s (%s): want a task, got %s", lit, enc, t);
            }
            s_assert_task_value(task, lit, !legacy);
            /* GetTask reads the same task back from the committed rows. */
            char *get = mem_printf(
                "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"GetTask\",\"params\":{\"id\":\"%s\"}}",
                tid);
            json_t *again = s_rpc(get);
            free(get);
            if (!json_equal(json_object_get(again, "result"), task)) {
                char *a = jsonout_dumps(again);
                char *t = jsonout_dumps(task);
                fail_msg("%s: GetTask %s differs from SendMessage %s", lit, a, t);
            }
            json_decref(again);
            s_assert_receipt_value(chat, lit);
            s_assert_readable(chat, lit, 2);
            json_decref(rpc);
            free(body);
            stored++;
        }
    }
    printf("a2a schemas: %d numbers stored and read back (%d of them exact doubles beyond 2^53),"
           " %d refused\n",
           stored, s_exact_big, refused);
    assert_true(stored > 10 && s_exact_big > 0);
    assert_int_equal(refused, 2 * s_refused(lits, n));
}

/* A2A data parts (v1 {"data"} and v0.3 {"kind":"data"}) are refused whatever they hold: a
 * number the policy accepts gets -32602 naming the part, one it refuses the policy's parse
 * error; nothing is written either way. The other members of a request that may hold any JSON
 * (message.metadata, params.metadata besides the extension's, configuration) are never stored,
 * so only the refusal applies to them, the same parse error. */
static void test_a2a_data_parts_are_refused(void **u) {
    (void)u;
    char lits[64][S_LIT_MAX];
    int n = s_literals(lits, 64);
    for (int i = 0; i < n; i++) {
        const char *lit = lits[i];
        for (int legacy = 0; legacy < 2; legacy++) {
            char *body = mem_printf(
                "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"%s\",\"params\":{\"message\":{"
                "\"messageId\":\"m-data\",\"role\":\"%s\",\"parts\":[{%s\"text\":\"a\"},{%s"
                "\"data\":{\"n\":%s}%s}]}}}",
                legacy ? "message/send" : "SendMessage", legacy ? "user" : "ROLE_USER",
                legacy ? "\"kind\":\"text\"," : "", legacy ? "\"kind\":\"data\"," : "", lit,
                legacy ? "" : ",\"mediaType\":\"application/json\"");
            int64_t chats = s_count_chats();
            json_t *rpc = s_rpc(body);
            if (s_accepted(lit)) {
                s_assert_rpc_invalid(rpc, lit, "params.message.parts[1]",
                                     "only text and file parts are accepted");
            } else {
                s_assert_rpc_refused(rpc, lit, body,
                                     (size_t)(strstr(body, "{\"n\":") - body + strlen("{\"n\":")),
                                     "params.message.parts[1].data.n");
            }
            assert_int_equal(s_count_chats(), chats);
            json_decref(rpc);
            free(body);
        }
    }
}

/* Message content cannot carry a number: gateway_content accepts only text parts holding
 * exactly "type" and "text" (a string), so a data part, a tool-result part (tool results go
 * through POST tool-results, covered above) and a number beside a text part's text are all
 * refused, on create and on send. The 400 names the part's type or the extra member for a
 * number the policy accepts, and the number itself for one it refuses (the body's parse comes
 * first); nothing is stored. */
static void test_message_content_cannot_carry_a_number(void **u) {
    (void)u;
    proc_http_t r = s_http("POST", "chats", "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}");
    assert_int_equal(r.status, 201);
    char *chat = s_chat_id(&r);
    proc_http_free(&r);
    clusterlog_expect_status(s_cluster, chat, "waiting", S_TURN_MS);
    char send[160];
    snprintf(send, sizeof send, "chats/%s/messages", chat);
    static const struct {
        const char *part;  /* %s is the number */
        const char *field; /* what an accepted number's refusal names */
        const char *detail;
        const char *number_field; /* what a refused number's refusal names */
    } cases[] = {
        {"{\"type\":\"data\",\"data\":{\"n\":%s}}", "content[0].type",
         "only \"text\" and \"file\" input parts", "content[0].data.n"},
        {"{\"type\":\"tool-result\",\"tool_call_id\":\"c1\",\"tool_name\":\"ask\",\"output\":"
         "{\"n\":%s}}",
         "content[0].type", "only \"text\" and \"file\" input parts", "content[0].output.n"},
        {"{\"type\":\"text\",\"text\":\"a number\",\"n\":%s}", "content[0].n", "unknown field",
         "content[0].n"},
    };
    char lits[64][S_LIT_MAX];
    int n = s_literals(lits, 64);
    char *before = cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages");
    int64_t chats = s_count_chats();
    for (int i = 0; i < n; i++) {
        const char *lit = lits[i];
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char *part = mem_printf(cases[c].part, lit);
            char *body = mem_printf("{\"content\":[%s]}", part);
            for (int on_send = 0; on_send < 2; on_send++) {
                r = s_http("POST", on_send ? send : "chats", body);
                if (s_accepted(lit)) {
                    s_assert_invalid(&r, lit, cases[c].field, cases[c].detail);
                } else {
                    s_assert_refused(&r, lit, cases[c].number_field);
                }
                proc_http_free(&r);
            }
            free(body);
            free(part);
        }
    }
    char *after = cluster_sql(s_cluster, "SELECT count(*) FROM chat_messages");
    assert_string_equal(before, after);
    assert_int_equal(s_count_chats(), chats);
    free(before);
    free(after);
    free(chat);
}

/* A row written before the policy: 1e300 in a stored tool result as PostgreSQL's jsonb gave it
 * back, a 301-digit integer, reads over REST and SSE, and the worker runs the next turn on it. */
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
        " UPDATE chat_messages SET content = regexp_replace(content::text, '\"n\": ?1', "
        "'\"n\": ' || 1e300::numeric || ', \"tiny\": ' || 1e-300::numeric)::json"
        " WHERE chat_id = '%s' AND content::text ~ '\"n\": ?1'; COMMIT;"
        " SELECT count(*) FROM chat_messages"
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
        cmocka_unit_test(test_tool_schemas_and_results_are_refused_or_read_back),
        cmocka_unit_test(test_response_format_is_refused_or_read_back),
        cmocka_unit_test(test_a2a_structured_output_schemas_are_refused_or_read_back),
        cmocka_unit_test(test_a2a_data_parts_are_refused),
        cmocka_unit_test(test_message_content_cannot_carry_a_number),
        cmocka_unit_test(test_legacy_row_with_a_huge_number_still_reads),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
