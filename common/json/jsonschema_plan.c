/* jsonschema_plan: what the compiler derives from a node once its keywords are read, so that
 * the validator does little per instance value: name tables, keyword groups, quick tests,
 * one-pass objects, discriminators and const/enum values on a tape (JSONSCHEMA.md,
 * "Validation cost"). */
#include "schemanode.h"
#include "mem.h"

#include <stdlib.h>
#include <string.h>

js_head_t js_head_of(const char *key, size_t len) {
    js_head_t h = {0, 0};
    size_t n = len < 8 ? len : 8;
    memcpy(&h.word, key, n);
    memset(&h.mask, 0xff, n);
    return h;
}

/* The index of key among node's names, or -1 (for keys of the schema: js_prop_find reads
 * tape strings only). */
static long s_name_index(const js_node_t *node, const char *key, size_t len) {
    for (size_t i = 0; i < node->nnames; i++) {
        if (node->props[i].len == len && memcmp(node->props[i].key, key, len) == 0) {
            return (long)i;
        }
    }
    return -1;
}

/* The index of key among node's names, appending it when it is new. */
static uint32_t s_name(js_node_t *node, size_t *cap, const char *key, size_t len) {
    long at = s_name_index(node, key, len);
    if (at >= 0) {
        return (uint32_t)at;
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
        node->props[k].head = js_head_of(node->props[k].key, node->props[k].len);
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

/* Whether node is {"type": "object", ...} requiring key with a string const on it; returns that
 * const's node or NULL. */
static const js_node_t *s_disc_const(const js_node_t *node, const char *key, size_t len) {
    if (node->is_bool || !(node->has & JS_HAS_TYPE) || node->types != JS_T_OBJECT) {
        return NULL;
    }
    long i = s_name_index(node, key, len);
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
        size_t i = 0;
        while (i < list->count && s_disc_const(list->items[i], p->key, p->len)) {
            i++;
        }
        if (i < list->count) {
            continue;
        }
        js_disc_t *d = mem_calloc(1, sizeof *d);
        *d = (js_disc_t){.key = p->key, .len = p->len, .head = p->head};
        d->consts = mem_calloc(list->count, sizeof *d->consts);
        d->distinct = true;
        for (i = 0; i < list->count; i++) {
            const js_node_t *c = s_disc_const(list->items[i], p->key, p->len);
            for (size_t j = 0; j < i; j++) {
                d->distinct = d->distinct &&
                              !(d->consts[j]->const_len == c->const_len &&
                                memcmp(d->consts[j]->const_str, c->const_str, c->const_len) == 0);
            }
            d->consts[i] = c;
        }
        return d;
    }
    return NULL;
}

void js_disc_free(js_disc_t *d) {
    if (d) {
        free(d->consts);
        free(d);
    }
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
        case JS_G_GENERIC: /* a string const, and a type that admits it or none */
            return node->const_str && !(node->has & ~(JS_HAS_TYPE | JS_HAS_CONST)) &&
                           (!(node->has & JS_HAS_TYPE) || (node->types & JS_T_STRING))
                       ? JS_QUICK_CONST
                       : JS_QUICK_NONE;
        case JS_G_NUMBER:
            return !(node->has & ~range) ? JS_QUICK_RANGE : JS_QUICK_NONE;
        case JS_G_STRING:
            return !(node->has & ~length) ? JS_QUICK_LENGTH : JS_QUICK_NONE;
        default:
            return JS_QUICK_NONE;
    }
}

/* Copies const and enum values onto the schema's tape, where instances are compared. */
static void s_prepare_values(jsonschema_t *schema, js_node_t *node) {
    if (node->has & JS_HAS_CONST) {
        long at = jsontape_from_json(schema->values, node->const_value);
        ASSERT(at >= 0); /* schema text is capped far below the tape's indexes */
        node->const_at = (uint32_t)at;
        if (json_is_string(node->const_value)) {
            node->const_str = json_string_value(node->const_value);
            node->const_len = json_string_length(node->const_value);
            node->const_head = js_head_of(node->const_str, node->const_len);
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

/* One table of every member name that properties, required and dependencies look up, so that
 * validation visits each instance member once. The names are distinct (properties keys are;
 * s_name merges the rest), so the table is a set. */
void js_plan_node(jsonschema_t *schema, js_node_t *node) {
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
    /* Validity alone (no report) needs one pass over the members when each member's checks
     * depend on that member only (not so for dependencies), and the names fit one word. */
    node->one_pass = node->nnames <= 64 && !node->ndeps;
    node->only_object = node->one_pass && !node->is_bool && node->groups == JS_G_OBJECT;
    node->any_of.disc = s_discriminator(&node->any_of);
    node->one_of.disc = s_discriminator(&node->one_of);
    js_check_plan(node);
}
