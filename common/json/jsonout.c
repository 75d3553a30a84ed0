/* jsonout: compact JSON with shortest reals; see jsonout.h. */
#include "jsonout.h"
#include "jsonnumber.h"
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

/* The n bytes at s (a jansson string: valid UTF-8) as a JSON string, escaped exactly as
 * jansson's json_dumps escapes without flags: \" \\ \b \f \n \r \t, any other control
 * character as \u00XX, everything else as is. Written here rather than through
 * json_dump_callback so that a key needs no string of its own. */
static void s_string(out_t *o, const char *s, size_t n) {
    s_put(o, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
            case '"':
            case '\\':
                esc[0] = '\\';
                esc[1] = (char)c;
                esc[2] = '\0';
                break;
            case '\b':
                memcpy(esc, "\\b", 3);
                break;
            case '\f':
                memcpy(esc, "\\f", 3);
                break;
            case '\n':
                memcpy(esc, "\\n", 3);
                break;
            case '\r':
                memcpy(esc, "\\r", 3);
                break;
            case '\t':
                memcpy(esc, "\\t", 3);
                break;
            default:
                if (c >= 0x20) {
                    continue;
                }
                snprintf(esc, sizeof esc, "\\u%04X", c);
                break;
        }
        s_put(o, s + run, i - run);
        s_put(o, esc, strlen(esc));
        run = i + 1;
    }
    s_put(o, s + run, n - run);
    s_put(o, "\"", 1);
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
            size_t key_len;
            json_t *member;
            int first = 1;
            json_object_keylen_foreach((json_t *)v, key, key_len, member) {
                if (!first) {
                    s_put(o, ",", 1);
                }
                first = 0;
                s_string(o, key, key_len);
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
        case JSON_REAL: {
            size_t len = 0;
            const char *text = jsonnumber_text(v, &len);
            if (text) {
                s_put(o, text, len);
            } else {
                s_real(o, json_real_value(v));
            }
            break;
        }
        case JSON_STRING:
            s_string(o, json_string_value(v), json_string_length(v));
            break;
        case JSON_INTEGER: {
            char buf[24];
            int n = snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            s_put(o, buf, (size_t)n);
            break;
        }
        case JSON_TRUE:
            s_put(o, "true", 4);
            break;
        case JSON_FALSE:
            s_put(o, "false", 5);
            break;
        case JSON_NULL:
            s_put(o, "null", 4);
            break;
    }
}

char *jsonout_dumps(const json_t *v) {
    out_t o = {mem_alloc(64), 0, 64};
    o.buf[0] = '\0';
    s_value(&o, v);
    return o.buf;
}
