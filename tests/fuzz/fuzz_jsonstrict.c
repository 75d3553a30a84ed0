/*
 * libFuzzer target for the strict JSON boundary. Besides "no crash, leak or sanitizer report"
 * it checks properties: an error names a code, an offset inside the input and a message; an
 * accepted value is also accepted by jansson's own parser and is equal to what jansson builds;
 * and an accepted value survives a jansson dump and reload unchanged.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonstrict.h"

static void s_check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_jsonstrict: property violated: %s\n", what);
        abort();
    }
}

static void s_accepted(const char *buf, size_t len, json_t *value) {
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
    static const jsonstrict_limits_t small = {4096, 8, 256, 32, 32, 256, 32};
    const char *buf = (const char *)data;
    for (int pass = 0; pass < 2; pass++) {
        json_t *value = NULL;
        jsonstrict_error_t err;
        const jsonstrict_limits_t *lim = pass ? &small : NULL;
        if (jsonstrict_parse(buf, size, lim, &value, &err) == 0) {
            s_check(value != NULL, "success without a value");
            s_accepted(buf, size, value);
            json_decref(value);
        } else {
            s_check(value == NULL, "failure with a value");
            s_rejected(buf, size, &err);
        }
    }
    return 0;
}
