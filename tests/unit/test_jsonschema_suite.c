/*
 * The official JSON-Schema-Test-Suite, draft7, run through the real path: every schema and
 * every instance text goes through the strict boundary (jsonstrict_parse) and then through
 * jsonschema_compile/jsonschema_validate.
 *
 * The harness cuts the raw text of each "schema" and "data" out of the suite files itself
 * (the files hold numbers that the boundary rightly refuses, so they cannot be parsed whole).
 * Groups whose schema has $ref, $id, id, definitions or $defs at a schema position are
 * expected to be rejected at compile time (inline schemas only) and are counted as such; the
 * harness decides that on its own walk of the schema, not by asking the compiler.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonschema.h"
#include "jsonstrict.h"

/* The required-test figure for the pinned suite (SOURCE_COMMIT.txt beside tests/): every
 * required test outside the reference-using groups. */
#define SUITE_REQUIRED_EXPECTED 818

/* The optional tests that do not pass, each with its reason (relative to the source tree). */
#define KNOWN_FAILURES_FILE "tests/unit/jsonschema-known-failures.txt"

typedef struct {
    size_t passed;
    size_t failed;
    size_t rejected_groups; /* rejected at compile time, as expected */
    size_t rejected_tests;
    size_t boundary; /* instance refused by the strict boundary */
    size_t unsupported;
    size_t nul_bypass; /* texts parsed by jansson because the boundary refuses U+0000 */
} s_counts_t;

/* The boundary refuses a decoded U+0000 (PostgreSQL JSONB cannot store it), which is a rule of
 * the boundary, not of JSON Schema. The validator itself handles such strings, so the suite's
 * NUL tests are parsed with jansson instead and counted in nul_bypass. */
static int s_parse(const char *text, size_t len, const jsonstrict_limits_t *lim, json_t **out,
                   jsonstrict_error_t *err, s_counts_t *c) {
    if (jsonstrict_parse(text, len, lim, out, err) == 0) {
        return 0;
    }
    if (err->code != JSONSTRICT_E_NUL) {
        return -1;
    }
    *out = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, NULL);
    c->nul_bypass += *out != NULL;
    return *out ? 0 : -1;
}

static char *s_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    size_t cap = 1 << 16;
    size_t n = 0;
    char *buf = malloc(cap);
    size_t got = 0;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* --- a raw skipper over well-formed JSON text, to find value spans --- */

static const char *s_ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') {
        p++;
    }
    return p;
}

static const char *s_skip(const char *p) {
    p = s_ws(p);
    if (*p == '"') {
        for (p++; *p != '"'; p++) {
            if (*p == '\\') {
                p++;
            }
        }
        return p + 1;
    }
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = s_ws(p + 1);
        while (*p != close) {
            p = s_skip(p);
            p = s_ws(p);
            if (*p == ':' || *p == ',') {
                p++;
            }
            p = s_ws(p);
        }
        return p + 1;
    }
    while (*p && !strchr(",}] \n\r\t", *p)) {
        p++;
    }
    return p;
}

typedef struct {
    const char *start;
    size_t len;
} s_span_t;

/* The span of member key in the object at p (len 0 when absent). */
static s_span_t s_member(const char *p, const char *key) {
    s_span_t none = {NULL, 0};
    p = s_ws(p);
    if (*p != '{') {
        return none;
    }
    p = s_ws(p + 1);
    size_t klen = strlen(key);
    while (*p == '"') {
        const char *kend = s_skip(p);
        bool hit = (size_t)(kend - p) == klen + 2 && memcmp(p + 1, key, klen) == 0;
        p = s_ws(s_ws(kend) + 1);
        const char *vend = s_skip(p);
        if (hit) {
            return (s_span_t){p, (size_t)(vend - p)};
        }
        p = s_ws(vend);
        if (*p == ',') {
            p = s_ws(p + 1);
        }
    }
    return none;
}

/* The spans of the elements of the array at p; returns the count (at most cap). */
static size_t s_elements(const char *p, s_span_t *out, size_t cap) {
    size_t n = 0;
    p = s_ws(p);
    if (*p != '[') {
        return 0;
    }
    p = s_ws(p + 1);
    while (*p != ']' && n < cap) {
        const char *end = s_skip(p);
        out[n++] = (s_span_t){p, (size_t)(end - p)};
        p = s_ws(end);
        if (*p == ',') {
            p = s_ws(p + 1);
        }
    }
    return n;
}

/* --- the harness's own view of which schemas use references --- */

static bool s_uses_ref(const json_t *s);

static bool s_any_ref(const json_t *list) {
    for (size_t i = 0; i < json_array_size(list); i++) {
        if (s_uses_ref(json_array_get(list, i))) {
            return true;
        }
    }
    return false;
}

static bool s_uses_ref(const json_t *s) {
    static const char *refs[] = {"$ref", "$id", "id", "definitions", "$defs"};
    static const char *maps[] = {"properties", "patternProperties", "dependencies"};
    static const char *lists[] = {"allOf", "anyOf", "oneOf", "items"};
    static const char *subs[] = {"additionalItems",
                                 "additionalProperties",
                                 "contains",
                                 "propertyNames",
                                 "not",
                                 "if",
                                 "then",
                                 "else",
                                 "items"};
    if (!json_is_object(s)) {
        return false;
    }
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        if (json_object_get(s, refs[i])) {
            return true;
        }
    }
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        const char *key = NULL;
        json_t *v = NULL;
        json_object_foreach(json_object_get(s, maps[i]), key, v) {
            if (s_uses_ref(v)) {
                return true;
            }
        }
    }
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        if (s_any_ref(json_object_get(s, lists[i]))) {
            return true;
        }
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (s_uses_ref(json_object_get(s, subs[i]))) {
            return true;
        }
    }
    return false;
}

/* --- running --- */

static char s_root[1024]; /* the suite's draft7 directory */

static bool s_verbose(void) {
    return getenv("SUITE_VERBOSE") != NULL;
}

/* Every test that did not pass, as "file | group | description | kind", while recording is
 * on (the optional suites, pinned against KNOWN_FAILURES_FILE). */
static char **s_seen;
static size_t s_nseen;
static bool s_recording;

/* Notes a test that did not pass; kind is failed, boundary or unsupported. */
static void s_note(const char *file, const char *group, const s_span_t *test, const char *kind,
                   const char *why) {
    s_span_t d = s_member(test->start, "description");
    if (s_verbose()) {
        fprintf(stderr, "  FAIL %s | %s | %.*s: %s\n", file, group, (int)d.len, d.start, why);
    }
    if (s_recording) {
        char key[1024];
        snprintf(key, sizeof key, "%s | %s | %.*s | %s", file, group, (int)d.len, d.start, kind);
        s_seen = realloc(s_seen, (s_nseen + 1) * sizeof *s_seen);
        assert_non_null(s_seen);
        s_seen[s_nseen++] = strdup(key);
    }
}

static void s_run_group(const char *file, const s_span_t *group, s_counts_t *c) {
    static const jsonstrict_limits_t data_limits = {
        .max_bytes = 1 << 20,
        .max_depth = 64,
        .max_values = 1 << 16,
        .max_keys = 1 << 16,
        .max_items = 1 << 16,
        .max_string_bytes = 1 << 16,
        .max_number_chars = 128,
        .numbers = JSONSTRICT_NUMBERS_STORABLE,
    };
    s_span_t tests[64];
    size_t ntests = s_elements(s_member(group->start, "tests").start, tests, 64);
    s_span_t desc = s_member(group->start, "description");
    char gname[160];
    snprintf(gname, sizeof gname, "%.*s", (int)desc.len, desc.start);
    s_span_t ss = s_member(group->start, "schema");
    json_t *schema = NULL;
    jsonstrict_error_t perr;
    if (s_parse(ss.start, ss.len, &jsonstrict_limits_schema, &schema, &perr, c)) {
        for (size_t t = 0; t < ntests; t++) {
            s_note(file, gname, &tests[t], "unsupported", perr.message);
        }
        c->unsupported += ntests;
        return;
    }
    jsonschema_t *compiled = NULL;
    jsonschema_error_t cerr;
    int rc = jsonschema_compile(schema, &compiled, &cerr);
    bool expect_reject = s_uses_ref(schema);
    /* The same schema as native code (jsonschema_native) must give the interpreter's verdicts. */
    jsonschema_t *native = NULL;
    char why[256] = "";
    if (rc == 0 && !expect_reject &&
        (jsonschema_compile(schema, &native, &cerr) != 0 ||
         jsonschema_native(native, why, sizeof why) != 0)) {
        print_error("%s: %s: no native code: %s\n", file, gname, why);
        c->failed++;
    }
    json_decref(schema);
    if (rc != 0 || expect_reject) {
        if (rc != 0 && expect_reject) {
            c->rejected_groups++;
            c->rejected_tests += ntests;
        } else {
            bool unsupported = rc != 0 && strstr(file, "optional");
            for (size_t t = 0; t < ntests; t++) {
                s_note(file, gname, &tests[t], unsupported ? "unsupported" : "failed",
                       rc ? cerr.message : "compiled a $ref schema");
            }
            if (unsupported) {
                c->unsupported += ntests;
            } else {
                c->failed += ntests;
            }
        }
        jsonschema_destroy(&compiled);
        return;
    }
    for (size_t t = 0; t < ntests; t++) {
        s_span_t ds = s_member(tests[t].start, "data");
        s_span_t vs = s_member(tests[t].start, "valid");
        bool want = vs.len == 4 && memcmp(vs.start, "true", 4) == 0;
        json_t *data = NULL;
        if (s_parse(ds.start, ds.len, &data_limits, &data, &perr, c)) {
            s_note(file, gname, &tests[t], "boundary", perr.message);
            c->boundary++;
            continue;
        }
        jsonschema_report_t report;
        bool got =
            jsonschema_validate(compiled, data, JSONSCHEMA_ALL_ERRORS, &report) == JSONSCHEMA_VALID;
        /* Fail-fast must agree with the full run. */
        bool fast =
            jsonschema_validate(compiled, data, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
        bool by_native = native && jsonschema_validate(native, data, JSONSCHEMA_FAIL_FAST, NULL) ==
                                       JSONSCHEMA_VALID;
        json_decref(data);
        if (native && by_native != fast) {
            s_note(file, gname, &tests[t], "failed", "the native code disagrees");
            c->failed++;
        } else if (got == want && fast == got && (got || report.count > 0)) {
            c->passed++;
        } else {
            c->failed++;
            s_note(file, gname, &tests[t], "failed", got ? "accepted" : "rejected");
        }
    }
    jsonschema_destroy(&compiled);
    jsonschema_destroy(&native);
}

static void s_run_file(const char *dir, const char *name, s_counts_t *c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len = 0;
    char *text = s_read(path, &len);
    assert_non_null(text);
    text = realloc(text, len + 1);
    text[len] = '\0';
    /* Named by its path under the draft7 directory: "optional/format/email.json". */
    size_t root = strlen(s_root);
    const char *rel = strncmp(dir, s_root, root) == 0 ? dir + root : "";
    char label[256];
    snprintf(label, sizeof label, "%s%s%s", *rel == '/' ? rel + 1 : rel, *rel ? "/" : "", name);
    s_span_t groups[128];
    size_t n = s_elements(text, groups, 128);
    for (size_t g = 0; g < n; g++) {
        s_run_group(label, &groups[g], c);
    }
    free(text);
}

static int s_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every *.json in dir (sorted) whose name passes keep; returns the number of files. */
static size_t s_run_dir(const char *dir, bool (*keep)(const char *), s_counts_t *c, bool per_file) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *names[128];
    size_t n = 0;
    struct dirent *e = NULL;
    while ((e = readdir(d)) && n < 128) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0 && (!keep || keep(e->d_name))) {
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(names, n, sizeof *names, s_cmp);
    for (size_t i = 0; i < n; i++) {
        s_counts_t one = {0};
        s_run_file(dir, names[i], &one);
        if (per_file) {
            printf("  optional %-28s %3zu passed, %3zu failed, %3zu refused by the boundary, "
                   "%3zu schema unsupported\n",
                   names[i], one.passed, one.failed, one.boundary, one.unsupported);
        }
        c->passed += one.passed;
        c->failed += one.failed;
        c->rejected_groups += one.rejected_groups;
        c->rejected_tests += one.rejected_tests;
        c->boundary += one.boundary;
        c->unsupported += one.unsupported;
        c->nul_bypass += one.nul_bypass;
        free(names[i]);
    }
    return n;
}

static bool s_optional_file(const char *name) {
    return strcmp(name, "bignum.json") == 0 || strcmp(name, "float-overflow.json") == 0 ||
           strcmp(name, "ecmascript-regex.json") == 0 || strcmp(name, "non-bmp-regex.json") == 0;
}

static bool s_supported_format(const char *name) {
    return strcmp(name, "unknown.json") != 0; /* every other format file names a format we have */
}

static int s_setup(void **state) {
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    snprintf(s_root, sizeof s_root, "%s/../shared/testdata/JSON-Schema-Test-Suite/tests/draft7",
             src ? src : ".");
    return 0;
}

static void test_required_suite_passes_except_reference_groups(void **state) {
    s_counts_t c = {0};
    size_t files = s_run_dir(s_root, NULL, &c, false);
    assert_true(files > 30);
    printf("draft7 required: %zu passed, %zu failed\n", c.passed, c.failed);
    printf("draft7 required: %zu groups (%zu tests) rejected at compile time as expected "
           "($ref/$id/definitions), %zu refused by the boundary, %zu unsupported, %zu texts with "
           "U+0000 parsed past the boundary\n",
           c.rejected_groups, c.rejected_tests, c.boundary, c.unsupported, c.nul_bypass);
    assert_int_equal(c.failed, 0);
    assert_int_equal(c.boundary, 0);
    assert_int_equal(c.unsupported, 0);
    assert_true(c.rejected_groups > 0);
    assert_int_equal(c.passed, SUITE_REQUIRED_EXPECTED);
}

/* Whether the known-failures file lists key ("file | group | description | kind"), and
 * marks that line as met. */
static bool s_known(char **known, bool *met, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(key);
        if (strncmp(known[i], key, len) == 0 && strncmp(known[i] + len, " | ", 3) == 0) {
            met[i] = true;
            return true;
        }
    }
    return false;
}

/* The known-failures file's entries ("file | group | description | kind | reason"); the
 * count in *n. Comments (#) and blank lines are skipped. */
static char **s_load_known(const char *path, size_t *n) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char **out = NULL;
    char line[2048];
    *n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#') {
            continue;
        }
        out = realloc(out, (*n + 1) * sizeof *out);
        assert_non_null(out);
        out[(*n)++] = strdup(line);
    }
    fclose(f);
    return out;
}

/* The optional suites (formats included) are pinned: every test that does not pass is listed,
 * with its reason, in KNOWN_FAILURES_FILE, and every listed one still does not pass. */
static void test_optional_suite_fails_exactly_the_known_cases(void **state) {
    s_counts_t c = {0};
    char dir[1100];
    s_recording = true;
    snprintf(dir, sizeof dir, "%s/optional", s_root);
    s_run_dir(dir, s_optional_file, &c, true);
    snprintf(dir, sizeof dir, "%s/optional/format", s_root);
    s_run_dir(dir, s_supported_format, &c, true);
    s_recording = false;
    printf("draft7 optional: %zu passed, %zu failed, %zu refused by the boundary, %zu schema "
           "unsupported\n",
           c.passed, c.failed, c.boundary, c.unsupported);
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    char path[1100];
    snprintf(path, sizeof path, "%s/" KNOWN_FAILURES_FILE, src ? src : ".");
    size_t nknown = 0;
    char **known = s_load_known(path, &nknown);
    bool *met = calloc(nknown + 1, sizeof *met);
    size_t unexpected = 0;
    for (size_t i = 0; i < s_nseen; i++) {
        if (!s_known(known, met, nknown, s_seen[i])) {
            printf("NEW FAILURE (not in %s): %s\n", KNOWN_FAILURES_FILE, s_seen[i]);
            unexpected++;
        }
        free(s_seen[i]);
    }
    free(s_seen);
    s_seen = NULL;
    s_nseen = 0;
    size_t passing = 0;
    for (size_t i = 0; i < nknown; i++) {
        if (!met[i]) {
            printf("NOW PASSES (remove it from %s): %s\n", KNOWN_FAILURES_FILE, known[i]);
            passing++;
        }
        free(known[i]);
    }
    free(known);
    free(met);
    assert_true(c.passed > 0);
    assert_int_equal(unexpected, 0);
    assert_int_equal(passing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_required_suite_passes_except_reference_groups, s_setup),
        cmocka_unit_test_setup(test_optional_suite_fails_exactly_the_known_cases, s_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
