/*
 * libFuzzer target for the strict JSON boundary. Besides "no crash, leak or sanitizer report"
 * it checks properties: an error names a code, an offset inside the input and a message; an
 * accepted value is also accepted by jansson's own parser and is equal to what jansson builds;
 * an accepted value survives a jansson dump and reload unchanged; and jsonstrict_parse_tape
 * agrees with jsonstrict_parse on every input (the same outcome, error code, offset, path and
 * message, and a tape equal to the jansson value) and produces a well-formed tape.
 *
 * Numbers are carried exactly (jsonstrict.h, the number policy): jsonout_dumps of an accepted
 * value parses back to an equal value whose numbers are the same entries, one by one (every
 * text real's literal byte for byte, every other number the same int64 or double), and
 * printing that again gives the same text. jansson's own parser cannot read every accepted
 * literal (integers beyond int64, 1e400) nor tell 1.50 from 1.5, so it is compared only on
 * values without text reals.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "jsontape.h"

static void s_check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_jsonstrict: property violated: %s\n", what);
        abort();
    }
}

/* A disagreement between the two ways of parsing stops the fuzzer where it happened. */
static void s_agree(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_jsonstrict: parse and parse_tape disagree: %s\n", what);
        __builtin_trap();
    }
}

/* Every entry's next is past it and inside the tape; a container's children end exactly at
 * its next and number its size (an object's are key strings and values). */
static void s_well_formed(const jsontape_t *t) {
    s_agree(t->count > 0, "an accepted document with an empty tape");
    s_agree(jsontape_at(t, 0)->next == t->count, "the root does not span the tape");
    for (uint32_t i = 0; i < t->count; i++) {
        const jsontape_entry_t *e = jsontape_at(t, i);
        s_agree(e->next > i && e->next <= t->count, "an entry's next is out of bounds");
        if (e->type != JSONTAPE_ARRAY && e->type != JSONTAPE_OBJECT) {
            s_agree(e->next == i + 1, "a scalar with children");
            continue;
        }
        uint32_t n = 0;
        uint32_t k = i + 1;
        while (k < e->next) {
            if (e->type == JSONTAPE_OBJECT) {
                s_agree(jsontape_at(t, k)->type == JSONTAPE_STRING, "an object key is no string");
                k++;
                s_agree(k < e->next, "an object key without a value");
            }
            k = jsontape_at(t, k)->next;
            n++;
        }
        s_agree(k == e->next && n == e->size, "a container's size or span is wrong");
    }
}

/* Parses buf the tape way and compares with the jansson result (rc, err, value). */
static void s_compare_tape(const char *buf, size_t len, const jsonstrict_limits_t *lim, int rc,
                           const jsonstrict_error_t *err, const json_t *value) {
    static jsontape_t tape; /* reused across inputs, as a caller would (jsontape_clear) */
    static jsontape_t from;
    jsonstrict_error_t terr;
    int trc = jsonstrict_parse_tape(buf, len, lim, &tape, &terr);
    s_agree(trc == rc, "return code");
    if (rc != 0) {
        s_agree(terr.code == err->code, "error code");
        s_agree(terr.offset == err->offset, "error offset");
        s_agree(strcmp(terr.path, err->path) == 0, "error path");
        s_agree(strcmp(terr.message, err->message) == 0, "error message");
        s_agree(tape.count == 0 && tape.bytes_len == 0, "a failed parse left a tape");
        return;
    }
    s_well_formed(&tape);
    jsontape_clear(&from);
    s_agree(jsontape_from_json(&from, value) == 0, "the value does not fit a tape");
    s_agree(from.count == tape.count, "entry count");
    s_agree(jsontape_equal(&tape, 0, &from, 0), "value");
    s_agree(jsontape_value_hash(&tape, 0) == jsontape_value_hash(&from, 0), "value hash");
}

/* Whether v holds a text real anywhere. */
static bool s_has_text_real(const json_t *v) {
    if (jsonnumber_text(v, NULL)) {
        return true;
    }
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (s_has_text_real(json_array_get(v, i))) {
                return true;
            }
        }
    }
    if (json_is_object(v)) {
        const char *key;
        json_t *member;
        json_object_foreach((json_t *)v, key, member) {
            if (s_has_text_real(member)) {
                return true;
            }
        }
    }
    return false;
}

/* Whether out[0..n) holds lit[0..k). */
static bool s_contains(const char *out, size_t n, const char *lit, size_t k) {
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(out + i, lit, k) == 0) {
            return true;
        }
    }
    return false;
}

/* jsonout's text of the accepted value parses back (under the same caps: it is never longer
 * and never deeper) to an equal value with the same number entries in the same order (jansson
 * keeps members in insertion order, which is document order); and is its own fixed point. */
static void s_round_trip(const char *buf, size_t len, const jsonstrict_limits_t *lim,
                         const json_t *value) {
    static jsontape_t orig;
    static jsontape_t back;
    char *out = jsonout_dumps(value);
    size_t n = strlen(out);
    s_check(jsonstrict_parse_tape(buf, len, lim, &orig, NULL) == 0, "the input no longer parses");
    s_check(jsonstrict_parse_tape(out, n, lim, &back, NULL) == 0,
            "jsonout's text of an accepted value is refused");
    s_check(jsontape_equal(&orig, 0, &back, 0), "jsonout's text parses to another value");
    s_check(jsontape_value_hash(&orig, 0) == jsontape_value_hash(&back, 0),
            "jsonout's text parses to a value of another hash");
    s_check(orig.count == back.count, "jsonout's text has another number of entries");
    for (uint32_t i = 0; i < orig.count; i++) {
        const jsontape_entry_t *a = jsontape_at(&orig, i);
        const jsontape_entry_t *b = jsontape_at(&back, i);
        s_check(a->type == b->type && a->flags == b->flags, "an entry changed kind");
        if (!jsontape_is_number(a)) {
            continue;
        }
        jsontape_num_t na = jsontape_num(&orig, a);
        jsontape_num_t nb = jsontape_num(&back, b);
        s_check(memcmp(&na.d, &nb.d, sizeof na.d) == 0 && na.i == nb.i, "a number changed");
        if (na.text) {
            s_check(nb.text && na.len == nb.len && memcmp(na.text, nb.text, na.len) == 0,
                    "a text real's literal changed");
            s_check(s_contains(buf, len, na.text, na.len), "a literal not in the input");
            s_check(s_contains(out, n, na.text, na.len), "a literal not in jsonout's text");
        }
    }
    json_t *again = NULL;
    s_check(jsonstrict_parse(out, n, lim, &again, NULL) == 0, "jsonout's text is refused");
    char *out2 = jsonout_dumps(again);
    s_check(strcmp(out, out2) == 0, "jsonout's text is not its own fixed point");
    free(out2);
    json_decref(again);
    free(out);
}

static void s_accepted(const char *buf, size_t len, json_t *value) {
    if (s_has_text_real(value)) {
        return;
    }
    json_error_t jerr;
    json_t *theirs = json_loadb(buf, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    s_check(theirs != NULL, "jansson rejects what the boundary accepted");
    s_check(json_equal(value, theirs), "jansson builds a different value");
    json_decref(theirs);
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    s_check(text != NULL, "jansson cannot dump an accepted value");
    json_t *again = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    s_check(again != NULL && json_equal(again, value), "dump and reload changes the value");
    json_decref(again);
    free(text);
}

static void s_rejected(const char *buf, size_t len, const jsonstrict_error_t *err) {
    s_check(err->code != JSONSTRICT_OK, "failure without a code");
    s_check(err->offset <= len, "offset beyond the input");
    s_check(err->message[0] != '\0', "failure without a message");
    s_check(err->path[0] == '\0' || err->path[0] == '/', "path is not a JSON pointer");
    /* jansson stops at a raw NUL byte (and so accepts "1\0junk"): compare only without one. */
    bool comparable = memchr(buf, '\0', len) == NULL;
    if (comparable &&
        (err->code == JSONSTRICT_E_SYNTAX || err->code == JSONSTRICT_E_UTF8 ||
         err->code == JSONSTRICT_E_TRAILING || err->code == JSONSTRICT_E_DUPLICATE_KEY)) {
        json_t *theirs = json_loadb(buf, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        s_check(theirs == NULL, "jansson accepts text the boundary calls malformed");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const jsonstrict_limits_t small = {4096, 8,   256, 32,
                                              32,   256, 32,  JSONSTRICT_NUMBERS_STORABLE};
    const char *buf = (const char *)data;
    for (int pass = 0; pass < 2; pass++) {
        json_t *value = NULL;
        jsonstrict_error_t err;
        const jsonstrict_limits_t *lim = pass ? &small : NULL;
        int rc = jsonstrict_parse(buf, size, lim, &value, &err);
        s_compare_tape(buf, size, lim, rc, &err, value);
        if (rc == 0) {
            s_check(value != NULL, "success without a value");
            s_accepted(buf, size, value);
            s_round_trip(buf, size, lim, value);
            json_decref(value);
        } else {
            s_check(value == NULL, "failure with a value");
            s_rejected(buf, size, &err);
        }
    }
    return 0;
}
