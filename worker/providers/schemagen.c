/* schemagen: see schemagen.h. */
#include "schemagen.h"
#include "jsonnumber.h"
#include "mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_ITEMS_MAX 64 /* array items the generator writes at most */

static json_t *s_gen(const json_t *schema, int variant, int depth);

static double s_num(const json_t *schema, const char *key, double dflt) {
    const json_t *v = json_object_get(schema, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* The schema with one applicator (allOf, anyOf or oneOf) replaced by its branch's keys:
 * a shallow copy, new reference. */
static json_t *s_merge(const json_t *schema, const char *applicator, const json_t *branch) {
    json_t *out = json_copy((json_t *)schema);
    json_object_del(out, applicator);
    if (json_is_object(branch)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)branch, k, v) {
            json_object_set(out, k, v);
        }
    }
    return out;
}

/* The first type the schema lists, preferring any other over "null"; NULL when absent. */
static const char *s_type(const json_t *schema) {
    const json_t *t = json_object_get(schema, "type");
    if (json_is_string(t)) {
        return json_string_value(t);
    }
    const char *first = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
        const char *name = json_string_value(e);
        if (name && strcmp(name, "null") != 0) {
            return name;
        }
        first = first ? first : name;
    }
    if (first) {
        return first;
    }
    if (json_object_get(schema, "properties") || json_object_get(schema, "required") ||
        json_object_get(schema, "minProperties")) {
        return "object";
    }
    if (json_object_get(schema, "items") || json_object_get(schema, "minItems")) {
        return "array";
    }
    if (json_object_get(schema, "minLength") || json_object_get(schema, "maxLength") ||
        json_object_get(schema, "format")) {
        return "string";
    }
    if (json_object_get(schema, "minimum") || json_object_get(schema, "maximum") ||
        json_object_get(schema, "exclusiveMinimum") ||
        json_object_get(schema, "exclusiveMaximum")) {
        return "number";
    }
    return "null";
}

static json_t *s_number(const json_t *schema, bool integer, int variant) {
    double lo = s_num(schema, "minimum", -INFINITY);
    double xlo = s_num(schema, "exclusiveMinimum", -INFINITY);
    double hi = s_num(schema, "maximum", INFINITY);
    double xhi = s_num(schema, "exclusiveMaximum", INFINITY);
    double start = 0;
    if (isfinite(lo) || isfinite(xlo)) {
        start = isfinite(xlo) && floor(xlo) + 1 > lo ? floor(xlo) + 1 : ceil(lo);
        if (!integer && isfinite(lo) && lo >= (isfinite(xlo) ? floor(xlo) + 1 : -INFINITY)) {
            start = lo;
        }
    }
    double top = isfinite(xhi) ? (integer ? ceil(xhi) - 1 : xhi) : hi;
    if (start > top) {
        start = integer ? floor(top) : (isfinite(xhi) && !isfinite(hi) ? (xhi + start) / 2 : top);
    }
    double v = start + variant <= top ? start + variant : start;
    double m = s_num(schema, "multipleOf", 0);
    if (m > 0) {
        double k = ceil(v / m);
        for (int i = 0; i < 100 && integer && floor(k * m) != k * m; i++) {
            k++;
        }
        v = k * m;
    }
    if (floor(v) == v && fabs(v) < 9007199254740992.0) {
        return json_integer((json_int_t)v);
    }
    return json_real(v);
}

static const char *s_format_sample(const char *format) {
    static const struct {
        const char *name;
        const char *sample;
    } formats[] = {
        {"date-time", "2024-01-02T03:04:05Z"},
        {"date", "2024-01-02"},
        {"time", "03:04:05Z"},
        {"email", "someone@example.com"},
        {"idn-email", "someone@example.com"},
        {"hostname", "example.com"},
        {"idn-hostname", "example.com"},
        {"ipv4", "192.0.2.1"},
        {"ipv6", "2001:db8::1"},
        {"uri", "https://example.com/a"},
        {"uri-reference", "/a"},
        {"iri", "https://example.com/a"},
        {"iri-reference", "/a"},
        {"uri-template", "https://example.com/{id}"},
        {"json-pointer", "/a"},
        {"relative-json-pointer", "0"},
        {"regex", "a+"},
    };
    for (size_t i = 0; format && i < sizeof formats / sizeof formats[0]; i++) {
        if (!strcmp(formats[i].name, format)) {
            return formats[i].sample;
        }
    }
    return NULL;
}

static json_t *s_string(const json_t *schema, int variant) {
    const char *sample = s_format_sample(json_string_value(json_object_get(schema, "format")));
    char *base = sample    ? mem_strdup(sample)
                 : variant ? mem_printf("sample-%d", variant)
                           : mem_strdup("sample");
    size_t len = strlen(base);
    double minlen = s_num(schema, "minLength", 0);
    double maxlen = s_num(schema, "maxLength", 1e9);
    size_t want = len;
    if (!sample && want > maxlen) {
        want = (size_t)maxlen;
    }
    if (want < minlen) {
        want = minlen > 4096 ? 4096 : (size_t)minlen;
    }
    char *s = mem_alloc(want + 1);
    for (size_t i = 0; i < want; i++) {
        s[i] = i < len ? base[i] : 'x';
    }
    s[want] = '\0';
    json_t *out = json_string(s);
    free(s);
    free(base);
    return out;
}

static json_t *s_object(const json_t *schema, int variant, int depth) {
    json_t *out = json_object();
    const json_t *props = json_object_get(schema, "properties");
    const json_t *required = json_object_get(schema, "required");
    const json_t *extra = json_object_get(schema, "additionalProperties");
    double maxp = s_num(schema, "maxProperties", 1e9);
    size_t i;
    json_t *r;
    json_array_foreach(required, i, r) {
        const char *k = json_string_value(r);
        const json_t *sub = json_object_get(props, k);
        if (k && !json_object_get(out, k)) {
            json_object_set_new(out, k, s_gen(sub ? sub : extra, variant, depth + 1));
        }
    }
    const char *k;
    json_t *sub;
    json_object_foreach((json_t *)props, k, sub) {
        if (json_object_size(out) < maxp && !json_object_get(out, k)) {
            json_object_set_new(out, k, s_gen(sub, variant, depth + 1));
        }
    }
    double minp = s_num(schema, "minProperties", 0);
    for (int n = 1; json_object_size(out) < minp && n <= S_ITEMS_MAX && !json_is_false(extra);
         n++) {
        char key[24];
        snprintf(key, sizeof key, "extra%d", n);
        json_object_set_new(out, key, s_gen(extra, variant, depth + 1));
    }
    return out;
}

static json_t *s_array(const json_t *schema, int variant, int depth) {
    json_t *out = json_array();
    const json_t *items = json_object_get(schema, "items");
    double minn = s_num(schema, "minItems", 0);
    double maxn = s_num(schema, "maxItems", S_ITEMS_MAX);
    size_t n = minn > 0 ? (size_t)minn : 1;
    n = n > maxn ? (size_t)maxn : n;
    n = n > S_ITEMS_MAX ? S_ITEMS_MAX : n;
    if (json_is_array(items)) {
        const json_t *more = json_object_get(schema, "additionalItems");
        size_t tuple = json_array_size(items);
        n = n > tuple ? n : tuple;
        for (size_t i = 0; i < n && !(i >= tuple && json_is_false(more)); i++) {
            const json_t *sub = i < tuple ? json_array_get(items, i) : more;
            json_array_append_new(out, s_gen(sub, variant + (int)i, depth + 1));
        }
        return out;
    }
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(out, s_gen(items, variant + (int)i, depth + 1));
    }
    return out;
}

static json_t *s_gen(const json_t *schema, int variant, int depth) {
    if (!json_is_object(schema) || depth > SCHEMAGEN_DEPTH_MAX) {
        return json_null();
    }
    const json_t *c = json_object_get(schema, "const");
    if (c) {
        return jsonnumber_deep_copy(c);
    }
    const json_t *e = json_object_get(schema, "enum");
    if (json_array_size(e) > 0) {
        size_t n = json_array_size(e);
        return jsonnumber_deep_copy(json_array_get(e, (size_t)variant % n));
    }
    static const char *const applicators[] = {"allOf", "anyOf", "oneOf"};
    for (size_t a = 0; a < 3; a++) {
        const json_t *branches = json_object_get(schema, applicators[a]);
        if (json_array_size(branches) == 0) {
            continue;
        }
        json_t *merged = s_merge(schema, applicators[a], json_array_get(branches, 0));
        for (size_t i = 1; a == 0 && i < json_array_size(branches); i++) {
            json_t *next = s_merge(merged, "allOf", json_array_get(branches, i));
            json_decref(merged);
            merged = next;
        }
        json_t *out = s_gen(merged, variant, depth + 1);
        json_decref(merged);
        return out;
    }
    const char *type = s_type(schema);
    if (!strcmp(type, "object")) {
        return s_object(schema, variant, depth);
    }
    if (!strcmp(type, "array")) {
        return s_array(schema, variant, depth);
    }
    if (!strcmp(type, "string")) {
        return s_string(schema, variant);
    }
    if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        return s_number(schema, !strcmp(type, "integer"), variant);
    }
    if (!strcmp(type, "boolean")) {
        return json_boolean(variant % 2 == 0);
    }
    return json_null();
}

json_t *schemagen_instance(const json_t *schema, int variant) {
    return s_gen(schema, variant, 0);
}

static bool s_accepts(const jsonschema_t *compiled, const json_t *v) {
    return jsonschema_validate(compiled, v, JSONSCHEMA_FAIL_FAST, NULL) == JSONSCHEMA_VALID;
}

/* Candidate schemas: the schema itself, each anyOf/oneOf branch merged in, each listed type. */
static json_t *s_candidates(const json_t *schema) {
    json_t *out = json_array();
    json_array_append(out, (json_t *)schema);
    static const char *const applicators[] = {"anyOf", "oneOf"};
    for (size_t a = 0; a < 2; a++) {
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(schema, applicators[a]), i, b) {
            json_array_append_new(out, s_merge(schema, applicators[a], b));
        }
    }
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(schema, "type"), i, t) {
        json_t *one = json_copy((json_t *)schema);
        json_object_set(one, "type", t);
        json_array_append_new(out, one);
    }
    return out;
}

json_t *schemagen_valid(const json_t *schema, const jsonschema_t *compiled) {
    json_t *cands = s_candidates(schema);
    json_t *found = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(cands, i, c) {
        json_t *v = schemagen_instance(c, 0);
        if (s_accepts(compiled, v)) {
            found = v;
            break;
        }
        json_decref(v);
    }
    json_decref(cands);
    return found;
}

json_t *schemagen_invalid(const json_t *schema, const jsonschema_t *compiled) {
    static const char *const tries[] = {
        "\"not-a-valid-value\"", "123456789", "-1", "0.5", "true", "null", "[]", "{}",
        "{\"unexpected\":true}", "\"\"",
    };
    json_t *inst = schemagen_instance(schema, 0);
    /* The valid instance minus a member, or plus one: wrong shape rather than wrong type. */
    if (json_is_object(inst) && json_object_size(inst) > 0) {
        void *it = json_object_iter(inst);
        json_t *fewer = json_copy(inst);
        json_object_del(fewer, json_object_iter_key(it));
        if (!s_accepts(compiled, fewer)) {
            json_decref(inst);
            return fewer;
        }
        json_decref(fewer);
    }
    json_decref(inst);
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        json_t *v = json_loads(tries[i], JSON_DECODE_ANY, NULL);
        if (v && !s_accepts(compiled, v)) {
            return v;
        }
        json_decref(v);
    }
    return NULL;
}
