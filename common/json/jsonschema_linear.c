/* jsonschema_linear: the linear-pattern matcher that js_regex_match takes instead of PCRE2 for
 * simple patterns (jsonschema_regex.c decides); see JSONSCHEMA.md. */
#include "schemanode.h"
#include "mem.h"

#include <stdlib.h>
#include <string.h>

/* --- linear patterns: a bit-parallel automaton instead of PCRE2 ---
 *
 * Most schema patterns are a sequence of single-character atoms with quantifiers, such as
 * ^[A-Z]{3}-[0-9]{4}$. Those are matched in one pass over the bytes (no backtracking, no call
 * into PCRE2): each atom copy is a position, bit j of the state says "position j is next",
 * and a byte moves the state by a shift and an AND (Shift-And with optional and repeated
 * positions). The subset is kept to what the bytes decide exactly: atoms are ASCII literals,
 * \d, \w, escaped punctuation and positive classes of those, so an atom never matches a byte of
 * a multi-byte UTF-8 character and byte positions are character positions. Anything else
 * (groups, alternation, '.', \s, negated classes, other escapes, lazy quantifiers) is left
 * to PCRE2. PCRE2 still compiles every pattern first, so syntax errors are reported alike. */

#define S_LINEAR_POSITIONS 62 /* atom copies; bit 62 at most is acceptance */

#define S_DFA_STATES 64 /* cap on the automaton's reachable states, the dead one included */

struct js_linear {
    uint64_t on[256]; /* positions whose atom holds the byte */
    uint64_t star;    /* positions that repeat (x* and the tail of x+, x{n,}) */
    uint64_t skip;    /* positions that may be skipped (x?, x*) */
    uint64_t accept;  /* the bit after the last position */
    /* The same automaton with its reachable states numbered (0 is the dead state), when they
     * are few: one table load per byte instead of the bit operations. next is NULL else. */
    uint8_t *next; /* [state * 256 + byte] -> state */
    uint8_t start;
    uint64_t accepting; /* bit per state */
};

typedef struct {
    uint64_t bits[4];
} s_byteset_t;

typedef struct {
    const char *src;
    size_t len;
    size_t i;
    js_linear_t *lin;
    int npos;
} s_lin_parse_t;

static void s_set_range(s_byteset_t *set, unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi; c++) {
        set->bits[c >> 6] |= 1ull << (c & 63);
    }
}

static bool s_lin_punct(char c) {
    return c != '\0' && strchr("^$\\.*+?()[]{}|/-", c) != NULL;
}

/* \d or \w into set; false for any other escape letter. */
static bool s_lin_class_escape(char c, s_byteset_t *set) {
    if (c == 'd' || c == 'w') {
        s_set_range(set, '0', '9');
    }
    if (c == 'w') {
        s_set_range(set, 'A', 'Z');
        s_set_range(set, 'a', 'z');
        s_set_range(set, '_', '_');
    }
    return c == 'd' || c == 'w';
}

/* One class member at p->i (a literal, escaped punctuation or \d/\w, or a range). */
static bool s_lin_member(s_lin_parse_t *p, s_byteset_t *set) {
    const char *s = p->src;
    char c = s[p->i++];
    if (c == '\\') {
        c = p->i < p->len ? s[p->i++] : '\0';
        if (s_lin_class_escape(c, set)) {
            return p->i < p->len && (s[p->i] != '-' || (p->i + 1 < p->len && s[p->i + 1] == ']'));
        }
        if (!s_lin_punct(c)) {
            return false;
        }
    } else if (c < 0x20 || c > 0x7e) {
        return false;
    }
    unsigned lo = (unsigned char)c;
    unsigned hi = lo;
    if (p->i + 1 < p->len && s[p->i] == '-' && s[p->i + 1] != ']') {
        char h = s[p->i + 1];
        p->i += 2;
        if (h == '\\') {
            h = p->i < p->len ? s[p->i++] : '\0';
            if (!s_lin_punct(h)) {
                return false;
            }
        } else if (h < 0x20 || h > 0x7e) {
            return false;
        }
        hi = (unsigned char)h;
    }
    if (hi < lo) {
        return false;
    }
    s_set_range(set, lo, hi);
    return true;
}

static bool s_lin_class(s_lin_parse_t *p, s_byteset_t *set) {
    if (p->i < p->len && (p->src[p->i] == '^' || p->src[p->i] == ']')) {
        return false; /* negated or empty */
    }
    while (p->i < p->len && p->src[p->i] != ']') {
        if (!s_lin_member(p, set)) {
            return false;
        }
    }
    if (p->i >= p->len) {
        return false;
    }
    p->i++;
    return true;
}

/* One atom at p->i into set. */
static bool s_lin_atom(s_lin_parse_t *p, s_byteset_t *set) {
    char c = p->src[p->i++];
    if (c == '[') {
        return s_lin_class(p, set);
    }
    if (c == '\\') {
        c = p->i < p->len ? p->src[p->i++] : '\0';
        if (s_lin_class_escape(c, set)) {
            return true;
        }
        if (!s_lin_punct(c)) {
            return false;
        }
    } else if (c < 0x20 || c > 0x7e || strchr("^$.*+?()[]{}|", c)) {
        return false;
    }
    s_set_range(set, (unsigned char)c, (unsigned char)c);
    return true;
}

static bool s_lin_number(s_lin_parse_t *p, unsigned *out) {
    size_t start = p->i;
    unsigned n = 0;
    while (p->i < p->len && p->src[p->i] >= '0' && p->src[p->i] <= '9' && n < 1000) {
        n = n * 10 + (unsigned)(p->src[p->i++] - '0');
    }
    *out = n;
    return p->i > start && n < 1000;
}

#define S_LIN_INF 1000u

/* The quantifier at p->i, if any, as min and max (S_LIN_INF: unbounded). */
static bool s_lin_quantifier(s_lin_parse_t *p, unsigned *min, unsigned *max) {
    *min = 1;
    *max = 1;
    char c = p->i < p->len ? p->src[p->i] : '\0';
    if (c == '?' || c == '*' || c == '+') {
        p->i++;
        *min = c == '+';
        *max = c == '?' ? 1 : S_LIN_INF;
    } else if (c == '{') {
        p->i++;
        if (!s_lin_number(p, min)) {
            return false;
        }
        *max = *min;
        if (p->i < p->len && p->src[p->i] == ',') {
            p->i++;
            *max = S_LIN_INF;
            if (p->i < p->len && p->src[p->i] != '}' && !s_lin_number(p, max)) {
                return false;
            }
        }
        if (p->i >= p->len || p->src[p->i] != '}' || *max < *min) {
            return false;
        }
        p->i++;
    }
    c = p->i < p->len ? p->src[p->i] : '\0';
    return c != '?' && c != '+' && c != '*' && c != '{'; /* no lazy or stacked quantifiers */
}

/* Appends copies of the atom set: min mandatory ones, then optional ones or one repeating. */
static bool s_lin_add(s_lin_parse_t *p, const s_byteset_t *set, unsigned min, unsigned max) {
    unsigned copies = max == S_LIN_INF ? min + 1 : max;
    if (copies > (unsigned)(S_LINEAR_POSITIONS - p->npos)) {
        return false;
    }
    for (unsigned k = 0; k < copies; k++) {
        uint64_t bit = 1ull << p->npos++;
        for (unsigned c = 0; c < 256; c++) {
            if (set->bits[c >> 6] & (1ull << (c & 63))) {
                p->lin->on[c] |= bit;
            }
        }
        if (k >= min) {
            p->lin->skip |= bit;
            p->lin->star |= max == S_LIN_INF ? bit : 0;
        }
    }
    return true;
}

static bool s_lin_any(s_lin_parse_t *p) {
    s_byteset_t all = {{~0ull, ~0ull, ~0ull, ~0ull}};
    return s_lin_add(p, &all, 0, S_LIN_INF);
}

/* The automaton for src, or NULL when src is outside the subset. Unanchored ends become a
 * repeated any-byte position, which keeps the search semantics of an unanchored pattern. */
static js_linear_t *s_lin_parse(const char *src, size_t len) {
    s_lin_parse_t p = {.src = src, .len = len, .lin = mem_calloc(1, sizeof(js_linear_t))};
    bool ok = true;
    bool anchored_end = len > 0 && src[len - 1] == '$';
    if (anchored_end) {
        size_t bs = 0; /* an escaped $ is a literal */
        while (bs + 1 < len && src[len - 2 - bs] == '\\') {
            bs++;
        }
        anchored_end = bs % 2 == 0;
        p.len -= anchored_end;
    }
    if (p.len > 0 && src[0] == '^') {
        p.i = 1;
    } else {
        ok = s_lin_any(&p);
    }
    while (ok && p.i < p.len) {
        s_byteset_t set = {{0}};
        unsigned min = 0;
        unsigned max = 0;
        ok = s_lin_atom(&p, &set) && s_lin_quantifier(&p, &min, &max) &&
             s_lin_add(&p, &set, min, max);
    }
    if (ok && !anchored_end) {
        ok = s_lin_any(&p);
    }
    if (!ok) {
        free(p.lin);
        return NULL;
    }
    p.lin->accept = 1ull << p.npos;
    return p.lin;
}

/* Adds the positions reachable by skipping: a skippable position j in state t makes j + 1
 * next too, through a whole run of skippable positions. Adding x = t & skip to skip carries
 * from the lowest set bit of each run to the bit after it, so the carries are exactly the
 * positions reached. */
static uint64_t s_lin_close(const js_linear_t *lin, uint64_t t) {
    uint64_t x = t & lin->skip;
    return t | ((lin->skip + x) ^ lin->skip ^ x);
}

/* The state after byte class column col from state t. */
static uint64_t s_lin_step(const js_linear_t *lin, uint64_t t, uint64_t col) {
    uint64_t m = t & col;
    return s_lin_close(lin, (m << 1) | (m & lin->star));
}

/* The index of state t among states[0..*n), added when new; -1 past the cap. */
static int s_dfa_state(uint64_t *states, size_t *n, uint64_t t) {
    for (size_t i = 0; i < *n; i++) {
        if (states[i] == t) {
            return (int)i;
        }
    }
    if (*n == S_DFA_STATES) {
        return -1;
    }
    states[*n] = t;
    return (int)(*n)++;
}

/* Numbers the reachable states of lin's automaton (subset construction over its bit sets),
 * leaving lin->next NULL when there are more than S_DFA_STATES. Bytes with the same on[]
 * column step alike, so each column is stepped once per state. */
static void s_lin_dfa(js_linear_t *lin) {
    uint64_t cols[S_DFA_STATES];
    uint8_t cls[256]; /* byte -> its column in cols */
    size_t ncls = 0;
    for (unsigned b = 0; b < 256; b++) {
        size_t c = 0;
        while (c < ncls && cols[c] != lin->on[b]) {
            c++;
        }
        if (c == ncls) {
            if (ncls == S_DFA_STATES) {
                return;
            }
            cols[ncls++] = lin->on[b];
        }
        cls[b] = (uint8_t)c;
    }
    uint64_t states[S_DFA_STATES] = {0}; /* states[0] = 0: dead */
    uint8_t to[S_DFA_STATES];
    size_t n = 1;
    uint8_t *next = mem_calloc(S_DFA_STATES * 256, 1); /* row 0, the dead state's, stays 0 */
    lin->start = (uint8_t)s_dfa_state(states, &n, s_lin_close(lin, 1));
    for (size_t i = 1; i < n; i++) {
        for (size_t c = 0; c < ncls; c++) {
            int st = s_dfa_state(states, &n, s_lin_step(lin, states[i], cols[c]));
            if (st < 0) {
                free(next);
                return;
            }
            to[c] = (uint8_t)st;
        }
        for (unsigned b = 0; b < 256; b++) {
            next[i * 256 + b] = to[cls[b]];
        }
    }
    for (size_t i = 0; i < n; i++) {
        lin->accepting |= (uint64_t)((states[i] & lin->accept) != 0) << i;
    }
    lin->next = mem_realloc(next, n * 256);
}

js_linear_t *js_linear_new(const char *src, size_t len) {
    js_linear_t *lin = s_lin_parse(src, len);
    if (lin) {
        s_lin_dfa(lin);
    }
    return lin;
}

void js_linear_free(js_linear_t **lin_p) {
    if (!lin_p || !*lin_p) {
        return;
    }
    free((*lin_p)->next);
    free(*lin_p);
    *lin_p = NULL;
}

bool js_linear_is_table(const js_linear_t *lin) {
    return lin->next != NULL;
}

bool js_linear_match(const js_linear_t *lin, const char *s, size_t len) {
    if (lin->next) {
        const unsigned char *u = (const unsigned char *)s;
        const uint8_t *next = lin->next;
        unsigned st = lin->start;
        size_t i = 0;
        /* The dead state 0 steps to itself, so it is looked for once per 4 bytes. */
        for (; len - i >= 4 && st; i += 4) {
            st = next[st * 256 + u[i]];
            st = next[st * 256 + u[i + 1]];
            st = next[st * 256 + u[i + 2]];
            st = next[st * 256 + u[i + 3]];
        }
        for (; i < len && st; i++) {
            st = next[st * 256 + u[i]];
        }
        return (lin->accepting >> st) & 1;
    }
    uint64_t t = s_lin_close(lin, 1);
    for (size_t i = 0; i < len && t; i++) {
        uint64_t m = t & lin->on[(unsigned char)s[i]];
        t = s_lin_close(lin, (m << 1) | (m & lin->star));
    }
    return (t & lin->accept) != 0;
}
