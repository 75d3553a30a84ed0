/*
 * jsonschema_native: a compiled schema's validity checks as C, built by the system's C
 * compiler into a shared object that the process loads (jsonschema_native in jsonschema.h).
 *
 * Each node becomes one static function that does what its check in jsonschema_check.c does
 * (node->shape says which), with the node's constants written into the code: its type bits,
 * bounds, member names as words, subschemas as direct calls, so that the compiler can inline
 * a whole object's members into one loop. A node of any other shape calls its check through
 * the pointer the interpreter would use, so every verdict is the interpreter's. The code
 * holds the addresses of this process's nodes and is never saved: it lives and dies with the
 * schema.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dynbuf.h"
#include "mem.h"
#include "schemanode.h"

extern char **environ;

/* The generated code restates the tape entry's layout; these keep the two in step. */
_Static_assert(sizeof(jsontape_entry_t) == 24, "jsontape_entry_t layout");
_Static_assert(offsetof(jsontape_entry_t, size) == 4, "jsontape_entry_t.size");
_Static_assert(offsetof(jsontape_entry_t, next) == 8, "jsontape_entry_t.next");
_Static_assert(offsetof(jsontape_entry_t, u) == 16, "jsontape_entry_t.u");

/* The most bytes of C one schema may become (1024 nodes fit well under it). */
#define NATIVE_MAX_SOURCE_BYTES ((size_t)16 << 20)

/* What every generated file starts with: the entry, loads and the type test of schemanode.h. */
static const char s_prelude[] =
    "#include <stdint.h>\n"
    "typedef struct { unsigned char type, flags; unsigned short pad; uint32_t size, next, hash;\n"
    "    union { int64_t i; double d; struct { uint32_t off, chars; } s; } u; } E;\n"
    "_Static_assert(sizeof(E) == 24, \"entry\");\n"
    "typedef _Bool F(void *, const void *, uint32_t);\n"
    "static inline uint64_t ld64(const char *p) { uint64_t w; __builtin_memcpy(&w, p, 8);"
    " return w; }\n"
    "static inline int integral(const E *x) {\n"
    "    return x->type == %d || (x->flags & %d ? (x->flags & %d) != 0 :"
    " x->u.d == __builtin_floor(x->u.d));\n"
    "}\n"
    "static const unsigned char tb[8] = {%d, %d, %d, %d, %d, %d, %d, %d};\n"
    "static inline int type_ok(unsigned types, const E *x) {\n"
    "    return (types & tb[x->type]) || (x->type == %d && (types & %d) && integral(x));\n"
    "}\n";

typedef struct {
    const jsonschema_t *schema;
    dynbuf_t out;
    int failed; /* an append passed the cap */
} s_gen_t;

static void s_emit(s_gen_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_emit(s_gen_t *g, const char *fmt, ...) {
    char small[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof small) {
        ASSERT(!"a format of this file longer than its buffer");
    }
    g->failed |= dynbuf_add(&g->out, small, (size_t)n) != 0;
}

/* The index of node among the schema's nodes: its function is n<index>. */
static size_t s_id(const s_gen_t *g, const js_node_t *node) {
    for (size_t i = 0; i < g->schema->nnodes; i++) {
        if (g->schema->nodes[i] == node) {
            return i;
        }
    }
    ASSERT(!"a subschema outside its schema's nodes");
    return 0;
}

/* A test that the tape string s (an expression, of len bytes) equals key[0..klen): js_str_is
 * with the words of key written in. When known_len, the caller has compared the lengths. */
static void s_emit_str_is(s_gen_t *g, const char *s, const char *len, const char *key, size_t klen,
                          js_head_t head, bool known_len) {
    if (!known_len) {
        s_emit(g, "%s == %zu && ", len, klen);
    }
    s_emit(g, "((ld64(%s) ^ 0x%llxull) & 0x%llxull) == 0", s, (unsigned long long)head.word,
           (unsigned long long)head.mask);
    if (klen > 8) {
        s_emit(g, " && ld64(%s + %zu) == 0x%llxull", s, klen - 8,
               (unsigned long long)js_load64(key + klen - 8));
    }
    for (size_t i = 8; i + 8 < klen; i += 8) {
        /* the words between, overlapping the last one where klen is not a multiple of 8 */
        s_emit(g, " && ld64(%s + %zu) == 0x%llxull", s, i, (unsigned long long)js_load64(key + i));
    }
}

/* The test of the value at index expr against node: its pass bits, then its function. */
static void s_emit_check(s_gen_t *g, const js_node_t *node, const char *expr) {
    if (node->pass == 0xff) {
        s_emit(g, "1");
        return;
    }
    if (node->pass == 0) {
        s_emit(g, "n%zu(c, e, b, %s)", s_id(g, node), expr);
        return;
    }
    s_emit(g, "(((%uu >> e[%s].type) & 1) || n%zu(c, e, b, %s))", node->pass, expr, s_id(g, node),
           expr);
}

/* The type test a node with a type keyword opens with (c_array_head, c_object, ...). */
static void s_emit_type(s_gen_t *g, const js_node_t *node) {
    if (node->has & JS_HAS_TYPE) {
        s_emit(g, "    if (!type_ok(%u, x)) return 0;\n", node->types);
    }
}

/* A C expression of x's exact value (hexadecimal), infinities included. */
static const char *s_double(double x, char *out, size_t cap) {
    if (isinf(x)) {
        snprintf(out, cap, "%s__builtin_inf()", x < 0 ? "-" : "");
    } else {
        snprintf(out, cap, "%a", x);
    }
    return out;
}

/* Counts in [lo, hi]: the tests a bound needs (0 and SIZE_MAX mean none). */
static void s_emit_counts(s_gen_t *g, const char *what, size_t lo, size_t hi) {
    if (lo > 0) {
        s_emit(g, "    if (%s < %zuull) return 0;\n", what, lo);
    }
    if (hi < SIZE_MAX) {
        s_emit(g, "    if (%s > %zuull) return 0;\n", what, hi);
    }
}

static void s_emit_range(s_gen_t *g, const js_node_t *node) {
    s_emit_type(g, node);
    s_emit(g,
           "    double d;\n"
           "    if (x->type == %d && !(x->flags & %d)) d = x->u.d;\n"
           "    else if (x->type == %d && x->u.i >= -(1ll << 53) && x->u.i <= (1ll << 53))"
           " d = (double)x->u.i;\n"
           "    else if (x->type != %d && x->type != %d) return 1;\n"
           "    else return ((F *)%p)(c, (const void *)%p, v);\n",
           JSONTAPE_REAL, JSONTAPE_F_TEXT, JSONTAPE_INTEGER, JSONTAPE_INTEGER, JSONTAPE_REAL,
           (void *)node->check, (const void *)node);
    char lo[48], hi[48];
    s_emit(g, "    return d >= %s && d <= %s;\n", s_double(node->range_lo, lo, sizeof lo),
           s_double(node->range_hi, hi, sizeof hi));
}

static void s_emit_length(s_gen_t *g, const js_node_t *node) {
    s_emit_type(g, node);
    s_emit(g, "    if (x->type != %d) return 1;\n", JSONTAPE_STRING);
    s_emit_counts(g, "x->u.s.chars", node->has & JS_HAS_MINLEN ? node->min_length : 0,
                  node->has & JS_HAS_MAXLEN ? node->max_length : SIZE_MAX);
    s_emit(g, "    return 1;\n");
}

/* js_check_members (without patternProperties) as o<id>: type, then one pass over the
 * members whose names are a switch on their length. */
static void s_emit_object(s_gen_t *g, const js_node_t *node) {
    s_emit(g,
           "static inline int o%zu(void *c, const E *e, const char *b, uint32_t v) {\n"
           "    const E *x = &e[v];\n",
           s_id(g, node));
    s_emit_type(g, node);
    s_emit(g, "    if (x->type != %d) return 1;\n", JSONTAPE_OBJECT);
    s_emit_counts(g, "x->size", node->min_properties, node->max_properties);
    s_emit(g, "    uint64_t seen = 0;\n"
              "    for (uint32_t k = v + 1; k < x->next; k = e[k + 1].next) {\n"
              "        const char *s = b + e[k].u.s.off;\n");
    if (node->property_names) {
        s_emit(g, "        if (!");
        s_emit_check(g, node->property_names, "k");
        s_emit(g, ") return 0;\n");
    }
    s_emit(g, "        switch (e[k].size) {\n");
    bool *done = mem_calloc(node->nnames + 1, sizeof *done);
    for (size_t i = 0; i < node->nnames; i++) {
        if (done[i]) {
            continue;
        }
        s_emit(g, "        case %zu:\n", node->props[i].len);
        for (size_t j = i; j < node->nnames; j++) {
            const js_prop_t *p = &node->props[j];
            if (done[j] || p->len != node->props[i].len) {
                continue;
            }
            done[j] = true;
            s_emit(g, "            if (");
            s_emit_str_is(g, "s", "", p->key, p->len, p->head, true);
            s_emit(g, ") {\n                seen |= 0x%llxull;\n", 1ull << j);
            if (j < node->nprops) {
                s_emit(g, "                if (!");
                s_emit_check(g, p->node, "k + 1");
                s_emit(g, ") return 0;\n                continue;\n");
            }
            s_emit(g, "            }\n");
        }
        s_emit(g, "            break;\n");
    }
    free(done);
    s_emit(g, "        }\n");
    /* others is NULL where additionalProperties is checked per member instead. */
    const js_node_t *others = node->per_member ? node->additional_properties : node->others;
    if (others) {
        s_emit(g, "        if (!");
        s_emit_check(g, others, "k + 1");
        s_emit(g, ") return 0;\n");
    }
    s_emit(g, "    }\n    return (seen & 0x%llxull) == 0x%llxull;\n}\n",
           (unsigned long long)node->required_word, (unsigned long long)node->required_word);
}

/* "if (!<check of node on v>) return 0;" */
static void s_emit_require(s_gen_t *g, const js_node_t *node, bool negate) {
    s_emit(g, "    if (%s", negate ? "" : "!");
    s_emit_check(g, node, "v");
    s_emit(g, ") return 0;\n");
}

/* The checks of list's schemas on v, with op between them. */
static void s_emit_joined(s_gen_t *g, const js_list_t *list, const char *op) {
    for (size_t i = 0; i < list->count; i++) {
        s_emit(g, "%s", i ? op : "");
        s_emit_check(g, list->items[i], "v");
    }
}

/* js_apply for validity: allOf, anyOf, oneOf, not, if/then/else, each as its definition
 * says (a discriminator only spares branches that cannot match). */
static void s_emit_apply(s_gen_t *g, const js_node_t *node) {
    for (size_t i = 0; i < node->all_of.count; i++) {
        s_emit_require(g, node->all_of.items[i], false);
    }
    if (node->any_of.count) {
        s_emit(g, "    if (!(");
        s_emit_joined(g, &node->any_of, " || ");
        s_emit(g, ")) return 0;\n");
    }
    if (node->one_of.count) {
        s_emit(g, "    if (");
        s_emit_joined(g, &node->one_of, " + "); /* each check is 0 or 1 */
        s_emit(g, " != 1) return 0;\n");
    }
    if (node->not_schema) {
        s_emit_require(g, node->not_schema, true);
    }
    if (node->if_schema && (node->then_schema || node->else_schema)) {
        s_emit(g, "    if (");
        s_emit_check(g, node->if_schema, "v");
        s_emit(g, ") {\n");
        if (node->then_schema) {
            s_emit_require(g, node->then_schema, false);
        }
        s_emit(g, "    } else {\n");
        if (node->else_schema) {
            s_emit_require(g, node->else_schema, false);
        }
        s_emit(g, "    }\n");
    }
    s_emit(g, "    return 1;\n");
}

/* c_enum: a string compared with the string values in place; any other value by
 * js_enum_has. */
static void s_emit_enum(s_gen_t *g, const js_node_t *node) {
    const jsontape_t *values = g->schema->values;
    s_emit_type(g, node);
    s_emit(g, "    if (x->type == %d) return 0", JSONTAPE_STRING);
    for (size_t i = 0; i < node->nenum; i++) {
        const jsontape_entry_t *w = jsontape_at(values, node->enum_at[i]);
        if (w->type == JSONTAPE_STRING) {
            s_emit(g, " || (");
            s_emit_str_is(g, "(b + x->u.s.off)", "x->size", jsontape_str(values, w), w->size,
                          js_head_of(jsontape_str(values, w), w->size), false);
            s_emit(g, ")");
        }
    }
    s_emit(g, ";\n    return ((F *)%p)(c, (const void *)%p, v);\n", (void *)js_enum_has,
           (const void *)node);
}

/* c_array_head: type, then item counts. */
static void s_emit_array_head(s_gen_t *g, const js_node_t *node) {
    s_emit_type(g, node);
    s_emit(g, "    if (x->type != %d) return 1;\n", JSONTAPE_ARRAY);
    s_emit_counts(g, "x->size", node->min_items, node->max_items);
}

static void s_emit_items(s_gen_t *g, const js_node_t *node) {
    s_emit_array_head(g, node);
    if (node->items) {
        s_emit(g, "    for (uint32_t it = v + 1; it < x->next; it = e[it].next)\n"
                  "        if (!");
        s_emit_check(g, node->items, "it");
        s_emit(g, ") return 0;\n");
    }
    s_emit(g, "    return 1;\n");
}

static void s_emit_tuple(s_gen_t *g, const js_node_t *node) {
    s_emit_array_head(g, node);
    s_emit(g, "    uint32_t it = v + 1;\n");
    for (size_t i = 0; i < node->items_array.count; i++) {
        s_emit(g, "    if (it >= x->next) return 1;\n");
        if (node->items_array.items[i]) {
            s_emit(g, "    if (!");
            s_emit_check(g, node->items_array.items[i], "it");
            s_emit(g, ") return 0;\n");
        }
        s_emit(g, "    it = e[it].next;\n");
    }
    if (node->additional_items) {
        s_emit(g, "    for (; it < x->next; it = e[it].next)\n        if (!");
        s_emit_check(g, node->additional_items, "it");
        s_emit(g, ") return 0;\n");
    }
    s_emit(g, "    return 1;\n");
}

/* c_disc: the discriminating member's value, then the branches whose const it meets. */
static void s_emit_disc(s_gen_t *g, const js_node_t *node) {
    const bool any = node->any_of.count != 0;
    const js_list_t *list = any ? &node->any_of : &node->one_of;
    const js_disc_t *d = list->disc;
    s_emit(g,
           "    if (x->type != %d) return 0;\n    uint32_t dv = 0;\n"
           "    for (uint32_t k = v + 1; k < x->next; k = e[k + 1].next)\n"
           "        if (",
           JSONTAPE_OBJECT);
    s_emit_str_is(g, "(b + e[k].u.s.off)", "e[k].size", d->key, d->len, d->head, false);
    s_emit(g,
           ") { dv = k + 1; break; }\n"
           "    if (!dv || e[dv].type != %d) return 0;\n"
           "    const char *s = b + e[dv].u.s.off;\n    int hits = 0;\n    (void)hits;\n",
           JSONTAPE_STRING);
    for (size_t i = 0; i < list->count; i++) {
        const js_node_t *c = d->consts[i];
        s_emit(g, "    if (");
        s_emit_str_is(g, "s", "e[dv].size", c->const_str, c->const_len, c->const_head, false);
        s_emit(g, ") {\n        int ok = ");
        s_emit_check(g, list->items[i], "v");
        if (d->distinct) {
            s_emit(g, ";\n        return ok;\n    }\n");
        } else {
            s_emit(g, ";\n        if (ok && %s) return %d;\n    }\n", any ? "1" : "++hits == 2",
                   any);
        }
    }
    s_emit(g, "    return hits == 1;\n");
}

/* Whether node's shape is one this file writes out (else its check is called). */
static bool s_written(const js_node_t *node) {
    switch (node->shape) {
        case JS_SHAPE_TYPE:
        case JS_SHAPE_FALSE:
        case JS_SHAPE_CONST:
        case JS_SHAPE_LENGTH:
        case JS_SHAPE_ITEMS:
        case JS_SHAPE_TUPLE:
        case JS_SHAPE_DISC:
        case JS_SHAPE_ENUM:
        case JS_SHAPE_APPLY:
            return true;
        case JS_SHAPE_RANGE:
            return node->range_f64 && !(node->has & JS_HAS_MULTIPLE);
        case JS_SHAPE_OBJECT:
        case JS_SHAPE_OBJECT_APPLY: /* one pass: at most 64 names */
            return node->npatprops == 0;
        default:
            return false;
    }
}

/* n<id>: node's check on the value at v whose type its pass bits did not admit. */
static void s_emit_node(s_gen_t *g, const js_node_t *node) {
    const bool object = node->shape == JS_SHAPE_OBJECT || node->shape == JS_SHAPE_OBJECT_APPLY;
    if (object && s_written(node)) {
        s_emit_object(g, node);
    }
    s_emit(g,
           "static int n%zu(void *c, const E *e, const char *b, uint32_t v) {\n"
           "    const E *x = &e[v];\n    (void)x, (void)b, (void)c;\n",
           s_id(g, node));
    if (!s_written(node)) {
        s_emit(g, "    return ((F *)%p)(c, (const void *)%p, v);\n", (void *)node->check,
               (const void *)node);
    } else if (node->shape == JS_SHAPE_TYPE && !node->is_bool) {
        s_emit(g, "    return type_ok(%u, x);\n", node->types);
    } else if (node->shape == JS_SHAPE_TYPE || node->shape == JS_SHAPE_FALSE) {
        s_emit(g, "    return 0;\n"); /* the schema true passes every type before its check */
    } else if (node->shape == JS_SHAPE_CONST) {
        s_emit(g, "    return x->type == %d && (", JSONTAPE_STRING);
        s_emit_str_is(g, "(b + x->u.s.off)", "x->size", node->const_str, node->const_len,
                      node->const_head, false);
        s_emit(g, ");\n");
    } else if (node->shape == JS_SHAPE_RANGE) {
        s_emit_range(g, node);
    } else if (node->shape == JS_SHAPE_LENGTH) {
        s_emit_length(g, node);
    } else if (node->shape == JS_SHAPE_OBJECT) {
        s_emit(g, "    return o%zu(c, e, b, v);\n", s_id(g, node));
    } else if (node->shape == JS_SHAPE_OBJECT_APPLY) {
        s_emit(g, "    if (!o%zu(c, e, b, v)) return 0;\n", s_id(g, node));
        s_emit_apply(g, node);
    } else if (node->shape == JS_SHAPE_APPLY) {
        s_emit_type(g, node);
        s_emit_apply(g, node);
    } else if (node->shape == JS_SHAPE_ENUM) {
        s_emit_enum(g, node);
    } else if (node->shape == JS_SHAPE_ITEMS) {
        s_emit_items(g, node);
    } else if (node->shape == JS_SHAPE_TUPLE) {
        s_emit_tuple(g, node);
    } else {
        s_emit_disc(g, node);
    }
    s_emit(g, "}\n");
}

/* The C of the whole schema, or NULL when it would pass NATIVE_MAX_SOURCE_BYTES. */
static char *s_source(const jsonschema_t *schema) {
    s_gen_t g = {.schema = schema};
    dynbuf_init(&g.out, NATIVE_MAX_SOURCE_BYTES);
    s_emit(&g, s_prelude, JSONTAPE_INTEGER, JSONTAPE_F_TEXT, JSONTAPE_F_INTEGRAL, js_type_bits[0],
           js_type_bits[1], js_type_bits[2], js_type_bits[3], js_type_bits[4], js_type_bits[5],
           js_type_bits[6], js_type_bits[7], JSONTAPE_REAL, JS_T_INTEGER);
    for (size_t i = 0; i < schema->nnodes; i++) {
        s_emit(&g, "static int n%zu(void *, const E *, const char *, uint32_t);\n", i);
    }
    for (size_t i = 0; i < schema->nnodes; i++) {
        s_emit_node(&g, schema->nodes[i]);
    }
    s_emit(&g, "_Bool chatfleet_schema_root(void *c, const E *e, const char *b, uint32_t v) {\n"
               "    return ");
    s_emit_check(&g, schema->root, "v");
    s_emit(&g, ";\n}\n");
    if (g.failed) {
        dynbuf_free(&g.out);
        return NULL;
    }
    return dynbuf_take(&g.out);
}

/* --- building and loading --- */

typedef struct {
    char dir[256];
    char c[300];   /* the source */
    char so[300];  /* the shared object */
    char log[300]; /* the compiler's output */
} s_files_t;

/* Writes text to path, a new file only this user may read. */
static int s_write(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -1;
    }
    size_t len = strlen(text);
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    return close(fd);
}

/* The first line the compiler wrote, into out (cap bytes). */
static void s_first_line(const char *path, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(out, (int)cap, f)) {
            out[strcspn(out, "\n")] = '\0';
        }
        fclose(f);
    }
}

/* Runs the compiler on f->c into f->so: 0, or -1 with the reason in err. */
static int s_compile(const s_files_t *f, char *err, size_t errlen) {
    const char *cc = getenv("CHATFLEET_CC");
    cc = cc && *cc ? cc : "cc";
    char *argv[] = {(char *)cc,    "-O2", "-fPIC", "-shared",    "-fno-plt", "-o",
                    (char *)f->so, "-x",  "c",     (char *)f->c, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, f->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(err, errlen, "cannot run the C compiler %s: %s", cc, strerror(rc));
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "waiting for the C compiler %s: %s", cc, strerror(errno));
            return -1;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char line[200];
        s_first_line(f->log, line, sizeof line);
        snprintf(err, errlen, "the C compiler %s failed (status %d): %s", cc, status, line);
        return -1;
    }
    return 0;
}

/* Builds and loads src: the loaded code, or NULL with the reason in err. */
static struct js_native *s_build(const char *src, char *err, size_t errlen) {
    s_files_t f;
    const char *tmp = getenv("TMPDIR");
    snprintf(f.dir, sizeof f.dir, "%s/chatfleet-schema-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(f.dir)) {
        snprintf(err, errlen, "cannot make a directory in %s: %s", tmp && *tmp ? tmp : "/tmp",
                 strerror(errno));
        return NULL;
    }
    snprintf(f.c, sizeof f.c, "%s/schema.c", f.dir);
    snprintf(f.so, sizeof f.so, "%s/schema.so", f.dir);
    snprintf(f.log, sizeof f.log, "%s/cc.log", f.dir);
    struct js_native *native = NULL;
    if (s_write(f.c, src) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", f.c, strerror(errno));
    } else if (s_compile(&f, err, errlen) == 0) {
        void *lib = dlopen(f.so, RTLD_NOW | RTLD_LOCAL);
        void *root = lib ? dlsym(lib, "chatfleet_schema_root") : NULL;
        if (!root) {
            snprintf(err, errlen, "cannot load the compiled schema: %s", dlerror());
            if (lib) {
                dlclose(lib);
            }
        } else {
            native = mem_calloc(1, sizeof *native);
            native->lib = lib;
            *(void **)&native->root = root; /* POSIX: a symbol's address as a function */
        }
    }
    unlink(f.c);
    unlink(f.so); /* a loaded object stays mapped */
    unlink(f.log);
    rmdir(f.dir);
    return native;
}

int jsonschema_native(jsonschema_t *self, char *err, size_t errlen) {
    char *src = s_source(self);
    if (!src) {
        snprintf(err, errlen, "the schema's code would pass %zu bytes", NATIVE_MAX_SOURCE_BYTES);
        return -1;
    }
    struct js_native *native = s_build(src, err, errlen);
    free(src);
    if (!native) {
        return -1;
    }
    js_native_free(&self->native);
    self->native = native;
    return 0;
}

char *jsonschema_native_source(const jsonschema_t *self) {
    return s_source(self);
}

void js_native_free(struct js_native **native_p) {
    if (!native_p || !*native_p) {
        return;
    }
    dlclose((*native_p)->lib);
    free(*native_p);
    *native_p = NULL;
}
