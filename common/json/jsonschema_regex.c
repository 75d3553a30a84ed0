/* jsonschema_regex: ECMA-262 regexes on PCRE2 (rewrites, compile, match); see JSONSCHEMA.md. */
#include "schemanode.h"
#include "hex.h"
#include "mem.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Reads exactly n hex digits at rx->i; -1 when they are not there. */
static long s_hexn(s_rx_t *rx, size_t at, int n) {
    long v = 0;
    if (at + (size_t)n > rx->len) {
        return -1;
    }
    for (int k = 0; k < n; k++) {
        int h = hex_digit(rx->src[at + (size_t)k]);
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
        while (j < rx->len && hex_digit(rx->src[j]) >= 0 && cp <= 0x10FFFF) {
            cp = cp * 16 + hex_digit(rx->src[j++]);
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
    re->linear = js_linear_new(src, len);
    return re;
}

void js_regex_free(js_regex_t **re_p) {
    if (!re_p || !*re_p) {
        return;
    }
    pcre2_code_free((*re_p)->code);
    js_linear_free(&(*re_p)->linear);
    free(*re_p);
    *re_p = NULL;
}

bool js_regex_valid(const char *src, size_t len) {
    char err[JSONSCHEMA_MESSAGE_MAX];
    pcre2_code *code = s_pcre2(src, len, err, sizeof err);
    pcre2_code_free(code);
    return code != NULL;
}

bool js_regex_is_linear(const js_regex_t *re) {
    return re->linear != NULL;
}

bool js_regex_is_table(const js_regex_t *re) {
    return re->linear && js_linear_is_table(re->linear);
}

/* PCRE2 match data, one per thread: a compiled schema is shared between threads, and match
 * data is only scratch between a match's start and end, so a thread reuses its own instead of
 * allocating one per validation. The key's destructor frees it when the thread exits. */
static pthread_key_t s_md_key;
static pthread_once_t s_md_once = PTHREAD_ONCE_INIT;
static _Thread_local pcre2_match_data *s_md;

static void s_md_free(void *md) {
    pcre2_match_data_free(md);
}

static void s_md_init(void) {
    int rc = pthread_key_create(&s_md_key, s_md_free);
    ASSERT(rc == 0);
}

pcre2_match_data *js_regex_thread_data(void) {
    if (!s_md) {
        int rc = pthread_once(&s_md_once, s_md_init);
        ASSERT(rc == 0);
        s_md = pcre2_match_data_create(1, NULL);
        ASSERT(s_md != NULL); /* NULL only when malloc fails */
        rc = pthread_setspecific(s_md_key, s_md);
        ASSERT(rc == 0);
    }
    return s_md;
}

int js_regex_match_pcre2(const js_regex_t *re, const char *s, size_t len, pcre2_match_data *md,
                         pcre2_match_context *mctx) {
    /* Instance strings are valid UTF-8 (jsonstrict or jansson checked them). */
    int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, len, 0, 0, md, mctx)
                     : pcre2_match(re->code, (PCRE2_SPTR)s, len, 0, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc >= 0) {
        return 1;
    }
    return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}
