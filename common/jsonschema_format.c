/* jsonschema_format: ECMA-262 regexes on PCRE2 and the supported formats; see JSONSCHEMA.md. */
#include "jsonschema_internal.h"
#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct js_regex {
    pcre2_code *code;
    bool jit; /* compiled by the JIT: matched with pcre2_jit_match (no per-call checks) */
};

/* --- ECMA-262 to PCRE2 rewriting --- */

static bool s_isalpha(char c) {
    return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} s_buf_t;

static void s_put(s_buf_t *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->buf = mem_realloc(b->buf, b->cap);
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static void s_puts(s_buf_t *b, const char *s) {
    s_put(b, s, strlen(s));
}

/* ECMA-262 WhiteSpace and LineTerminator, the meaning of \s (PCRE2's \s is ASCII only). */
#define S_ECMA_SPACE                                                                               \
    "\\t\\n\\x{0b}\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}"  \
    "\\x{3000}\\x{feff}"

typedef struct {
    const char *src;
    size_t len;
    size_t i;
    char *err;
    size_t errlen;
} s_rx_t;

__attribute__((format(printf, 2, 3))) static int s_rx_fail(s_rx_t *rx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rx->err, rx->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int s_hexval(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Reads exactly n hex digits at rx->i; -1 when they are not there. */
static long s_hexn(s_rx_t *rx, size_t at, int n) {
    long v = 0;
    if (at + (size_t)n > rx->len) {
        return -1;
    }
    for (int k = 0; k < n; k++) {
        int h = s_hexval(rx->src[at + (size_t)k]);
        if (h < 0) {
            return -1;
        }
        v = v * 16 + h;
    }
    return v;
}

static void s_put_cp(s_buf_t *out, long cp) {
    char tmp[16];
    int n = snprintf(tmp, sizeof tmp, "\\x{%lx}", cp);
    s_put(out, tmp, (size_t)n);
}

/* \u escapes: \uHHHH, a surrogate pair of them, or \u{H...}. rx->i is on the 'u'. */
static int s_unicode_escape(s_rx_t *rx, s_buf_t *out) {
    size_t at = rx->i + 1;
    long cp = 0;
    if (at < rx->len && rx->src[at] == '{') {
        size_t j = at + 1;
        while (j < rx->len && s_hexval(rx->src[j]) >= 0 && cp <= 0x10FFFF) {
            cp = cp * 16 + s_hexval(rx->src[j++]);
        }
        if (j == at + 1 || j >= rx->len || rx->src[j] != '}' || cp > 0x10FFFF) {
            return s_rx_fail(rx, "invalid \\u{...} escape");
        }
        rx->i = j + 1;
    } else {
        cp = s_hexn(rx, at, 4);
        if (cp < 0) {
            return s_rx_fail(rx, "\\u needs four hex digits");
        }
        rx->i = at + 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && rx->i + 1 < rx->len && rx->src[rx->i] == '\\' &&
            rx->src[rx->i + 1] == 'u') {
            long lo = s_hexn(rx, rx->i + 2, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                rx->i += 6;
            }
        }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
        return s_rx_fail(rx, "lone surrogate escape");
    }
    s_put_cp(out, cp);
    return 0;
}

/* ECMA-262 long General_Category names (and the "digit" alias) as PCRE2 spells them. */
static const char *s_gc_alias[][2] = {
    {"Letter", "L"},
    {"Cased_Letter", "LC"},
    {"Uppercase_Letter", "Lu"},
    {"Lowercase_Letter", "Ll"},
    {"Titlecase_Letter", "Lt"},
    {"Modifier_Letter", "Lm"},
    {"Other_Letter", "Lo"},
    {"Mark", "M"},
    {"Nonspacing_Mark", "Mn"},
    {"Spacing_Mark", "Mc"},
    {"Enclosing_Mark", "Me"},
    {"Number", "N"},
    {"Decimal_Number", "Nd"},
    {"digit", "Nd"},
    {"Letter_Number", "Nl"},
    {"Other_Number", "No"},
    {"Punctuation", "P"},
    {"Connector_Punctuation", "Pc"},
    {"Dash_Punctuation", "Pd"},
    {"Open_Punctuation", "Ps"},
    {"Close_Punctuation", "Pe"},
    {"Initial_Punctuation", "Pi"},
    {"Final_Punctuation", "Pf"},
    {"Other_Punctuation", "Po"},
    {"Symbol", "S"},
    {"Math_Symbol", "Sm"},
    {"Currency_Symbol", "Sc"},
    {"Modifier_Symbol", "Sk"},
    {"Other_Symbol", "So"},
    {"Separator", "Z"},
    {"Space_Separator", "Zs"},
    {"Line_Separator", "Zl"},
    {"Paragraph_Separator", "Zp"},
    {"Other", "C"},
    {"Control", "Cc"},
    {"Format", "Cf"},
    {"Surrogate", "Cs"},
    {"Private_Use", "Co"},
    {"Unassigned", "Cn"},
};

/* \p{...} or \P{...} at rx->i (on the '{'): General_Category and Script names. */
static int s_property(s_rx_t *rx, s_buf_t *out, char c) {
    const char *open = rx->src + rx->i + 1;
    const char *close = memchr(open, '}', rx->len - rx->i - 1);
    if (!close) {
        return s_rx_fail(rx, "unterminated \\p{...}");
    }
    size_t n = (size_t)(close - open);
    const char *eq = memchr(open, '=', n);
    if (eq) {
        n -= (size_t)(eq + 1 - open);
        open = eq + 1; /* gc=, sc=, General_Category=, Script=: PCRE2 takes the bare value */
    }
    for (size_t k = 0; k < sizeof s_gc_alias / sizeof s_gc_alias[0]; k++) {
        if (strlen(s_gc_alias[k][0]) == n && memcmp(s_gc_alias[k][0], open, n) == 0) {
            open = s_gc_alias[k][1];
            n = strlen(open);
            break;
        }
    }
    char head[3] = {'\\', c, '{'};
    s_put(out, head, 3);
    s_put(out, open, n);
    s_put(out, "}", 1);
    rx->i = (size_t)(close - rx->src) + 1;
    return 0;
}

/* One escape at rx->i (on the backslash). In a class, \S sets *non_space instead. */
static int s_escape(s_rx_t *rx, s_buf_t *out, bool in_class, bool *non_space) {
    if (rx->i + 1 >= rx->len) {
        return s_rx_fail(rx, "trailing backslash");
    }
    char c = rx->src[++rx->i];
    if (c == 'u') {
        return s_unicode_escape(rx, out);
    }
    if (c == 'x') {
        long v = s_hexn(rx, rx->i + 1, 2);
        if (v < 0) {
            return s_rx_fail(rx, "\\x needs two hex digits");
        }
        rx->i += 3;
        s_put_cp(out, v);
        return 0;
    }
    rx->i++;
    if (c == 'd' || c == 'D' || c == 'w' || c == 'W' || c == 't' || c == 'n' || c == 'r' ||
        c == 'f' || c == 'b' || (c == 'B' && !in_class)) {
        char esc[2] = {'\\', c};
        s_put(out, esc, 2);
        return 0;
    }
    if (c == 's') {
        s_puts(out, in_class ? S_ECMA_SPACE : "[" S_ECMA_SPACE "]");
        return 0;
    }
    if (c == 'S') {
        if (in_class) {
            *non_space = true;
        } else {
            s_puts(out, "[^" S_ECMA_SPACE "]");
        }
        return 0;
    }
    if (c == 'v') {
        s_puts(out, "\\x{0b}");
        return 0;
    }
    if (c == '0' && (rx->i >= rx->len || rx->src[rx->i] < '0' || rx->src[rx->i] > '9')) {
        s_puts(out, "\\x{00}");
        return 0;
    }
    if (c >= '1' && c <= '9' && !in_class) {
        s_put(out, "\\", 1);
        s_put(out, &c, 1);
        while (rx->i < rx->len && rx->src[rx->i] >= '0' && rx->src[rx->i] <= '9') {
            s_put(out, &rx->src[rx->i++], 1);
        }
        return 0;
    }
    if (c == 'c' && rx->i < rx->len &&
        ((rx->src[rx->i] | 0x20) >= 'a' && (rx->src[rx->i] | 0x20) <= 'z')) {
        char esc[3] = {'\\', 'c', rx->src[rx->i++]};
        s_put(out, esc, 3);
        return 0;
    }
    if ((c == 'p' || c == 'P') && rx->i < rx->len && rx->src[rx->i] == '{') {
        return s_property(rx, out, c);
    }
    if (c == 'k' && !in_class && rx->i < rx->len && rx->src[rx->i] == '<') {
        s_puts(out, "\\k");
        return 0;
    }
    if (strchr("^$\\.*+?()[]{}|/-", c) && c != '\0') {
        char esc[2] = {'\\', c};
        s_put(out, esc, 2);
        return 0;
    }
    return s_rx_fail(rx, "unsupported escape \\%c", c >= 0x20 && c < 0x7F ? c : '?');
}

/* A character class at rx->i (on '['). ECMA '[' inside a class is a literal (never POSIX);
 * \S inside a class has no PCRE2 spelling, so such a class becomes an alternation. */
static int s_class(s_rx_t *rx, s_buf_t *out) {
    s_buf_t body = {0};
    bool negated = false;
    bool non_space = false;
    rx->i++;
    if (rx->i < rx->len && rx->src[rx->i] == '^') {
        negated = true;
        rx->i++;
    }
    int rc = 0;
    while (rc == 0) {
        if (rx->i >= rx->len) {
            rc = s_rx_fail(rx, "unterminated character class");
            break;
        }
        char c = rx->src[rx->i];
        if (c == ']') {
            rx->i++;
            break;
        }
        if (c == '\\') {
            rc = s_escape(rx, &body, true, &non_space);
        } else if (c == '[') {
            s_puts(&body, "\\[");
            rx->i++;
        } else {
            s_put(&body, &c, 1);
            rx->i++;
        }
    }
    if (rc == 0) {
        const char *b = body.buf ? body.buf : "";
        char *t = NULL;
        if (!non_space) {
            t = mem_printf("[%s%s]", negated ? "^" : "", b);
        } else if (!negated) {
            t = mem_printf("(?:[%s]|[^" S_ECMA_SPACE "])", b);
        } else {
            t = mem_printf("(?:(?![%s])[" S_ECMA_SPACE "])", b);
        }
        s_puts(out, t);
        free(t);
    }
    free(body.buf);
    return rc;
}

/* After a quantifier: a lazy '?' is ECMA, a possessive '+' is not. */
static int s_after_quantifier(s_rx_t *rx, s_buf_t *out) {
    if (rx->i < rx->len && rx->src[rx->i] == '?') {
        s_put(out, "?", 1);
        rx->i++;
    } else if (rx->i < rx->len && rx->src[rx->i] == '+') {
        return s_rx_fail(rx, "possessive quantifiers are not ECMA-262");
    }
    return 0;
}

static int s_brace(s_rx_t *rx, s_buf_t *out) {
    size_t j = rx->i + 1;
    size_t digits = 0;
    while (j < rx->len && rx->src[j] >= '0' && rx->src[j] <= '9') {
        j++, digits++;
    }
    if (digits && j < rx->len && rx->src[j] == ',') {
        j++;
        while (j < rx->len && rx->src[j] >= '0' && rx->src[j] <= '9') {
            j++;
        }
    }
    if (!digits || j >= rx->len || rx->src[j] != '}') {
        s_puts(out, "\\{"); /* not a quantifier: a literal brace */
        rx->i++;
        return 0;
    }
    s_put(out, rx->src + rx->i, j + 1 - rx->i);
    rx->i = j + 1;
    return s_after_quantifier(rx, out);
}

static int s_group(s_rx_t *rx, s_buf_t *out) {
    const char *p = rx->src + rx->i;
    size_t left = rx->len - rx->i;
    if (left >= 2 && p[1] == '*') {
        return s_rx_fail(rx, "PCRE2 verbs are not ECMA-262");
    }
    if (left >= 2 && p[1] == '?') {
        bool ok = (left >= 3 && (p[2] == ':' || p[2] == '=' || p[2] == '!')) ||
                  (left >= 4 && p[2] == '<' && (p[3] == '=' || p[3] == '!' || s_isalpha(p[3])));
        if (!ok) {
            return s_rx_fail(rx, "group syntax (?%c is not ECMA-262", left >= 3 ? p[2] : ' ');
        }
    }
    s_put(out, "(", 1);
    rx->i++;
    return 0;
}

static int s_translate(s_rx_t *rx, s_buf_t *out) {
    while (rx->i < rx->len) {
        char c = rx->src[rx->i];
        int rc = 0;
        bool unused = false;
        switch (c) {
            case '\\':
                rc = s_escape(rx, out, false, &unused);
                break;
            case '[':
                rc = s_class(rx, out);
                break;
            case '.':
                s_puts(out, "[^\\n\\r\\x{2028}\\x{2029}]");
                rx->i++;
                break;
            case '(':
                rc = s_group(rx, out);
                break;
            case '{':
                rc = s_brace(rx, out);
                break;
            case '*':
            case '+':
            case '?':
                s_put(out, &c, 1);
                rx->i++;
                rc = s_after_quantifier(rx, out);
                break;
            default:
                s_put(out, &c, 1);
                rx->i++;
        }
        if (rc) {
            return -1;
        }
    }
    return 0;
}

static pcre2_code *s_pcre2(const char *src, size_t len, char *err, size_t errlen) {
    s_rx_t rx = {.src = src, .len = len, .err = err, .errlen = errlen};
    s_buf_t out = {0};
    if (s_translate(&rx, &out)) {
        free(out.buf);
        return NULL;
    }
    pcre2_compile_context *cctx = pcre2_compile_context_create(NULL);
    ASSERT(cctx != NULL); /* NULL only when malloc fails */
    pcre2_set_parens_nest_limit(cctx, 64);
    int code = 0;
    PCRE2_SIZE off = 0;
    uint32_t opts = PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_NEVER_UCP |
                    PCRE2_NEVER_BACKSLASH_C;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)(out.buf ? out.buf : ""), out.len, opts, &code, &off, cctx);
    pcre2_compile_context_free(cctx);
    free(out.buf);
    if (!re) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "%s", (const char *)msg);
    }
    return re;
}

js_regex_t *js_regex_compile(const char *src, size_t len, char *err, size_t errlen) {
    pcre2_code *code = s_pcre2(src, len, err, errlen);
    if (!code) {
        return NULL;
    }
    /* JIT is an optimisation only: when it fails the interpreter runs, under the same limits. */
    js_regex_t *re = mem_alloc(sizeof *re);
    re->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    re->code = code;
    return re;
}

void js_regex_free(js_regex_t **re_p) {
    if (!re_p || !*re_p) {
        return;
    }
    pcre2_code_free((*re_p)->code);
    free(*re_p);
    *re_p = NULL;
}

int js_regex_match(const js_regex_t *re, const char *s, size_t len, pcre2_match_data *md,
                   pcre2_match_context *mctx) {
    /* Instance strings are valid UTF-8 (jsonstrict or jansson checked them). */
    int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, len, 0, 0, md, mctx)
                     : pcre2_match(re->code, (PCRE2_SPTR)s, len, 0, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc >= 0) {
        return 1;
    }
    return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

/* --- formats --- */

static const char *s_format_names[] = {
    [JS_FMT_DATE_TIME] = "date-time",
    [JS_FMT_DATE] = "date",
    [JS_FMT_TIME] = "time",
    [JS_FMT_EMAIL] = "email",
    [JS_FMT_IDN_EMAIL] = "idn-email",
    [JS_FMT_HOSTNAME] = "hostname",
    [JS_FMT_IDN_HOSTNAME] = "idn-hostname",
    [JS_FMT_IPV4] = "ipv4",
    [JS_FMT_IPV6] = "ipv6",
    [JS_FMT_URI] = "uri",
    [JS_FMT_URI_REFERENCE] = "uri-reference",
    [JS_FMT_IRI] = "iri",
    [JS_FMT_IRI_REFERENCE] = "iri-reference",
    [JS_FMT_URI_TEMPLATE] = "uri-template",
    [JS_FMT_JSON_POINTER] = "json-pointer",
    [JS_FMT_RELATIVE_JSON_POINTER] = "relative-json-pointer",
    [JS_FMT_REGEX] = "regex",
};

#define S_NFORMATS (sizeof s_format_names / sizeof s_format_names[0])

js_format_t js_format_lookup(const char *name) {
    for (size_t i = 1; i < S_NFORMATS; i++) {
        if (strcmp(s_format_names[i], name) == 0) {
            return (js_format_t)i;
        }
    }
    return JS_FMT_NONE;
}

const char *js_format_name(js_format_t fmt) {
    return (size_t)fmt < S_NFORMATS && s_format_names[fmt] ? s_format_names[fmt] : "format";
}

static bool s_isdigit(char c) {
    return c >= '0' && c <= '9';
}

static bool s_ishex(char c) {
    return s_hexval(c) >= 0;
}

/* n ASCII digits at s as a number, or -1. */
static int s_digits(const char *s, size_t len, size_t at, size_t n) {
    if (at + n > len) {
        return -1;
    }
    int v = 0;
    for (size_t k = 0; k < n; k++) {
        if (!s_isdigit(s[at + k])) {
            return -1;
        }
        v = v * 10 + (s[at + k] - '0');
    }
    return v;
}

/* RFC 3339 full-date. */
static bool s_date(const char *s, size_t len) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (len != 10 || s[4] != '-' || s[7] != '-') {
        return false;
    }
    int y = s_digits(s, len, 0, 4);
    int m = s_digits(s, len, 5, 2);
    int d = s_digits(s, len, 8, 2);
    if (y < 0 || m < 1 || m > 12 || d < 1) {
        return false;
    }
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[m - 1] + (m == 2 && leap);
}

/* RFC 3339 full-time; a leap second only where UTC reads 23:59:60. */
static bool s_time(const char *s, size_t len) {
    if (len < 9 || s[2] != ':' || s[5] != ':') {
        return false;
    }
    int h = s_digits(s, len, 0, 2);
    int mi = s_digits(s, len, 3, 2);
    int sec = s_digits(s, len, 6, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60) {
        return false;
    }
    size_t i = 8;
    if (i < len && s[i] == '.') {
        size_t start = ++i;
        while (i < len && s_isdigit(s[i])) {
            i++;
        }
        if (i == start) {
            return false;
        }
    }
    int off = 0;
    if (i + 1 == len && (s[i] == 'Z' || s[i] == 'z')) {
        off = 0;
    } else if (i + 6 == len && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
        int oh = s_digits(s, len, i + 1, 2);
        int om = s_digits(s, len, i + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59) {
            return false;
        }
        off = (s[i] == '+' ? 1 : -1) * (oh * 60 + om);
    } else {
        return false;
    }
    if (sec == 60) {
        int utc = ((h * 60 + mi - off) % 1440 + 1440) % 1440;
        return utc == 23 * 60 + 59;
    }
    return true;
}

static bool s_date_time(const char *s, size_t len) {
    return len > 11 && (s[10] == 'T' || s[10] == 't') && s_date(s, 10) && s_time(s + 11, len - 11);
}

static bool s_ipv4(const char *s, size_t len) {
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (i >= len || s[i] != '.') {
                return false;
            }
            i++;
        }
        size_t start = i;
        int v = 0;
        while (i < len && s_isdigit(s[i]) && i - start < 3) {
            v = v * 10 + (s[i++] - '0');
        }
        size_t n = i - start;
        if (n == 0 || v > 255 || (n > 1 && s[start] == '0')) {
            return false;
        }
    }
    return i == len;
}

static bool s_ipv6(const char *s, size_t len) {
    int groups = 0;
    bool gap = false;
    size_t i = 0;
    if (len >= 2 && s[0] == ':' && s[1] == ':') {
        gap = true;
        i = 2;
    } else if (len >= 1 && s[0] == ':') {
        return false;
    }
    while (i < len) {
        size_t start = i;
        while (i < len && s_ishex(s[i]) && i - start < 5) {
            i++;
        }
        if (i < len && s[i] == '.') {
            /* An embedded IPv4 address ends the text and counts as two groups. */
            if (!s_ipv4(s + start, len - start)) {
                return false;
            }
            groups += 2;
            i = len;
            break;
        }
        if (i == start || i - start > 4) {
            return false;
        }
        groups++;
        if (i == len) {
            break;
        }
        if (s[i] != ':') {
            return false;
        }
        i++;
        if (i < len && s[i] == ':') {
            if (gap) {
                return false;
            }
            gap = true;
            i++;
        } else if (i == len) {
            return false;
        }
    }
    return gap ? groups <= 7 : groups == 8;
}

/* One hostname label of LDH characters, 1..63 bytes, no hyphen at either end. */
static bool s_ldh_label(const char *s, size_t len) {
    if (len == 0 || len > 63 || s[0] == '-' || s[len - 1] == '-') {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!s_isalpha(s[i]) && !s_isdigit(s[i]) && s[i] != '-') {
            return false;
        }
    }
    return true;
}

/* RFC 3492 decoding of the part after "xn--"; writes code points to out. -1 when invalid. */
static long s_punycode(const char *s, size_t len, uint32_t *out, size_t cap) {
    size_t b = 0;
    for (size_t j = 0; j < len; j++) {
        if (s[j] == '-') {
            b = j;
        }
    }
    size_t n_out = 0;
    bool has_delim = memchr(s, '-', len) != NULL;
    for (size_t j = 0; has_delim && j < b; j++) {
        if (n_out == cap || (unsigned char)s[j] >= 0x80) {
            return -1;
        }
        out[n_out++] = (unsigned char)s[j];
    }
    uint32_t n = 128, bias = 72;
    uint64_t i = 0;
    for (size_t in = has_delim ? b + 1 : 0; in < len;) {
        uint64_t old = i, w = 1;
        for (uint32_t k = 36;; k += 36) {
            if (in >= len) {
                return -1;
            }
            char c = s[in++];
            int digit = s_isdigit(c) ? c - '0' + 26 : s_isalpha(c) ? (c | 0x20) - 'a' : -1;
            if (digit < 0) {
                return -1;
            }
            i += (uint64_t)digit * w;
            uint32_t t = k <= bias ? 1 : k >= bias + 26 ? 26 : k - bias;
            if ((uint32_t)digit < t) {
                break;
            }
            w *= 36 - t;
            if (i > 0x10FFFF * 64ull || w > 0x10FFFF * 64ull) {
                return -1;
            }
        }
        uint64_t delta = (i - old) / (old == 0 ? 700 : 2);
        delta += delta / (n_out + 1);
        uint32_t k = 0;
        while (delta > 455) {
            delta /= 35;
            k += 36;
        }
        bias = k + (uint32_t)(36 * delta / (delta + 38));
        n += (uint32_t)(i / (n_out + 1));
        i %= n_out + 1;
        if (n > 0x10FFFF || (n >= 0xD800 && n <= 0xDFFF) || n_out == cap) {
            return -1;
        }
        memmove(out + i + 1, out + i, (n_out - i) * sizeof *out);
        out[i++] = n;
        n_out++;
    }
    return (long)n_out;
}

/* Code points from UTF-8 (already valid); returns the count or -1 over cap. */
static long s_utf8_decode(const char *s, size_t len, uint32_t *out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp = c;
        size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (k > 1) {
            cp = c & (0x7F >> k);
            for (size_t j = 1; j < k && i + j < len; j++) {
                cp = (cp << 6) | ((unsigned char)s[i + j] & 0x3F);
            }
        }
        if (n == cap) {
            return -1;
        }
        out[n++] = cp;
        i += k;
    }
    return (long)n;
}

/* A few IDNA2008 (RFC 5892) rules on a U-label: no leading combining mark, no ASCII
 * uppercase, contextual rules for the characters the test suites exercise. */
static bool s_ulabel_ok(const uint32_t *cp, size_t n) {
    if (n == 0) {
        return false;
    }
    if ((cp[0] >= 0x300 && cp[0] <= 0x36F) || cp[0] == 0x5BE ||
        (n >= 4 && cp[2] == '-' && cp[3] == '-')) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        if ((c >= 'A' && c <= 'Z') || c == 0x302E || c == 0x302F || c == 0x3031 || c == 0x3032 ||
            c == 0x3033 || c == 0x3034 || c == 0x3035 || c == 0x303B || c == 0x0640 ||
            c == 0x07FA) {
            return false;
        }
        if (c == 0x00B7 && !(i > 0 && i + 1 < n && cp[i - 1] == 'l' && cp[i + 1] == 'l')) {
            return false; /* MIDDLE DOT only between two l */
        }
        if (c == 0x0375 && !(i + 1 < n && cp[i + 1] >= 0x370 && cp[i + 1] <= 0x3FF)) {
            return false; /* Greek KERAIA before Greek */
        }
        if ((c == 0x05F3 || c == 0x05F4) && !(i > 0 && cp[i - 1] >= 0x5D0 && cp[i - 1] <= 0x5EA)) {
            return false; /* Hebrew GERESH/GERSHAYIM after Hebrew */
        }
        if (c == 0x200D && !(i > 0 && cp[i - 1] == 0x94D)) {
            return false; /* ZERO WIDTH JOINER after a virama */
        }
        if (c == 0x200C && !(i > 0 && cp[i - 1] == 0x94D)) {
            return false; /* ZWNJ after a virama (the joining-type rule is not modelled) */
        }
        if (c == 0x30FB) {
            bool ok = false;
            for (size_t j = 0; j < n; j++) {
                uint32_t d = cp[j];
                ok = ok || (d >= 0x3041 && d <= 0x309F) || (d >= 0x30A0 && d <= 0x30FA) ||
                     (d >= 0x4E00 && d <= 0x9FFF);
            }
            if (!ok) {
                return false; /* KATAKANA MIDDLE DOT needs Hiragana, Katakana or Han */
            }
        }
    }
    bool arabic_indic = false, extended = false;
    for (size_t i = 0; i < n; i++) {
        arabic_indic = arabic_indic || (cp[i] >= 0x660 && cp[i] <= 0x669);
        extended = extended || (cp[i] >= 0x6F0 && cp[i] <= 0x6F9);
    }
    return !(arabic_indic && extended);
}

#define S_LABEL_CP_MAX 64

static bool s_label(const char *s, size_t len, bool idn) {
    uint32_t cp[S_LABEL_CP_MAX];
    bool ascii = true;
    for (size_t i = 0; i < len; i++) {
        ascii = ascii && (unsigned char)s[i] < 0x80;
    }
    if (ascii) {
        if (!s_ldh_label(s, len)) {
            return false;
        }
        if (len >= 4 && (s[0] | 0x20) == 'x' && (s[1] | 0x20) == 'n' && s[2] == '-' &&
            s[3] == '-') {
            long n = s_punycode(s + 4, len - 4, cp, S_LABEL_CP_MAX);
            return n > 0 && s_ulabel_ok(cp, (size_t)n);
        }
        return !(len >= 4 && s[2] == '-' && s[3] == '-');
    }
    if (!idn || len > 4 * 63) {
        return false;
    }
    long n = s_utf8_decode(s, len, cp, S_LABEL_CP_MAX);
    return n > 0 && s_ulabel_ok(cp, (size_t)n);
}

static bool s_hostname(const char *s, size_t len, bool idn) {
    if (len == 0 || len > 253) {
        return false;
    }
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        size_t sep = 0; /* bytes of the separator at i */
        if (i == len || s[i] == '.') {
            sep = 1;
        } else if (idn && len - i >= 3 &&
                   (memcmp(s + i, "\xe3\x80\x82", 3) == 0 ||
                    memcmp(s + i, "\xef\xbc\x8e", 3) == 0 ||
                    memcmp(s + i, "\xef\xbd\xa1", 3) == 0)) {
            sep = 3; /* the ideographic and fullwidth full stops of RFC 3490 */
        }
        if (!sep) {
            continue;
        }
        if (!s_label(s + start, i - start, idn)) {
            return false;
        }
        start = i + sep;
        i += sep - 1;
    }
    return true;
}

/* RFC 5321 dot-atom or quoted string, then a hostname or an address literal. */
static bool s_email(const char *s, size_t len, bool idn) {
    const char *at = NULL;
    for (size_t i = len; i > 0; i--) {
        if (s[i - 1] == '@') {
            at = s + i - 1;
            break;
        }
    }
    if (!at || at == s) {
        return false;
    }
    size_t llen = (size_t)(at - s);
    const char *dom = at + 1;
    size_t dlen = len - llen - 1;
    if (s[0] == '"') {
        if (llen < 2 || s[llen - 1] != '"') {
            return false;
        }
    } else {
        for (size_t i = 0; i < llen; i++) {
            unsigned char c = (unsigned char)s[i];
            bool atext = s_isalpha((char)c) || s_isdigit((char)c) ||
                         strchr("!#$%&'*+-/=?^_`{|}~", c) || (idn && c >= 0x80);
            if (c == '.') {
                if (i == 0 || i + 1 == llen || s[i + 1] == '.') {
                    return false;
                }
            } else if (!atext || c == 0) {
                return false;
            }
        }
    }
    if (dlen >= 2 && dom[0] == '[' && dom[dlen - 1] == ']') {
        if (dlen > 7 && memcmp(dom + 1, "IPv6:", 5) == 0) {
            return s_ipv6(dom + 6, dlen - 7);
        }
        return s_ipv4(dom + 1, dlen - 2);
    }
    return s_hostname(dom, dlen, idn);
}

/* --- URIs (RFC 3986) and IRIs (RFC 3987: ucschar allowed wherever unreserved is) --- */

typedef struct {
    const char *s;
    size_t len;
    size_t i;
    bool iri;
} s_uri_t;

/* One pchar-like character at u->i, consuming it; extra are the allowed ASCII extras. */
static bool s_uri_char(s_uri_t *u, const char *extra) {
    unsigned char c = (unsigned char)u->s[u->i];
    if (c == '%') {
        if (u->i + 2 >= u->len + 0 || !s_ishex(u->s[u->i + 1]) || !s_ishex(u->s[u->i + 2])) {
            return false;
        }
        u->i += 3;
        return true;
    }
    if (c >= 0x80) {
        if (!u->iri) {
            return false;
        }
        u->i++;
        return true;
    }
    if (s_isalpha((char)c) || s_isdigit((char)c) || strchr("-._~!$&'()*+,;=", c) ||
        (strchr(extra, c) && c != 0)) {
        u->i++;
        return true;
    }
    return false;
}

static bool s_uri_run(s_uri_t *u, const char *extra, const char *stop) {
    while (u->i < u->len && !strchr(stop, u->s[u->i])) {
        if (!s_uri_char(u, extra)) {
            return false;
        }
    }
    return true;
}

static bool s_authority(s_uri_t *u) {
    size_t end = u->i;
    while (end < u->len && !strchr("/?#", u->s[end])) {
        end++;
    }
    const char *at = NULL;
    for (size_t k = u->i; k < end; k++) {
        if (u->s[k] == '@') {
            at = u->s + k;
        }
    }
    if (at) {
        s_uri_t sub = {.s = u->s, .len = (size_t)(at - u->s), .i = u->i, .iri = u->iri};
        if (!s_uri_run(&sub, ":", "")) {
            return false;
        }
        u->i = (size_t)(at - u->s) + 1;
    }
    if (u->i < end && u->s[u->i] == '[') {
        const char *close = memchr(u->s + u->i, ']', end - u->i);
        if (!close || !s_ipv6(u->s + u->i + 1, (size_t)(close - u->s) - u->i - 1)) {
            return false;
        }
        u->i = (size_t)(close - u->s) + 1;
    } else {
        s_uri_t host = {.s = u->s, .len = end, .i = u->i, .iri = u->iri};
        if (!s_uri_run(&host, "", ":")) {
            return false;
        }
        u->i = host.i;
    }
    if (u->i < end && u->s[u->i] == ':') {
        for (u->i++; u->i < end; u->i++) {
            if (!s_isdigit(u->s[u->i])) {
                return false;
            }
        }
    }
    return u->i == end;
}

/* The part after the scheme (or all of a relative reference). */
static bool s_hier(s_uri_t *u) {
    if (u->len - u->i >= 2 && u->s[u->i] == '/' && u->s[u->i + 1] == '/') {
        u->i += 2;
        if (!s_authority(u)) {
            return false;
        }
    }
    if (!s_uri_run(u, ":@/", "?#")) {
        return false;
    }
    if (u->i < u->len && u->s[u->i] == '?') {
        u->i++;
        if (!s_uri_run(u, ":@/?", "#")) {
            return false;
        }
    }
    if (u->i < u->len && u->s[u->i] == '#') {
        u->i++;
        if (!s_uri_run(u, ":@/?", "")) {
            return false;
        }
    }
    return u->i == u->len;
}

static size_t s_scheme_len(const char *s, size_t len) {
    if (len == 0 || !s_isalpha(s[0])) {
        return 0;
    }
    size_t i = 1;
    while (i < len && (s_isalpha(s[i]) || s_isdigit(s[i]) || strchr("+-.", s[i]))) {
        i++;
    }
    return i < len && s[i] == ':' ? i : 0;
}

static bool s_uri(const char *s, size_t len, bool iri, bool reference) {
    s_uri_t u = {.s = s, .len = len, .iri = iri};
    size_t scheme = s_scheme_len(s, len);
    if (scheme) {
        u.i = scheme + 1;
        return s_hier(&u);
    }
    if (!reference) {
        return false;
    }
    /* A relative reference: its first segment may not contain ':'. */
    for (size_t i = 0; i < len && s[i] != '/' && s[i] != '?' && s[i] != '#'; i++) {
        if (s[i] == ':') {
            return false;
        }
    }
    return s_hier(&u);
}

/* RFC 6570 syntax, up to level 4. */
static bool s_uri_template(const char *s, size_t len) {
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '}' || c <= ' ' || strchr("\"'<>\\^`|", c)) {
            return false;
        }
        if (c != '{') {
            i++;
            continue;
        }
        const char *close = memchr(s + i, '}', len - i);
        if (!close) {
            return false;
        }
        size_t j = i + 1;
        size_t end = (size_t)(close - s);
        if (j < end && strchr("+#./;?&=,!@|", s[j])) {
            j++;
        }
        bool need_name = true;
        for (; j < end; j++) {
            char e = s[j];
            if (s_isalpha(e) || s_isdigit(e) || e == '_' || e == '.' || e == '%') {
                need_name = false;
            } else if (e == ',' && !need_name) {
                need_name = true;
            } else if (e == '*' && !need_name && (j + 1 == end || s[j + 1] == ',')) {
                continue;
            } else if (e == ':' && !need_name) {
                size_t k = j + 1;
                while (k < end && s_isdigit(s[k]) && k - j <= 4) {
                    k++;
                }
                if (k == j + 1 || s[j + 1] == '0' || (k < end && s[k] != ',')) {
                    return false;
                }
                j = k - 1;
            } else {
                return false;
            }
        }
        if (need_name) {
            return false;
        }
        i = end + 1;
    }
    return true;
}

static bool s_json_pointer(const char *s, size_t len) {
    if (len > 0 && s[0] != '/') {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '~' && (i + 1 == len || (s[i + 1] != '0' && s[i + 1] != '1'))) {
            return false;
        }
    }
    return true;
}

static bool s_relative_json_pointer(const char *s, size_t len) {
    size_t i = 0;
    while (i < len && s_isdigit(s[i])) {
        i++;
    }
    if (i == 0 || (i > 1 && s[0] == '0')) {
        return false;
    }
    if (i < len && s[i] == '#') {
        return i + 1 == len;
    }
    return s_json_pointer(s + i, len - i);
}

/* A regex the validator would accept: the same rewrites, compiled (not run) under the pattern
 * byte cap, so its cost is bounded like any schema pattern. */
static bool s_regex_format(const char *s, size_t len) {
    char err[JSONSCHEMA_MESSAGE_MAX];
    if (len > JSONSCHEMA_MAX_PATTERN_BYTES) {
        return false;
    }
    pcre2_code *code = s_pcre2(s, len, err, sizeof err);
    pcre2_code_free(code);
    return code != NULL;
}

bool js_format_check(js_format_t fmt, const char *s, size_t len) {
    switch (fmt) {
        case JS_FMT_DATE_TIME:
            return s_date_time(s, len);
        case JS_FMT_DATE:
            return s_date(s, len);
        case JS_FMT_TIME:
            return s_time(s, len);
        case JS_FMT_EMAIL:
            return s_email(s, len, false);
        case JS_FMT_IDN_EMAIL:
            return s_email(s, len, true);
        case JS_FMT_HOSTNAME:
            return s_hostname(s, len, false);
        case JS_FMT_IDN_HOSTNAME:
            return s_hostname(s, len, true);
        case JS_FMT_IPV4:
            return s_ipv4(s, len);
        case JS_FMT_IPV6:
            return s_ipv6(s, len);
        case JS_FMT_URI:
            return s_uri(s, len, false, false);
        case JS_FMT_URI_REFERENCE:
            return s_uri(s, len, false, true);
        case JS_FMT_IRI:
            return s_uri(s, len, true, false);
        case JS_FMT_IRI_REFERENCE:
            return s_uri(s, len, true, true);
        case JS_FMT_URI_TEMPLATE:
            return s_uri_template(s, len);
        case JS_FMT_JSON_POINTER:
            return s_json_pointer(s, len);
        case JS_FMT_RELATIVE_JSON_POINTER:
            return s_relative_json_pointer(s, len);
        case JS_FMT_REGEX:
            return s_regex_format(s, len);
        default:
            return true;
    }
}
