/*
 * jsonschema: a JSON Schema Draft-07 compiler and validator for structured output
 * (ARCHITECTURE.md §8). Supported keywords, formats, limits and the ECMA-262 regex
 * rewrites are listed in common/json/JSONSCHEMA.md.
 *
 * Inline schemas only: $ref, $id, id, definitions and $defs are rejected where they stand at a
 * schema position (they are fine as property names and inside const/enum/default data), so
 * compilation and validation never touch the network or the file system. Unknown keywords and
 * unknown format names are rejected at compile time. A compiled schema is immutable: any
 * number of threads may validate against it at once (PCRE2 match data is per call).
 *
 * Parse schema and instance text with jsonstrict_parse() (or jsonstrict_parse_tape()) first;
 * instances built by other means must hold valid UTF-8 strings (as jansson's checked
 * constructors guarantee).
 */
#ifndef CHATFLEET_JSONSCHEMA_H
#define CHATFLEET_JSONSCHEMA_H

#include <jansson.h>
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

#include "jsontape.h"

#define JSONSCHEMA_DRAFT7_URI "http://json-schema.org/draft-07/schema#"

/* Fixed compile-time caps (schema text itself is capped by jsonstrict_limits_schema). */
#define JSONSCHEMA_MAX_DEPTH         16   /* levels of nested subschemas, root = 1 */
#define JSONSCHEMA_MAX_NODES         1024 /* subschemas in one schema, root included */
#define JSONSCHEMA_MAX_PATTERNS      64   /* pattern + patternProperties regexes in one schema */
#define JSONSCHEMA_MAX_PATTERN_BYTES 1024 /* bytes of one regex source */
#define JSONSCHEMA_MAX_BRANCHES      128  /* allOf + anyOf + oneOf subschemas in one schema */

/* Fixed validation-time caps. A validation that would exceed one of them is reported
 * invalid with a message naming the cap, never silently passed. */
#define JSONSCHEMA_MATCH_LIMIT       20000 /* PCRE2 match limit (backtracking steps) per match */
#define JSONSCHEMA_MATCH_DEPTH_LIMIT 1000  /* PCRE2 depth limit (nested backtracks) per match */
#define JSONSCHEMA_MATCH_HEAP_KIB    1024  /* PCRE2 heap limit per match, in KiB */
#define JSONSCHEMA_MAX_MATCHES       16384 /* regex matches in one validation */

#define JSONSCHEMA_ERRORS_MAX  32  /* issues kept in one report */
#define JSONSCHEMA_PATH_MAX    256 /* bytes of a path in an issue, NUL included (truncated) */
#define JSONSCHEMA_MESSAGE_MAX 160 /* bytes of a message, NUL included (truncated) */

typedef struct jsonschema jsonschema_t;

/* Why a schema was rejected: the JSON pointer of the offending value inside the schema. */
typedef struct {
    char schema_path[JSONSCHEMA_PATH_MAX];
    char message[JSONSCHEMA_MESSAGE_MAX];
} jsonschema_error_t;

/* One validation failure. */
typedef struct {
    char instance_path[JSONSCHEMA_PATH_MAX]; /* JSON pointer into the instance, "" = root */
    char schema_path[JSONSCHEMA_PATH_MAX];   /* JSON pointer of the failing keyword */
    char message[JSONSCHEMA_MESSAGE_MAX];
} jsonschema_issue_t;

typedef struct {
    size_t count;   /* issues in items */
    bool truncated; /* more failures existed than JSONSCHEMA_ERRORS_MAX (validation stopped) */
    jsonschema_issue_t items[JSONSCHEMA_ERRORS_MAX];
} jsonschema_report_t;

typedef enum {
    JSONSCHEMA_FAIL_FAST = 0,  /* stop at the first failure (one issue at most) */
    JSONSCHEMA_ALL_ERRORS = 1, /* collect failures up to JSONSCHEMA_ERRORS_MAX */
} jsonschema_mode_t;

typedef enum {
    JSONSCHEMA_VALID = 0,
    JSONSCHEMA_INVALID = 1,
} jsonschema_result_t;

/* Compiles schema (not retained: it is deep-copied) into *out. Returns 0, or -1 with *out NULL
 * and the reason in *err (when err is not NULL). The caller destroys *out. */
int jsonschema_compile(const json_t *schema, jsonschema_t **out, jsonschema_error_t *err);

/* Validates instance. Returns JSONSCHEMA_VALID or JSONSCHEMA_INVALID; when report is not NULL
 * it is reset and receives the issues (the first only, in fail-fast mode). A regex that hits
 * its limits, or more than JSONSCHEMA_MAX_MATCHES matches, makes the instance invalid. */
jsonschema_result_t jsonschema_validate(const jsonschema_t *self, const json_t *instance,
                                        jsonschema_mode_t mode, jsonschema_report_t *report);

/* The same on the value at index of a tape (jsontape.h), which is how the validator reads
 * every instance: jsonschema_validate copies its json_t onto a tape first, so a caller that
 * parses text itself saves that copy with jsonstrict_parse_tape. */
jsonschema_result_t jsonschema_validate_tape(const jsonschema_t *self, const jsontape_t *doc,
                                             uint32_t index, jsonschema_mode_t mode,
                                             jsonschema_report_t *report);

/* Compiles self's checks to native code with the system's C compiler (the program
 * CHATFLEET_CC names, else cc; in a private directory under TMPDIR, removed at once) and loads
 * it: validations of self without a report then run that code, with the interpreter's
 * verdicts. It takes 0.1-0.2 s and needs a C compiler at run time, so it is for a
 * schema that will check many instances; the code lives as long as self. Call it before self
 * is shared between threads. Returns 0, or -1 with the reason in err (errlen bytes) and self
 * as it was. */
int jsonschema_native(jsonschema_t *self, char *err, size_t errlen);

/* The C that jsonschema_native compiles (malloc'd; NULL when over its cap), for review. */
char *jsonschema_native_source(const jsonschema_t *self);

/* Frees the schema; safe on NULL and sets *self_p to NULL. */
void jsonschema_destroy(jsonschema_t **self_p);

/* Numbers of nodes and regexes in a compiled schema (for limits tests and diagnostics). */
size_t jsonschema_node_count(const jsonschema_t *self);
size_t jsonschema_pattern_count(const jsonschema_t *self);

#endif
