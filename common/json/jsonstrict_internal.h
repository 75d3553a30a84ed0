/*
 * jsonstrict_internal: what the parser (jsonstrict.c) takes from the number conversions
 * (jsonstrict_number.c) and from duplicate-key detection (jsonstrict_keys.c), split for size.
 * Not part of the public interface; include jsonstrict.h instead. Neither touches the parser
 * nor formats messages: the conversions return a code and the key check a yes or no, and
 * jsonstrict.c reports the error at the literal's or the key's offset.
 */
#ifndef CHATFLEET_JSONSTRICT_INTERNAL_H
#define CHATFLEET_JSONSTRICT_INTERNAL_H

#include "jsonstrict.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A number literal as the tape keeps it (jsonstrict.h, the number policy). */
typedef struct {
    bool is_int;   /* an int64 (i) */
    bool text;     /* a text real: the literal is kept, d is its nearest double */
    bool integral; /* a text real whose value has no fractional part */
    int64_t i;
    double d; /* a real's value (the largest finite double of its sign beyond the range) */
} jsonstrict_num_t;

/* Reads the number literal at[0..len) (its syntax already checked; is_int when it has neither
 * fraction nor exponent; len at most JSONSTRICT_NUMBER_CHARS_CEILING but under
 * JSONSTRICT_NUMBERS_NEAREST). Returns JSONSTRICT_OK and sets *out, or
 * JSONSTRICT_E_NUMBER_RANGE when a nonzero value's magnitude is beyond
 * 10^+-JSONSTRICT_NUMBER_EXP_MAX (under JSONSTRICT_NUMBERS_NEAREST such a value, and a literal
 * longer than the ceiling, is read as a plain real: its nearest double). The parser reads
 * integer literals of at most 18 digits itself. */
jsonstrict_code_t jsonstrict_number_read(const unsigned char *at, size_t len, bool is_int,
                                         jsonstrict_numbers_t numbers, jsonstrict_num_t *out);

/* --- duplicate keys (jsonstrict_keys.c) --- */

/* One open object as duplicate detection sees it. A small object is checked by scanning its
 * earlier keys on the tape; once it reaches a fixed number of members (jsonstrict_keys.c) its
 * keys move into the table under a serial of its own. */
typedef struct {
    uint32_t at;      /* the object's tape entry */
    uint32_t members; /* keys recorded while the object is small */
    uint32_t serial;  /* its serial in the table once it is big, or 0 */
} jsonstrict_keys_object_t;

/* The keys of the open big objects, owned by one parse: open addressing on (object serial, key
 * hash), at most half full, placed with a per-process random seed so that crafted keys cannot
 * pile into one probe run. A slot whose serial is at most retired is empty: when the last open
 * big object closes, retired moves up to every serial handed out, which empties the table at
 * no cost, so it holds only the keys of the outermost open big object and of those in it.
 * A zeroed jsonstrict_keys_t is an empty table. */
typedef struct {
    struct jsonstrict_keys_slot *slots;
    size_t cap;           /* slots: a power of two, or 0 */
    size_t used;          /* live slots (at most half of cap) */
    uint32_t retired;     /* serials up to this one are dead */
    uint32_t last_serial; /* the last serial handed out, or 0 */
    size_t open;          /* big objects open */
    uint32_t seed;        /* the process's seed, read when the table is first made */
} jsonstrict_keys_t;

/* Notes that the object at tape entry at opens, with no keys yet. */
void jsonstrict_keys_open(jsonstrict_keys_object_t *obj, uint32_t at);

/* Up to this many members an object finds a duplicate key by comparing the new key with each
 * earlier one (hash first), here, without a call; past it, its keys go to the key table. */
#define JSONSTRICT_SCAN_KEYS 16

/* jsonstrict_keys_seen for an object that is big or turns big with key (jsonstrict_keys.c). */
bool jsonstrict_keys_seen_big(jsonstrict_keys_t *keys, jsonstrict_keys_object_t *obj,
                              const jsontape_t *tape, uint32_t key);

/* Whether the key at tape entry key (a string entry: its hash, size and bytes are compared)
 * repeats an earlier key of obj; when it does not, records it. The caller asks once for each
 * member's key, in order, of the innermost open object, after adding the key to the tape and
 * before its value; a yes ends the parse. Costs a scan of the few earlier keys while obj is
 * small, then one probe of the table per key, plus one per earlier key when obj turns big (the
 * table may grow: mem_calloc aborts when memory runs out). */
static inline bool jsonstrict_keys_seen(jsonstrict_keys_t *keys, jsonstrict_keys_object_t *obj,
                                        const jsontape_t *tape, uint32_t key) {
    if (obj->serial != 0 || obj->members >= JSONSTRICT_SCAN_KEYS) {
        return jsonstrict_keys_seen_big(keys, obj, tape, key);
    }
    const jsontape_entry_t *e = jsontape_at(tape, key);
    for (uint32_t k = obj->at + 1; k < key; k = jsontape_at(tape, k + 1)->next) {
        const jsontape_entry_t *o = jsontape_at(tape, k);
        if (o->hash == e->hash && o->size == e->size &&
            memcmp(jsontape_str(tape, o), jsontape_str(tape, e), e->size) == 0) {
            return true;
        }
    }
    obj->members++;
    return false;
}

/* Notes that obj closes: when it was the last big object open, the table empties. */
void jsonstrict_keys_close(jsonstrict_keys_t *keys, const jsonstrict_keys_object_t *obj);

/* Frees the table's memory and leaves *keys zeroed (empty). */
void jsonstrict_keys_free(jsonstrict_keys_t *keys);

#endif
