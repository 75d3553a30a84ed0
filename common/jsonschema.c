/* jsonschema: the Draft-07 compiler; see jsonschema.h and JSONSCHEMA.md. */
#include "jsonschema_internal.h"
#include "jsonstrict.h"
#include "mem.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    jsonschema_t *schema;
    jsonschema_error_t *err;
    size_t branches;
} s_compiler_t;

typedef int (*s_keyword_fn)(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                            int depth);

typedef struct {
    const char *name;
    s_keyword_fn fn;
} s_keyword_t;

__attribute__((format(printf, 3, 4))) static int s_fail(s_compiler_t *c, const char *path,
                                                        const char *fmt, ...) {
    if (!c->err) {
        return -1;
    }
    snprintf(c->err->schema_path, sizeof c->err->schema_path, "%s", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->message, sizeof c->err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* parent + "/" + key escaped per RFC 6901; a new string owned by the caller. */
static char *s_child_path(const char *parent, const char *key, size_t len) {
    size_t plen = strlen(parent);
    char *out = mem_alloc(plen + 2 * len + 2);
    memcpy(out, parent, plen);
    size_t n = plen;
    out[n++] = '/';
    for (size_t i = 0; i < len; i++) {
        if (key[i] == '~' || key[i] == '/') {
            out[n++] = '~';
            out[n++] = key[i] == '~' ? '0' : '1';
        } else {
            out[n++] = key[i];
        }
    }
    out[n] = '\0';
    return out;
}

static char *s_index_path(const char *parent, size_t index) {
    return mem_printf("%s/%zu", parent, index);
}

/* A word-at-a-time hash (lookups run once per instance member, so it must be cheap on short
 * keys): 8-byte words, the last one overlapping; keys under 8 bytes are read as two
 * overlapping 4-byte words or, under 4, as three bytes, which with the length determine them. */
/* The index of key among node's names, appending it when it is new. */
static uint32_t s_name(js_node_t *node, size_t *cap, const char *key, size_t len) {
    for (size_t i = 0; i < node->nnames; i++) {
        if (node->props[i].len == len && memcmp(node->props[i].key, key, len) == 0) {
            return (uint32_t)i;
        }
    }
    if (node->nnames == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        node->props = mem_realloc(node->props, *cap * sizeof *node->props);
    }
    node->props[node->nnames] = (js_prop_t){.key = key, .len = len};
    return (uint32_t)node->nnames++;
}

/* Indexes of the strings of names (required, or a dependency's array form). */
static uint32_t *s_name_list(js_node_t *node, size_t *cap, const json_t *names, size_t *count) {
    *count = json_array_size(names);
    uint32_t *idx = mem_calloc(*count ? *count : 1, sizeof *idx);
    for (size_t i = 0; i < *count; i++) {
        const json_t *name = json_array_get(names, i);
        idx[i] = s_name(node, cap, json_string_value(name), json_string_length(name));
    }
    return idx;
}

static void s_index_slots(js_node_t *node) {
    size_t n = 8;
    while (n < 2 * node->nnames) {
        n *= 2;
    }
    node->nslots = n;
    node->prop_slots = mem_calloc(n, sizeof *node->prop_slots);
    for (size_t k = 0; k < node->nnames; k++) {
        node->props[k].hash = jsontape_hash(node->props[k].key, node->props[k].len);
        size_t i = node->props[k].hash & (n - 1);
        while (node->prop_slots[i]) {
            i = (i + 1) & (n - 1);
        }
        node->prop_slots[i] = (uint32_t)k + 1;
    }
}

/* The keyword groups node has (JS_G_*). */
static uint8_t s_groups(const js_node_t *node) {
    const uint32_t num =
        JS_HAS_MINIMUM | JS_HAS_MAXIMUM | JS_HAS_EXMIN | JS_HAS_EXMAX | JS_HAS_MULTIPLE;
    const uint32_t str = JS_HAS_MINLEN | JS_HAS_MAXLEN | JS_HAS_PATTERN | JS_HAS_FORMAT;
    const uint32_t arr = JS_HAS_MINITEMS | JS_HAS_MAXITEMS | JS_HAS_UNIQUE;
    const uint32_t obj = JS_HAS_MINPROPS | JS_HAS_MAXPROPS | JS_HAS_REQUIRED;
    uint8_t g = 0;
    g |= (node->has & (JS_HAS_CONST | JS_HAS_ENUM)) ? JS_G_GENERIC : 0;
    g |= (node->has & num) ? JS_G_NUMBER : 0;
    g |= (node->has & str) ? JS_G_STRING : 0;
    g |=
        (node->has & arr) || node->items || node->items_is_array || node->contains ? JS_G_ARRAY : 0;
    g |= (node->has & obj) || node->nnames || node->npatprops || node->additional_properties ||
                 node->property_names || node->ndeps
             ? JS_G_OBJECT
             : 0;
    g |= node->all_of.count || node->any_of.count || node->one_of.count || node->not_schema ||
                 node->if_schema
             ? JS_G_APPLY
             : 0;
    return g;
}

/* Copies const and enum values onto the schema's tape, where instances are compared. */
/* Whether node is {"type": "object", ...} requiring key (hash h) with a string const on it;
 * returns that const's node or NULL. */
static const js_node_t *s_disc_const(const js_node_t *node, const char *key, size_t len,
                                     uint32_t h) {
    if (node->is_bool || !(node->has & JS_HAS_TYPE) || node->types != JS_T_OBJECT) {
        return NULL;
    }
    long i = js_prop_find(node, key, len, h);
    if (i < 0 || (size_t)i >= node->nprops || !((node->required_mask[i / 64] >> (i % 64)) & 1)) {
        return NULL;
    }
    const js_node_t *sub = node->props[i].node;
    return sub->quick == JS_QUICK_CONST ? sub : NULL;
}

/* A discriminator for list (see js_disc_t), taken from the first branch's required names, or
 * NULL when no name tells every branch apart. */
static js_disc_t *s_discriminator(const js_list_t *list) {
    if (list->count < 2 || list->items[0]->is_bool) {
        return NULL;
    }
    const js_node_t *first = list->items[0];
    for (size_t r = 0; r < first->nrequired; r++) {
        const js_prop_t *p = &first->props[first->required_idx[r]];
        uint32_t h = jsontape_hash(p->key, p->len);
        size_t i = 0;
        while (i < list->count && s_disc_const(list->items[i], p->key, p->len, h)) {
            i++;
        }
        if (i < list->count) {
            continue;
        }
        js_disc_t *d = mem_calloc(1, sizeof *d);
        *d = (js_disc_t){.key = p->key, .len = p->len, .hash = h};
        d->consts = mem_calloc(list->count, sizeof *d->consts);
        for (i = 0; i < list->count; i++) {
            d->consts[i] = s_disc_const(list->items[i], p->key, p->len, h);
        }
        return d;
    }
    return NULL;
}

static void s_disc_free(js_disc_t *d) {
    if (d) {
        free(d->consts);
        free(d);
    }
}

/* Whether items under node (or an additionalItems) can be accepted by a scalar quick test;
 * false, the schema that forbids any item, is fine too: its test is the count. */
static bool s_quick_item(const js_node_t *node) {
    return !node || (node->is_bool && !node->bool_value) ||
           (node->quick != JS_QUICK_NONE && node->quick != JS_QUICK_ARRAY);
}

static bool s_quick_array(const js_node_t *node) {
    if (node->has & ~(uint32_t)(JS_HAS_TYPE | JS_HAS_MINITEMS | JS_HAS_MAXITEMS) ||
        node->contains) {
        return false;
    }
    if (!node->items_is_array) {
        return s_quick_item(node->items);
    }
    for (size_t i = 0; i < node->items_array.count; i++) {
        if (!s_quick_item(node->items_array.items[i])) {
            return false;
        }
    }
    return s_quick_item(node->additional_items);
}

/* Which quick test covers every assertion node has (JS_QUICK_NONE when none does). */
static uint8_t s_quick(const js_node_t *node) {
    const uint32_t range =
        JS_HAS_TYPE | JS_HAS_MINIMUM | JS_HAS_MAXIMUM | JS_HAS_EXMIN | JS_HAS_EXMAX;
    const uint32_t length = JS_HAS_TYPE | JS_HAS_MINLEN | JS_HAS_MAXLEN;
    if (node->is_bool) {
        return node->bool_value ? JS_QUICK_TYPE : JS_QUICK_NONE;
    }
    switch (node->groups) {
        case 0:
            return JS_QUICK_TYPE;
        case JS_G_GENERIC:
            return node->const_str && !(node->has & ~(JS_HAS_TYPE | JS_HAS_CONST)) ? JS_QUICK_CONST
                                                                                   : JS_QUICK_NONE;
        case JS_G_NUMBER:
            return !(node->has & ~range) ? JS_QUICK_RANGE : JS_QUICK_NONE;
        case JS_G_STRING:
            return !(node->has & ~length) ? JS_QUICK_LENGTH : JS_QUICK_NONE;
        case JS_G_ARRAY:
            return s_quick_array(node) ? JS_QUICK_ARRAY : JS_QUICK_NONE;
        default:
            return JS_QUICK_NONE;
    }
}

/* The tape types whose values node's quick test accepts on the type alone: those its type
 * admits (a real only where any number is) that its other assertions do not look at. */
static uint8_t s_quick_pass(const js_node_t *node) {
    static const uint8_t bits[8] = {
        JS_T_NULL,   JS_T_BOOLEAN, JS_T_BOOLEAN, JS_T_NUMBER | JS_T_INTEGER,
        JS_T_NUMBER, JS_T_STRING,  JS_T_ARRAY,   JS_T_OBJECT,
    };
    uint8_t looked_at = node->quick == JS_QUICK_RANGE ? 1u << JSONTAPE_INTEGER | 1u << JSONTAPE_REAL
                        : node->quick == JS_QUICK_LENGTH ? 1u << JSONTAPE_STRING
                        : node->quick == JS_QUICK_ARRAY  ? 1u << JSONTAPE_ARRAY
                                                         : 0;
    if (node->quick == JS_QUICK_NONE || node->quick == JS_QUICK_CONST) {
        return 0;
    }
    uint8_t pass = 0;
    for (int t = 0; t < 8; t++) {
        bool admitted =
            node->is_bool || !(node->has & JS_HAS_TYPE) ||
            (t == JSONTAPE_REAL ? (node->types & JS_T_NUMBER) != 0 : (node->types & bits[t]) != 0);
        pass |= admitted && !(looked_at & (1u << t)) ? (uint8_t)(1u << t) : 0;
    }
    return pass;
}

static void s_prepare_values(jsonschema_t *schema, js_node_t *node) {
    if (node->has & JS_HAS_CONST) {
        long at = jsontape_from_json(schema->values, node->const_value);
        ASSERT(at >= 0); /* schema text is capped far below the tape's indexes */
        node->const_at = (uint32_t)at;
        if (json_is_string(node->const_value)) {
            node->const_str = json_string_value(node->const_value);
            node->const_len = json_string_length(node->const_value);
        }
    }
    if (!(node->has & JS_HAS_ENUM)) {
        return;
    }
    node->nenum = json_array_size(node->enum_values);
    node->enum_at = mem_calloc(node->nenum ? node->nenum : 1, sizeof *node->enum_at);
    node->enum_hashes = mem_calloc(node->nenum ? node->nenum : 1, sizeof *node->enum_hashes);
    for (size_t i = 0; i < node->nenum; i++) {
        long at = jsontape_from_json(schema->values, json_array_get(node->enum_values, i));
        ASSERT(at >= 0);
        node->enum_at[i] = (uint32_t)at;
        node->enum_hashes[i] = jsontape_value_hash(schema->values, (uint32_t)at);
    }
}

/* After all keywords: one table of every member name that properties, required and
 * dependencies look up, so that validation visits each instance member once. The names are
 * distinct (properties keys are; s_name merges the rest), so the table is a set. */
static void s_finish(jsonschema_t *schema, js_node_t *node) {
    size_t cap = node->nprops;
    node->nnames = node->nprops;
    if (node->required) {
        node->required_idx = s_name_list(node, &cap, node->required, &node->nrequired);
    }
    for (size_t i = 0; i < node->ndeps; i++) {
        js_dep_t *dep = &node->deps[i];
        dep->name = s_name(node, &cap, dep->key, dep->len);
        if (dep->required) {
            dep->required_idx = s_name_list(node, &cap, dep->required, &dep->nrequired);
        }
    }
    if (node->nnames) {
        s_index_slots(node);
        node->scratch = schema->nscratch;
        schema->nscratch += node->nnames;
        node->nwords = (node->nnames + 63) / 64;
        node->bits = schema->nbitwords;
        schema->nbitwords += node->nwords;
        node->required_mask = mem_calloc(node->nwords, sizeof *node->required_mask);
        for (size_t i = 0; i < node->nrequired; i++) {
            node->required_mask[node->required_idx[i] / 64] |= 1ull << (node->required_idx[i] % 64);
        }
    }
    s_prepare_values(schema, node);
    node->groups = s_groups(node);
    node->quick = s_quick(node);
    node->quick_pass = s_quick_pass(node);
    /* Validity alone (no report) needs one pass over the members when each member's checks
     * depend on that member only (not so for dependencies), and the names fit one word. */
    node->one_pass = node->nnames <= 64 && !node->ndeps;
    node->only_object = node->one_pass && !node->is_bool && node->groups == JS_G_OBJECT;
    node->any_of.disc = s_discriminator(&node->any_of);
    node->one_of.disc = s_discriminator(&node->one_of);
}

static js_node_t *s_compile_node(s_compiler_t *c, json_t *json, const char *path, int depth);

/* Compiles the subschema under keyword key of the node at parent_path. */
static js_node_t *s_sub(s_compiler_t *c, json_t *json, const char *kw_path, int depth) {
    return s_compile_node(c, json, kw_path, depth + 1);
}

static int s_schema_kw(s_compiler_t *c, json_t *value, const char *path, int depth,
                       js_node_t **out) {
    *out = s_sub(c, value, path, depth);
    return *out ? 0 : -1;
}

static bool s_is_integral(const json_t *v) {
    if (json_is_integer(v)) {
        return true;
    }
    return json_is_real(v) && floor(json_real_value(v)) == json_real_value(v);
}

static int s_count(s_compiler_t *c, json_t *value, const char *path, size_t *out) {
    if (!s_is_integral(value) || json_number_value(value) < 0) {
        return s_fail(c, path, "must be a non-negative integer");
    }
    if (json_is_integer(value)) {
        *out = (size_t)json_integer_value(value);
    } else {
        double d = json_real_value(value);
        *out = d >= 18446744073709551615.0 ? SIZE_MAX : (size_t)d;
    }
    return 0;
}

static int s_number(s_compiler_t *c, json_t *value, const char *path, js_num_t *out) {
    if (!json_is_number(value)) {
        return s_fail(c, path, "must be a number");
    }
    *out = js_num_of(value);
    return 0;
}

/* --- keyword handlers, in Draft-07 meta-schema order --- */

static int s_kw_schema(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                       int depth) {
    if (depth != 1) {
        return s_fail(c, path, "$schema is only allowed at the root");
    }
    if (!json_is_string(value) || strcmp(json_string_value(value), JSONSCHEMA_DRAFT7_URI) != 0) {
        return s_fail(c, path, "only Draft-07 (\"%s\") is supported", JSONSCHEMA_DRAFT7_URI);
    }
    return 0;
}

static int s_kw_reject(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                       int depth) {
    const char *kw = strrchr(path, '/') + 1;
    return s_fail(c, path, "%s is not supported: schemas must be inline (no references)", kw);
}

static int s_kw_string_annotation(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                                  int depth) {
    return json_is_string(value) ? 0 : s_fail(c, path, "must be a string");
}

static int s_kw_bool_annotation(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                                int depth) {
    return json_is_boolean(value) ? 0 : s_fail(c, path, "must be a boolean");
}

static int s_kw_any_annotation(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                               int depth) {
    return 0;
}

static int s_kw_examples(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                         int depth) {
    return json_is_array(value) ? 0 : s_fail(c, path, "must be an array");
}

static int s_kw_multiple_of(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                            int depth) {
    if (!json_is_number(value) || json_number_value(value) <= 0) {
        return s_fail(c, path, "must be a number greater than 0");
    }
    js_decimal_t *dec = &node->multiple_of;
    dec->d = json_number_value(value);
    if (json_is_integer(value)) {
        uint64_t m = (uint64_t)json_integer_value(value);
        int e = 0;
        while (m % 10 == 0) {
            m /= 10;
            e++;
        }
        dec->m = m;
        dec->e = e;
    } else {
        char digits[JSONSTRICT_DIGITS_MAX + 1];
        jsonstrict_shortest(dec->d, digits, &dec->e);
        dec->m = strtoull(digits, NULL, 10);
    }
    node->has |= JS_HAS_MULTIPLE;
    return 0;
}

static int s_kw_maximum(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                        int depth) {
    node->has |= JS_HAS_MAXIMUM;
    return s_number(c, value, path, &node->maximum);
}

static int s_kw_exclusive_maximum(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                                  int depth) {
    node->has |= JS_HAS_EXMAX;
    return s_number(c, value, path, &node->exclusive_maximum);
}

static int s_kw_minimum(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                        int depth) {
    node->has |= JS_HAS_MINIMUM;
    return s_number(c, value, path, &node->minimum);
}

static int s_kw_exclusive_minimum(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                                  int depth) {
    node->has |= JS_HAS_EXMIN;
    return s_number(c, value, path, &node->exclusive_minimum);
}

static int s_kw_max_length(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                           int depth) {
    node->has |= JS_HAS_MAXLEN;
    return s_count(c, value, path, &node->max_length);
}

static int s_kw_min_length(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                           int depth) {
    node->has |= JS_HAS_MINLEN;
    return s_count(c, value, path, &node->min_length);
}

static int s_regex(s_compiler_t *c, const char *src, size_t len, const char *path,
                   js_regex_t **out) {
    char why[JSONSCHEMA_MESSAGE_MAX];
    if (++c->schema->npatterns > JSONSCHEMA_MAX_PATTERNS) {
        return s_fail(c, path, "more than %d patterns in one schema", JSONSCHEMA_MAX_PATTERNS);
    }
    if (len > JSONSCHEMA_MAX_PATTERN_BYTES) {
        return s_fail(c, path, "pattern of %zu bytes exceeds the cap of %d bytes", len,
                      JSONSCHEMA_MAX_PATTERN_BYTES);
    }
    *out = js_regex_compile(src, len, why, sizeof why);
    return *out ? 0 : s_fail(c, path, "invalid ECMA-262 regex: %s", why);
}

static int s_kw_pattern(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                        int depth) {
    if (!json_is_string(value)) {
        return s_fail(c, path, "must be a string");
    }
    node->has |= JS_HAS_PATTERN;
    return s_regex(c, json_string_value(value), json_string_length(value), path, &node->pattern);
}

static int s_list(s_compiler_t *c, json_t *value, const char *path, int depth, js_list_t *out) {
    out->count = json_array_size(value);
    out->items = mem_calloc(out->count, sizeof *out->items);
    for (size_t i = 0; i < out->count; i++) {
        char *p = s_index_path(path, i);
        out->items[i] = s_sub(c, json_array_get(value, i), p, depth);
        free(p);
        if (!out->items[i]) {
            return -1;
        }
    }
    return 0;
}

static int s_kw_items(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                      int depth) {
    if (json_is_array(value)) {
        node->items_is_array = true;
        return s_list(c, value, path, depth, &node->items_array);
    }
    return s_schema_kw(c, value, path, depth, &node->items);
}

static int s_kw_additional_items(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                                 int depth) {
    return s_schema_kw(c, value, path, depth, &node->additional_items);
}

static int s_kw_max_items(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                          int depth) {
    node->has |= JS_HAS_MAXITEMS;
    return s_count(c, value, path, &node->max_items);
}

static int s_kw_min_items(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                          int depth) {
    node->has |= JS_HAS_MINITEMS;
    return s_count(c, value, path, &node->min_items);
}

static int s_kw_unique_items(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                             int depth) {
    if (!json_is_boolean(value)) {
        return s_fail(c, path, "must be a boolean");
    }
    if (json_is_true(value)) {
        node->has |= JS_HAS_UNIQUE;
    }
    return 0;
}

static int s_kw_contains(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                         int depth) {
    return s_schema_kw(c, value, path, depth, &node->contains);
}

static int s_kw_max_properties(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                               int depth) {
    node->has |= JS_HAS_MAXPROPS;
    return s_count(c, value, path, &node->max_properties);
}

static int s_kw_min_properties(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                               int depth) {
    node->has |= JS_HAS_MINPROPS;
    return s_count(c, value, path, &node->min_properties);
}

/* An array of distinct strings (required, and the array form of dependencies). */
static int s_string_set(s_compiler_t *c, json_t *value, const char *path) {
    if (!json_is_array(value)) {
        return s_fail(c, path, "must be an array of strings");
    }
    for (size_t i = 0; i < json_array_size(value); i++) {
        json_t *item = json_array_get(value, i);
        if (!json_is_string(item)) {
            return s_fail(c, path, "item %zu must be a string", i);
        }
        for (size_t j = 0; j < i; j++) {
            if (json_equal(item, json_array_get(value, j))) {
                return s_fail(c, path, "item %zu repeats item %zu", i, j);
            }
        }
    }
    return 0;
}

static int s_kw_required(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                         int depth) {
    if (s_string_set(c, value, path)) {
        return -1;
    }
    if (json_array_size(value) > 0) {
        node->has |= JS_HAS_REQUIRED;
        node->required = value;
    }
    return 0;
}

static int s_kw_properties(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                           int depth) {
    if (!json_is_object(value)) {
        return s_fail(c, path, "must be an object");
    }
    node->props = mem_calloc(json_object_size(value), sizeof *node->props);
    const char *key = NULL;
    size_t len = 0;
    json_t *sub = NULL;
    json_object_keylen_foreach(value, key, len, sub) {
        char *p = s_child_path(path, key, len);
        js_prop_t *prop = &node->props[node->nprops++];
        prop->key = key;
        prop->len = len;
        prop->node = s_sub(c, sub, p, depth);
        free(p);
        if (!prop->node) {
            return -1;
        }
    }
    return 0;
}

static int s_kw_pattern_properties(s_compiler_t *c, js_node_t *node, json_t *value,
                                   const char *path, int depth) {
    if (!json_is_object(value)) {
        return s_fail(c, path, "must be an object");
    }
    node->patprops = mem_calloc(json_object_size(value), sizeof *node->patprops);
    const char *key = NULL;
    size_t len = 0;
    json_t *sub = NULL;
    json_object_keylen_foreach(value, key, len, sub) {
        char *p = s_child_path(path, key, len);
        js_patprop_t *pp = &node->patprops[node->npatprops++];
        int rc = s_regex(c, key, len, p, &pp->re);
        if (rc == 0) {
            pp->node = s_sub(c, sub, p, depth);
        }
        free(p);
        if (rc || !pp->node) {
            return -1;
        }
    }
    return 0;
}

static int s_kw_additional_properties(s_compiler_t *c, js_node_t *node, json_t *value,
                                      const char *path, int depth) {
    return s_schema_kw(c, value, path, depth, &node->additional_properties);
}

static int s_kw_dependencies(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                             int depth) {
    if (!json_is_object(value)) {
        return s_fail(c, path, "must be an object");
    }
    node->deps = mem_calloc(json_object_size(value), sizeof *node->deps);
    const char *key = NULL;
    size_t len = 0;
    json_t *sub = NULL;
    json_object_keylen_foreach(value, key, len, sub) {
        char *p = s_child_path(path, key, len);
        js_dep_t *dep = &node->deps[node->ndeps++];
        dep->key = key;
        dep->len = len;
        int rc = 0;
        if (json_is_array(sub)) {
            rc = s_string_set(c, sub, p);
            dep->required = sub;
        } else {
            rc = s_schema_kw(c, sub, p, depth, &dep->node);
        }
        free(p);
        if (rc) {
            return -1;
        }
    }
    return 0;
}

static int s_kw_property_names(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                               int depth) {
    return s_schema_kw(c, value, path, depth, &node->property_names);
}

static int s_kw_const(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                      int depth) {
    node->has |= JS_HAS_CONST;
    node->const_value = value;
    return 0;
}

static int s_kw_enum(s_compiler_t *c, js_node_t *node, json_t *value, const char *path, int depth) {
    if (!json_is_array(value)) {
        return s_fail(c, path, "must be an array");
    }
    node->has |= JS_HAS_ENUM;
    node->enum_values = value;
    return 0;
}

static const char *s_type_names[] = {"null",   "boolean", "object", "array",
                                     "number", "string",  "integer"};

static int s_type_bit(s_compiler_t *c, json_t *name, const char *path, uint8_t *types) {
    for (int i = 0; i < 7; i++) {
        if (json_is_string(name) && strcmp(json_string_value(name), s_type_names[i]) == 0) {
            if (*types & (1u << i)) {
                return s_fail(c, path, "type \"%s\" is listed twice", s_type_names[i]);
            }
            *types |= (uint8_t)(1u << i);
            return 0;
        }
    }
    return s_fail(c, path,
                  "must name JSON types (null, boolean, object, array, number, string, "
                  "integer)");
}

static int s_kw_type(s_compiler_t *c, js_node_t *node, json_t *value, const char *path, int depth) {
    node->has |= JS_HAS_TYPE;
    if (!json_is_array(value)) {
        return s_type_bit(c, value, path, &node->types);
    }
    for (size_t i = 0; i < json_array_size(value); i++) {
        if (s_type_bit(c, json_array_get(value, i), path, &node->types)) {
            return -1;
        }
    }
    return 0;
}

static int s_kw_format(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                       int depth) {
    if (!json_is_string(value)) {
        return s_fail(c, path, "must be a string");
    }
    node->format = js_format_lookup(json_string_value(value));
    if (node->format == JS_FMT_NONE) {
        return s_fail(c, path, "unsupported format \"%.64s\" (see JSONSCHEMA.md)",
                      json_string_value(value));
    }
    node->has |= JS_HAS_FORMAT;
    return 0;
}

static int s_branches(s_compiler_t *c, json_t *value, const char *path, int depth, js_list_t *out) {
    if (!json_is_array(value) || json_array_size(value) == 0) {
        return s_fail(c, path, "must be a non-empty array of schemas");
    }
    c->branches += json_array_size(value);
    if (c->branches > JSONSCHEMA_MAX_BRANCHES) {
        return s_fail(c, path, "more than %d allOf/anyOf/oneOf branches in one schema",
                      JSONSCHEMA_MAX_BRANCHES);
    }
    return s_list(c, value, path, depth, out);
}

static int s_kw_all_of(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                       int depth) {
    return s_branches(c, value, path, depth, &node->all_of);
}

static int s_kw_any_of(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                       int depth) {
    return s_branches(c, value, path, depth, &node->any_of);
}

static int s_kw_one_of(s_compiler_t *c, js_node_t *node, json_t *value, const char *path,
                       int depth) {
    return s_branches(c, value, path, depth, &node->one_of);
}

static int s_kw_not(s_compiler_t *c, js_node_t *node, json_t *value, const char *path, int depth) {
    return s_schema_kw(c, value, path, depth, &node->not_schema);
}

static int s_kw_if(s_compiler_t *c, js_node_t *node, json_t *value, const char *path, int depth) {
    return s_schema_kw(c, value, path, depth, &node->if_schema);
}

static int s_kw_then(s_compiler_t *c, js_node_t *node, json_t *value, const char *path, int depth) {
    return s_schema_kw(c, value, path, depth, &node->then_schema);
}

static int s_kw_else(s_compiler_t *c, js_node_t *node, json_t *value, const char *path, int depth) {
    return s_schema_kw(c, value, path, depth, &node->else_schema);
}

static const s_keyword_t s_keywords[] = {
    {"$schema", s_kw_schema},
    {"$ref", s_kw_reject},
    {"$id", s_kw_reject},
    {"id", s_kw_reject},
    {"definitions", s_kw_reject},
    {"$defs", s_kw_reject},
    {"$comment", s_kw_string_annotation},
    {"title", s_kw_string_annotation},
    {"description", s_kw_string_annotation},
    {"default", s_kw_any_annotation},
    {"readOnly", s_kw_bool_annotation},
    {"writeOnly", s_kw_bool_annotation},
    {"examples", s_kw_examples},
    {"contentMediaType", s_kw_string_annotation},
    {"contentEncoding", s_kw_string_annotation},
    {"multipleOf", s_kw_multiple_of},
    {"maximum", s_kw_maximum},
    {"exclusiveMaximum", s_kw_exclusive_maximum},
    {"minimum", s_kw_minimum},
    {"exclusiveMinimum", s_kw_exclusive_minimum},
    {"maxLength", s_kw_max_length},
    {"minLength", s_kw_min_length},
    {"pattern", s_kw_pattern},
    {"additionalItems", s_kw_additional_items},
    {"items", s_kw_items},
    {"maxItems", s_kw_max_items},
    {"minItems", s_kw_min_items},
    {"uniqueItems", s_kw_unique_items},
    {"contains", s_kw_contains},
    {"maxProperties", s_kw_max_properties},
    {"minProperties", s_kw_min_properties},
    {"required", s_kw_required},
    {"additionalProperties", s_kw_additional_properties},
    {"properties", s_kw_properties},
    {"patternProperties", s_kw_pattern_properties},
    {"dependencies", s_kw_dependencies},
    {"propertyNames", s_kw_property_names},
    {"const", s_kw_const},
    {"enum", s_kw_enum},
    {"type", s_kw_type},
    {"format", s_kw_format},
    {"allOf", s_kw_all_of},
    {"anyOf", s_kw_any_of},
    {"oneOf", s_kw_one_of},
    {"not", s_kw_not},
    {"if", s_kw_if},
    {"then", s_kw_then},
    {"else", s_kw_else},
};

static const s_keyword_t *s_keyword(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof s_keywords / sizeof s_keywords[0]; i++) {
        if (strlen(s_keywords[i].name) == len && memcmp(s_keywords[i].name, name, len) == 0) {
            return &s_keywords[i];
        }
    }
    return NULL;
}

static js_node_t *s_new_node(s_compiler_t *c, const char *path) {
    jsonschema_t *s = c->schema;
    js_node_t *node = mem_calloc(1, sizeof *node);
    node->path = mem_strdup(path);
    s->nodes = mem_realloc(s->nodes, (s->nnodes + 1) * sizeof *s->nodes);
    s->nodes[s->nnodes++] = node;
    return node;
}

static int s_keywords_of(s_compiler_t *c, js_node_t *node, json_t *json, int depth) {
    const char *key = NULL;
    size_t len = 0;
    json_t *value = NULL;
    json_object_keylen_foreach(json, key, len, value) {
        char *p = s_child_path(node->path, key, len);
        const s_keyword_t *kw = s_keyword(key, len);
        int rc =
            kw ? kw->fn(c, node, value, p, depth) : s_fail(c, p, "unknown keyword \"%.64s\"", key);
        free(p);
        if (rc) {
            return -1;
        }
    }
    return 0;
}

static js_node_t *s_compile_node(s_compiler_t *c, json_t *json, const char *path, int depth) {
    if (!json_is_object(json) && !json_is_boolean(json)) {
        s_fail(c, path, "a schema must be an object or a boolean");
        return NULL;
    }
    if (depth > JSONSCHEMA_MAX_DEPTH) {
        s_fail(c, path, "schema nesting exceeds the cap of %d levels", JSONSCHEMA_MAX_DEPTH);
        return NULL;
    }
    if (c->schema->nnodes >= JSONSCHEMA_MAX_NODES) {
        s_fail(c, path, "schema exceeds the cap of %d subschemas", JSONSCHEMA_MAX_NODES);
        return NULL;
    }
    js_node_t *node = s_new_node(c, path);
    if (json_is_boolean(json)) {
        node->is_bool = true;
        node->bool_value = json_is_true(json);
        return node;
    }
    if (s_keywords_of(c, node, json, depth)) {
        return NULL;
    }
    s_finish(c->schema, node);
    return node;
}

static pcre2_match_context *s_match_context(void) {
    pcre2_match_context *mctx = pcre2_match_context_create(NULL);
    ASSERT(mctx != NULL); /* NULL only when malloc fails */
    pcre2_set_match_limit(mctx, JSONSCHEMA_MATCH_LIMIT);
    pcre2_set_depth_limit(mctx, JSONSCHEMA_MATCH_DEPTH_LIMIT);
    pcre2_set_heap_limit(mctx, JSONSCHEMA_MATCH_HEAP_KIB);
    return mctx;
}

int jsonschema_compile(const json_t *schema, jsonschema_t **out, jsonschema_error_t *err) {
    jsonschema_t *self = mem_calloc(1, sizeof *self);
    self->values = jsontape_new();
    s_compiler_t c = {.schema = self, .err = err};
    *out = NULL;
    if (err) {
        memset(err, 0, sizeof *err);
    }
    /* A private copy keeps the compiled form independent of the caller's (mutable) value. */
    self->doc = json_deep_copy(schema);
    if (!self->doc) {
        s_fail(&c, "", "schema could not be copied");
        jsonschema_destroy(&self);
        return -1;
    }
    self->root = s_compile_node(&c, self->doc, "", 1);
    if (!self->root) {
        jsonschema_destroy(&self);
        return -1;
    }
    self->match_ctx = s_match_context();
    *out = self;
    return 0;
}

static void s_node_free(js_node_t *node) {
    js_regex_free(&node->pattern);
    for (size_t i = 0; i < node->npatprops; i++) {
        js_regex_free(&node->patprops[i].re);
    }
    free(node->patprops);
    free(node->props);
    free(node->prop_slots);
    for (size_t i = 0; i < node->ndeps; i++) {
        free(node->deps[i].required_idx);
    }
    free(node->deps);
    free(node->required_idx);
    free(node->enum_hashes);
    free(node->enum_at);
    free(node->required_mask);
    free(node->items_array.items);
    free(node->all_of.items);
    free(node->any_of.items);
    free(node->one_of.items);
    s_disc_free(node->any_of.disc);
    s_disc_free(node->one_of.disc);
    free(node->path);
    free(node);
}

void jsonschema_destroy(jsonschema_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    jsonschema_t *self = *self_p;
    for (size_t i = 0; i < self->nnodes; i++) {
        s_node_free(self->nodes[i]);
    }
    free(self->nodes);
    if (self->match_ctx) {
        pcre2_match_context_free(self->match_ctx);
    }
    json_decref(self->doc);
    jsontape_destroy(&self->values);
    free(self);
    *self_p = NULL;
}

size_t jsonschema_node_count(const jsonschema_t *self) {
    return self->nnodes;
}

size_t jsonschema_pattern_count(const jsonschema_t *self) {
    return self->npatterns;
}
