/* jsonstrict: the strict JSON boundary; see jsonstrict.h. */
#include "jsonstrict.h"
#include "jsonstrict_internal.h"
#include "hex.h"
#include "mem.h"

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

const jsonstrict_limits_t jsonstrict_limits_stored = {
    .max_bytes = JSONSTRICT_BYTES_CEILING,
    .max_depth = JSONSTRICT_DEPTH_CEILING,
    .max_values = SIZE_MAX,
    .max_keys = SIZE_MAX,
    .max_items = SIZE_MAX,
    .max_string_bytes = SIZE_MAX,
    .max_number_chars = SIZE_MAX,
    .numbers = JSONSTRICT_NUMBERS_NEAREST,
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
    bool has_key; /* object: a key has been decoded (and names the member in paths) */
    uint32_t at;  /* the container's tape entry */
    uint32_t key; /* object: the tape entry of the current key */
    size_t index; /* array: index of the element being parsed; object: members so far */
    jsonstrict_keys_object_t keys; /* object: its keys so far, for duplicates */
} s_frame_t;

/* Frames kept on the stack when the depth cap allows (the default and schema caps do). */
#define S_FRAMES_ON_STACK 65

typedef struct {
    const unsigned char *start;
    const unsigned char *p;
    const unsigned char *end;
    jsonstrict_limits_t lim;
    size_t values;
    int depth;
    s_frame_t *frames;       /* lim.max_depth entries */
    jsontape_t *tape;        /* the document so far; the keys that frames name live in it */
    jsonstrict_keys_t keys;  /* the open big objects' keys (zeroed: empty) */
    char scratch_small[256]; /* decoded string values with escapes, when short */
    char *scratch;           /* longer ones (scratch_cap bytes) */
    size_t scratch_cap;
    jsonstrict_error_t *err;
} s_parser_t;

static const char *s_code_names[] = {
    "ok",        "too_large", "syntax",        "trailing",      "utf8",
    "surrogate", "nul",       "duplicate_key", "depth",         "values",
    "keys",      "items",     "string_length", "number_length", "number_range",
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
            const jsontape_entry_t *key = jsontape_at(ps->tape, f->key);
            s_path_append(out, cap, &len, jsontape_str(ps->tape, key), key->size);
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
    /* Locals, since a store through a char pointer could otherwise alias ps->p. */
    const uint64_t ws = 1ull << ' ' | 1ull << '\t' | 1ull << '\n' | 1ull << '\r';
    const unsigned char *p = ps->p;
    while (p < ps->end && *p <= ' ' && (ws >> *p & 1)) {
        p++;
    }
    ps->p = p;
}

static int s_hex4(const unsigned char *p, const unsigned char *end, uint32_t *out) {
    if (end - p < 4) {
        return -1;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(p[i]);
        if (d < 0) {
            return -1;
        }
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

size_t jsonstrict_utf8_len(const unsigned char *p, const unsigned char *end) {
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

/* The bytes that stand for themselves in a string body: printable ASCII other than '"' and
 * '\\'. A table, since this is the test of the parser's innermost loop. */
#define S_PLAIN(c)   ((c) >= 0x20 && (c) < 0x80 && (c) != '"' && (c) != '\\')
#define S_PLAIN4(c)  S_PLAIN(c), S_PLAIN((c) + 1), S_PLAIN((c) + 2), S_PLAIN((c) + 3)
#define S_PLAIN16(c) S_PLAIN4(c), S_PLAIN4((c) + 4), S_PLAIN4((c) + 8), S_PLAIN4((c) + 12)
static const bool s_plain_byte[256] = {
    S_PLAIN16(0x00), S_PLAIN16(0x10), S_PLAIN16(0x20), S_PLAIN16(0x30),
    S_PLAIN16(0x40), S_PLAIN16(0x50), S_PLAIN16(0x60), S_PLAIN16(0x70),
    /* 0x80 to 0xFF: zero, the bytes of multibyte sequences */
};

/* The first byte in [p, end) that is not plain (s_plain_byte), or end: 8 bytes at a time while
 * 8 are left (bit tricks on a word: a quote, a backslash, a byte below 0x20 or from 0x80 marks
 * its byte's top bit, exactly in the lowest marked byte), then byte by byte. */
static const unsigned char *s_plain_run(const unsigned char *p, const unsigned char *end) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull;
    const uint64_t highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t w = 0;
        memcpy(&w, p, sizeof w);
        uint64_t q = w ^ (ones * '"');
        uint64_t b = w ^ (ones * '\\');
        uint64_t marks = ((q - ones) & ~q) | ((b - ones) & ~b) | (w - ones * 0x20) | w;
        marks &= highs;
        if (marks) {
            return p + (__builtin_ctzll(marks) >> 3); /* byte 0 is the lowest */
        }
        p += 8;
    }
#endif
    while (p < end && s_plain_byte[*p]) {
        p++;
    }
    return p;
}

/* A string as scanned: its byte length without quotes, its decoded length in bytes and in
 * characters (code points), and whether it has escapes. */
typedef struct {
    size_t raw_len;
    size_t decoded_len;
    size_t chars;
    bool escaped;
} s_str_t;

/* Scans the string whose opening quote is at ps->p: validates it and describes it in *str.
 * Leaves ps->p after the closing quote. */
static __attribute__((noinline)) int s_scan_string_full(s_parser_t *ps, s_str_t *str) {
    const unsigned char *open = ps->p++;
    const unsigned char *p = ps->p;
    const unsigned char *end = ps->end;
    size_t decoded = 0;
    size_t chars = 0;
    bool *escaped = &str->escaped;
    *escaped = false;
    for (;;) {
        /* Runs of plain ASCII, the bulk of most strings, decode to themselves. */
        const unsigned char *run = p;
        p = s_plain_run(p, end);
        decoded += (size_t)(p - run);
        chars += (size_t)(p - run);
        if (p >= end) {
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
            if (p + 1 >= end) {
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
                chars++;
                continue;
            }
            uint32_t cp = 0;
            if (s_hex4(p + 2, end, &cp)) {
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
                if (p + 8 > end || p[6] != '\\' || p[7] != 'u' || s_hex4(p + 8, end, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    return s_fail(ps, JSONSTRICT_E_SURROGATE, p, "unpaired high surrogate \\u%04X",
                                  (unsigned)cp);
                }
                p += 12;
                decoded += 4;
                chars++;
                continue;
            }
            p += 6;
            decoded += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
            chars++;
            continue;
        }
        size_t n = jsonstrict_utf8_len(p, end);
        if (n == 0) {
            return s_fail(ps, JSONSTRICT_E_UTF8, p, "invalid UTF-8 byte 0x%02X in string", c);
        }
        p += n;
        decoded += n;
        chars++;
    }
    str->raw_len = (size_t)(p - ps->p);
    str->decoded_len = decoded;
    str->chars = chars;
    if (decoded > ps->lim.max_string_bytes) {
        return s_fail(ps, JSONSTRICT_E_STRING_LENGTH, open,
                      "string of %zu bytes exceeds the cap of %zu bytes", decoded,
                      ps->lim.max_string_bytes);
    }
    ps->p = p + 1;
    return 0;
}

/* s_scan_string_full, with a plain ASCII string (most names and values) scanned here: one
 * run up to its closing quote. Any other is scanned again by s_scan_string_full. */
static inline int s_scan_string(s_parser_t *ps, s_str_t *str) {
    const unsigned char *body = ps->p + 1;
    const unsigned char *p = s_plain_run(body, ps->end);
    size_t n = (size_t)(p - body);
    if (p == ps->end || *p != '"' || n > ps->lim.max_string_bytes) {
        return s_scan_string_full(ps, str);
    }
    *str = (s_str_t){.raw_len = n, .decoded_len = n, .chars = n, .escaped = false};
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
    if (n < sizeof ps->scratch_small) {
        return ps->scratch_small;
    }
    if (n + 1 > ps->scratch_cap) {
        ps->scratch_cap = n + 1 > 2 * ps->scratch_cap ? n + 1 : 2 * ps->scratch_cap;
        ps->scratch = mem_realloc(ps->scratch, ps->scratch_cap);
    }
    return ps->scratch;
}

/* s_add_string for a string with escapes: decoded into scratch first. */
static __attribute__((noinline)) uint32_t s_add_escaped(s_parser_t *ps, const unsigned char *body,
                                                        const s_str_t *str) {
    char *buf = s_scratch(ps, str->decoded_len);
    s_decode(body, str->raw_len, buf);
    return jsontape_add_text(ps->tape, buf, str->decoded_len, str->chars);
}

/* Appends the string scanned at body (a value or a key) to the tape: its bytes are copied into
 * the arena once, straight from the input, or decoded first when it has escapes. */
static inline uint32_t s_add_string(s_parser_t *ps, const unsigned char *body, const s_str_t *str) {
    /* The scan proved the text valid UTF-8 without NUL, as the tape requires. */
    if (str->escaped) {
        return s_add_escaped(ps, body, str);
    }
    return jsontape_add_text(ps->tape, (const char *)body, str->decoded_len, str->chars);
}

static int s_parse_value(s_parser_t *ps);

static int s_parse_string(s_parser_t *ps) {
    const unsigned char *body = ps->p + 1;
    s_str_t str;
    if (s_scan_string(ps, &str)) {
        return -1;
    }
    s_add_string(ps, body, &str);
    return 0;
}

static bool s_digit(const unsigned char *p, const unsigned char *end) {
    return p < end && *p >= '0' && *p <= '9';
}

static int s_parse_number(s_parser_t *ps) {
    const unsigned char *at = ps->p;
    const unsigned char *p = ps->p;
    bool is_int = true;
    if (p < ps->end && *p == '-') {
        p++;
    }
    if (!s_digit(p, ps->end)) {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, at, "invalid number");
    }
    const unsigned char *digits = p;
    if (*p == '0') {
        p++;
    } else {
        while (s_digit(p, ps->end)) {
            p++;
        }
    }
    size_t int_digits = (size_t)(p - digits);
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
    bool nearest = ps->lim.numbers == JSONSTRICT_NUMBERS_NEAREST;
    if (len > ps->lim.max_number_chars && !nearest) {
        return s_fail(ps, JSONSTRICT_E_NUMBER_LENGTH, at,
                      "number literal of %zu characters exceeds the cap of %zu", len,
                      ps->lim.max_number_chars);
    }
    ps->p = p;
    bool negative = digits > at; /* a '-' precedes the digits */
    if (is_int && int_digits <= 18 && !(negative && *digits == '0')) {
        /* At most 18 digits, the common case, kept inline: no overflow. */
        int64_t v = 0;
        for (size_t i = 0; i < int_digits; i++) {
            v = v * 10 + (digits[i] - '0');
        }
        jsontape_add_integer(ps->tape, negative ? -v : v);
        return 0;
    }
    jsonstrict_num_t num;
    if (jsonstrict_number_read(at, len, is_int, ps->lim.numbers, &num) != JSONSTRICT_OK) {
        return s_fail(ps, JSONSTRICT_E_NUMBER_RANGE, at,
                      "number %.*s has a magnitude beyond 10^+-%d (the number cap)",
                      (int)(len > 40 ? 40 : len), (const char *)at, JSONSTRICT_NUMBER_EXP_MAX);
    }
    if (num.is_int) {
        jsontape_add_integer(ps->tape, num.i);
    } else if (num.text) {
        jsontape_add_text_real(ps->tape, (const char *)at, len, num.d, num.integral);
    } else {
        jsontape_add_real(ps->tape, num.d);
    }
    return 0;
}

static int s_literal(s_parser_t *ps, const char *word, size_t n, jsontape_type_t type) {
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "invalid literal");
    }
    ps->p += n;
    jsontape_add_literal(ps->tape, type);
    return 0;
}

static int s_push(s_parser_t *ps, bool is_object) {
    if (ps->depth >= ps->lim.max_depth) {
        return s_fail(ps, JSONSTRICT_E_DEPTH, ps->p, "nesting exceeds the cap of %d levels",
                      ps->lim.max_depth);
    }
    s_frame_t *f = &ps->frames[ps->depth++];
    f->is_object = is_object;
    f->has_key = false;
    f->at = jsontape_open(ps->tape, is_object ? JSONTAPE_OBJECT : JSONTAPE_ARRAY);
    f->key = 0;
    f->index = 0;
    if (is_object) {
        jsonstrict_keys_open(&f->keys, f->at);
    }
    ps->p++;
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

/* --- containers --- */

static int s_parse_member(s_parser_t *ps, s_frame_t *f) {
    s_skip_ws(ps);
    const unsigned char *at = ps->p;
    if (at >= ps->end || *at != '"') {
        return s_fail(ps, JSONSTRICT_E_SYNTAX, at, "object key expected");
    }
    if (f->index >= ps->lim.max_keys) {
        return s_fail(ps, JSONSTRICT_E_KEYS, at, "object exceeds the cap of %zu keys",
                      ps->lim.max_keys);
    }
    s_str_t str;
    f->has_key = false;
    if (s_scan_string(ps, &str)) {
        return -1;
    }
    f->key = s_add_string(ps, at + 1, &str);
    f->has_key = true;
    if (jsonstrict_keys_seen(&ps->keys, &f->keys, ps->tape, f->key)) {
        return s_fail(ps, JSONSTRICT_E_DUPLICATE_KEY, at, "duplicate object key");
    }
    if (s_expect(ps, ':', "':'") || s_parse_value(ps)) {
        return -1;
    }
    f->index++;
    return 0;
}

static int s_parse_object(s_parser_t *ps) {
    if (s_push(ps, true)) {
        return -1;
    }
    s_frame_t *f = &ps->frames[ps->depth - 1];
    s_skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        for (;;) {
            if (s_parse_member(ps, f)) {
                return -1;
            }
            s_skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (s_expect(ps, '}', "',' or '}'")) {
                return -1;
            }
            break;
        }
    }
    jsonstrict_keys_close(&ps->keys, &f->keys);
    jsontape_close(ps->tape, f->at, (uint32_t)f->index);
    ps->depth--;
    return 0;
}

static int s_parse_array(s_parser_t *ps) {
    if (s_push(ps, false)) {
        return -1;
    }
    s_frame_t *f = &ps->frames[ps->depth - 1];
    size_t items = 0;
    s_skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;; f->index++) {
            if (f->index >= ps->lim.max_items) {
                return s_fail(ps, JSONSTRICT_E_ITEMS, ps->p, "array exceeds the cap of %zu items",
                              ps->lim.max_items);
            }
            if (s_parse_value(ps)) {
                return -1;
            }
            s_skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (s_expect(ps, ']', "',' or ']'")) {
                return -1;
            }
            items = f->index + 1;
            break;
        }
    }
    jsontape_close(ps->tape, f->at, (uint32_t)items);
    ps->depth--;
    return 0;
}

static int s_parse_value(s_parser_t *ps) {
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
            return s_parse_object(ps);
        case '[':
            return s_parse_array(ps);
        case '"':
            return s_parse_string(ps);
        case 't':
            return s_literal(ps, "true", 4, JSONTAPE_TRUE);
        case 'f':
            return s_literal(ps, "false", 5, JSONTAPE_FALSE);
        case 'n':
            return s_literal(ps, "null", 4, JSONTAPE_NULL);
        case 'N':
        case 'I':
            return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "non-finite numbers are not JSON");
        default:
            if (*ps->p == '-' && ps->p + 1 < ps->end && ps->p[1] == 'I') {
                return s_fail(ps, JSONSTRICT_E_SYNTAX, ps->p, "non-finite numbers are not JSON");
            }
            return s_parse_number(ps);
    }
}

static void s_clamp(jsonstrict_limits_t *lim) {
    if (lim->max_bytes > JSONSTRICT_BYTES_CEILING) {
        lim->max_bytes = JSONSTRICT_BYTES_CEILING;
    }
    if (lim->max_depth > JSONSTRICT_DEPTH_CEILING || lim->max_depth < 0) {
        lim->max_depth = JSONSTRICT_DEPTH_CEILING;
    }
    if (lim->max_number_chars > JSONSTRICT_NUMBER_CHARS_CEILING &&
        lim->numbers != JSONSTRICT_NUMBERS_NEAREST) {
        lim->max_number_chars = JSONSTRICT_NUMBER_CHARS_CEILING;
    }
}

int jsonstrict_parse_tape(const char *buf, size_t len, const jsonstrict_limits_t *limits,
                          jsontape_t *out, jsonstrict_error_t *err) {
    s_parser_t ps = {.start = (const unsigned char *)buf, .err = err, .tape = out};
    ps.p = ps.start;
    ps.lim = limits ? *limits : jsonstrict_limits_default;
    s_clamp(&ps.lim);
    jsontape_clear(out);
    if (err) {
        memset(err, 0, sizeof *err);
    }
    /* The byte ceiling also keeps the tape inside its 32-bit indexes: every entry and every
     * arena byte (a string's decoded bytes and its NUL) stands for at least one input byte. */
    if (len > ps.lim.max_bytes) {
        return s_fail(&ps, JSONSTRICT_E_TOO_LARGE, ps.start,
                      "input of %zu bytes exceeds the cap of %zu bytes", len, ps.lim.max_bytes);
    }
    ps.end = ps.start + len;
    s_frame_t frames[S_FRAMES_ON_STACK];
    ps.frames = ps.lim.max_depth <= S_FRAMES_ON_STACK
                    ? frames
                    : mem_calloc((size_t)ps.lim.max_depth, sizeof *ps.frames);
    int rc = s_parse_value(&ps);
    if (rc == 0) {
        s_skip_ws(&ps);
        if (ps.p != ps.end) {
            rc = s_fail(&ps, JSONSTRICT_E_TRAILING, ps.p, "trailing data after the JSON value");
        }
    }
    if (ps.frames != frames) {
        free(ps.frames);
    }
    free(ps.scratch);
    jsonstrict_keys_free(&ps.keys);
    if (rc != 0) {
        jsontape_clear(out);
    }
    return rc;
}

int jsonstrict_parse(const char *buf, size_t len, const jsonstrict_limits_t *limits, json_t **out,
                     jsonstrict_error_t *err) {
    /* A tape of this call's own: its two buffers are the only memory the parse itself takes,
     * and they are freed here (jsontape_t is a plain struct; a zeroed one is empty). */
    jsontape_t tape = {0};
    *out = NULL;
    int rc = jsonstrict_parse_tape(buf, len, limits, &tape, err);
    if (rc == 0) {
        *out = jsontape_to_json(&tape, 0);
        ASSERT(*out != NULL); /* jansson returns NULL only when malloc fails */
    }
    free(tape.entries);
    free(tape.bytes);
    return rc;
}

json_t *jsonstrict_load_stored(const char *text, size_t len) {
    json_t *v = NULL;
    return jsonstrict_parse(text, len, &jsonstrict_limits_stored, &v, NULL) == 0 ? v : NULL;
}
