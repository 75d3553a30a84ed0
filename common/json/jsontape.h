/*
 * jsontape: a JSON document as one flat array of entries, in document order, plus one arena of
 * string bytes. It is what the strict parser produces (jsonstrict_parse_tape) and what the
 * schema validator reads: walking it needs no calls, no hashing and no pointer chasing, so
 * validation and parsing cost a fraction of what jansson values cost. jansson values convert
 * both ways (jsontape_from_json, jsontape_to_json) for the code that holds json_t.
 *
 * Layout. Every value is one entry; a container's children follow it. An object of n members
 * is its entry, then n pairs (key entry, value entries); an array of n items is its entry, then
 * the n items. Each entry's next is the index just past the value and all of its children, so
 * any value is skipped in one step. A string entry (value or key) carries its byte length, its
 * code point count and jsontape_hash of its bytes; its bytes are NUL-terminated in the arena.
 *
 * Numbers are as the boundary reads them (jsonnumber.h): an int64 literal is JSONTAPE_INTEGER,
 * a literal that is the text jsonout prints for its double a JSONTAPE_REAL, and any other a
 * JSONTAPE_REAL that keeps its literal in the arena (a text real: JSONTAPE_F_TEXT, its nearest
 * double in u.d). Every number is worth what its literal says, exactly: comparisons,
 * equality and hashes treat 1, 1.0, 1e0 and 1.000 alike, and order 1e300 and
 * 1000000000000000000000000000000000000000000000000000001e246 by their decimal values.
 */
#ifndef CHATFLEET_JSONTAPE_H
#define CHATFLEET_JSONTAPE_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    JSONTAPE_NULL = 0,
    JSONTAPE_FALSE,
    JSONTAPE_TRUE,
    JSONTAPE_INTEGER,
    JSONTAPE_REAL,
    JSONTAPE_STRING,
    JSONTAPE_ARRAY,
    JSONTAPE_OBJECT,
} jsontape_type_t;

/* The most entries and string bytes one tape holds (indexes are 32-bit). */
#define JSONTAPE_MAX_ENTRIES      ((size_t)UINT32_MAX - 1)
#define JSONTAPE_MAX_STRING_BYTES ((size_t)UINT32_MAX - 1)

/* Entry flags. */
enum {
    JSONTAPE_F_TEXT = 1 << 0,     /* a text real: its literal is kept (text_off, size) */
    JSONTAPE_F_INTEGRAL = 1 << 1, /* a text real whose value has no fractional part */
};

typedef struct {
    uint8_t type;  /* jsontape_type_t */
    uint8_t flags; /* JSONTAPE_F_* */
    uint8_t pad[2];
    uint32_t size; /* string: bytes; array: items; object: members; text real: literal bytes */
    uint32_t next; /* index just past this value and its children */
    union {
        uint32_t hash;     /* string: jsontape_hash of its bytes; else 0 */
        uint32_t text_off; /* text real: offset of its literal (NUL-terminated) in the arena */
    };
    union {
        int64_t i; /* JSONTAPE_INTEGER */
        double d;  /* JSONTAPE_REAL */
        struct {
            uint32_t off;   /* offset of the bytes in the arena */
            uint32_t chars; /* code points */
        } s;                /* JSONTAPE_STRING */
    } u;
} jsontape_entry_t;

/* Each string in a tape's arena is followed by its NUL and zeros up to this many bytes from
 * its end, so that a reader may load 8 bytes from the start of any string. */
#define JSONTAPE_PAD 8

typedef struct {
    jsontape_entry_t *entries;
    size_t count;
    size_t cap;
    char *bytes; /* string arena; JSONTAPE_PAD bytes are readable from any string's start */
    size_t bytes_len;
    size_t bytes_cap;
} jsontape_t;

/* A number exactly as the tape holds it: an int64, a double, or a literal (text) with its
 * nearest double. */
typedef struct {
    bool is_int;
    uint32_t len; /* a text real's literal: its bytes */
    union {
        int64_t i; /* is_int */
        double d;  /* else: the real, or a text real's nearest double */
    };
    const char *text; /* a text real's literal (NUL-terminated), else NULL */
} jsontape_num_t;

jsontape_t *jsontape_new(void);
/* Frees the tape; safe on NULL and sets *self_p to NULL. */
void jsontape_destroy(jsontape_t **self_p);
/* Empties the tape, keeping its memory for the next document. */
void jsontape_clear(jsontape_t *self);

/* --- building, in document order (the parser and jsontape_from_json) --- */

/* Each returns the new entry's index. A string's bytes must be valid UTF-8. */
uint32_t jsontape_add_literal(jsontape_t *self, jsontape_type_t type); /* null/true/false */
uint32_t jsontape_add_integer(jsontape_t *self, int64_t i);
uint32_t jsontape_add_real(jsontape_t *self, double d);
/* A text real: the literal lit[0..len) (valid JSON number syntax), its nearest double d (finite)
 * and whether its value is integral. */
uint32_t jsontape_add_text_real(jsontape_t *self, const char *lit, size_t len, double d,
                                bool integral);
uint32_t jsontape_add_string(jsontape_t *self, const char *s, size_t len);
/* As jsontape_add_string, with the count of characters (code points) already known (a parser
 * that scanned the text counts them as it goes). */
uint32_t jsontape_add_text(jsontape_t *self, const char *s, size_t len, size_t chars);
/* Opens an array or object; its children are added next; jsontape_close records their count
 * (items, or members for an object, whose keys are added with jsontape_add_string). */
uint32_t jsontape_open(jsontape_t *self, jsontape_type_t type);
void jsontape_close(jsontape_t *self, uint32_t index, uint32_t size);

/* Appends v (whose strings jansson guarantees to be UTF-8) and returns its index, or -1 when
 * it would not fit the tape's 32-bit indexes. Object members keep jansson's order. */
long jsontape_from_json(jsontape_t *self, const json_t *v);
/* A new jansson value equal to the value at index (NULL only when malloc fails). */
json_t *jsontape_to_json(const jsontape_t *self, uint32_t index);

/* --- reading --- */

static inline const jsontape_entry_t *jsontape_at(const jsontape_t *self, uint32_t index) {
    return &self->entries[index];
}

/* The bytes of a string entry, NUL-terminated. */
static inline const char *jsontape_str(const jsontape_t *self, const jsontape_entry_t *e) {
    return self->bytes + e->u.s.off;
}

static inline bool jsontape_is_number(const jsontape_entry_t *e) {
    return e->type == JSONTAPE_INTEGER || e->type == JSONTAPE_REAL;
}

/* The number entry e of self. */
static inline jsontape_num_t jsontape_num(const jsontape_t *self, const jsontape_entry_t *e) {
    jsontape_num_t n = {0};
    if (e->type == JSONTAPE_INTEGER) {
        n.is_int = true;
        n.i = e->u.i;
    } else {
        n.d = e->u.d;
        if (e->flags & JSONTAPE_F_TEXT) {
            n.text = self->bytes + e->text_off;
            n.len = e->size;
        }
    }
    return n;
}

/* Whether the number entry e has no fractional part. */
static inline bool jsontape_is_integral(const jsontape_entry_t *e) {
    return e->type == JSONTAPE_INTEGER ||
           (e->flags & JSONTAPE_F_TEXT ? (e->flags & JSONTAPE_F_INTEGRAL) != 0
                                       : e->u.d == floor(e->u.d));
}

struct jsondecimal; /* jsondecimal.h */

/* The decimal value of n (jsondecimal.h). */
void jsontape_num_decimal(jsontape_num_t n, struct jsondecimal *out);

/* jsontape_num_cmp for the values its quick tests leave: a text real on either side, or an
 * int64 and a double both beyond 2^53 (where a double's shortest text may not be its binary
 * value), compared as decimals. */
int jsontape_num_cmp_exact(jsontape_num_t a, jsontape_num_t b);

/* Exact comparison of two numbers (-1, 0, 1) by their decimal values. */
static inline int jsontape_num_cmp(jsontape_num_t a, jsontape_num_t b) {
    if (a.text || b.text) {
        return jsontape_num_cmp_exact(a, b);
    }
    if (a.is_int && b.is_int) {
        return a.i < b.i ? -1 : a.i > b.i;
    }
    /* Two doubles (the shortest forms order as the doubles do), or an int64 of magnitude up
     * to 2^53, which a double holds exactly. */
    const int64_t exact = (int64_t)1 << 53;
    if (!a.is_int && !b.is_int) {
        return a.d < b.d ? -1 : a.d > b.d;
    }
    if ((a.is_int && a.i >= -exact && a.i <= exact) ||
        (b.is_int && b.i >= -exact && b.i <= exact)) {
        double da = a.is_int ? (double)a.i : a.d;
        double db = b.is_int ? (double)b.i : b.d;
        return da < db ? -1 : da > db;
    }
    return jsontape_num_cmp_exact(a, b);
}

/* JSON equality of two values (possibly of two tapes): numbers by value (1 == 1.0), strings
 * by bytes, arrays in order, objects as sets of members. */
bool jsontape_equal(const jsontape_t *a, uint32_t ia, const jsontape_t *b, uint32_t ib);
/* A hash consistent with jsontape_equal. */
uint32_t jsontape_value_hash(const jsontape_t *self, uint32_t index);
/* Writes src[0..len) escaped for a JSON pointer (RFC 6901: "~" as "~0", "/" as "~1") to out,
 * which has room for 2 * len bytes; returns the bytes written (no NUL is added). */
size_t jsontape_escape(char *out, const char *src, size_t len);
/* Whether the items of the array at index are pairwise unequal (jsontape_equal). */
bool jsontape_unique(const jsontape_t *self, uint32_t index);
/* Writes to out (cap bytes) the JSON pointer (RFC 6901) of entry v within the value at root:
 * of a value, or of a member name, whose pointer is its member's. A pointer that does not fit
 * is cut at a segment boundary and ends with "/..." (empty when cap is under 5 bytes). */
void jsontape_pointer(const jsontape_t *self, uint32_t root, uint32_t v, char *out, size_t cap);
/* The hash of a byte string that string entries carry (and schema name tables use). */
uint32_t jsontape_hash(const char *s, size_t len);

#endif
