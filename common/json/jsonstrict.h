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
 * surrogate escapes, a decoded U+0000 anywhere (PostgreSQL JSONB cannot store it), duplicate
 * object keys, NaN/Infinity, integers outside int64, reals that overflow or underflow a double,
 * reals whose decimal value is not exactly the shortest round-trip form of the nearest double
 * (digits would be lost), and values over the depth, value, key, item and string caps.
 *
 * Numbers: an integer literal (no fraction, no exponent) becomes a json_integer (int64) or
 * JSONTAPE_INTEGER; any other literal becomes a json_real or JSONTAPE_REAL. So 1.0 and 1e2 are
 * reals with integral values; the schema validator treats them as integers. Exact integers beyond
 * int64 cannot be represented by jansson and are refused rather than rounded.
 *
 * The number policy (JSONSTRICT_NUMBERS_STORABLE, the default): every accepted number must read
 * back, unchanged, after a trip through PostgreSQL jsonb, by every reader (jansson, this parser
 * with the default caps, the CLI). A stored real is the text jsonout_real() gives its double
 * (the shortest round-trip "%g" form, ".0" added when integral) as PostgreSQL's numeric prints
 * it: plain decimal, never an exponent, with max(0, fraction digits - exponent) decimals, the
 * sign of zero dropped (jsonstrict_pgnumeric_text models it). So 1e300 comes back as a
 * 301-digit integer and 1e-300 as a 302-character decimal. The rule:
 *   - an integer literal is accepted when it is within int64 (it is stored as written; -0 as 0);
 *   - a real literal is accepted when it is exactly the shortest form of a finite double (or a
 *     zero), and the stored text of that double is either an integer within int64 or a decimal
 *     of at most JSONSTRICT_STORED_NUMBER_CHARS characters. Equivalently: |d| < 2^63 (every
 *     double from 2^63 up is integral and stored as an integer outside int64), and a nonzero
 *     |d| below 1 has at most 126 decimals in its shortest form (125 when negative): 1e-126 is
 *     accepted, 1e-127 is not (JSONSTRICT_E_NUMBER_STORAGE).
 * Such a stored text parses back to the same double (the sign of a zero aside: -0.0 is stored
 * as 0.0, which every reader compares equal) and passes this boundary again.
 *
 * Stored reads (JSONSTRICT_NUMBERS_NEAREST, jsonstrict_limits_stored): text PostgreSQL wrote
 * from a stored jsonb value is read with every number accepted whatever its length: an integer
 * within int64 stays an integer, anything else becomes the nearest double (beyond the double
 * range: the largest finite double of its sign). So rows written before the policy (1e300
 * stored as a long integer) still read, and no stored row can make a read fail on a number.
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

/* Characters of a real's text as PostgreSQL stores it, at most (the number policy above): the
 * default literal cap, so that a stored text passes the boundary again. */
#define JSONSTRICT_STORED_NUMBER_CHARS JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT

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
    JSONSTRICT_NUMBERS_STORABLE = 0, /* the boundary: exact, and readable back from jsonb */
    JSONSTRICT_NUMBERS_NEAREST,      /* stored text: any literal, to the nearest double */
    JSONSTRICT_NUMBERS_EXACT         /* STORABLE without the storage rule: any exact double,
                                      * for values that are never stored (validator tests) */
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
    JSONSTRICT_E_TOO_LARGE,        /* input over max_bytes */
    JSONSTRICT_E_SYNTAX,           /* not JSON (includes NaN and Infinity literals) */
    JSONSTRICT_E_TRAILING,         /* a complete value followed by more than whitespace */
    JSONSTRICT_E_UTF8,             /* invalid UTF-8 in a string */
    JSONSTRICT_E_SURROGATE,        /* an unpaired surrogate escape */
    JSONSTRICT_E_NUL,              /* a decoded U+0000 */
    JSONSTRICT_E_DUPLICATE_KEY,    /* the same key twice in one object */
    JSONSTRICT_E_DEPTH,            /* nesting over max_depth */
    JSONSTRICT_E_VALUES,           /* more than max_values values */
    JSONSTRICT_E_KEYS,             /* more than max_keys members in one object */
    JSONSTRICT_E_ITEMS,            /* more than max_items elements in one array */
    JSONSTRICT_E_STRING_LENGTH,    /* a string or key over max_string_bytes */
    JSONSTRICT_E_NUMBER_LENGTH,    /* a number literal over max_number_chars */
    JSONSTRICT_E_INTEGER_RANGE,    /* an integer literal outside int64 */
    JSONSTRICT_E_NUMBER_RANGE,     /* a real that overflows (or underflows) a double */
    JSONSTRICT_E_NUMBER_PRECISION, /* a real with more digits than the nearest double keeps */
    JSONSTRICT_E_NUMBER_STORAGE    /* a real PostgreSQL jsonb would give back unreadable */
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

/* A short stable name for code ("duplicate_key"), for logs and tests. */
const char *jsonstrict_code_name(jsonstrict_code_t code);

/* The length (1 to 4) of the valid UTF-8 character (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) that starts at p and ends by end, or 0 when none does.
 * The boundary's own test; exposed for text that must stay valid when cut. */
size_t jsonstrict_utf8_len(const unsigned char *p, const unsigned char *end);

#define JSONSTRICT_DIGITS_MAX 17 /* significant digits of the shortest form of a double */

/* The shortest decimal that reads back as the finite double d: writes its significant digits
 * (no leading or trailing zeros, NUL-terminated; "0" for zero) to digits and sets *exp10 so
 * that |d| = digits * 10^exp10. Returns the number of digits. The boundary accepts a real
 * only when its literal has exactly this value; the validator's multipleOf uses it too. */
int jsonstrict_shortest(double d, char digits[JSONSTRICT_DIGITS_MAX + 1], int *exp10);

/* PostgreSQL's text for the JSON number literal lit[0..len) (valid JSON number syntax) once
 * stored in jsonb: numeric_in then numeric_out (PostgreSQL 15, src/backend/utils/adt/numeric.c):
 * plain decimal, no exponent, max(0, fraction digits - exponent) decimals (trailing zeros kept),
 * no leading zeros, "-" only when nonzero. Writes at most cap - 1 characters and a NUL (cap > 0)
 * and returns the full length, like snprintf. Exponents PostgreSQL refuses (|e| >= 2^30 - 1) are
 * not modelled. The number policy applies it to jsonout_real()'s text of a double. */
size_t jsonstrict_pgnumeric_text(const char *lit, size_t len, char *out, size_t cap);

/* Whether the finite double d passes the number policy's storage rule (above): 0 when its
 * stored text is an int64 integer or a decimal of at most JSONSTRICT_STORED_NUMBER_CHARS
 * characters, else -1. Writes the stored text (truncated to cap - 1, NUL-terminated) to out
 * when out is not NULL, and its full length to *stored_len when that is not NULL. */
int jsonstrict_storable(double d, char *out, size_t cap, size_t *stored_len);

#endif
