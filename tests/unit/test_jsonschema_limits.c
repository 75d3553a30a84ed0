/*
 * Limits of the strict boundary and of the schema compiler and validator: every cap at its
 * bound (accepted) and one above (rejected, naming the cap), then the hostile inputs of
 * issue 4, each run in a child process that prints its wall time and peak memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jsondecimal.h"
#include "jsonschema.h"
#include "jsonstrict.h"
#include "textbuf.h"

/* Bounds asserted for every hostile input (generous: sanitizer builds run them too). */
#define HOSTILE_MAX_MS      3000
#define HOSTILE_MAX_RSS_KIB (256 * 1024)

/* --- boundary caps at and above the default bounds --- */

static int s_parse(const textbuf_t *t, const jsonstrict_limits_t *lim, jsonstrict_error_t *err) {
    json_t *v = NULL;
    int rc = jsonstrict_parse(t->p, t->len, lim, &v, err);
    json_decref(v);
    return rc;
}

static void s_expect_cap(textbuf_t *at, textbuf_t *over, const jsonstrict_limits_t *lim,
                         jsonstrict_code_t code) {
    jsonstrict_error_t err;
    if (s_parse(at, lim, &err) != 0) {
        print_error("at the bound: %s (%s)\n", err.message, jsonstrict_code_name(err.code));
    }
    assert_int_equal(s_parse(at, lim, &err), 0);
    assert_int_equal(s_parse(over, lim, &err), -1);
    assert_int_equal(err.code, code);
    free(at->p);
    free(over->p);
}

/* Nesting depth n: [[[...0...]]]. */
static textbuf_t s_nested(size_t n) {
    textbuf_t t = {0};
    textbuf_repeat(&t, "[", n);
    textbuf_add(&t, "0");
    textbuf_repeat(&t, "]", n);
    return t;
}

/* An array of n zeros, or an object of n keys. */
static textbuf_t s_array(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "[");
    for (size_t i = 0; i < n; i++) {
        textbuf_add(&t, "%s0", i ? "," : "");
    }
    textbuf_add(&t, "]");
    return t;
}

static textbuf_t s_object(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "{");
    for (size_t i = 0; i < n; i++) {
        textbuf_add(&t, "%s\"%zu\":0", i ? "," : "", i);
    }
    textbuf_add(&t, "}");
    return t;
}

static textbuf_t s_string(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "\"");
    textbuf_repeat(&t, "a", n);
    textbuf_add(&t, "\"");
    return t;
}

static textbuf_t s_padded(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "0");
    textbuf_repeat(&t, " ", n - 1);
    return t;
}

static textbuf_t s_number(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "1.");
    textbuf_repeat(&t, "0", n - 2);
    return t;
}

static void test_boundary_caps_at_and_above_default_bounds(void **state) {
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    textbuf_t at = s_padded(JSONSTRICT_MAX_BYTES_DEFAULT);
    textbuf_t over = s_padded(JSONSTRICT_MAX_BYTES_DEFAULT + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_TOO_LARGE);

    at = s_nested(JSONSTRICT_MAX_DEPTH_DEFAULT);
    over = s_nested(JSONSTRICT_MAX_DEPTH_DEFAULT + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_DEPTH);

    at = s_array(JSONSTRICT_MAX_ITEMS_DEFAULT);
    over = s_array(JSONSTRICT_MAX_ITEMS_DEFAULT + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_ITEMS);

    at = s_string(JSONSTRICT_MAX_STRING_BYTES_DEFAULT);
    over = s_string(JSONSTRICT_MAX_STRING_BYTES_DEFAULT + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_STRING_LENGTH);

    at = s_number(JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT);
    over = s_number(JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_NUMBER_LENGTH);

    /* An object of n keys holds n + 1 values: the values cap is met first. */
    at = s_object(JSONSTRICT_MAX_VALUES_DEFAULT - 1);
    over = s_object(JSONSTRICT_MAX_VALUES_DEFAULT);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_VALUES);

    lim.max_values = SIZE_MAX;
    at = s_object(JSONSTRICT_MAX_KEYS_DEFAULT);
    over = s_object(JSONSTRICT_MAX_KEYS_DEFAULT + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_KEYS);

    lim = jsonstrict_limits_schema;
    at = s_padded(JSONSTRICT_SCHEMA_MAX_BYTES);
    over = s_padded(JSONSTRICT_SCHEMA_MAX_BYTES + 1);
    s_expect_cap(&at, &over, &lim, JSONSTRICT_E_TOO_LARGE);
}

/* --- compiler caps --- */

static int s_compile_text(const textbuf_t *t, jsonschema_error_t *err) {
    static const jsonstrict_limits_t big = {1 << 24, 200,     1 << 20, 1 << 20,
                                            1 << 20, 1 << 20, 128,     JSONSTRICT_NUMBERS_STORABLE};
    json_t *v = NULL;
    jsonstrict_error_t perr;
    assert_int_equal(jsonstrict_parse(t->p, t->len, &big, &v, &perr), 0);
    jsonschema_t *s = NULL;
    int rc = jsonschema_compile(v, &s, err);
    json_decref(v);
    jsonschema_destroy(&s);
    return rc;
}

static void s_expect_schema_cap(textbuf_t *at, textbuf_t *over, const char *word) {
    jsonschema_error_t err;
    int rc = s_compile_text(at, &err);
    if (rc) {
        print_error("at the bound: %s at %s\n", err.message, err.schema_path);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(s_compile_text(over, &err), -1);
    if (!strstr(err.message, word)) {
        print_error("message %s lacks %s\n", err.message, word);
    }
    assert_non_null(strstr(err.message, word));
    free(at->p);
    free(over->p);
}

static textbuf_t s_schema_depth(size_t levels) {
    textbuf_t t = {0};
    textbuf_repeat(&t, "{\"not\":", levels - 1);
    textbuf_add(&t, "{}");
    textbuf_repeat(&t, "}", levels - 1);
    return t;
}

/* A root with n - 1 subschemas under properties. */
static textbuf_t s_schema_nodes(size_t nodes) {
    textbuf_t t = {0};
    textbuf_add(&t, "{\"properties\":{");
    for (size_t i = 0; i + 1 < nodes; i++) {
        textbuf_add(&t, "%s\"p%zu\":true", i ? "," : "", i);
    }
    textbuf_add(&t, "}}");
    return t;
}

static textbuf_t s_schema_patterns(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "{\"patternProperties\":{");
    for (size_t i = 0; i < n; i++) {
        textbuf_add(&t, "%s\"^p%zu$\":true", i ? "," : "", i);
    }
    textbuf_add(&t, "}}");
    return t;
}

static textbuf_t s_schema_pattern_bytes(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "{\"pattern\":\"");
    textbuf_repeat(&t, "a", n);
    textbuf_add(&t, "\"}");
    return t;
}

static textbuf_t s_schema_branches(size_t n) {
    textbuf_t t = {0};
    textbuf_add(&t, "{\"anyOf\":[");
    for (size_t i = 0; i < n; i++) {
        textbuf_add(&t, "%s{\"const\":%zu}", i ? "," : "", i);
    }
    textbuf_add(&t, "]}");
    return t;
}

static void test_compiler_caps_at_and_above_bounds(void **state) {
    textbuf_t at = s_schema_depth(JSONSCHEMA_MAX_DEPTH);
    textbuf_t over = s_schema_depth(JSONSCHEMA_MAX_DEPTH + 1);
    s_expect_schema_cap(&at, &over, "levels");

    at = s_schema_nodes(JSONSCHEMA_MAX_NODES);
    over = s_schema_nodes(JSONSCHEMA_MAX_NODES + 1);
    s_expect_schema_cap(&at, &over, "subschemas");

    at = s_schema_patterns(JSONSCHEMA_MAX_PATTERNS);
    over = s_schema_patterns(JSONSCHEMA_MAX_PATTERNS + 1);
    s_expect_schema_cap(&at, &over, "patterns");

    at = s_schema_pattern_bytes(JSONSCHEMA_MAX_PATTERN_BYTES);
    over = s_schema_pattern_bytes(JSONSCHEMA_MAX_PATTERN_BYTES + 1);
    s_expect_schema_cap(&at, &over, "bytes");

    at = s_schema_branches(JSONSCHEMA_MAX_BRANCHES);
    over = s_schema_branches(JSONSCHEMA_MAX_BRANCHES + 1);
    s_expect_schema_cap(&at, &over, "branches");
}

/* --- validation caps --- */

static json_t *s_keys_instance(size_t n) {
    json_t *obj = json_object();
    for (size_t i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%zu", i);
        json_object_set_new(obj, key, json_integer((json_int_t)i));
    }
    return obj;
}

static jsonschema_t *s_schema(const char *text) {
    json_t *v = json_loads(text, 0, NULL);
    assert_non_null(v);
    jsonschema_t *s = NULL;
    jsonschema_error_t err;
    assert_int_equal(jsonschema_compile(v, &s, &err), 0);
    json_decref(v);
    return s;
}

static void test_match_cap_at_and_above_bound(void **state) {
    jsonschema_t *s = s_schema("{\"patternProperties\": {\"^k\": true}}");
    json_t *at = s_keys_instance(JSONSCHEMA_MAX_MATCHES);
    json_t *over = s_keys_instance(JSONSCHEMA_MAX_MATCHES + 1);
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate(s, at, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_VALID);
    assert_int_equal(jsonschema_validate(s, over, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, 1);
    assert_non_null(strstr(r.items[0].message, "cap"));
    json_decref(at);
    json_decref(over);
    jsonschema_destroy(&s);
}

static void test_error_cap_at_and_above_bound(void **state) {
    jsonschema_t *s = s_schema("{\"additionalProperties\": false}");
    json_t *at = s_keys_instance(JSONSCHEMA_ERRORS_MAX);
    json_t *over = s_keys_instance(JSONSCHEMA_ERRORS_MAX + 1);
    jsonschema_report_t r;
    assert_int_equal(jsonschema_validate(s, at, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, JSONSCHEMA_ERRORS_MAX);
    assert_false(r.truncated);
    assert_int_equal(jsonschema_validate(s, over, JSONSCHEMA_ALL_ERRORS, &r), JSONSCHEMA_INVALID);
    assert_int_equal(r.count, JSONSCHEMA_ERRORS_MAX);
    assert_true(r.truncated);
    json_decref(at);
    json_decref(over);
    jsonschema_destroy(&s);
}

/* --- hostile inputs, each in a child process --- */

typedef struct {
    int outcome; /* 0 accepted or valid, 1 rejected or invalid */
    double ms;
    char what[400];
} s_hostile_result_t;

typedef void (*s_hostile_fn)(s_hostile_result_t *r);

static double s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Parses text under the default caps (or lim); records the outcome and the reason. */
static void s_boundary(const textbuf_t *t, const jsonstrict_limits_t *lim, s_hostile_result_t *r) {
    jsonstrict_error_t err;
    double t0 = s_now_ms();
    json_t *v = NULL;
    int rc = jsonstrict_parse(t->p, t->len, lim, &v, &err);
    json_decref(v);
    r->ms = s_now_ms() - t0;
    r->outcome = rc != 0;
    snprintf(r->what, sizeof r->what, "%s", rc ? err.message : "accepted");
}

static void s_validate(const char *schema, json_t *instance, s_hostile_result_t *r) {
    double t0 = s_now_ms();
    jsonschema_t *s = s_schema(schema);
    jsonschema_report_t report;
    jsonschema_result_t res = jsonschema_validate(s, instance, JSONSCHEMA_ALL_ERRORS, &report);
    r->ms = s_now_ms() - t0;
    r->outcome = res == JSONSCHEMA_INVALID;
    snprintf(r->what, sizeof r->what, "%s (%zu issues%s)",
             res == JSONSCHEMA_VALID ? "valid" : report.items[0].message, report.count,
             report.truncated ? ", truncated" : "");
    jsonschema_destroy(&s);
}

static void s_deep(s_hostile_result_t *r) {
    textbuf_t t = s_nested(100000);
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = t.len; /* so that the depth cap, not the byte cap, is what stops it */
    s_boundary(&t, &lim, r);
    free(t.p);
}

static void s_million_keys(s_hostile_result_t *r) {
    textbuf_t t = s_object(1000000);
    jsonstrict_limits_t lim = jsonstrict_limits_default;
    lim.max_bytes = t.len;
    lim.max_values = SIZE_MAX;
    s_boundary(&t, &lim, r);
    free(t.p);
}

static void s_million_keys_default(s_hostile_result_t *r) {
    textbuf_t t = s_object(1000000);
    s_boundary(&t, NULL, r);
    free(t.p);
}

/* Numbers beyond the magnitude cap are refused; at the cap they are kept (as text). */
static void s_big_number(s_hostile_result_t *r) {
    textbuf_t t = {0};
    textbuf_add(&t, "1e401");
    s_boundary(&t, NULL, r);
    free(t.p);
}

static void s_cap_number(s_hostile_result_t *r) {
    textbuf_t t = {0};
    textbuf_add(&t, "[1e400, -1e-400, 9.9e400]");
    s_boundary(&t, NULL, r);
    free(t.p);
}

/* A number literal of n significant digits: "d.ddd...e<exp>" (digits from seed). */
static void s_long_literal(textbuf_t *t, size_t n, int exp, unsigned seed) {
    textbuf_add(t, "%u.", 1 + seed % 9);
    for (size_t i = 1; i < n; i++) {
        textbuf_add(t, "%u", (unsigned)((seed * 7 + i * 13) % 10));
    }
    textbuf_add(t, "e%d", exp);
}

/* The costliest exact-number workload the caps admit: anyOf branches of multipleOf, each with
 * a divisor of the most significant digits a multipleOf may have (36,
 * JSONDECIMAL_MULTIPLE_FAST_DIGITS) near 10^-300, as many as the 16 KiB schema cap holds, the last
 * branch any number; over an object of as many 120-digit members near 10^300 as the 64 KiB input
 * cap holds. Schema and instance are both read by the boundary, so every number is a text real
 * compared as a decimal, and each failing branch (quiet: nothing is reported, so the error cap
 * never stops the work) runs jsondecimal_multiple_of's remainder its longest. One more significant
 * digit in a divisor is refused when the schema is read. */
static void s_exact_multiple_of(s_hostile_result_t *r) {
    textbuf_t schema = {0};
    textbuf_add(&schema, "{\"additionalProperties\":{\"anyOf\":[");
    const char *last = ",{\"type\":\"number\"}]}}";
    for (unsigned i = 0; i + 1 < JSONSCHEMA_MAX_BRANCHES; i++) {
        size_t before = schema.len;
        textbuf_add(&schema, "%s{\"multipleOf\":", i ? "," : "");
        s_long_literal(&schema, JSONDECIMAL_MULTIPLE_FAST_DIGITS, -300, i);
        textbuf_add(&schema, "}");
        if (schema.len + strlen(last) > JSONSTRICT_SCHEMA_MAX_BYTES) {
            schema.len = before;
            break;
        }
    }
    textbuf_add(&schema, "%s", last);
    textbuf_t inst = {0};
    textbuf_add(&inst, "{");
    for (unsigned i = 0;; i++) {
        size_t before = inst.len;
        textbuf_add(&inst, "%s\"%u\":", i ? "," : "", i);
        s_long_literal(&inst, 120, 300, i + 1000);
        if (inst.len + 2 > JSONSTRICT_MAX_BYTES_DEFAULT) {
            inst.len = before;
            break;
        }
    }
    textbuf_add(&inst, "}");
    json_t *longer = NULL;
    textbuf_t one = {0};
    textbuf_add(&one, "{\"multipleOf\":");
    s_long_literal(&one, JSONDECIMAL_MULTIPLE_FAST_DIGITS + 1, -300, 7);
    textbuf_add(&one, "}");
    jsonstrict_error_t lerr;
    assert_int_equal(jsonstrict_parse(one.p, one.len, &jsonstrict_limits_schema, &longer, &lerr),
                     0);
    jsonschema_t *refused = NULL;
    jsonschema_error_t rerr;
    assert_int_equal(jsonschema_compile(longer, &refused, &rerr), -1);
    assert_non_null(strstr(rerr.message, "significant digits"));
    json_decref(longer);
    free(one.p);
    double t0 = s_now_ms();
    json_t *sv = NULL;
    json_t *iv = NULL;
    jsonstrict_error_t perr;
    assert_int_equal(jsonstrict_parse(schema.p, schema.len, &jsonstrict_limits_schema, &sv, &perr),
                     0);
    assert_int_equal(jsonstrict_parse(inst.p, inst.len, NULL, &iv, &perr), 0);
    jsonschema_t *s = NULL;
    jsonschema_error_t err;
    assert_int_equal(jsonschema_compile(sv, &s, &err), 0);
    jsonschema_report_t report;
    jsonschema_result_t res = jsonschema_validate(s, iv, JSONSCHEMA_ALL_ERRORS, &report);
    r->ms = s_now_ms() - t0;
    r->outcome = res == JSONSCHEMA_INVALID;
    snprintf(
        r->what, sizeof r->what, "%zu divisors x %zu members: %s (%zu issues%s)",
        json_array_size(json_object_get(json_object_get(sv, "additionalProperties"), "anyOf")) - 1,
        json_object_size(iv), res == JSONSCHEMA_VALID ? "valid" : report.items[0].message,
        report.count, report.truncated ? ", truncated" : "");
    jsonschema_destroy(&s);
    json_decref(sv);
    json_decref(iv);
    free(schema.p);
    free(inst.p);
}

static void s_lone_surrogate(s_hostile_result_t *r) {
    textbuf_t t = {0};
    textbuf_add(&t, "\"\\ud800\"");
    s_boundary(&t, NULL, r);
    free(t.p);
}

static void s_duplicates(s_hostile_result_t *r) {
    textbuf_t t = {0};
    textbuf_add(&t, "{\"a\":{\"b\":1,\"b\":2}}");
    s_boundary(&t, NULL, r);
    free(t.p);
}

static void s_redos(s_hostile_result_t *r) {
    char *s = malloc(JSONSTRICT_MAX_STRING_BYTES_DEFAULT + 1);
    memset(s, 'a', JSONSTRICT_MAX_STRING_BYTES_DEFAULT);
    s[JSONSTRICT_MAX_STRING_BYTES_DEFAULT - 1] = '!';
    json_t *v = json_stringn(s, JSONSTRICT_MAX_STRING_BYTES_DEFAULT);
    s_validate("{\"pattern\": \"(a+)+$\"}", v, r);
    json_decref(v);
    free(s);
}

/* 64 patterns (the cap) that backtrack on every key, over 4096 keys (the default key cap). */
static void s_pattern_properties(s_hostile_result_t *r) {
    textbuf_t schema = {0};
    textbuf_add(&schema, "{\"patternProperties\":{");
    for (int i = 0; i < JSONSCHEMA_MAX_PATTERNS; i++) {
        textbuf_add(&schema, "%s\"^(k+)+%d$\":{\"type\":\"string\"}", i ? "," : "", i);
    }
    textbuf_add(&schema, "}}");
    json_t *v = s_keys_instance(JSONSTRICT_MAX_KEYS_DEFAULT);
    s_validate(schema.p, v, r);
    json_decref(v);
    free(schema.p);
}

/* 64 patterns (the cap) that each backtrack about 2^13 steps, under the per-match step limit,
 * over the 256 keys that the match cap allows: the costliest accepted regex workload. */
static void s_pattern_backtracking(s_hostile_result_t *r) {
    textbuf_t schema = {0};
    textbuf_add(&schema, "{\"patternProperties\":{");
    for (int i = 0; i < JSONSCHEMA_MAX_PATTERNS; i++) {
        textbuf_add(&schema, "%s\"^(k+)+%d$\":true", i ? "," : "", i);
    }
    textbuf_add(&schema, "}}");
    json_t *v = json_object();
    for (int i = 0; i < JSONSCHEMA_MAX_MATCHES / JSONSCHEMA_MAX_PATTERNS; i++) {
        char key[64];
        snprintf(key, sizeof key, "kkkkkkkkkkkkk!%d", i);
        json_object_set_new(v, key, json_true());
    }
    s_validate(schema.p, v, r);
    json_decref(v);
    free(schema.p);
}

/* 128 branches (the cap) under additionalProperties over 4096 keys: failing allOf, failing
 * anyOf (quiet, nothing reported early), and passing ones, which evaluate everything. */
static void s_branches(s_hostile_result_t *r, const char *outer, const char *branch,
                       const char *last) {
    textbuf_t schema = {0};
    textbuf_add(&schema, "{\"additionalProperties\":{\"%s\":[", outer);
    for (int i = 0; i < JSONSCHEMA_MAX_BRANCHES; i++) {
        textbuf_add(&schema, "%s%s", i ? "," : "", i + 1 < JSONSCHEMA_MAX_BRANCHES ? branch : last);
    }
    textbuf_add(&schema, "]}}");
    json_t *v = s_keys_instance(JSONSTRICT_MAX_KEYS_DEFAULT);
    s_validate(schema.p, v, r);
    json_decref(v);
    free(schema.p);
}

static void s_all_of_failing(s_hostile_result_t *r) {
    s_branches(r, "allOf", "{\"type\":\"string\"}", "{\"type\":\"string\"}");
}

static void s_any_of_failing(s_hostile_result_t *r) {
    s_branches(r, "anyOf", "{\"type\":\"string\"}", "{\"type\":\"string\"}");
}

static void s_all_of_passing(s_hostile_result_t *r) {
    s_branches(r, "allOf", "{\"type\":\"integer\",\"minimum\":0}", "{\"minimum\":0}");
}

static void s_any_of_last(s_hostile_result_t *r) {
    s_branches(r, "anyOf", "{\"type\":\"string\"}", "{\"type\":\"integer\"}");
}

static void s_run_hostile(const char *name, s_hostile_fn fn, int want) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        s_hostile_result_t r = {0};
        fn(&r);
        ssize_t n = write(fds[1], &r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    s_hostile_result_t r = {0};
    ssize_t n = read(fds[0], &r, sizeof r);
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    assert_int_equal(wait4(pid, &status, 0, &ru), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(n, (ssize_t)sizeof r);
    printf("hostile %-34s %-8s %8.2f ms  peak RSS %6ld KiB  %s\n", name,
           r.outcome ? "rejected" : "accepted", r.ms, ru.ru_maxrss, r.what);
    assert_int_equal(r.outcome, want);
    assert_true(r.ms < HOSTILE_MAX_MS);
    assert_true(ru.ru_maxrss < HOSTILE_MAX_RSS_KIB);
}

static void test_hostile_inputs_cost_bounded_time_and_memory(void **state) {
    s_run_hostile("nesting 100000 deep", s_deep, 1);
    s_run_hostile("1000000 keys (byte cap raised)", s_million_keys, 1);
    s_run_hostile("1000000 keys (default caps)", s_million_keys_default, 1);
    s_run_hostile("1e401", s_big_number, 1);
    s_run_hostile("1e400, -1e-400, 9.9e400", s_cap_number, 0);
    s_run_hostile("anyOf multipleOf, 36 digits, x members", s_exact_multiple_of, 0);
    s_run_hostile("\"\\ud800\"", s_lone_surrogate, 1);
    s_run_hostile("duplicate keys", s_duplicates, 1);
    s_run_hostile("(a+)+$ on 16 KiB", s_redos, 1);
    s_run_hostile("64 patternProperties x 4096 keys", s_pattern_properties, 1);
    s_run_hostile("64 backtracking patterns x 256 keys", s_pattern_backtracking, 0);
    s_run_hostile("128 failing allOf x 4096 keys", s_all_of_failing, 1);
    s_run_hostile("128 failing anyOf x 4096 keys", s_any_of_failing, 1);
    s_run_hostile("128 passing allOf x 4096 keys", s_all_of_passing, 0);
    s_run_hostile("128 anyOf, last matches, x 4096 keys", s_any_of_last, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boundary_caps_at_and_above_default_bounds),
        cmocka_unit_test(test_compiler_caps_at_and_above_bounds),
        cmocka_unit_test(test_match_cap_at_and_above_bound),
        cmocka_unit_test(test_error_cap_at_and_above_bound),
        cmocka_unit_test(test_hostile_inputs_cost_bounded_time_and_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
