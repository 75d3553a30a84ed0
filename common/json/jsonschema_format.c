/* jsonschema_format: the supported formats and the decimal multipleOf (equality, hashes and
 * exact number comparison are jsontape's); see JSONSCHEMA.md. */
#include "schemanode.h"
#include "hex.h"
#include "jsondecimal.h"
#include "jsonnumber.h"
#include "jsonout.h"
#include "jsonstrict.h"
#include "mem.h"

#include <idn2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unictype.h>

/* --- numbers --- */

static const double s_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The exact answer without formatting, for a double and the common divisors; -1 when the fast
 * path cannot decide. With k = fractional digits of the divisor (10^k exact for k <= 22): if
 * N = round(x * 10^k) has at most 15 digits and N / 10^k reads back as x, then x's shortest
 * decimal is N / 10^k (a double has one decimal of at most 15 digits), so the question is
 * N mod m; if it does not read back, x has more than k fractional digits and is no multiple. */
static int s_multiple_fast(double x, const js_decimal_t *dec) {
    if (dec->e > 0 || dec->e < -22 || fabs(x) >= 1e15) {
        return -1;
    }
    int k = -dec->e;
    double scaled = x * s_pow10[k];
    if (fabs(scaled) >= 1e15) {
        return -1;
    }
    double n = nearbyint(scaled);
    if (n / s_pow10[k] != x) {
        return 0;
    }
    int64_t ni = (int64_t)fabs(n);
    return (uint64_t)ni % dec->m == 0;
}

js_num_t js_num_of(const json_t *v) {
    js_num_t n = {0};
    size_t len = 0;
    if (json_is_integer(v)) {
        n.is_int = true;
        n.i = json_integer_value(v);
    } else {
        n.d = json_real_value(v);
        n.text = jsonnumber_text(v, &len);
        n.len = (uint32_t)len;
    }
    return n;
}

const char *js_num_text(js_num_t n, char *buf, size_t cap) {
    char real[JSONOUT_REAL_MAX];
    if (n.text) {
        snprintf(buf, cap, "%.*s", (int)n.len, n.text);
    } else if (n.is_int) {
        snprintf(buf, cap, "%lld", (long long)n.i);
    } else {
        jsonout_real(n.d, real);
        snprintf(buf, cap, "%s", real);
    }
    return buf;
}

/* x / dec as decimals, for a text real on either side. */
static bool s_multiple_exact(js_num_t x, const js_decimal_t *dec) {
    jsondecimal_t d[2]; /* a leaf: no recursion below it */
    jsontape_num_decimal(x, &d[0]);
    jsontape_num_decimal(dec->num, &d[1]);
    return jsondecimal_multiple_of(&d[0], &d[1]);
}

/* Is x a multiple of dec? Exact in decimal: x = mx*10^ex, divisor = md*10^ed. */
bool js_multiple(js_num_t x, const js_decimal_t *dec) {
    if (x.text || dec->num.text || dec->m > UINT64_MAX / 10) {
        return s_multiple_exact(x, dec); /* and r * 10 below would not fit */
    }
    uint64_t mx = 0;
    int ex = 0;
    if (x.is_int) {
        if (x.i == 0) {
            return true;
        }
        mx = x.i < 0 ? (uint64_t)0 - (uint64_t)x.i : (uint64_t)x.i;
        while (mx % 10 == 0) {
            mx /= 10;
            ex++;
        }
    } else {
        if (x.d == 0) {
            return true;
        }
        int fast = s_multiple_fast(x.d, dec);
        if (fast >= 0) {
            return fast == 1;
        }
        char digits[JSONDECIMAL_SHORTEST_MAX + 1];
        jsondecimal_shortest(x.d, digits, &ex);
        mx = strtoull(digits, NULL, 10);
    }
    if (ex < dec->e) {
        return false; /* mx has no trailing zero, so 10^(ed-ex) cannot divide it */
    }
    uint64_t r = mx % dec->m;
    for (int k = ex; k > dec->e && r != 0; k--) {
        r = (r * 10) % dec->m;
    }
    return r == 0;
}

static bool s_isalpha(char c) {
    return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
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
    return hex_digit(c) >= 0;
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

/* --- host names: RFC 1123 labels, and IDNA2008 (RFC 5890-5893) through libidn2 --- */

/* A host name's ASCII form (its A-labels and LDH labels) is at most 253 octets (RFC 1034 §3.1,
 * without the root's dot) and a label at most 63. A U-label's code point takes at least one
 * octet of its A-label and at most four bytes of UTF-8, so a label's text past 4 * 63 bytes
 * cannot be a label. */
#define S_HOST_OCTETS_MAX  253
#define S_LABEL_OCTETS_MAX 63
#define S_LABEL_TEXT_MAX   (4 * S_LABEL_OCTETS_MAX)

/* One label of LDH characters, 1..63 bytes, no hyphen at either end. */
static bool s_ldh_label(const char *s, size_t len) {
    if (len == 0 || len > S_LABEL_OCTETS_MAX || s[0] == '-' || s[len - 1] == '-') {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!s_isalpha(s[i]) && !s_isdigit(s[i]) && s[i] != '-') {
            return false;
        }
    }
    return true;
}

/* The bytes of the label separator at s[i], 0 when there is none: "." and, in an
 * internationalized name, the ideographic and fullwidth full stops (RFC 3490 §3.1). */
static size_t s_separator(const char *s, size_t len, size_t i, bool idn) {
    if (s[i] == '.') {
        return 1;
    }
    if (idn && len - i >= 3 &&
        (memcmp(s + i, "\xe3\x80\x82", 3) == 0 || memcmp(s + i, "\xef\xbc\x8e", 3) == 0 ||
         memcmp(s + i, "\xef\xbd\xa1", 3) == 0)) {
        return 3;
    }
    return 0;
}

/* Checks one label and appends its ASCII form to out (*out_len bytes so far, at most
 * S_HOST_OCTETS_MAX); false when it is no label or the name grows too long. *idna is set when
 * the label is an A-label or a U-label. An ASCII label is case-insensitive and is lowercased
 * (libidn2 takes A-labels in lower case); "--" in its third and fourth places is reserved for
 * A-labels (RFC 5890 §2.3.1). A U-label is taken as written (IDNA2008 disallows upper case in
 * it). idn2_register_u8 applies RFC 5891 §4 to a U-label, or to an A-label's decoded U-label,
 * which must encode back to the same A-label: NFC, disallowed and unassigned code points,
 * hyphens, a leading combining mark, CONTEXTJ and CONTEXTO (RFC 5892 appendix A) and the Bidi
 * rule within the label (RFC 5893). It maps nothing (no UTS #46), so what is checked is the
 * text as written. flags: IDN2_NFC_INPUT to take a U-label in NFC first. */
static bool s_label(const char *s, size_t len, bool idn, int flags, char *out, size_t *out_len,
                    bool *idna) {
    char label[S_LABEL_TEXT_MAX + 1];
    bool ascii = true;
    if (len == 0 || len > S_LABEL_TEXT_MAX) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        ascii = ascii && (unsigned char)s[i] < 0x80;
    }
    for (size_t i = 0; i < len; i++) {
        label[i] = ascii && s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] | 0x20) : s[i];
    }
    label[len] = '\0';
    uint8_t *alabel = NULL;
    if (ascii) {
        if (!s_ldh_label(label, len)) {
            return false;
        }
        if (len >= 4 && label[2] == '-' && label[3] == '-') {
            if (memcmp(label, "xn--", 4) != 0 ||
                idn2_register_u8(NULL, (const uint8_t *)label, NULL, 0) != IDN2_OK) {
                return false;
            }
            *idna = true;
        }
    } else {
        if (!idn || idn2_register_u8((const uint8_t *)label, NULL, &alabel, flags) != IDN2_OK) {
            return false;
        }
        *idna = true;
    }
    const char *form = alabel ? (const char *)alabel : label;
    size_t n = strlen(form);
    bool fits = *out_len + n <= S_HOST_OCTETS_MAX;
    if (fits) {
        memcpy(out + *out_len, form, n);
        *out_len += n;
    }
    idn2_free(alabel);
    return fits;
}

/* RFC 5893 §2 on one label of a Bidi domain name: conditions 1-4 for a label that starts
 * right-to-left, 1, 5 and 6 for one that starts left-to-right. */
static bool s_bidi_label(const uint32_t *cp, size_t n) {
    int first = uc_bidi_class(cp[0]);
    bool rtl = first == UC_BIDI_R || first == UC_BIDI_AL;
    if (!rtl && first != UC_BIDI_L) {
        return false;
    }
    bool en = false;
    bool an = false;
    int last = first; /* the class of the last character that is no NSM */
    for (size_t i = 0; i < n; i++) {
        int c = uc_bidi_class(cp[i]);
        if (c == UC_BIDI_NSM) {
            continue;
        }
        en = en || c == UC_BIDI_EN;
        an = an || c == UC_BIDI_AN;
        bool both = c == UC_BIDI_EN || c == UC_BIDI_ES || c == UC_BIDI_CS || c == UC_BIDI_ET ||
                    c == UC_BIDI_ON || c == UC_BIDI_BN;
        bool own = rtl ? c == UC_BIDI_R || c == UC_BIDI_AL || c == UC_BIDI_AN : c == UC_BIDI_L;
        if (!both && !own) {
            return false;
        }
        last = c;
    }
    if (rtl) {
        return !(en && an) && (last == UC_BIDI_R || last == UC_BIDI_AL || last == UC_BIDI_EN ||
                               last == UC_BIDI_AN);
    }
    return last == UC_BIDI_L || last == UC_BIDI_EN;
}

/* The Bidi rule across the name (ascii: its ASCII form): when any label holds an R, AL or AN
 * character, every label must pass RFC 5893 §2. libidn2 checks the rule only inside such a
 * label and leaves out condition 4, so "0a.<Hebrew>" or a Hebrew label with both kinds of
 * digits would pass it. The classes are libunistring's, the tables libidn2 itself reads. */
static bool s_bidi_name(const char *ascii) {
    uint32_t *cp = NULL;
    if (idn2_to_unicode_8z4z(ascii, &cp, 0) != IDN2_OK) {
        return false;
    }
    bool bidi = false;
    for (size_t i = 0; cp[i] != 0; i++) {
        int c = uc_bidi_class(cp[i]);
        bidi = bidi || c == UC_BIDI_R || c == UC_BIDI_AL || c == UC_BIDI_AN;
    }
    bool ok = true;
    size_t start = 0;
    for (size_t i = 0; bidi && ok; i++) {
        if (cp[i] == '.' || cp[i] == 0) {
            ok = s_bidi_label(cp + start, i - start);
            start = i + 1;
        }
        if (cp[i] == 0) {
            break;
        }
    }
    idn2_free(cp);
    return ok;
}

/* A host name without a trailing dot: labels as s_label takes them, at most 253 octets in
 * ASCII form; idn adds U-labels and the other full stops. */
static bool s_hostname(const char *s, size_t len, bool idn, int flags) {
    char ascii[S_HOST_OCTETS_MAX + 1];
    size_t n = 0;
    bool idna = false;
    if (len == 0 || memchr(s, '\0', len)) {
        return false;
    }
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        size_t sep = i == len ? 1 : s_separator(s, len, i, idn);
        if (!sep) {
            continue;
        }
        if (!s_label(s + start, i - start, idn, flags, ascii, &n, &idna)) {
            return false;
        }
        if (i < len) {
            if (n == S_HOST_OCTETS_MAX) {
                return false;
            }
            ascii[n++] = '.';
        }
        start = i + sep;
        i += sep - 1;
    }
    ascii[n] = '\0';
    return !idna || s_bidi_name(ascii);
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
    return s_hostname(dom, dlen, idn, idn ? IDN2_NFC_INPUT : 0);
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

/* RFC 3986 IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ), the "v" in
 * either case (ABNF strings are case-insensitive). */
static bool s_ipvfuture(const char *s, size_t len) {
    size_t i = 1;
    if (len < 4 || (s[0] | 0x20) != 'v') {
        return false;
    }
    while (i < len && s_ishex(s[i])) {
        i++;
    }
    if (i == 1 || i >= len - 1 || s[i] != '.') {
        return false;
    }
    for (i++; i < len; i++) {
        if (!s_isalpha(s[i]) && !s_isdigit(s[i]) && !strchr("-._~!$&'()*+,;=:", s[i])) {
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
        const char *lit = u->s + u->i + 1;
        size_t lit_len = close ? (size_t)(close - lit) : 0;
        if (!close || !(s_ipv6(lit, lit_len) || s_ipvfuture(lit, lit_len))) {
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
        if (c == '}' || c <= ' ' || c == 0x7f || strchr("\"<>\\^`|", c)) {
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
            /* varname: varchars joined by single dots, never at either end. */
            bool dot_ok = !need_name && s[j - 1] != '.' && j + 1 < end &&
                          (s_isalpha(s[j + 1]) || s_isdigit(s[j + 1]) || strchr("_%", s[j + 1]));
            if (s_isalpha(e) || s_isdigit(e) || e == '_' || e == '%' || (e == '.' && dot_ok)) {
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
    return len <= JSONSCHEMA_MAX_PATTERN_BYTES && js_regex_valid(s, len);
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
            return s_hostname(s, len, false, 0);
        case JS_FMT_IDN_HOSTNAME:
            return s_hostname(s, len, true, 0);
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
