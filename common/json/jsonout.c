/* jsonout: compact JSON with shortest reals; see jsonout.h. */
#include "jsonout.h"
#include "mem.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} out_t;

static void s_put(out_t *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->cap) {
        o->cap = (o->len + n + 1) * 2;
        o->buf = mem_realloc(o->buf, o->cap);
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

static int s_put_cb(const char *s, size_t n, void *ctx) {
    s_put(ctx, s, n);
    return 0;
}

size_t jsonout_real(double d, char buf[JSONOUT_REAL_MAX]) {
    /* 15 digits always identify a double uniquely when they round-trip (DBL_DIG); subnormals
     * carry fewer, so for them every precision is tried from one (as jsonstrict does). */
    for (int prec = fabs(d) < DBL_MIN ? 1 : 15; prec <= 17; prec++) {
        snprintf(buf, JSONOUT_REAL_MAX, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) {
            break;
        }
    }
    size_t n = strlen(buf);
    if (!strpbrk(buf, ".eEn")) { /* "nan"/"inf" cannot occur: the boundary refuses them */
        memcpy(buf + n, ".0", 3);
        n += 2;
    }
    return n;
}

static void s_real(out_t *o, double d) {
    char buf[JSONOUT_REAL_MAX];
    s_put(o, buf, jsonout_real(d, buf));
}

static void s_value(out_t *o, const json_t *v) {
    switch (json_typeof(v)) {
        case JSON_OBJECT: {
            s_put(o, "{", 1);
            const char *key;
            json_t *member;
            int first = 1;
            json_object_foreach((json_t *)v, key, member) {
                if (!first) {
                    s_put(o, ",", 1);
                }
                first = 0;
                json_t *k = json_string(key);
                json_dump_callback(k, s_put_cb, o, JSON_ENCODE_ANY);
                json_decref(k);
                s_put(o, ":", 1);
                s_value(o, member);
            }
            s_put(o, "}", 1);
            break;
        }
        case JSON_ARRAY: {
            s_put(o, "[", 1);
            for (size_t i = 0; i < json_array_size(v); i++) {
                if (i) {
                    s_put(o, ",", 1);
                }
                s_value(o, json_array_get(v, i));
            }
            s_put(o, "]", 1);
            break;
        }
        case JSON_REAL:
            s_real(o, json_real_value(v));
            break;
        default: /* strings, integers, true, false, null: jansson writes them exactly */
            json_dump_callback(v, s_put_cb, o, JSON_ENCODE_ANY);
            break;
    }
}

char *jsonout_dumps(const json_t *v) {
    out_t o = {mem_strdup(""), 0, 1};
    s_value(&o, v);
    return o.buf;
}
