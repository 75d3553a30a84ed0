/* jsonstrict: the strict JSON boundary; see jsonstrict.h. */
#include "jsonstrict.h"
#include "mem.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const jsonstrict_limits_t jsonstrict_limits_default = {
    .max_bytes = JSONSTRICT_MAX_BYTES_DEFAULT,
    .max_depth = JSONSTRICT_MAX_DEPTH_DEFAULT,
    .max_values = JSONSTRICT_MAX_VALUES_DEFAULT,
    .max_keys = JSONSTRICT_MAX_KEYS_DEFAULT,
    .max_items = JSONSTRICT_MAX_ITEMS_DEFAULT,
    .max_string_bytes = JSONSTRICT_MAX_STRING_BYTES_DEFAULT,
    .max_number_chars = JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT,
};

const jsonstrict_limits_t jsonstrict_limits_schema = {
    .max_bytes = JSONSTRICT_SCHEMA_MAX_BYTES,
    .max_depth = JSONSTRICT_SCHEMA_MAX_DEPTH,
    .max_values = JSONSTRICT_MAX_VALUES_DEFAULT,
    .max_keys = JSONSTRICT_MAX_KEYS_DEFAULT,
    .max_items = JSONSTRICT_MAX_ITEMS_DEFAULT,
    .max_string_bytes = JSONSTRICT_MAX_STRING_BYTES_DEFAULT,
    .max_number_chars = JSONSTRICT_MAX_NUMBER_CHARS_DEFAULT,
};

/* One open container on the way down, kept so that an error can name its JSON pointer. */
typedef struct {
    bool is_object;
    size_t index;   /* array: index of the element being parsed */
    size_t key_off; /* object: the current key, in the parser's key stack */
    size_t key_len;
    bool has_key; /* object: a key has been decoded (and names the member in paths) */
} s_frame_t;

typedef struct {
    const unsigned char *start;
    const unsigned char *p;
    const unsigned char *end;
    jsonstrict_limits_t lim;
    size_t values;
    int depth;
    s_frame_t *frames; /* lim.max_depth entries */
    char *keys;        /* decoded keys of the open objects, back to back */
    size_t keys_len;
    size_t keys_cap;
    char *scratch; /* decoded string value with escapes */
    size_t scratch_cap;
    jsonstrict_error_t *err;
} s_parser_t;

static const char *s_code_names[] = {
    "ok",
    "too_large",
    "syntax",
    "trailing",
    "utf8",
    "surrogate",
    "nul",
    "duplicate_key",
    "depth",
    "values",
    "keys",
    "items",
    "string_length",
    "number_length",
    "integer_range",
    "number_range",
    "number_precision",
};

const char *jsonstrict_code_name(jsonstrict_code_t code) {
    if ((size_t)code < sizeof s_code_names / sizeof s_code_names[0]) {
        return s_code_names[code];
    }
    return "unknown";
}

/* Appends src[0..n) to the pointer at out (capacity cap, used *len), escaping per RFC 6901. */
static void s_path_append(char *out, size_t cap, size_t *len, const char *src, size_t n) {
    for (size_t i = 0; i < n && *len + 3 < cap; i++) {
        if (src[i] == '~' || src[i] == '/') {
            out[(*len)++] = '~';
            out[(*len)++] = src[i] == '~' ? '0' : '1';
        } else {
            out[(*len)++] = src[i];
        }
    }
    out[*len] = '\0';
}

static void s_build_path(const s_parser_t *ps, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < ps->depth; i++) {
        const s_frame_t *f = &ps->frames[i];
        if (f->is_object && !f->has_key) {
            break; /* the error is in the object itself, before or inside a key */
        }
        if (len + 2 >= cap) {
            break;
        }
        out[len++] = '/';
        out[len] = '\0';
        if (f->is_object) {
            s_path_append(out, cap, &len, ps->keys + f->key_off, f->key_len);
        } else {
            char num[24];
            int n = snprintf(num, sizeof num, "%zu", f->index);
            s_path_append(out, cap, &len, num, (size_t)n);
        }
    }
    if (len + 4 >= cap) {
        memcpy(out + cap - 4, "...", 4);
    }
}

__attribute__((format(printf, 4, 5))) static int
s_fail(s_parser_t *ps, jsonstrict_code_t code, const unsigned char *at, const char *fmt, ...) {
    jsonstrict_error_t *err = ps->err;
    if (!err) {
        return -1;
    }
    err->code = code;
    err->offset = (size_t)(at - ps->start);
    s_build_path(ps, err->path, sizeof err->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

static void s_skip_ws(s_parser_t *ps) {
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) {
        ps->p++;
    }
}

static int s_hex4(const unsigned char *p, const unsigned char *end, uint32_t *out) {
    if (end - p < 4) {
        return -1;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= c - '0';
        } else if (c >= 'a' && c <= 'f') {
            v |= c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
            v |= c - 'A' + 10;
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (RFC 3629), or 0 when it is invalid. */
static size_t s_utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t avail = (size_t)(end - p);
    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        return avail >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (avail < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) {
            return 0; /* overlong, or an encoded surrogate */
        }
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (avail < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) {
            return 0; /* overlong, or above U+10FFFF */
        }
        return 4;
    }
    return 0;
}

static size_t s_utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Scans the string whose opening quote is at ps->p: validates it, and sets *raw_len to its
 * byte length without quotes, *decoded_len to its decoded length and *escaped when it has
 * escapes. Leaves ps->p after the closing quote. */
static int s_scan_string(s_parser_t *ps, size_t *raw_len, size_t *decoded_len, bool *escaped) {
    const unsigned char *open = ps->p++;
    const unsigned char *p = ps->p;
    size_t decoded = 0;
    *escaped = false;
    for (;;) {
        if (p >= ps->end) {
            return s_fail(ps, JSONSTRICT_E_SYNTAX, open, "unterminated string");
        }
        unsigned c = *p;
        if (c == '"') {
            break;
        }
        if (c < 0x20) {
            return s_fail(ps, JSONSTRICT_E_SYNTAX, p, "unescaped control character in string");
        }
        if (c == '\\') {
            *escaped = true;
            if (p + 1 >= ps->end) {
                return s_fail(ps, JSONSTRICT_E_SYNTAX, p, "unterminated escape");
            }
            unsigned e = p[1];
            if (e != 'u') {
                if (!strchr("\"\\/bfnrt", (int)e) || e == 0) {
                    return s_fail(ps, JSONSTRICT_E_SYNTAX, p, "invalid escape \\%c",
                                  e >= 0x20 && e < 0x7F ? (int)e : '?');
                }
                p += 2;
                decoded++;
                continue;
            }
            uint32_t cp = 0;
            if (s_hex4(p + 2, ps->end, &cp)) {
                return s_fail(ps, JSONSTRICT_E_SYNTAX, p, "\\u needs four hex digits");
            }
            if (cp == 0) {
                return s_fail(ps, JSONSTRICT_E_NUL, p,
                              "\\u0000 is not allowed (JSONB cannot "
                              "store U+0000)");
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return s_fail(ps, JSONSTRICT_E_SURROGATE, p, "unpaired low surrogate \\u%04X",
                              (unsigned)cp);
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo = 0;
                if (p + 8 > ps->end || p[6] != '\\' || p[7] != 'u' || s_hex4(p + 8, ps->end, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    return s_fail(ps, JSONSTRICT_E_SURROGATE, p, "unpaired high surrogate \\u%04X",
                                  (unsigned)cp);
                }
                p += 12;
                decoded += 4;
                continue;
            }
            p += 6;
            decoded += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
            continue;
        }
        size_t n = s_utf8_len(p, ps->end);
        if (n == 0) {
            return s_fail(ps, JSONSTRICT_E_UTF8, p, "invalid UTF-8 byte 0x%02X in string", c);
        }
        p += n;
        decoded += n;
    }
    *raw_len = (size_t)(p - ps->p);
    *decoded_len = decoded;
    if (decoded > ps->lim.max_string_bytes) {
        return s_fail(ps, JSONSTRICT_E_STRING_LENGTH, open,
                      "string of %zu bytes exceeds the cap of %zu bytes", decoded,
                      ps->lim.max_string_bytes);
    }
    ps->p = p + 1;
    return 0;
}

/* Decodes a validated raw string body src[0..raw_len) into out (room for the decoded length). */
static void s_decode(const unsigned char *src, size_t raw_len, char *out) {
    const unsigned char *end = src + raw_len;
    size_t n = 0;
    while (src < end) {
        if (*src != '\\') {
            out[n++] = (char)*src++;
            continue;
        }
        unsigned e = src[1];
        if (e != 'u') {
            static const char from[] = "\"\\/bfnrt";
            static const char to[] = "\"\\/\b\f\n\r\t";
            out[n++] = to[strchr(from, (int)e) - from];
            src += 2;
            continue;
        }
        uint32_t cp = 0;
        (void)s_hex4(src + 2, end, &cp);
        src += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            (void)s_hex4(src + 2, end, &lo);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            src += 6;
        }
        n += s_utf8_put(out + n, cp);
    }
}

static char *s_scratch(s_parser_t *ps, size_t n) {
    if (n + 1 > ps->scratch_cap) {
        ps->scratch_cap = n + 1 > 2 * ps->scratch_cap ? n + 1 : 2 * ps->scratch_cap;
        ps->scratch = mem_realloc(ps->scratch, ps->scratch_cap);
    }
    return ps->scratch;
}

static int s_parse_value(s_parser_t *ps, json_t **out);

static int s_parse_string(s_parser_t *ps, json_t **out) {
    const unsigned char *body = ps->p + 1;
    size_t raw_len = 0;
    size_t dec_len = 0;
    bool escaped = false;
    if (s_scan_string(ps, &raw_len, &dec_len, &escaped)) {
        return -1;
    }
    const char *text = (const char *)body;
    if (escaped) {
        char *buf = s_scratch(ps, dec_len);
        s_decode(body, raw_len, buf);
        text = buf;
    }
    /* The text is valid UTF-8 without NUL: the scan proved it, so skip jansson's recheck. */
    *out = json_stringn_nocheck(text, dec_len);
    ASSERT(*out != NULL); /* jansson returns NULL only when malloc fails */
    return 0;
}

/* The significant digits of a number literal: value = digits * 10^exp10. */
typedef struct {
    char digits[JSONSTRICT_NUMBER_CHARS_CEILING + 1];
    size_t ndigits;
    long exp10;
} s_decimal_t;

static void s_literal_decimal(const char *lit, size_t len, s_decimal_t *dec) {
    size_t i = 0;
    long frac_digits = 0;
    bool in_frac = false;
    dec->ndigits = 0;
    if (lit[i] == '-') {
        i++;
    }
    for (; i < len && lit[i] != 'e' && lit[i] != 'E'; i++) {
        if (lit[i] == '.') {
            in_frac = true;
            continue;
        }
        if (in_frac) {
            frac_digits++;
        }
        if (dec->ndigits == 0 && lit[i] == '0') {
            continue;
        }
        dec->digits[dec->ndigits++] = lit[i];
    }
    long exp = 0;
    if (i < len) {
        errno = 0;
        exp = strtol(lit + i + 1, NULL, 10); /* saturates at LONG_MIN/LONG_MAX */
    }
    if (exp > LONG_MAX / 2) {
        exp = LONG_MAX / 2;
    } else if (exp < LONG_MIN / 2) {
        exp = LONG_MIN / 2;
    }
    dec->exp10 = exp - frac_digits;
    while (dec->ndigits > 0 && dec->digits[dec->ndigits - 1] == '0') {
        dec->ndigits--;
        dec->exp10++;
    }
    dec->digits[dec->ndigits] = '\0';
}

int jsonstrict_shortest(double d, char digits[JSONSTRICT_DIGITS_MAX + 1], int *exp10) {
    char buf[40];
    if (d == 0) {
        digits[0] = '0';
        digits[1] = '\0';
        *exp10 = 0;
        return 1;
    }
    /* Any decimal of at most 15 digits that reads back as d is the unique such value
     * (DBL_DIG), so the 15-digit form, stripped of trailing zeros, is the shortest. Subnormals
     * carry fewer digits, so for them every precision is tried from one. */
    int prec = fabs(d) < DBL_MIN ? 1 : 15;
    for (; prec < JSONSTRICT_DIGITS_MAX; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) {
            break;
        }
    }
    if (prec == JSONSTRICT_DIGITS_MAX) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    }
    const char *p = buf[0] == '-' ? buf + 1 : buf;
    int n = 0;
    for (; *p && *p != 'e'; p++) {
        if (*p != '.') {
            digits[n++] = *p;
        }
    }
    int e = (int)strtol(p + 1, NULL, 10);
    *exp10 = e - (n - 1);
    while (n > 1 && digits[n - 1] == '0') {
        n--;
        (*exp10)++;
    }
    digits[n] = '\0';
    return n;
}

static int s_real(s_parser_t *ps, const unsigned char *at, const char *lit, size_t len,
                  json_t **out) {
    s_decimal_t dec;
    s_literal_decimal(lit, len, &dec);
    double d = strtod(lit, NULL);
    if (dec.ndigits == 0) {
        *out = json_real(lit[0] == '-' ? -0.0 : 0.0);
        ASSERT(*out != NULL);
        return 0;
    }
    long magnitude = (long)dec.ndigits + dec.exp10; /* decimal exponent of the leading digit */
    bool easy = dec.ndigits <= 15 && magnitude > -306 && magnitude < 308;
    if (!easy) {
        if (isinf(d)) {
            return s_fail(ps, JSONSTRICT_E_NUMBER_RANGE, at,
                          "number %.*s overflows a double (beyond exact representation)",
                          (int)(len > 40 ? 40 : len), lit);
        }
        if (d == 0) {
            return s_fail(ps, JSONSTRICT_E_NUMBER_RANGE, at,
                          "number %.*s underflows a double to zero (beyond exact representation)",
                          (int)(len > 40 ? 40 : len), lit);
        }
        char digits[JSONSTRICT_DIGITS_MAX + 1];
        int exp10 = 0;
        jsonstrict_shortest(d, digits, &exp10);
        if (strcmp(digits, dec.digits) != 0 || exp10 != dec.exp10) {
            return s_fail(ps, JSONSTRICT_E_NUMBER_PRECISION, at,
                          "number %.*s has more precision than a double keeps (nearest is "
                          "%.17g)",
                          (int)(len > 40 ? 40 : len), lit, d);
        }
    }
    *out = json_real(d);
    ASSERT(*out != NULL);
    return 0;
}

static int s_integer(s_parser_t *ps, const unsigned char *at, const char *lit, size_t len,
                     json_t **out) {
    errno = 0;
    long long v = strtoll(lit, NULL, 10);
    if (errno == ERANGE) {
        return s_fail(ps, JSONSTRICT_E_INTEGER_RANGE, at,
                      "integer %.*s is outside int64 (beyond exact representation)",
                      (int)(len > 40 ? 40 : len), lit);
    }
    *out = json_integer((json_int_t)v);
    ASSERT(*out != NULL);
    return 0;
}

static bool s_digit(const unsigned char *p, const unsigned char *end) {
    return p < end && *p >= '0' && *p <= '9';
}

static int s_parse_number(s_parser_t *ps, json_t **out) {
    const unsigned char *at = ps->p;
    const unsigned char *p = ps->p;
    bool is_int = true;
    if (p < ps->end && *p == '-') {
        p++;
    }
    if (!s_digit(p, ps->end)) {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, at, "invalid number");
    }
    if (*p == '0') {
        p++;
    } else {
        while (s_digit(p, ps->end)) {
            p++;
        }
    }
    if (p < ps->end && *p == '.') {
        is_int = false;
        if (!s_digit(++p, ps->end)) {
            return s_fail(ps, JSONSTRICT_E_SYNTAX, at, "digit expected after decimal point");
        }
        while (s_digit(p, ps->end)) {
            p++;
        }
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        is_int = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (!s_digit(p, ps->end)) {
            return s_fail(ps, JSONSTRICT_E_SYNTAX, at, "digit expected in exponent");
        }
        while (s_digit(p, ps->end)) {
            p++;
        }
    }
    size_t len = (size_t)(p - at);
    if (len > ps->lim.max_number_chars) {
        return s_fail(ps, JSONSTRICT_E_NUMBER_LENGTH, at,
                      "number literal of %zu characters exceeds the cap of %zu", len,
                      ps->lim.max_number_chars);
    }
    char lit[JSONSTRICT_NUMBER_CHARS_CEILING + 1];
    memcpy(lit, at, len);
    lit[len] = '\0';
    ps->p = p;
    return is_int ? s_integer(ps, at, lit, len, out) : s_real(ps, at, lit, len, out);
}

static int s_literal(s_parser_t *ps, const char *word, json_t *value, json_t **out) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "invalid literal");
    }
    ps->p += n;
    *out = value;
    return 0;
}

static int s_push(s_parser_t *ps, bool is_object) {
    if (ps->depth >= ps->lim.max_depth) {
        return s_fail(ps, JSONSTRICT_E_DEPTH, ps->p, "nesting exceeds the cap of %d levels",
                      ps->lim.max_depth);
    }
    s_frame_t *f = &ps->frames[ps->depth++];
    f->is_object = is_object;
    f->index = 0;
    f->key_off = ps->keys_len;
    f->key_len = 0;
    f->has_key = false;
    ps->p++;
    return 0;
}

/* Decodes the key at ps->p onto the key stack (as the current frame's key). */
static int s_parse_key(s_parser_t *ps) {
    s_frame_t *f = &ps->frames[ps->depth - 1];
    const unsigned char *body = ps->p + 1;
    size_t raw_len = 0;
    size_t dec_len = 0;
    bool escaped = false;
    ps->keys_len = f->key_off;
    f->key_len = 0;
    f->has_key = false;
    if (s_scan_string(ps, &raw_len, &dec_len, &escaped)) {
        return -1;
    }
    if (f->key_off + dec_len + 1 > ps->keys_cap) {
        size_t want = f->key_off + dec_len + 1;
        ps->keys_cap = want > 2 * ps->keys_cap ? want : 2 * ps->keys_cap;
        ps->keys = mem_realloc(ps->keys, ps->keys_cap);
    }
    char *dst = ps->keys + f->key_off;
    if (escaped) {
        s_decode(body, raw_len, dst);
    } else {
        memcpy(dst, body, raw_len);
    }
    dst[dec_len] = '\0';
    f->key_len = dec_len;
    f->has_key = true;
    ps->keys_len = f->key_off + dec_len + 1;
    return 0;
}

static int s_expect(s_parser_t *ps, char c, const char *what) {
    s_skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != (unsigned char)c) {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "%s expected", what);
    }
    ps->p++;
    return 0;
}

static int s_parse_member(s_parser_t *ps, json_t *obj, size_t count) {
    s_skip_ws(ps);
    const unsigned char *at = ps->p;
    if (at >= ps->end || *at != '"') {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, at, "object key expected");
    }
    if (count >= ps->lim.max_keys) {
        return s_fail(ps, JSONSTRICT_E_KEYS, at, "object exceeds the cap of %zu keys",
                      ps->lim.max_keys);
    }
    if (s_parse_key(ps)) {
        return -1;
    }
    const s_frame_t *f = &ps->frames[ps->depth - 1];
    if (json_object_getn(obj, ps->keys + f->key_off, f->key_len)) {
        return s_fail(ps, JSONSTRICT_E_DUPLICATE_KEY, at, "duplicate object key");
    }
    json_t *value = NULL;
    if (s_expect(ps, ':', "':'") || s_parse_value(ps, &value)) {
        return -1;
    }
    /* Steals the reference to value; the key is copied. */
    int rc = json_object_setn_new_nocheck(obj, ps->keys + f->key_off, f->key_len, value);
    ASSERT(rc == 0);
    return 0;
}

static int s_parse_object(s_parser_t *ps, json_t **out) {
    if (s_push(ps, true)) {
        return -1;
    }
    json_t *obj = json_object();
    ASSERT(obj != NULL);
    s_skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        for (size_t count = 0;; count++) {
            if (s_parse_member(ps, obj, count)) {
                json_decref(obj);
                return -1;
            }
            s_skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (s_expect(ps, '}', "',' or '}'")) {
                json_decref(obj);
                return -1;
            }
            break;
        }
    }
    ps->keys_len = ps->frames[--ps->depth].key_off;
    *out = obj;
    return 0;
}

static int s_parse_array(s_parser_t *ps, json_t **out) {
    if (s_push(ps, false)) {
        return -1;
    }
    json_t *arr = json_array();
    ASSERT(arr != NULL);
    s_frame_t *f = &ps->frames[ps->depth - 1];
    s_skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;; f->index++) {
            json_t *item = NULL;
            if (f->index >= ps->lim.max_items) {
                json_decref(arr);
                return s_fail(ps, JSONSTRICT_E_ITEMS, ps->p, "array exceeds the cap of %zu items",
                              ps->lim.max_items);
            }
            if (s_parse_value(ps, &item)) {
                json_decref(arr);
                return -1;
            }
            int rc = json_array_append_new(arr, item); /* steals item */
            ASSERT(rc == 0);
            s_skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (s_expect(ps, ']', "',' or ']'")) {
                json_decref(arr);
                return -1;
            }
            break;
        }
    }
    ps->depth--;
    *out = arr;
    return 0;
}

static int s_parse_value(s_parser_t *ps, json_t **out) {
    s_skip_ws(ps);
    if (ps->p >= ps->end) {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "value expected");
    }
    if (++ps->values > ps->lim.max_values) {
        return s_fail(ps, JSONSTRICT_E_VALUES, ps->p, "input exceeds the cap of %zu values",
                      ps->lim.max_values);
    }
    switch (*ps->p) {
        case '{':
            return s_parse_object(ps, out);
        case '[':
            return s_parse_array(ps, out);
        case '"':
            return s_parse_string(ps, out);
        case 't':
            return s_literal(ps, "true", json_true(), out);
        case 'f':
            return s_literal(ps, "false", json_false(), out);
        case 'n':
            return s_literal(ps, "null", json_null(), out);
        case 'N':
        case 'I':
            return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "non-finite numbers are not JSON");
        default:
            if (*ps->p == '-' && ps->p + 1 < ps->end && ps->p[1] == 'I') {
                return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "non-finite numbers are not JSON");
            }
            return s_parse_number(ps, out);
    }
}

static void s_clamp(jsonstrict_limits_t *lim) {
    if (lim->max_depth > JSONSTRICT_DEPTH_CEILING || lim->max_depth < 0) {
        lim->max_depth = JSONSTRICT_DEPTH_CEILING;
    }
    if (lim->max_number_chars > JSONSTRICT_NUMBER_CHARS_CEILING) {
        lim->max_number_chars = JSONSTRICT_NUMBER_CHARS_CEILING;
    }
}

int jsonstrict_parse(const char *buf, size_t len, const jsonstrict_limits_t *limits, json_t **out,
                     jsonstrict_error_t *err) {
    s_parser_t ps = {.start = (const unsigned char *)buf, .err = err};
    ps.p = ps.start;
    ps.end = ps.start + len;
    ps.lim = limits ? *limits : jsonstrict_limits_default;
    s_clamp(&ps.lim);
    *out = NULL;
    if (err) {
        memset(err, 0, sizeof *err);
    }
    if (len > ps.lim.max_bytes) {
        return s_fail(&ps, JSONSTRICT_E_TOO_LARGE, ps.start,
                      "input of %zu bytes exceeds the cap of %zu bytes", len, ps.lim.max_bytes);
    }
    ps.frames = mem_calloc((size_t)ps.lim.max_depth + 1, sizeof *ps.frames);
    json_t *value = NULL;
    int rc = s_parse_value(&ps, &value);
    if (rc == 0) {
        s_skip_ws(&ps);
        if (ps.p != ps.end) {
            rc = s_fail(&ps, JSONSTRICT_E_TRAILING, ps.p, "trailing data after the JSON value");
            json_decref(value);
            value = NULL;
        }
    }
    free(ps.frames);
    free(ps.keys);
    free(ps.scratch);
    *out = value;
    return rc;
}
