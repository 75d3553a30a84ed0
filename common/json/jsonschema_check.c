/*
 * jsonschema_check: validity alone, where nothing is reported (fail-fast validation without a
 * report, and the quiet branches of anyOf, oneOf, not, if and contains). Each node gets, when
 * it is planned, the check made for its shape: a leaf's test, an object's one pass over its
 * members, an array's items, a discriminated anyOf/oneOf; any other node is visited by the
 * validator (js_visit). A check tests only what its node asserts, so that the common schemas
 * cost a few loads and compares per value; see js_check in schemanode.h.
 */
#include "schemanode.h"

/* --- leaves --- */

/* type alone (or the schema true, whose pass admits every value). */
static bool c_type(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    return !node->is_bool && js_type_ok(node->types, &ctx->e[v]);
}

/* The schema false. */
static bool c_false(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    (void)ctx, (void)node, (void)v;
    return false;
}

/* A string const (and type at most). */
static bool c_const(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    return e->type == JSONTAPE_STRING &&
           js_str_is(jsontape_str(ctx->t, e), e->size, node->const_str, node->const_len,
                     node->const_head);
}

/* The validator's numeric keywords, reporting nothing even where the caller reports (the
 * quick test c_range runs there before the visit that reports). */
static bool c_numeric_exact(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    ctx->quiet++;
    bool ok = js_numeric(ctx, node, v);
    ctx->quiet--;
    return ok;
}

/* The numeric keywords on the number at v (its type already checked): as doubles where
 * range_f64 says they stand for the bounds and the number is a double or an int64 a double
 * holds exactly, so that the comparisons are jsontape_num_cmp's; else the validator's. */
static inline bool c_numeric(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    const int64_t exact = (int64_t)1 << 53;
    double x = 0;
    if (!node->range_f64) {
        return c_numeric_exact(ctx, node, v);
    }
    if (e->type == JSONTAPE_REAL && !(e->flags & JSONTAPE_F_TEXT)) {
        x = e->u.d;
    } else if (e->type == JSONTAPE_INTEGER && e->u.i >= -exact && e->u.i <= exact) {
        x = (double)e->u.i;
    } else {
        return c_numeric_exact(ctx, node, v);
    }
    return x >= node->range_lo && x <= node->range_hi &&
           (!(node->has & JS_HAS_MULTIPLE) ||
            js_multiple(jsontape_num(ctx->t, e), &node->multiple_of));
}

/* Type and numeric bounds. */
static bool c_range(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    if ((node->has & JS_HAS_TYPE) && !js_type_ok(node->types, e)) {
        return false;
    }
    return !jsontape_is_number(e) || c_numeric(ctx, node, v);
}

/* minLength/maxLength (and type at most). */
static bool c_length(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    if ((node->has & JS_HAS_TYPE) && !js_type_ok(node->types, e)) {
        return false;
    }
    return e->type != JSONTAPE_STRING ||
           ((!(node->has & JS_HAS_MINLEN) || e->u.s.chars >= node->min_length) &&
            (!(node->has & JS_HAS_MAXLEN) || e->u.s.chars <= node->max_length));
}

/* enum (and type at most). */
static bool c_enum(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    return (!(node->has & JS_HAS_TYPE) || js_type_ok(node->types, &ctx->e[v])) &&
           js_enum_has(ctx, node, v);
}

/* Any other leaf: type, const/enum, and the numeric or string keywords. */
static bool c_leaf(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    if ((node->has & JS_HAS_TYPE) && !js_type_ok(node->types, e)) {
        return false;
    }
    if ((node->groups & JS_G_GENERIC) && !js_generic(ctx, node, v)) {
        return false;
    }
    switch (node->groups & js_type_group[e->type]) {
        case JS_G_NUMBER:
            return c_numeric(ctx, node, v);
        case JS_G_STRING:
            return js_chars(ctx, node, e);
        default:
            return true;
    }
}

/* --- arrays --- */

/* An array node's type and item counts on v: 1 or 0 when they settle the verdict (v is not an
 * array, or fails them), -1 when v's items are still to be checked. */
static inline int c_array_head(const js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    if ((node->has & JS_HAS_TYPE) && !js_type_ok(node->types, e)) {
        return 0;
    }
    if (e->type != JSONTAPE_ARRAY) {
        return 1;
    }
    return e->size >= node->min_items && e->size <= node->max_items ? -1 : 0;
}

/* items (one schema for every item), minItems/maxItems and type: nothing else. */
static bool c_items(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    int head = c_array_head(ctx, node, v);
    if (head >= 0 || !node->items) {
        return head != 0;
    }
    const uint32_t end = ctx->e[v].next;
    for (uint32_t it = v + 1; it < end; it = ctx->e[it].next) {
        if (!js_check(ctx, node->items, it)) {
            return false;
        }
    }
    return true;
}

/* items as a list (with additionalItems), minItems/maxItems and type: nothing else. */
static bool c_tuple(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    int head = c_array_head(ctx, node, v);
    if (head >= 0) {
        return head != 0;
    }
    size_t i = 0;
    const uint32_t end = ctx->e[v].next;
    for (uint32_t it = v + 1; it < end; it = ctx->e[it].next, i++) {
        const js_node_t *sub =
            i < node->items_array.count ? node->items_array.items[i] : node->additional_items;
        if (sub && !js_check(ctx, sub, it)) {
            return false;
        }
    }
    return true;
}

/* --- objects --- */

/* Type and the object keywords of a one_pass node. */
static bool c_object(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const jsontape_entry_t *e = &ctx->e[v];
    if ((node->has & JS_HAS_TYPE) && !js_type_ok(node->types, e)) {
        return false;
    }
    return e->type != JSONTAPE_OBJECT || js_check_members(ctx, node, v);
}

/* --- applicators --- */

/* A one_pass object node with applicators besides: its type and members, then the
 * applicators. */
static bool c_object_apply(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    return c_object(ctx, node, v) && js_apply(ctx, node, v);
}

/* anyOf or oneOf (whichever the node has) with a discriminator, and nothing else: only the
 * branches whose const the discriminating member meets are checked. */
static bool c_disc(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    const bool any = node->any_of.count != 0;
    const js_list_t *list = any ? &node->any_of : &node->one_of;
    uint32_t dv = js_disc_value(ctx, list, v);
    if (!dv) {
        return false; /* every branch is an object that requires the member */
    }
    const jsontape_entry_t *de = &ctx->e[dv];
    if (de->type != JSONTAPE_STRING) {
        return false; /* every const is a string */
    }
    const char *s = jsontape_str(ctx->t, de);
    size_t hits = 0;
    for (size_t i = 0; i < list->count && !ctx->abort; i++) {
        const js_node_t *c = list->disc->consts[i];
        if (!js_str_is(s, de->size, c->const_str, c->const_len, c->const_head)) {
            continue;
        }
        bool ok = js_check(ctx, list->items[i], v);
        if (list->disc->distinct) {
            return ok; /* no other branch's const can match */
        }
        if (ok && (any || ++hits == 2)) {
            return any;
        }
    }
    return hits == 1;
}

/* Any other node: the validator's visit (quiet here). */
static bool c_visit(js_vctx_t *ctx, const js_node_t *node, uint32_t v) {
    return js_visit(ctx, node, v);
}

/* --- planning --- */

/* The tape types node admits on the type alone: those its type admits (a real only where any
 * number is) and no keyword of node looks at. */
static uint8_t s_pass(const js_node_t *node) {
    if (node->is_bool) {
        return node->bool_value ? 0xff : 0;
    }
    if (node->groups & (JS_G_GENERIC | JS_G_APPLY)) {
        return 0;
    }
    uint8_t pass = 0;
    for (int t = 0; t < 8; t++) {
        bool admitted = !(node->has & JS_HAS_TYPE) ||
                        (t == JSONTAPE_REAL ? (node->types & JS_T_NUMBER) != 0
                                            : (node->types & js_type_bits[t]) != 0);
        pass |= admitted && !(node->groups & js_type_group[t]) ? (uint8_t)(1u << t) : 0;
    }
    return pass;
}

/* Whether a bound a double stands for: a double, or an int64 a double holds exactly. */
static bool s_f64(js_num_t n, double *out) {
    const int64_t exact = (int64_t)1 << 53;
    if (n.text || (n.is_int && (n.i < -exact || n.i > exact))) {
        return false;
    }
    *out = n.is_int ? (double)n.i : n.d;
    return true;
}

/* Sets range_f64 and the double bounds of a node with numeric keywords, at most one lower and
 * one upper bound, each of which a double stands for. */
static void s_plan_range(js_node_t *node) {
    uint32_t has = node->has;
    if (((has & JS_HAS_MINIMUM) && (has & JS_HAS_EXMIN)) ||
        ((has & JS_HAS_MAXIMUM) && (has & JS_HAS_EXMAX))) {
        return;
    }
    node->range_lo = -INFINITY;
    node->range_hi = INFINITY;
    bool ok = true;
    if (has & (JS_HAS_MINIMUM | JS_HAS_EXMIN)) {
        ok = s_f64(has & JS_HAS_MINIMUM ? node->minimum : node->exclusive_minimum,
                   &node->range_lo) &&
             ok;
    }
    if (has & (JS_HAS_MAXIMUM | JS_HAS_EXMAX)) {
        ok = s_f64(has & JS_HAS_MAXIMUM ? node->maximum : node->exclusive_maximum,
                   &node->range_hi) &&
             ok;
    }
    /* Between doubles, x > lo is x >= the next double up from lo (and so below). */
    node->range_lo = has & JS_HAS_EXMIN ? nextafter(node->range_lo, INFINITY) : node->range_lo;
    node->range_hi = has & JS_HAS_EXMAX ? nextafter(node->range_hi, -INFINITY) : node->range_hi;
    node->range_f64 = ok;
}

/* An anyOf or oneOf with a discriminator and no other keyword. */
static bool s_disc_only(const js_node_t *node) {
    const js_list_t *l = node->any_of.count ? &node->any_of : &node->one_of;
    return node->groups == JS_G_APPLY && !(node->has & JS_HAS_TYPE) && l->disc &&
           !node->all_of.count && !(node->any_of.count && node->one_of.count) &&
           !node->not_schema && !node->if_schema;
}

/* An array node with items, minItems, maxItems and type at most. */
static bool s_items_only(const js_node_t *node) {
    return node->groups == JS_G_ARRAY && !node->contains &&
           !(node->has & ~(uint32_t)(JS_HAS_TYPE | JS_HAS_MINITEMS | JS_HAS_MAXITEMS));
}

/* The check each shape names. */
static js_check_fn *const s_checks[] = {
    [JS_SHAPE_VISIT] = c_visit,   [JS_SHAPE_TYPE] = c_type,
    [JS_SHAPE_FALSE] = c_false,   [JS_SHAPE_CONST] = c_const,
    [JS_SHAPE_RANGE] = c_range,   [JS_SHAPE_LENGTH] = c_length,
    [JS_SHAPE_OBJECT] = c_object, [JS_SHAPE_ITEMS] = c_items,
    [JS_SHAPE_TUPLE] = c_tuple,   [JS_SHAPE_DISC] = c_disc,
    [JS_SHAPE_ENUM] = c_enum,     [JS_SHAPE_OBJECT_APPLY] = c_object_apply,
    [JS_SHAPE_APPLY] = c_visit,   [JS_SHAPE_LEAF] = c_leaf,
};

/* The shape of node, whose fields the checks read are ready. */
static uint8_t s_shape(const js_node_t *node) {
    if (node->is_bool) {
        return node->bool_value ? JS_SHAPE_TYPE : JS_SHAPE_FALSE;
    }
    switch (node->quick) {
        case JS_QUICK_TYPE:
            return JS_SHAPE_TYPE;
        case JS_QUICK_CONST:
            return JS_SHAPE_CONST;
        case JS_QUICK_RANGE:
            return JS_SHAPE_RANGE;
        case JS_QUICK_LENGTH:
            return JS_SHAPE_LENGTH;
        default:
            break;
    }
    if (node->only_object) {
        return JS_SHAPE_OBJECT;
    }
    if (node->one_pass && node->groups == (JS_G_OBJECT | JS_G_APPLY)) {
        return JS_SHAPE_OBJECT_APPLY;
    }
    if (s_items_only(node)) {
        return node->items_is_array ? JS_SHAPE_TUPLE : JS_SHAPE_ITEMS;
    }
    if (s_disc_only(node)) {
        return JS_SHAPE_DISC;
    }
    if (node->groups == JS_G_GENERIC && !(node->has & ~(JS_HAS_TYPE | JS_HAS_ENUM))) {
        return JS_SHAPE_ENUM;
    }
    if (!(node->groups & ~(JS_G_GENERIC | JS_G_NUMBER | JS_G_STRING))) {
        return JS_SHAPE_LEAF;
    }
    return node->groups == JS_G_APPLY ? JS_SHAPE_APPLY : JS_SHAPE_VISIT;
}

void js_check_plan(js_node_t *node) {
    node->pass = s_pass(node);
    if (node->groups & JS_G_NUMBER) {
        s_plan_range(node);
    }
    if (!node->is_bool && node->quick == JS_QUICK_NONE) {
        /* What the checks read, ready: counts with no bound are 0 and SIZE_MAX. */
        node->min_items = node->has & JS_HAS_MINITEMS ? node->min_items : 0;
        node->max_items = node->has & JS_HAS_MAXITEMS ? node->max_items : SIZE_MAX;
        node->min_properties = node->has & JS_HAS_MINPROPS ? node->min_properties : 0;
        node->max_properties = node->has & JS_HAS_MAXPROPS ? node->max_properties : SIZE_MAX;
        if (node->one_pass) {
            node->per_member = node->npatprops || node->property_names;
            node->others = node->per_member ? NULL : node->additional_properties;
            node->required_word = node->nrequired ? node->required_mask[0] : 0;
        }
    }
    node->shape = s_shape(node);
    node->check = s_checks[node->shape];
}
