/* jsonschema_validate: the Draft-07 validator over a compiled schema; see jsonschema.h. */
#include "schemanode.h"
#include "mem.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scratch slots kept on the stack; a schema that names more members uses the heap. */
#define S_SCRATCH_STACK 256

/* --- reporting --- */

/* Records a failure of keyword kw of node (out of the hot path: failing is the rare case). */
__attribute__((format(printf, 5, 6), cold, noinline)) static bool
s_record(js_vctx_t *ctx, const js_node_t *node, uint32_t v, const char *kw, const char *fmt, ...) {
    jsonschema_report_t *r = ctx->report;
    if (r->count == JSONSCHEMA_ERRORS_MAX) {
        r->truncated = true;
        ctx->abort = true;
        return false;
    }
    jsonschema_issue_t *issue = &r->items[r->count++];
    jsontape_pointer(ctx->t, ctx->root, v, issue->instance_path, sizeof issue->instance_path);
    snprintf(issue->schema_path, sizeof issue->schema_path, "%s%s%s", node->path, kw ? "/" : "",
             kw ? kw : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(issue->message, sizeof issue->message, fmt, ap);
    va_end(ap);
    return false;
}

/* A failure: recorded unless quiet or without a report. Evaluates to false (the validity), so
 * that callers can return it. The message arguments are evaluated only when recorded. */
#define s_fail(ctx, node, v, kw, ...)                                                              \
    (((ctx)->quiet > 0 || !(ctx)->report) ? false : s_record(ctx, node, v, kw, __VA_ARGS__))

/* A cap was hit: the instance is invalid and validation stops, even in quiet mode. */
__attribute__((cold, noinline)) static bool s_abort(js_vctx_t *ctx, const js_node_t *node,
                                                    uint32_t v, const char *kw, const char *why) {
    int quiet = ctx->quiet;
    ctx->quiet = 0;
    s_fail(ctx, node, v, kw, "%s", why);
    ctx->quiet = quiet;
    ctx->abort = true;
    return false;
}

/* Whether to go on after a failure: only when collecting every error, outside quiet mode. */
static bool s_go_on(const js_vctx_t *ctx) {
    return ctx->all_errors && ctx->quiet == 0 && !ctx->abort;
}

/* node on the child value v: where nothing is reported its check; else a leaf's check, or a
 * visit that reports. */
static inline bool s_child(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    if (ctx->quiet > 0 || !ctx->report) {
        return js_check(ctx, node, v);
    }
    return ((node->pass >> ctx->e[v].type) & 1) ||
           (node->quick != JS_QUICK_NONE && node->check(ctx, node, v)) || js_visit(ctx, node, v);
}

/* Runs node on v without reporting: for anyOf, oneOf, not, if and contains. */
static bool s_quiet(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool all = ctx->all_errors;
    ctx->quiet++;
    ctx->all_errors = false;
    bool ok = js_check(ctx, node, v);
    ctx->all_errors = all;
    ctx->quiet--;
    return ok;
}

/* 1 match, 0 no match, -1 aborted (a limit was hit; already reported). */
static int s_match(js_vctx_t *ctx, const js_node_t *node, uint32_t v, const char *kw,
                   const js_regex_t *re, const char *s, size_t len) {
    if (++ctx->matches > JSONSCHEMA_MAX_MATCHES) {
        s_abort(ctx, node, v, kw, "validation exceeds the cap of regex matches per validation");
        return -1;
    }
    int rc = js_regex_match(re, s, len, NULL, ctx->schema->match_ctx);
    if (rc < 0) {
        s_abort(ctx, node, v, kw, "regex match exceeds its backtracking limit");
    }
    return rc;
}

/* --- keyword groups --- */

bool js_numeric(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    js_num_t x = jsontape_num(ctx->t, &ctx->e[v]);
    char b[136]; /* a number literal of the default cap, whole */
    bool ok = true;
    if ((node->has & JS_HAS_MINIMUM) && jsontape_num_cmp(x, node->minimum) < 0) {
        ok = s_fail(ctx, node, v, "minimum", "must be >= %s",
                    js_num_text(node->minimum, b, sizeof b));
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_MAXIMUM) && jsontape_num_cmp(x, node->maximum) > 0) {
        ok = s_fail(ctx, node, v, "maximum", "must be <= %s",
                    js_num_text(node->maximum, b, sizeof b));
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_EXMIN) && jsontape_num_cmp(x, node->exclusive_minimum) <= 0) {
        ok = s_fail(ctx, node, v, "exclusiveMinimum", "must be > %s",
                    js_num_text(node->exclusive_minimum, b, sizeof b));
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_EXMAX) && jsontape_num_cmp(x, node->exclusive_maximum) >= 0) {
        ok = s_fail(ctx, node, v, "exclusiveMaximum", "must be < %s",
                    js_num_text(node->exclusive_maximum, b, sizeof b));
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_MULTIPLE) && !js_multiple(x, &node->multiple_of)) {
        ok = s_fail(ctx, node, v, "multipleOf", "must be a multiple of %s",
                    js_num_text(node->multiple_of.num, b, sizeof b));
    }
    return ok;
}

bool js_chars(js_vctx_t *ctx, const js_node_t *node, const jsontape_entry_t *e) {
    bool ok = true;
    uint32_t v = (uint32_t)(e - ctx->e);
    const char *s = jsontape_str(ctx->t, e);
    size_t len = e->size;
    if ((node->has & JS_HAS_MINLEN) && e->u.s.chars < node->min_length) {
        ok = s_fail(ctx, node, v, "minLength", "must have at least %zu characters",
                    node->min_length);
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_MAXLEN) && e->u.s.chars > node->max_length) {
        ok =
            s_fail(ctx, node, v, "maxLength", "must have at most %zu characters", node->max_length);
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if (node->has & JS_HAS_PATTERN) {
        int rc = s_match(ctx, node, v, "pattern", node->pattern, s, len);
        if (rc < 0) {
            return false;
        }
        if (rc == 0) {
            ok = s_fail(ctx, node, v, "pattern", "does not match the pattern");
            if (!s_go_on(ctx)) {
                return false;
            }
        }
    }
    if ((node->has & JS_HAS_FORMAT) && !js_format_check(node->format, s, len)) {
        ok = s_fail(ctx, node, v, "format", "is not a valid %s", js_format_name(node->format));
    }
    return ok;
}

static bool s_items(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool ok = true;
    const uint32_t end = ctx->e[v].next;
    size_t i = 0;
    if (!node->items_is_array) {
        for (uint32_t it = v + 1; it < end; it = ctx->e[it].next, i++) {
            if (!s_child(ctx, node->items, it)) {
                ok = false;
                if (!s_go_on(ctx)) {
                    return false;
                }
            }
        }
        return ok;
    }
    for (uint32_t it = v + 1; it < end; it = ctx->e[it].next, i++) {
        const js_node_t *sub =
            i < node->items_array.count ? node->items_array.items[i] : node->additional_items;
        if (sub && !s_child(ctx, sub, it)) {
            ok = false;
            if (!s_go_on(ctx)) {
                return false;
            }
        }
    }
    return ok;
}

static bool s_contains(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    for (uint32_t it = v + 1; it < ctx->e[v].next; it = ctx->e[it].next) {
        if (s_quiet(ctx, node->contains, it)) {
            return true;
        }
        if (ctx->abort) {
            return false;
        }
    }
    return s_fail(ctx, node, v, "contains", "must contain an item that matches the schema");
}

static bool s_array(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    size_t n = ctx->e[v].size;
    bool ok = true;
    if ((node->has & JS_HAS_MINITEMS) && n < node->min_items) {
        ok = s_fail(ctx, node, v, "minItems", "must have at least %zu items", node->min_items);
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_MAXITEMS) && n > node->max_items) {
        ok = s_fail(ctx, node, v, "maxItems", "must have at most %zu items", node->max_items);
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_UNIQUE) && !jsontape_unique(ctx->t, v)) {
        ok = s_fail(ctx, node, v, "uniqueItems", "must not contain equal items");
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->items || node->items_is_array) && !s_items(ctx, node, v)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if (node->contains && !s_contains(ctx, node, v)) {
        ok = false;
    }
    return ok;
}

static inline bool s_bit(const uint64_t *bits, size_t i) {
    return (bits[i / 64] >> (i % 64)) & 1;
}

/* Whether bits has every bit of mask (nwords words). */
static inline bool s_all_bits(const uint64_t *bits, const uint64_t *mask, size_t nwords) {
    for (size_t w = 0; w < nwords; w++) {
        if ((bits[w] & mask[w]) != mask[w]) {
            return false;
        }
    }
    return true;
}

/* Fails for each name in idx (indexes into node's names) that v lacks. */
static bool s_required(js_vctx_t *ctx, const js_node_t *node, uint32_t v, const char *kw,
                       const uint32_t *idx, size_t count, const uint64_t *has) {
    bool ok = true;
    for (size_t i = 0; i < count; i++) {
        if (!s_bit(has, idx[i])) {
            ok = s_fail(ctx, node, v, kw, "lacks required property \"%.64s\"",
                        node->props[idx[i]].key);
            if (!s_go_on(ctx)) {
                return false;
            }
        }
    }
    return ok;
}

/* properties, in schema order, on the members that has says v has. */
static bool s_properties(js_vctx_t *ctx, const js_node_t *node, const uint64_t *has,
                         const uint32_t *found) {
    bool ok = true;
    for (size_t w = 0; w * 64 < node->nprops; w++) {
        uint64_t word = has[w];
        if (node->nprops - w * 64 < 64) {
            word &= (1ull << (node->nprops - w * 64)) - 1; /* names past the properties */
        }
        for (; word; word &= word - 1) {
            size_t i = w * 64 + (size_t)__builtin_ctzll(word);
            const js_prop_t *p = &node->props[i];
            if (!s_child(ctx, p->node, found[i])) {
                ok = false;
                if (!s_go_on(ctx)) {
                    return false;
                }
            }
        }
    }
    return ok;
}

/* patternProperties, additionalProperties and propertyNames for the member whose key entry
 * is k (its value follows it). propertyNames validates the key entry itself: a string. */
bool js_visit_member(js_vctx_t *ctx, const js_node_t *node, uint32_t v, uint32_t k) {
    const jsontape_entry_t *ke = &ctx->e[k];
    const char *key = jsontape_str(ctx->t, ke);
    size_t len = ke->size;
    uint32_t m = k + 1;
    bool ok = true;
    bool matched = false;
    if (node->additional_properties) {
        long idx = js_prop_find(node, key, len, ke->hash);
        matched = idx >= 0 && (size_t)idx < node->nprops;
    }
    for (size_t i = 0; i < node->npatprops; i++) {
        int rc = s_match(ctx, node, v, "patternProperties", node->patprops[i].re, key, len);
        if (rc < 0) {
            return false;
        }
        if (rc == 1) {
            matched = true;
            if (!s_child(ctx, node->patprops[i].node, m)) {
                ok = false;
                if (!s_go_on(ctx)) {
                    return false;
                }
            }
        }
    }
    if (node->additional_properties && !matched && !s_child(ctx, node->additional_properties, m)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if (node->property_names) {
        ok = s_child(ctx, node->property_names, k) && ok;
    }
    return ok;
}

static bool s_members(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool ok = true;
    for (uint32_t k = v + 1; k < ctx->e[v].next; k = ctx->e[k + 1].next) {
        if (!js_visit_member(ctx, node, v, k)) {
            ok = false;
            if (!s_go_on(ctx)) {
                return false;
            }
        }
    }
    return ok;
}

static bool s_dependencies(js_vctx_t *ctx, const js_node_t *node, uint32_t v, const uint64_t *has) {
    bool ok = true;
    for (size_t i = 0; i < node->ndeps; i++) {
        const js_dep_t *dep = &node->deps[i];
        if (!s_bit(has, dep->name)) {
            continue;
        }
        bool good = dep->required ? s_required(ctx, node, v, "dependencies", dep->required_idx,
                                               dep->nrequired, has)
                                  : js_visit(ctx, dep->node, v);
        if (!good) {
            ok = false;
            if (!s_go_on(ctx)) {
                return false;
            }
        }
    }
    return ok;
}

/* One pass over v's members: sets in has the bits of node's names that v has, with the value
 * of each in found, and returns how many members are not properties (those
 * additionalProperties applies to, unless a pattern matches). */
static size_t s_collect(const js_vctx_t *ctx, const js_node_t *node, uint32_t v, uint64_t *has,
                        uint32_t *found) {
    for (size_t w = 0; w < node->nwords; w++) {
        has[w] = 0;
    }
    size_t others = 0;
    const jsontape_entry_t *e = ctx->e;
    size_t guess = 0;
    for (uint32_t k = v + 1; k < e[v].next; k = e[k + 1].next) {
        long idx = js_name_of(ctx, node, k, guess);
        if (idx >= 0) {
            size_t i = (size_t)idx;
            has[i / 64] |= 1ull << (i % 64);
            found[i] = k + 1;
            guess = i + 1;
        }
        others += idx < 0 || (size_t)idx >= node->nprops;
    }
    return others;
}

static bool s_object_size(js_vctx_t *ctx, const js_node_t *node, uint32_t v, size_t n) {
    bool ok = true;
    if ((node->has & JS_HAS_MINPROPS) && n < node->min_properties) {
        ok = s_fail(ctx, node, v, "minProperties", "must have at least %zu properties",
                    node->min_properties);
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_MAXPROPS) && n > node->max_properties) {
        ok = s_fail(ctx, node, v, "maxProperties", "must have at most %zu properties",
                    node->max_properties);
    }
    return ok;
}

/* js_check_members for a node with patternProperties or propertyNames: the member's pattern
 * schemas by js_visit_member; without patterns, additionalProperties and propertyNames here. */
static bool s_check_members_each(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = ctx->e;
    uint64_t seen = 0;
    size_t guess = 0;
    for (uint32_t k = v + 1; k < e[v].next; k = e[k + 1].next) {
        long idx = js_name_of(ctx, node, k, guess);
        bool property = idx >= 0 && (size_t)idx < node->nprops;
        if (idx >= 0) {
            seen |= 1ull << idx;
            guess = (size_t)idx + 1;
        }
        if (property && !js_check(ctx, node->props[idx].node, k + 1)) {
            return false;
        }
        if (node->npatprops) {
            if (!js_visit_member(ctx, node, v, k)) {
                return false;
            }
            continue;
        }
        if ((!property && node->additional_properties &&
             !js_check(ctx, node->additional_properties, k + 1)) ||
            (node->property_names && !js_check(ctx, node->property_names, k))) {
            return false;
        }
    }
    return (seen & node->required_word) == node->required_word;
}

/* Each member is looked up and checked as it comes, stopping at the first failure. */
bool js_check_members(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = ctx->e;
    if (ctx->abort || e[v].size < node->min_properties || e[v].size > node->max_properties) {
        return false;
    }
    if (node->per_member) {
        return s_check_members_each(ctx, node, v);
    }
    uint64_t seen = 0;
    size_t guess = 0;
    const uint32_t end = e[v].next;
    for (uint32_t k = v + 1; k < end; k = e[k + 1].next) {
        long idx = js_name_of(ctx, node, k, guess);
        const js_node_t *sub = node->others;
        if (idx >= 0) {
            seen |= 1ull << idx;
            guess = (size_t)idx + 1;
            sub = (size_t)idx < node->nprops ? node->props[idx].node : sub;
        }
        if (sub && !js_check(ctx, sub, k + 1)) {
            return false;
        }
    }
    return (seen & node->required_word) == node->required_word;
}

static bool s_object(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    if (node->one_pass && (ctx->quiet > 0 || !ctx->report)) {
        return js_check_members(ctx, node, v);
    }
    bool ok = true;
    if ((node->has & (JS_HAS_MINPROPS | JS_HAS_MAXPROPS)) &&
        !s_object_size(ctx, node, v, ctx->e[v].size)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    uint32_t *found = ctx->scratch + node->scratch;
    uint64_t *has = ctx->bits + node->bits;
    size_t others = node->nnames ? s_collect(ctx, node, v, has, found) : ctx->e[v].size;
    if (node->nrequired && !s_all_bits(has, node->required_mask, node->nwords) &&
        !s_required(ctx, node, v, "required", node->required_idx, node->nrequired, has)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if (node->nprops && !s_properties(ctx, node, has, found)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->npatprops || node->property_names || (node->additional_properties && others)) &&
        !s_members(ctx, node, v)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if (node->ndeps && !s_dependencies(ctx, node, v, has)) {
        ok = false;
    }
    return ok;
}

/* Hashes first: jsontape_equal runs only on the values that can be equal. */
bool js_enum_has(const js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_t *values = ctx->schema->values;
    const jsontape_entry_t *e = &ctx->e[v];
    if (e->type == JSONTAPE_STRING) { /* the common enum, compared here without calls */
        for (size_t i = 0; i < node->nenum; i++) {
            const jsontape_entry_t *w = &values->entries[node->enum_at[i]];
            if (node->enum_hashes[i] == e->hash && w->type == JSONTAPE_STRING &&
                w->size == e->size &&
                js_key_eq(jsontape_str(values, w), jsontape_str(ctx->t, e), e->size)) {
                return true;
            }
        }
        return false;
    }
    uint32_t h = jsontape_value_hash(ctx->t, v);
    for (size_t i = 0; i < node->nenum; i++) {
        if (node->enum_hashes[i] == h && jsontape_equal(ctx->t, v, values, node->enum_at[i])) {
            return true;
        }
    }
    return false;
}

static bool s_const(const js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    if (!node->const_str) {
        return jsontape_equal(ctx->t, v, ctx->schema->values, node->const_at);
    }
    const jsontape_entry_t *e = &ctx->e[v];
    return e->type == JSONTAPE_STRING &&
           js_str_is(jsontape_str(ctx->t, e), e->size, node->const_str, node->const_len,
                     node->const_head);
}

bool js_generic(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool ok = true;
    if ((node->has & JS_HAS_CONST) && !s_const(ctx, node, v)) {
        ok = s_fail(ctx, node, v, "const", "must equal the constant");
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    if ((node->has & JS_HAS_ENUM) && !js_enum_has(ctx, node, v)) {
        ok = s_fail(ctx, node, v, "enum", "must be one of the enumerated values");
    }
    return ok;
}

/* Whether branch i of list can match, given js_disc_value's dv. */
static bool s_candidate(js_vctx_t *ctx, const js_list_t *list, size_t i, uint32_t dv) {
    return dv && (!list->disc || js_check(ctx, list->disc->consts[i], dv));
}

static bool s_combinators(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool ok = true;
    for (size_t i = 0; i < node->all_of.count; i++) {
        if (!js_visit(ctx, node->all_of.items[i], v)) {
            ok = false;
            if (!s_go_on(ctx)) {
                return false;
            }
        }
    }
    if (node->any_of.count) {
        bool any = false;
        uint32_t dv = js_disc_value(ctx, &node->any_of, v);
        for (size_t i = 0; i < node->any_of.count && !any && !ctx->abort; i++) {
            any = s_candidate(ctx, &node->any_of, i, dv) && s_quiet(ctx, node->any_of.items[i], v);
        }
        if (!any &&
            !(s_fail(ctx, node, v, "anyOf", "matches none of the schemas") || s_go_on(ctx))) {
            return false;
        }
        ok = ok && any;
    }
    if (node->one_of.count) {
        size_t hits = 0;
        uint32_t dv = js_disc_value(ctx, &node->one_of, v);
        for (size_t i = 0; i < node->one_of.count && hits < 2 && !ctx->abort; i++) {
            hits +=
                s_candidate(ctx, &node->one_of, i, dv) && s_quiet(ctx, node->one_of.items[i], v);
        }
        if (hits != 1 && !(s_fail(ctx, node, v, "oneOf", "matches %s of the schemas",
                                  hits ? "more than one" : "none") ||
                           s_go_on(ctx))) {
            return false;
        }
        ok = ok && hits == 1;
    }
    return ok;
}

static bool s_conditionals(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool ok = true;
    if (node->not_schema) {
        bool inner = s_quiet(ctx, node->not_schema, v);
        if (ctx->abort) {
            return false;
        }
        if (inner && !(s_fail(ctx, node, v, "not", "must not match the schema") || s_go_on(ctx))) {
            return false;
        }
        ok = !inner;
    }
    if (node->if_schema && (node->then_schema || node->else_schema)) {
        bool cond = s_quiet(ctx, node->if_schema, v);
        if (ctx->abort) {
            return false;
        }
        const js_node_t *branch = cond ? node->then_schema : node->else_schema;
        if (branch && !js_visit(ctx, branch, v)) {
            ok = false;
        }
    }
    return ok;
}

static bool s_typed(js_vctx_t *ctx, const js_node_t *node, uint32_t v, uint8_t group) {
    switch (group) {
        case JS_G_NUMBER:
            return js_numeric(ctx, node, v);
        case JS_G_STRING:
            return js_chars(ctx, node, &ctx->e[v]);
        case JS_G_ARRAY:
            return s_array(ctx, node, v);
        default:
            return s_object(ctx, node, v);
    }
}

bool js_apply(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    bool ok = true;
    if (node->all_of.count || node->any_of.count || node->one_of.count) {
        ok = s_combinators(ctx, node, v);
        if (!ok && !s_go_on(ctx)) {
            return false;
        }
    }
    if (node->not_schema || node->if_schema) {
        ok = s_conditionals(ctx, node, v) && ok;
    }
    return ok;
}

bool js_visit(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    if (ctx->abort) {
        return false;
    }
    if (node->is_bool) {
        return node->bool_value || s_fail(ctx, node, v, NULL, "no value is allowed here");
    }
    const jsontape_entry_t *e = &ctx->e[v];
    if ((node->has & JS_HAS_TYPE) && !js_type_ok(node->types, e)) {
        return s_fail(ctx, node, v, "type", "has the wrong type");
    }
    uint8_t groups = node->groups & (js_type_group[e->type] | JS_G_GENERIC | JS_G_APPLY);
    bool ok = true;
    if ((groups & JS_G_GENERIC) && !js_generic(ctx, node, v)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    uint8_t typed = groups & (uint8_t) ~(JS_G_GENERIC | JS_G_APPLY);
    if (typed && !s_typed(ctx, node, v, typed)) {
        ok = false;
        if (!s_go_on(ctx)) {
            return false;
        }
    }
    return (groups & JS_G_APPLY) ? js_apply(ctx, node, v) && ok : ok;
}

jsonschema_result_t jsonschema_validate_tape(const jsonschema_t *self, const jsontape_t *doc,
                                             uint32_t index, jsonschema_mode_t mode,
                                             jsonschema_report_t *report) {
    /* Field by field: the path segments need no zeroing (a segment is written before use). */
    js_vctx_t ctx;
    ctx.schema = self;
    ctx.report = report;
    ctx.all_errors = mode == JSONSCHEMA_ALL_ERRORS && report;
    ctx.quiet = 0;
    ctx.abort = false;
    ctx.root = index;
    ctx.matches = 0;
    ctx.t = doc;
    ctx.e = doc->entries;
    if (report) {
        report->count = 0;
        report->truncated = false;
    }
    /* Without references a node is never applied inside itself, so one slot range per node
     * is enough however the validation recurses. The slots need no initialisation. */
    uint32_t stack_scratch[S_SCRATCH_STACK];
    uint64_t stack_bits[S_SCRATCH_STACK / 16];
    ctx.scratch = self->nscratch <= S_SCRATCH_STACK
                      ? stack_scratch
                      : mem_calloc(self->nscratch, sizeof *ctx.scratch);
    ctx.bits = self->nbitwords <= S_SCRATCH_STACK / 16
                   ? stack_bits
                   : mem_calloc(self->nbitwords, sizeof *ctx.bits);
    bool ok = report         ? js_visit(&ctx, self->root, index)
              : self->native ? self->native->root(&ctx, ctx.e, doc->bytes, index)
                             : js_check(&ctx, self->root, index);
    if (ctx.scratch != stack_scratch) {
        free(ctx.scratch);
    }
    if (ctx.bits != stack_bits) {
        free(ctx.bits);
    }
    return ok && !ctx.abort ? JSONSCHEMA_VALID : JSONSCHEMA_INVALID;
}

jsonschema_result_t jsonschema_validate(const jsonschema_t *self, const json_t *instance,
                                        jsonschema_mode_t mode, jsonschema_report_t *report) {
    jsontape_t *doc = jsontape_new();
    long at = jsontape_from_json(doc, instance);
    jsonschema_result_t r = JSONSCHEMA_INVALID;
    if (at >= 0) {
        r = jsonschema_validate_tape(self, doc, (uint32_t)at, mode, report);
    } else if (report) {
        *report = (jsonschema_report_t){.count = 1};
        snprintf(report->items[0].message, sizeof report->items[0].message,
                 "instance exceeds the tape's 32-bit indexes");
    }
    jsontape_destroy(&doc);
    return r;
}
