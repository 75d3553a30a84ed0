/*
 * libFuzzer target for the schema compiler and validator. The input is a schema text, a NUL
 * byte and an instance text (without a NUL the text is both). Both go through the strict
 * boundary first, as in the servers. Properties checked: a rejected schema names a reason;
 * fail-fast (with and without a report) and all-errors agree, and so does validating the tape
 * that jsonstrict_parse_tape gives for the same text; a valid result has no issues and an
 * invalid one has some.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonschema.h"
#include "jsonstrict.h"

static void s_check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_jsonschema: property violated: %s\n", what);
        abort();
    }
}

static void s_validate(const jsonschema_t *schema, const json_t *instance) {
    static jsonschema_report_t report;
    jsonschema_result_t all = jsonschema_validate(schema, instance, JSONSCHEMA_ALL_ERRORS, &report);
    s_check(all == JSONSCHEMA_VALID ? report.count == 0 : report.count > 0,
            "result and report disagree");
    s_check(report.count <= JSONSCHEMA_ERRORS_MAX, "report over its cap");
    for (size_t i = 0; i < report.count; i++) {
        s_check(report.items[i].message[0] != '\0', "issue without a message");
    }
    jsonschema_result_t fast = jsonschema_validate(schema, instance, JSONSCHEMA_FAIL_FAST, NULL);
    s_check(fast == all, "fail-fast and all-errors disagree");
    jsonschema_result_t first =
        jsonschema_validate(schema, instance, JSONSCHEMA_FAIL_FAST, &report);
    s_check(first == all && report.count == (first == JSONSCHEMA_VALID ? 0u : 1u),
            "fail-fast with a report disagrees");
}

/* The text of an instance parsed straight onto a tape validates as its jansson value did. */
static void s_validate_text(const jsonschema_t *schema, const char *text, size_t len,
                            const jsonstrict_limits_t *limits, jsonschema_result_t want) {
    static jsontape_t *tape;
    if (!tape) {
        tape = jsontape_new(); /* reused across runs; reachable, so not a leak */
    }
    s_check(jsonstrict_parse_tape(text, len, limits, tape, NULL) == 0, "tape parse disagrees");
    s_check(jsonschema_validate_tape(schema, tape, 0, JSONSCHEMA_FAIL_FAST, NULL) == want,
            "tape validation disagrees");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    const char *nul = memchr(buf, '\0', size);
    size_t schema_len = nul ? (size_t)(nul - buf) : size;
    json_t *doc = NULL;
    jsonstrict_error_t perr;
    if (jsonstrict_parse(buf, schema_len, &jsonstrict_limits_schema, &doc, &perr)) {
        return 0;
    }
    jsonschema_t *schema = NULL;
    jsonschema_error_t err;
    if (jsonschema_compile(doc, &schema, &err)) {
        s_check(schema == NULL && err.message[0] != '\0', "rejection without a reason");
        json_decref(doc);
        return 0;
    }
    json_t *instance = NULL;
    if (nul) {
        if (jsonstrict_parse(nul + 1, size - schema_len - 1, NULL, &instance, &perr) == 0) {
            s_validate(schema, instance);
            s_validate_text(schema, nul + 1, size - schema_len - 1, NULL,
                            jsonschema_validate(schema, instance, JSONSCHEMA_FAIL_FAST, NULL));
            json_decref(instance);
        }
    }
    s_validate(schema, doc); /* the schema as its own instance: always available */
    s_validate_text(schema, buf, schema_len, &jsonstrict_limits_schema,
                    jsonschema_validate(schema, doc, JSONSCHEMA_FAIL_FAST, NULL));
    json_decref(doc);
    jsonschema_destroy(&schema);
    s_check(schema == NULL, "destroy does not null the pointer");
    return 0;
}
