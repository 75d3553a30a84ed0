/* jsonnumber: jansson values for JSON numbers that keep their text; see jsonnumber.h. */
#include "jsonnumber.h"
#include "jsondecimal.h"

#include <errno.h>
#include <float.h>
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* jansson's own real is { json_t json; double value; } (jansson_private.h); a text real
 * begins the same way, so jansson reads and frees it as a real. */
typedef struct {
    json_t json;
    double value;
    uint64_t tag;
    size_t len;
    char text[];
} s_text_real_t;

#define S_TAG 0x6a736f6e6e756d21ull /* "jsonnum!" */

json_t *jsonnumber_text_real(const char *lit, size_t len, double d) {
    s_text_real_t *r = malloc(sizeof *r + len + 1);
    if (!r) {
        return NULL;
    }
    r->json.type = JSON_REAL;
    r->json.refcount = 1;
    r->value = isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d;
    r->tag = S_TAG;
    r->len = len;
    memcpy(r->text, lit, len);
    r->text[len] = '\0';
    return &r->json;
}

const char *jsonnumber_text(const json_t *v, size_t *len) {
    if (!json_is_real(v) || malloc_usable_size((void *)v) < sizeof(s_text_real_t)) {
        return NULL;
    }
    const s_text_real_t *r = (const s_text_real_t *)v;
    if (r->tag != S_TAG) {
        return NULL;
    }
    if (len) {
        *len = r->len;
    }
    return r->text;
}

bool jsonnumber_fits_double(const json_t *v) {
    if (json_is_integer(v)) {
        double d = (double)json_integer_value(v);
        return d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
               (json_int_t)d == json_integer_value(v);
    }
    size_t len = 0;
    const char *text = jsonnumber_text(v, &len);
    if (!text) {
        return json_is_real(v);
    }
    jsondecimal_t *a = malloc(2 * sizeof *a);
    if (!a) {
        return false;
    }
    jsondecimal_of_literal(text, len, &a[0]);
    jsondecimal_of_double(json_real_value(v), &a[1]);
    bool same = jsondecimal_cmp(&a[0], &a[1]) == 0;
    free(a);
    return same;
}

json_t *jsonnumber_deep_copy(const json_t *v) {
    size_t len = 0;
    const char *text = jsonnumber_text(v, &len);
    if (text) {
        return jsonnumber_text_real(text, len, json_real_value(v));
    }
    if (json_is_array(v)) {
        json_t *out = json_array();
        for (size_t i = 0; out && i < json_array_size(v); i++) {
            if (json_array_append_new(out, jsonnumber_deep_copy(json_array_get(v, i))) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        return out;
    }
    if (json_is_object(v)) {
        json_t *out = json_object();
        const char *key;
        size_t key_len;
        json_t *member;
        json_object_keylen_foreach((json_t *)v, key, key_len, member) {
            if (out && json_object_setn_new_nocheck(out, key, key_len,
                                                    jsonnumber_deep_copy(member)) != 0) {
                json_decref(out);
                out = NULL;
            }
        }
        return out;
    }
    return json_deep_copy(v);
}
