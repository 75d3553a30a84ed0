/* jsonschema: the Draft-07 compiler; see jsonschema.h and JSONSCHEMA.md. */
#include "schemanode.h"
#include "jsondecimal.h"
#include "jsonnumber.h"
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
    n += jsontape_escape(out + n, key, len);
    out[n] = '\0';
    return out;
}

static char *s_index_path(const char *parent, size_t index) {
    return mem_printf("%s/%zu", parent, index);
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

/* Whether v is a text real (jsonnumber.h); if so, its decimal value in *out. */
static bool s_text_decimal(const json_t *v, jsondecimal_t *out) {
    size_t len = 0;
    const char *text = jsonnumber_text(v, &len);
    if (text) {
        jsondecimal_of_literal(text, len, out);
    }
    return text != NULL;
}

/* The sign of the number v (-1, 0, 1), exact for a text real. */
static int s_sign(const json_t *v) {
    jsondecimal_t dec;
    if (s_text_decimal(v, &dec)) {
        return dec.ndigits == 0 ? 0 : dec.neg ? -1 : 1;
    }
    double d = json_number_value(v);
    return d < 0 ? -1 : d > 0;
}

static bool s_is_integral(const json_t *v) {
    if (json_is_integer(v)) {
        return true;
    }
    jsondecimal_t dec;
    if (s_text_decimal(v, &dec)) {
        return jsondecimal_is_integer(&dec);
    }
    return json_is_real(v) && floor(json_real_value(v)) == json_real_value(v);
}

static int s_count(s_compiler_t *c, json_t *value, const char *path, size_t *out) {
    if (!s_is_integral(value) || s_sign(value) < 0) {
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
    if (!json_is_number(value) || s_sign(value) <= 0) {
        return s_fail(c, path, "must be a number greater than 0");
    }
    js_decimal_t *dec = &node->multiple_of;
    dec->d = json_number_value(value);
    dec->num = js_num_of(value);
    if (dec->num.text) {
        /* compared as a decimal (js_multiple), in 128-bit steps: the digits are capped */
        jsondecimal_t d;
        (void)s_text_decimal(value, &d);
        if (d.ndigits > JSONDECIMAL_MULTIPLE_FAST_DIGITS) {
            return s_fail(c, path, "must have at most %d significant digits",
                          JSONDECIMAL_MULTIPLE_FAST_DIGITS);
        }
    } else if (json_is_integer(value)) {
        uint64_t m = (uint64_t)json_integer_value(value);
        int e = 0;
        while (m % 10 == 0) {
            m /= 10;
            e++;
        }
        dec->m = m;
        dec->e = e;
    } else {
        char digits[JSONDECIMAL_SHORTEST_MAX + 1];
        jsondecimal_shortest(dec->d, digits, &dec->e);
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
        js_check_plan(node);
        return node;
    }
    if (s_keywords_of(c, node, json, depth)) {
        return NULL;
    }
    js_plan_node(c->schema, node);
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
    self->doc = jsonnumber_deep_copy(schema);
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
    js_disc_free(node->any_of.disc);
    js_disc_free(node->one_of.disc);
    free(node->path);
    free(node);
}

void jsonschema_destroy(jsonschema_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    jsonschema_t *self = *self_p;
    js_native_free(&self->native);
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
