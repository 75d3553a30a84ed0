/*
 * schemanode: a compiled schema's nodes, the form shared by jsonschema.c (compiler),
 * jsonschema_plan.c (what the compiler derives for the validator), jsonschema_validate.c
 * (validator), jsonschema_regex.c and jsonschema_linear.c (regexes) and jsonschema_format.c
 * (formats). Not part of the public interface; include jsonschema.h instead.
 */
#ifndef CHATFLEET_SCHEMANODE_H
#define CHATFLEET_SCHEMANODE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <string.h>

#include "jsonschema.h"
#include "jsontape.h"

/* Type bits; JS_T_INTEGER is set for integers and for reals with an integral value. */
enum {
    JS_T_NULL = 1 << 0,
    JS_T_BOOLEAN = 1 << 1,
    JS_T_OBJECT = 1 << 2,
    JS_T_ARRAY = 1 << 3,
    JS_T_NUMBER = 1 << 4,
    JS_T_STRING = 1 << 5,
    JS_T_INTEGER = 1 << 6,
};

/* The type bits of each jsontape_type_t (a real is also an integer when integral, which the
 * bits cannot say). */
static const uint8_t js_type_bits[8] = {
    JS_T_NULL,   JS_T_BOOLEAN, JS_T_BOOLEAN, JS_T_NUMBER | JS_T_INTEGER,
    JS_T_NUMBER, JS_T_STRING,  JS_T_ARRAY,   JS_T_OBJECT,
};

/* Keyword groups a node has, so that the validator skips whole groups in one test. */
enum {
    JS_G_GENERIC = 1u << 0, /* const, enum */
    JS_G_NUMBER = 1u << 1,
    JS_G_STRING = 1u << 2,
    JS_G_ARRAY = 1u << 3,
    JS_G_OBJECT = 1u << 4,
    JS_G_APPLY = 1u << 5, /* allOf, anyOf, oneOf, not, if */
};

/* The keyword group that applies to each jsontape_type_t. */
static const uint8_t js_type_group[8] = {
    0, 0, 0, JS_G_NUMBER, JS_G_NUMBER, JS_G_STRING, JS_G_ARRAY, JS_G_OBJECT,
};

/* Which assertions a node carries. */
enum {
    JS_HAS_TYPE = 1u << 0,
    JS_HAS_CONST = 1u << 1,
    JS_HAS_ENUM = 1u << 2,
    JS_HAS_MINIMUM = 1u << 3,
    JS_HAS_MAXIMUM = 1u << 4,
    JS_HAS_EXMIN = 1u << 5,
    JS_HAS_EXMAX = 1u << 6,
    JS_HAS_MULTIPLE = 1u << 7,
    JS_HAS_MINLEN = 1u << 8,
    JS_HAS_MAXLEN = 1u << 9,
    JS_HAS_PATTERN = 1u << 10,
    JS_HAS_FORMAT = 1u << 11,
    JS_HAS_MINITEMS = 1u << 12,
    JS_HAS_MAXITEMS = 1u << 13,
    JS_HAS_UNIQUE = 1u << 14,
    JS_HAS_MINPROPS = 1u << 15,
    JS_HAS_MAXPROPS = 1u << 16,
    JS_HAS_REQUIRED = 1u << 17,
};

typedef jsontape_num_t js_num_t;

/* Leaves whose check (a few compares, never a visit) the reporting validator also runs before
 * it visits the node to report. */
enum {
    JS_QUICK_NONE = 0, /* always visit */
    JS_QUICK_TYPE,     /* type at most */
    JS_QUICK_CONST,    /* a string const, and type at most */
    JS_QUICK_RANGE,    /* type and numeric bounds (minimum, maximum, exclusive ones) */
    JS_QUICK_LENGTH,   /* type and minLength/maxLength */
};

/* The shape of a node, which names its check (jsonschema_check.c) and lets other code
 * specialise that check (jsonschema_native.c). */
enum {
    JS_SHAPE_VISIT = 0,    /* c_visit: the validator's visit */
    JS_SHAPE_TYPE,         /* c_type */
    JS_SHAPE_FALSE,        /* c_false */
    JS_SHAPE_CONST,        /* c_const */
    JS_SHAPE_RANGE,        /* c_range */
    JS_SHAPE_LENGTH,       /* c_length */
    JS_SHAPE_OBJECT,       /* c_object */
    JS_SHAPE_ITEMS,        /* c_items */
    JS_SHAPE_TUPLE,        /* c_tuple */
    JS_SHAPE_DISC,         /* c_disc */
    JS_SHAPE_ENUM,         /* c_enum */
    JS_SHAPE_OBJECT_APPLY, /* c_object_apply */
    JS_SHAPE_APPLY,        /* c_visit of a node with type and applicators at most */
    JS_SHAPE_LEAF,         /* c_leaf */
};

/* A positive decimal m * 10^e with m free of trailing zeros (multipleOf), and the number as
 * written (a text real's literal is compared exactly, as a decimal). */
typedef struct {
    uint64_t m;
    int e;
    double d;
    jsontape_num_t num;
} js_decimal_t;

typedef enum {
    JS_FMT_NONE = 0,
    JS_FMT_DATE_TIME,
    JS_FMT_DATE,
    JS_FMT_TIME,
    JS_FMT_EMAIL,
    JS_FMT_IDN_EMAIL,
    JS_FMT_HOSTNAME,
    JS_FMT_IDN_HOSTNAME,
    JS_FMT_IPV4,
    JS_FMT_IPV6,
    JS_FMT_URI,
    JS_FMT_URI_REFERENCE,
    JS_FMT_IRI,
    JS_FMT_IRI_REFERENCE,
    JS_FMT_URI_TEMPLATE,
    JS_FMT_JSON_POINTER,
    JS_FMT_RELATIVE_JSON_POINTER,
    JS_FMT_REGEX,
} js_format_t;

typedef struct js_regex js_regex_t;
typedef struct js_node js_node_t;

/* One validation's state (jsonschema_validate.c owns it; jsonschema_check.c reads it). */
typedef struct {
    const jsonschema_t *schema;
    jsonschema_report_t *report;
    bool all_errors;
    int quiet;     /* > 0 inside anyOf/oneOf/not/if/contains: failures are not reported */
    bool abort;    /* a cap was hit or the report is full: stop everything */
    uint32_t root; /* the instance's index in t */
    size_t matches;
    const jsontape_t *t;       /* the instance */
    const jsontape_entry_t *e; /* its entries */
    uint32_t *scratch;         /* schema->nscratch slots; each node owns its own range */
    uint64_t *bits;            /* schema->nbitwords words; each node owns its own range */
} js_vctx_t;

/* A node's validity check (jsonschema_check.c): whether the value at v is valid against node,
 * reporting nothing. Called only where nothing is reported (no report, or quiet > 0). */
typedef bool js_check_fn(js_vctx_t *ctx, const js_node_t *node, uint32_t v);

/* A string an instance string is compared with, by its first 8 bytes (zero-padded) under a
 * mask of those that count, in one load (js_str_is). */
typedef struct {
    uint64_t word;
    uint64_t mask;
} js_head_t;

/* A member name the node looks up: a properties key (node set) or a name that only required
 * or dependencies mention (node NULL). */
typedef struct {
    const char *key; /* borrowed from the schema's copy of the document */
    size_t len;
    uint32_t hash; /* jsontape_hash of key */
    js_head_t head;
    js_node_t *node;
} js_prop_t;

typedef struct {
    js_regex_t *re;
    js_node_t *node;
} js_patprop_t;

typedef struct {
    const char *key;
    size_t len;
    uint32_t name;          /* index of key in the node's names */
    js_node_t *node;        /* schema form, or NULL */
    const json_t *required; /* array form (strings), or NULL */
    uint32_t *required_idx; /* array form as indexes into the node's names */
    size_t nrequired;
} js_dep_t;

/* A member that tells anyOf/oneOf branches apart: every branch is {"type": "object"} that
 * requires key and gives it a string const (consts[i], a JS_QUICK_CONST node), so a branch
 * whose const the instance's member does not meet cannot match and is not visited. */
typedef struct {
    const char *key;
    size_t len;
    js_head_t head;
    const js_node_t **consts;
    bool distinct; /* no two consts are equal: at most one branch is a candidate */
} js_disc_t;

typedef struct {
    js_node_t **items;
    size_t count;
    js_disc_t *disc; /* anyOf/oneOf only, or NULL */
} js_list_t;

struct js_node {
    /* Validity: values of the tape types in pass (bit 1 << jsontape_type_t) are valid on their
     * type alone; any other value is valid when check says so (js_check). */
    uint8_t pass;
    js_check_fn *check;
    uint8_t shape; /* JS_SHAPE_*: which check that is (check = its function) */
    char *path;    /* JSON pointer of this subschema in the schema document */
    bool is_bool;
    bool bool_value;
    uint32_t has;
    uint8_t types;
    uint8_t groups;   /* JS_G_* */
    uint8_t quick;    /* JS_QUICK_*: the leaf test that check runs */
    bool one_pass;    /* object keywords that one pass over the members can check (see s_finish) */
    bool only_object; /* one_pass, and nothing but type and object keywords */
    /* For one_pass: whether members need js_visit_member (patternProperties, propertyNames),
     * the node for members that are not properties where not, and required's bits. */
    bool per_member;
    const js_node_t *others;
    uint64_t required_word;
    /* The least and the greatest double the numeric bounds admit, and whether they stand for
     * the bounds (jsonschema_check.c). */
    double range_lo, range_hi;
    bool range_f64;
    js_num_t minimum;
    js_num_t maximum;
    js_num_t exclusive_minimum;
    js_num_t exclusive_maximum;
    js_decimal_t multiple_of;
    size_t min_length;
    size_t max_length;
    size_t min_items;
    size_t max_items;
    size_t min_properties;
    size_t max_properties;
    const json_t *const_value; /* borrowed; as a tape: values[const_at] */
    const json_t *enum_values; /* borrowed array; as a tape: values[enum_at[i]] */
    uint32_t const_at;
    uint32_t *enum_at;
    uint32_t *enum_hashes; /* jsontape_value_hash of each enum value */
    size_t nenum;
    const char *const_str; /* the const value when it is a string, else NULL */
    size_t const_len;
    js_head_t const_head;
    const json_t *required; /* borrowed array of strings */
    js_regex_t *pattern;
    js_format_t format;
    /* Names: the properties (props[0..nprops)) first, in schema order, then the names only
     * required or dependencies mention. The validator looks up each instance member once in
     * prop_slots and notes the hit in its scratch slots [scratch, scratch + nnames). */
    js_prop_t *props;
    size_t nprops;
    size_t nnames;
    uint32_t *prop_slots; /* open-addressing table of name indexes + 1, nslots entries */
    size_t nslots;
    uint32_t *required_idx; /* required, as indexes into props, in schema order */
    size_t nrequired;
    size_t scratch;
    /* Which names an object has, as a bitset of nwords words at ctx bits [bits, bits + nwords)
     * (the value slots are meaningful only where the bit is set, so they are never cleared);
     * required_mask has the bits of required. */
    size_t bits;
    size_t nwords;
    uint64_t *required_mask;
    js_patprop_t *patprops;
    size_t npatprops;
    js_node_t *additional_properties;
    js_dep_t *deps;
    size_t ndeps;
    js_node_t *property_names;
    js_node_t *items;      /* single-schema form */
    js_list_t items_array; /* array form */
    bool items_is_array;
    js_node_t *additional_items;
    js_node_t *contains;
    js_list_t all_of;
    js_list_t any_of;
    js_list_t one_of;
    js_node_t *not_schema;
    js_node_t *if_schema;
    js_node_t *then_schema;
    js_node_t *else_schema;
};

struct jsonschema {
    json_t *doc; /* owned deep copy: every borrowed pointer above points into it */
    js_node_t *root;
    js_node_t **nodes; /* every node, for destroy */
    size_t nnodes;
    size_t npatterns;
    size_t nscratch;    /* sum of the nodes' nnames: the validator's per-call scratch slots */
    size_t nbitwords;   /* sum of the nodes' nwords: the validator's per-call bitset words */
    jsontape_t *values; /* every const and enum value, for comparisons with instances */
    pcre2_match_context *match_ctx; /* limits only; read-only after compile */
    struct js_native *native;       /* the checks as native code (jsonschema_native), or NULL */
};

/* The native code of a schema (jsonschema_native.c): validity of the value at v, as js_check
 * on the root gives it. */
typedef bool js_native_fn(js_vctx_t *ctx, const jsontape_entry_t *e, const char *bytes, uint32_t v);
struct js_native {
    void *lib; /* dlopen handle */
    js_native_fn *root;
};
/* Unloads a schema's native code; safe on NULL and sets *native_p to NULL. */
void js_native_free(struct js_native **native_p);

static inline uint64_t js_load64(const char *p) {
    uint64_t w = 0;
    memcpy(&w, p, sizeof w);
    return w;
}

static inline uint64_t js_load32(const char *p) {
    uint32_t w = 0;
    memcpy(&w, p, sizeof w);
    return w;
}

/* a[0..len) == b[0..len), inline for the short keys schemas name (no call to memcmp). */
static inline bool js_key_eq(const char *a, const char *b, size_t len) {
    if (len >= 8) {
        for (size_t i = 0; i + 8 < len; i += 8) {
            if (js_load64(a + i) != js_load64(b + i)) {
                return false;
            }
        }
        return js_load64(a + len - 8) == js_load64(b + len - 8);
    }
    if (len >= 4) {
        return js_load32(a) == js_load32(b) && js_load32(a + len - 4) == js_load32(b + len - 4);
    }
    for (size_t i = 0; i < len; i++) {
        if (a[i] != b[i]) {
            return false;
        }
    }
    return true;
}

/* The head of key[0..len) (jsonschema_plan.c). */
js_head_t js_head_of(const char *key, size_t len);

/* Whether the tape string s[0..len) equals key[0..klen), whose head is head: its first 8
 * bytes, then its last 8, then any between. A tape keeps 8 bytes readable from the start of
 * each of its strings (jsontape.h). */
static inline bool js_str_is(const char *s, size_t len, const char *key, size_t klen,
                             js_head_t head) {
    return len == klen && !((js_load64(s) ^ head.word) & head.mask) &&
           (len <= 8 || (js_load64(s + len - 8) == js_load64(key + len - 8) &&
                         (len <= 16 || js_key_eq(s + 8, key + 8, len - 16))));
}

/* The index for the tape string key (whose jsontape_hash is hash) in node's names, or -1. */
static inline long js_prop_find(const js_node_t *node, const char *key, size_t len, uint32_t hash) {
    if (node->nslots == 0) {
        return -1;
    }
    size_t mask = node->nslots - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t slot = node->prop_slots[i];
        if (slot == 0) {
            return -1;
        }
        const js_prop_t *p = &node->props[slot - 1];
        if (p->hash == hash && js_str_is(key, len, p->key, p->len, p->head)) {
            return (long)slot - 1;
        }
    }
}

/* Does e have one of the type bits? An integral real is an integer. */
static inline bool js_type_ok(uint8_t types, const jsontape_entry_t *e) {
    if (types & js_type_bits[e->type]) {
        return true;
    }
    return e->type == JSONTAPE_REAL && (types & JS_T_INTEGER) && jsontape_is_integral(e);
}

/* Whether the value at v is valid against node (nothing is reported). */
static inline bool js_check(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    return ((node->pass >> ctx->e[v].type) & 1) || node->check(ctx, node, v);
}

/* The index among node's names of the member name at k, or -1. Members usually come in the
 * schema's order, so the name after the last one found (guess) is tried first. */
static inline long js_name_of(const js_vctx_t *ctx, const js_node_t *node, uint32_t k,
                              size_t guess) {
    const jsontape_entry_t *ke = &ctx->e[k];
    if (guess < node->nnames) {
        const js_prop_t *p = &node->props[guess];
        if (js_str_is(jsontape_str(ctx->t, ke), ke->size, p->key, p->len, p->head)) {
            return (long)guess;
        }
    }
    return js_prop_find(node, jsontape_str(ctx->t, ke), ke->size, ke->hash);
}

/* The value of list's discriminating member in v, or 0 when v is not an object that has it
 * (then no branch can match). Without a discriminator, 1: every branch is a candidate. */
static inline uint32_t js_disc_value(const js_vctx_t *ctx, const js_list_t *list, uint32_t v) {
    const js_disc_t *d = list->disc;
    if (!d) {
        return 1;
    }
    const jsontape_entry_t *e = ctx->e;
    if (e[v].type != JSONTAPE_OBJECT) {
        return 0;
    }
    for (uint32_t k = v + 1; k < e[v].next; k = e[k + 1].next) {
        if (js_str_is(jsontape_str(ctx->t, &e[k]), e[k].size, d->key, d->len, d->head)) {
            return k + 1;
        }
    }
    return 0;
}

/* The validator's visit of node on v (jsonschema_validate.c), reporting unless quiet; and its
 * patternProperties, additionalProperties and propertyNames on the member whose key is at k. */
bool js_visit(js_vctx_t *ctx, const js_node_t *node, uint32_t v);
bool js_visit_member(js_vctx_t *ctx, const js_node_t *node, uint32_t v, uint32_t k);
/* The validator's keyword groups on v (jsonschema_validate.c): const and enum; the numeric
 * keywords on a number; the string keywords on the string entry e (a value or a member name).
 * Each reports unless quiet, and stops at the first failure unless collecting every error. */
bool js_generic(js_vctx_t *ctx, const js_node_t *node, uint32_t v);
bool js_numeric(js_vctx_t *ctx, const js_node_t *node, uint32_t v);
bool js_chars(js_vctx_t *ctx, const js_node_t *node, const jsontape_entry_t *e);
/* node's applicators on v (allOf, anyOf, oneOf, not, if/then/else), reporting unless quiet. */
bool js_apply(js_vctx_t *ctx, const js_node_t *node, uint32_t v);
/* Whether the value at v is one of node's enum values (no report). */
bool js_enum_has(const js_vctx_t *ctx, const js_node_t *node, uint32_t v);
/* The object keywords of a one_pass node on the object at v, for validity alone (nothing is
 * reported). */
bool js_check_members(js_vctx_t *ctx, const js_node_t *node, uint32_t v);

/* The validity check for node, all of whose fields and subschemas are planned
 * (jsonschema_check.c); sets node->pass and node->check. */
void js_check_plan(js_node_t *node);

/* Formats: the id for a name (JS_FMT_NONE when unknown), the name, and the check. */
js_format_t js_format_lookup(const char *name);
const char *js_format_name(js_format_t fmt);
bool js_format_check(js_format_t fmt, const char *s, size_t len);

/* Regexes with ECMA-262 semantics (rewritten for PCRE2). Compile returns NULL and a reason in
 * err when the source is not a supported ECMA-262 pattern. */
js_regex_t *js_regex_compile(const char *src, size_t len, char *err, size_t errlen);
void js_regex_free(js_regex_t **re_p);
/* Whether src compiles under the same rewrites (the regex format; nothing is kept). */
bool js_regex_valid(const char *src, size_t len);
/* The calling thread's PCRE2 match data (created on first use, freed when the thread exits):
 * schemas are shared between threads, and match data is scratch for one match at a time. */
pcre2_match_data *js_regex_thread_data(void);
/* A pattern through PCRE2 always (1 match, 0 no match, -1 a PCRE2 limit was hit), and whether
 * js_regex_match uses the linear automaton instead (jsonschema_regex.c); for tests that
 * compare the two. */
int js_regex_match_pcre2(const js_regex_t *re, const char *s, size_t len, pcre2_match_data *md,
                         pcre2_match_context *mctx);
bool js_regex_is_linear(const js_regex_t *re);
/* Whether that automaton runs from its table of numbered states (few enough of them). */
bool js_regex_is_table(const js_regex_t *re);

/* Linear patterns (jsonschema_linear.c): a bit-parallel automaton that js_regex_match runs
 * instead of PCRE2. New returns NULL when src is outside the subset, and builds the table of
 * numbered states when they are few enough; free is safe on NULL and sets *lin_p to NULL. */
typedef struct js_linear js_linear_t;
js_linear_t *js_linear_new(const char *src, size_t len);
void js_linear_free(js_linear_t **lin_p);
/* Whether s matches, with the answer PCRE2 gives for the same pattern. */
bool js_linear_match(const js_linear_t *lin, const char *s, size_t len);
/* Whether lin runs from its table of numbered states. */
bool js_linear_is_table(const js_linear_t *lin);

/* A compiled pattern (jsonschema_regex.c owns it). */
struct js_regex {
    pcre2_code *code;
    bool jit;            /* compiled by the JIT: matched with pcre2_jit_match */
    js_linear_t *linear; /* the bit-parallel automaton, or NULL: see js_linear_new */
};

/* 1 match, 0 no match, -1 a PCRE2 limit was hit. md is the caller's per-call match data, or
 * NULL for the calling thread's (js_regex_thread_data). */
static inline int js_regex_match(const js_regex_t *re, const char *s, size_t len,
                                 pcre2_match_data *md, pcre2_match_context *mctx) {
    if (re->linear) {
        return js_linear_match(re->linear, s, len);
    }
    return js_regex_match_pcre2(re, s, len, md ? md : js_regex_thread_data(), mctx);
}

/* A schema number (compiler); a text real's literal is borrowed from the schema document. */
js_num_t js_num_of(const json_t *v);

/* The text of n as the schema wrote it, for messages (NUL-terminated, cut to cap). */
const char *js_num_text(js_num_t n, char *buf, size_t cap);

/* Is x a multiple of dec, exactly in decimal? */
bool js_multiple(js_num_t x, const js_decimal_t *dec);

/* The derived fields of node, all of whose keywords and subschemas are compiled
 * (jsonschema_plan.c); and the release of a discriminator. */
void js_plan_node(jsonschema_t *schema, js_node_t *node);
void js_disc_free(js_disc_t *d);

#endif
