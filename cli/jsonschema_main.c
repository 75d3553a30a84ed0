/*
 * chatfleet-jsonschema: checks JSON instances against a Draft-07 schema with the same strict
 * boundary and validator the servers use (ARCHITECTURE.md §11).
 *
 *   chatfleet-jsonschema check [--native] SCHEMA_FILE [INSTANCE_FILE...]   ("-" reads stdin)
 *
 * --native compiles the schema's checks to native code first (jsonschema_native: it needs a C
 * compiler, cc or CHATFLEET_CC), for many instances: each is checked by that code, and only an
 * invalid one is checked again by the interpreter for its report. The verdicts are the same.
 *
 * Exit status: 0 the schema compiles and every instance is valid; 1 an instance is invalid;
 * 2 the schema is rejected by the compiler; 3 a file is unreadable or its text is refused by
 * the strict JSON boundary (malformed, over a cap), the command line is wrong, or --native
 * found no working C compiler. When several
 * instances fail differently, 3 wins over 1. Reasons go to stderr with their paths; stdout
 * gets one "FILE: valid" line per valid instance.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonschema.h"
#include "jsonstrict.h"
#include "mem.h"

enum { EXIT_VALID = 0, EXIT_INVALID = 1, EXIT_SCHEMA = 2, EXIT_INPUT = 3 };

/* Reads at most max + 1 bytes of path ("-" = stdin), so the boundary can report an oversized
 * file without the tool reading all of it. Returns NULL (errno set) when unreadable. */
static char *s_read(const char *path, size_t max, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    char *buf = mem_alloc(max + 1);
    *len = fread(buf, 1, max + 1, f);
    int failed = ferror(f);
    if (f != stdin) {
        fclose(f);
    }
    if (failed) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    return buf;
}

/* Reads and parses path under limits; prints the reason and returns NULL on failure. */
static json_t *s_load(const char *path, const jsonstrict_limits_t *limits) {
    size_t len = 0;
    char *text = s_read(path, limits->max_bytes, &len);
    if (!text) {
        fprintf(stderr, "%s: unreadable: %s\n", path, strerror(errno));
        return NULL;
    }
    json_t *value = NULL;
    jsonstrict_error_t err;
    if (jsonstrict_parse(text, len, limits, &value, &err)) {
        fprintf(stderr, "%s: malformed JSON (%s) at byte %zu, path \"%s\": %s\n", path,
                jsonstrict_code_name(err.code), err.offset, err.path, err.message);
    }
    free(text);
    return value;
}

/* Checks the instance at path; with quick, without a report first (the native code), and
 * with the report only when that says invalid. */
static int s_check_instance(const jsonschema_t *schema, const char *path, bool quick) {
    json_t *instance = s_load(path, &jsonstrict_limits_default);
    if (!instance) {
        return EXIT_INPUT;
    }
    jsonschema_report_t *report = mem_alloc(sizeof *report);
    jsonschema_result_t r = JSONSCHEMA_INVALID;
    if (quick) {
        r = jsonschema_validate(schema, instance, JSONSCHEMA_FAIL_FAST, NULL);
    }
    if (r != JSONSCHEMA_VALID) {
        r = jsonschema_validate(schema, instance, JSONSCHEMA_ALL_ERRORS, report);
    }
    json_decref(instance);
    if (r == JSONSCHEMA_VALID) {
        printf("%s: valid\n", path);
        free(report);
        return EXIT_VALID;
    }
    for (size_t i = 0; i < report->count; i++) {
        const jsonschema_issue_t *issue = &report->items[i];
        fprintf(stderr, "%s: invalid at \"%s\": %s (schema \"%s\")\n", path, issue->instance_path,
                issue->message, issue->schema_path);
    }
    if (report->truncated) {
        fprintf(stderr, "%s: more than %d issues; the rest are not listed\n", path,
                JSONSCHEMA_ERRORS_MAX);
    }
    free(report);
    return EXIT_INVALID;
}

static int s_usage(void) {
    fprintf(stderr, "usage: chatfleet-jsonschema check [--native] SCHEMA_FILE [INSTANCE_FILE...]  "
                    "(\"-\" = stdin)\n"
                    "exit: 0 valid, 1 an instance invalid, 2 schema rejected, 3 bad input\n");
    return EXIT_INPUT;
}

int main(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[1], "check") != 0) {
        return s_usage();
    }
    const bool native = strcmp(argv[2], "--native") == 0;
    const int at = native ? 3 : 2; /* the schema's argument */
    if (at >= argc) {
        return s_usage();
    }
    json_t *doc = s_load(argv[at], &jsonstrict_limits_schema);
    if (!doc) {
        return EXIT_INPUT;
    }
    jsonschema_t *schema = NULL;
    jsonschema_error_t err;
    int rc = jsonschema_compile(doc, &schema, &err);
    json_decref(doc);
    if (rc) {
        fprintf(stderr, "%s: schema rejected at \"%s\": %s\n", argv[at], err.schema_path,
                err.message);
        return EXIT_SCHEMA;
    }
    char why[256];
    if (native && jsonschema_native(schema, why, sizeof why) != 0) {
        fprintf(stderr, "%s: no native code: %s\n", argv[at], why);
        jsonschema_destroy(&schema);
        return EXIT_INPUT;
    }
    int status = EXIT_VALID;
    for (int i = at + 1; i < argc; i++) {
        int one = s_check_instance(schema, argv[i], native);
        if (one == EXIT_INPUT || (one == EXIT_INVALID && status == EXIT_VALID)) {
            status = one;
        }
    }
    jsonschema_destroy(&schema);
    return status;
}
