/*
 * jsonstrict: the strict JSON boundary. Every untrusted JSON text the system accepts (request
 * bodies, schemas, model-produced values, tool arguments, recovered metadata) is parsed here
 * and nowhere else (ARCHITECTURE.md §8, "The strict JSON boundary").
 *
 * The parser is a single pass over the raw bytes that appends the document to a jsontape (one
 * flat array of entries and one string arena, so no allocation per value); jsonstrict_parse
 * converts that tape to jansson values. It is hand-written because json_loadb() cannot report
 * a JSON-pointer path, cannot say why a number was refused, and has no caps on values, keys,
 * items or string length; it also accepts integers and reals that lose precision silently.
 *
 * Rejected: input over the byte cap (checked before any parsing), syntax errors, trailing data,
 * invalid UTF-8 (overlong forms, encoded surrogates, code points above U+10FFFF), unpaired
 * surrogate escapes, a decoded U+0000 anywhere (PostgreSQL cannot store it), duplicate object
 * keys, NaN/Infinity, number literals over the number cap, nonzero numbers beyond
 * 10^+-JSONSTRICT_NUMBER_EXP_MAX in magnitude, and values over the depth, value, key, item and
 * string caps.
 *
 * The number policy: a number is worth exactly what its literal says and is carried as that
 * literal, byte for byte, from the text that brought it to every reader (stored as `json`,
 * which keeps text; ARCHITECTURE.md §8). The tape and jansson hold it as cheaply as they can
 * (jsonnumber.h): an integer literal inside int64 as an int64 (-0 aside), a literal that is the
 * text jsonout prints for its nearest double (the shortest round-trip "%g" form, ".0" added
 * when integral: 0.5, 1.0, 1e+300) as that double, and any other (1e300, 1.50, -0,
 * 12345678910111213141516171819202122232425262728293031, 0.1000000000000000000001) as a text
 * real: its literal, with its nearest double for readers that ask jansson for a number. The
 * caps keep every accepted number readable by every reader and storable anywhere: at most
 * JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT characters, and a magnitude (the decimal exponent of
 * the leading digit) within +-JSONSTRICT_NUMBER_EXP_MAX, which holds every double and keeps
 * PostgreSQL's numeric text of any number under a kilobyte.
 *
 * Stored reads (JSONSTRICT_NUMBERS_NEAREST, jsonstrict_limits_stored): text the system wrote
 * itself is read under the same rule with no number cap; a literal beyond the ceiling or the
 * magnitude cap (none is written since the policy) becomes its nearest double, the largest
 * finite double of its sign beyond the range, so no stored row can make a read fail.
 */
#ifndef CHATFLEET_JSONSTRICT_H
#define CHATFLEET_JSONSTRICT_H

#include "jsontape.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Default caps for model-produced values and request data (ARCHITECTURE.md §10). */
#define JSONSTRICT_MAX_BYTES_DEFAULT        65536 /* bytes of input */
#define JSONSTRICT_MAX_DEPTH_DEFAULT        32    /* nesting levels of arrays and objects */
#define JSONSTRICT_MAX_VALUES_DEFAULT       4096  /* values in total, containers included */
#define JSONSTRICT_MAX_KEYS_DEFAULT         4096  /* members in one object */
#define JSONSTRICT_MAX_ITEMS_DEFAULT        256   /* elements in one array */
#define JSONSTRICT_MAX_STRING_BYTES_DEFAULT 16384 /* decoded bytes of one string or key */
#define JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT 128   /* characters of one number literal */

/* The largest decimal exponent of a nonzero number's leading digit, either way: 1e400 and
 * 1e-400 are accepted, 1e401 and 9.9e-401 are not (every double is inside). */
#define JSONSTRICT_NUMBER_EXP_MAX 400

/* Caps for schemas (ARCHITECTURE.md §10: schema 16 KiB). */
#define JSONSTRICT_SCHEMA_MAX_BYTES 16384 /* bytes of schema text */
#define JSONSTRICT_SCHEMA_MAX_DEPTH 64    /* JSON nesting levels (two per schema level) */

/* Hard ceilings whatever the caller asks: the parser recurses once per level, and jansson's
 * own destructor and comparisons recurse too; and a tape's indexes are 32-bit (every entry and
 * every arena byte stands for at least one input byte, so this many bytes always fit). */
#define JSONSTRICT_DEPTH_CEILING        1000 /* nesting levels */
#define JSONSTRICT_NUMBER_CHARS_CEILING 1024 /* characters of one number literal */
#define JSONSTRICT_BYTES_CEILING        ((size_t)UINT32_MAX - 2) /* bytes of input */

#define JSONSTRICT_PATH_MAX    256 /* bytes of the error path, NUL included (truncated "...") */
#define JSONSTRICT_MESSAGE_MAX 192 /* bytes of the error message, NUL included */

/* How numbers are read (the number policy above). */
typedef enum {
    JSONSTRICT_NUMBERS_STORABLE = 0, /* the boundary: every cap */
    JSONSTRICT_NUMBERS_NEAREST       /* stored text: no number cap, never a number error */
} jsonstrict_numbers_t;

typedef struct {
    size_t max_bytes;
    int max_depth;
    size_t max_values;
    size_t max_keys;
    size_t max_items;
    size_t max_string_bytes;
    size_t max_number_chars; /* ignored (no cap) under JSONSTRICT_NUMBERS_NEAREST */
    jsonstrict_numbers_t numbers;
} jsonstrict_limits_t;

/* The default caps above, and the schema caps (schema bytes and depth, default otherwise). */
extern const jsonstrict_limits_t jsonstrict_limits_default;
extern const jsonstrict_limits_t jsonstrict_limits_schema;

/* For JSON text PostgreSQL produced from stored jsonb (rows the gateway and the worker read):
 * no caps but the ceilings, JSONSTRICT_NUMBERS_NEAREST. Stored values passed this boundary on
 * the way in (or were written by the system itself), so only the number rule is relaxed, for
 * rows written before the number policy. */
extern const jsonstrict_limits_t jsonstrict_limits_stored;

typedef enum {
    JSONSTRICT_OK = 0,
    JSONSTRICT_E_TOO_LARGE,     /* input over max_bytes */
    JSONSTRICT_E_SYNTAX,        /* not JSON (includes NaN and Infinity literals) */
    JSONSTRICT_E_TRAILING,      /* a complete value followed by more than whitespace */
    JSONSTRICT_E_UTF8,          /* invalid UTF-8 in a string */
    JSONSTRICT_E_SURROGATE,     /* an unpaired surrogate escape */
    JSONSTRICT_E_NUL,           /* a decoded U+0000 */
    JSONSTRICT_E_DUPLICATE_KEY, /* the same key twice in one object */
    JSONSTRICT_E_DEPTH,         /* nesting over max_depth */
    JSONSTRICT_E_VALUES,        /* more than max_values values */
    JSONSTRICT_E_KEYS,          /* more than max_keys members in one object */
    JSONSTRICT_E_ITEMS,         /* more than max_items elements in one array */
    JSONSTRICT_E_STRING_LENGTH, /* a string or key over max_string_bytes */
    JSONSTRICT_E_NUMBER_LENGTH, /* a number literal over max_number_chars */
    JSONSTRICT_E_NUMBER_RANGE   /* a nonzero number beyond 10^+-JSONSTRICT_NUMBER_EXP_MAX */
} jsonstrict_code_t;

typedef struct {
    jsonstrict_code_t code;
    size_t offset;                        /* byte offset in the input where the fault is */
    char path[JSONSTRICT_PATH_MAX];       /* JSON pointer (RFC 6901) of the value, "" = root */
    char message[JSONSTRICT_MESSAGE_MAX]; /* one sentence, no trailing newline */
} jsonstrict_error_t;

/* Parses exactly one JSON value from buf[0..len) under limits (NULL = the defaults; max_bytes
 * is clamped to JSONSTRICT_BYTES_CEILING). Clears *out (jsontape_clear, keeping its memory)
 * and appends the document, whose root is entry 0; keys are string entries. On success
 * returns 0. On failure returns -1, leaves *out empty and fills *err when err is not NULL.
 * The caller owns *out throughout; the parse itself allocates nothing per value. */
int jsonstrict_parse_tape(const char *buf, size_t len, const jsonstrict_limits_t *limits,
                          jsontape_t *out, jsonstrict_error_t *err);

/* The same parse (same rules, codes, offsets, paths and messages) as jansson values: on
 * success returns 0 and stores a new reference in *out (the caller json_decref()s it). On
 * failure returns -1, leaves *out NULL and fills *err when err is not NULL. */
int jsonstrict_parse(const char *buf, size_t len, const jsonstrict_limits_t *limits, json_t **out,
                     jsonstrict_error_t *err);

/* Text the system wrote itself (a stored row, its own canonical text, a live part) as jansson
 * values under jsonstrict_limits_stored, so that every number keeps its literal: a new
 * reference, or NULL only when the text is not JSON. What json_loads would do, without
 * turning 1e300 into 1e+300 or failing on integers beyond int64. */
json_t *jsonstrict_load_stored(const char *text, size_t len);

/* A short stable name for code ("duplicate_key"), for logs and tests. */
const char *jsonstrict_code_name(jsonstrict_code_t code);

/* The length (1 to 4) of the valid UTF-8 character (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) that starts at p and ends by end, or 0 when none does.
 * The boundary's own test; exposed for text that must stay valid when cut. */
size_t jsonstrict_utf8_len(const unsigned char *p, const unsigned char *end);

#endif
