/* jsontape: a JSON document as one flat array of entries; see jsontape.h. */
#include "jsontape.h"
#include "jsondecimal.h"
#include "jsonnumber.h"

#include "mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

jsontape_t *jsontape_new(void) {
    return mem_calloc(1, sizeof(jsontape_t));
}

void jsontape_destroy(jsontape_t **self_p) {
    if (!self_p || !*self_p) {
        return;
    }
    jsontape_t *self = *self_p;
    free(self->entries);
    free(self->bytes);
    free(self);
    *self_p = NULL;
}

void jsontape_clear(jsontape_t *self) {
    self->count = 0;
    self->bytes_len = 0;
}

/* --- building --- */

static jsontape_entry_t *s_add(jsontape_t *self, jsontape_type_t type) {
    ASSERT(self->count < JSONTAPE_MAX_ENTRIES); /* callers bound their input */
    if (self->count == self->cap) {
        self->cap = self->cap ? 2 * self->cap : 64;
        self->entries = mem_realloc(self->entries, self->cap * sizeof *self->entries);
    }
    jsontape_entry_t *e = &self->entries[self->count++];
    memset(e, 0, sizeof *e);
    e->type = (uint8_t)type;
    e->next = (uint32_t)self->count;
    return e;
}

uint32_t jsontape_add_literal(jsontape_t *self, jsontape_type_t type) {
    ASSERT(type == JSONTAPE_NULL || type == JSONTAPE_TRUE || type == JSONTAPE_FALSE);
    s_add(self, type);
    return (uint32_t)self->count - 1;
}

uint32_t jsontape_add_integer(jsontape_t *self, int64_t i) {
    s_add(self, JSONTAPE_INTEGER)->u.i = i;
    return (uint32_t)self->count - 1;
}

uint32_t jsontape_add_real(jsontape_t *self, double d) {
    s_add(self, JSONTAPE_REAL)->u.d = d;
    return (uint32_t)self->count - 1;
}

#define S_HASH_K 0x9E3779B97F4A7C15ull

/* The end of jsontape_hash: h folded to 32 bits. */
static inline uint32_t s_hash_final(uint64_t h) {
    h ^= h >> 32;
    h *= S_HASH_K;
    return (uint32_t)(h >> 32);
}

/* jsontape_hash of a string of 4 to 16 bytes from its two ends, which may overlap: its first
 * and last 8 bytes from 8 bytes on, its first and last 4 below. */
static inline uint32_t s_hash_ends(size_t len, uint64_t first, uint64_t last) {
    uint64_t h = (uint64_t)len * S_HASH_K;
    if (len < 8) {
        return s_hash_final((h ^ (first << 32 | last)) * S_HASH_K);
    }
    if (len > 8) {
        h = (h ^ first) * S_HASH_K;
        h ^= h >> 29;
    }
    return s_hash_final((h ^ last) * S_HASH_K);
}

/* jsontape_hash of a string of at most 3 bytes. */
static inline uint32_t s_hash_small(const char *key, size_t len) {
    uint64_t h = (uint64_t)len * S_HASH_K;
    if (len > 0) {
        uint64_t w = (uint64_t)(unsigned char)key[0] << 16 |
                     (uint64_t)(unsigned char)key[len / 2] << 8 | (unsigned char)key[len - 1];
        h = (h ^ w) * S_HASH_K;
    }
    return s_hash_final(h);
}

/* The hash of s[0..len) from its first and last width bytes (8, or 4 below 8 bytes), read as
 * words that may overlap; when dst is set, they are stored there too (a copy of the string). */
static inline uint32_t s_hash_by_ends(char *dst, const char *s, size_t len, size_t width) {
    uint32_t a = 0;
    uint32_t b = 0;
    uint64_t a8 = 0;
    uint64_t b8 = 0;
    if (width == 8) {
        memcpy(&a8, s, 8);
        memcpy(&b8, s + len - 8, 8);
    } else {
        memcpy(&a, s, 4);
        memcpy(&b, s + len - 4, 4);
        a8 = a;
        b8 = b;
    }
    if (dst) {
        memcpy(dst, s, width);
        memcpy(dst + len - width, s + len - width, width);
    }
    return s_hash_ends(len, a8, b8);
}

/* Copies src[0..len) to dst and returns its jsontape_hash: a string of at most 16 bytes (a
 * name, the bulk of a document) without a call, read within src and written within
 * dst[0..len). */
static inline uint32_t s_copy_hash(char *dst, const char *src, size_t len) {
    if (len >= 4 && len <= 16) {
        return len >= 8 ? s_hash_by_ends(dst, src, len, 8) : s_hash_by_ends(dst, src, len, 4);
    }
    if (len < 4) {
        for (size_t i = 0; i < len; i++) {
            dst[i] = src[i];
        }
        return s_hash_small(dst, len);
    }
    memcpy(dst, src, len);
    return jsontape_hash(dst, len);
}

/* Reserves room for a string of len bytes at the end of the arena and returns its offset: the
 * JSONTAPE_PAD bytes from the string's end are allocated and zeroed (its NUL among them), so
 * that 8 bytes can be read from any string's start. */
static uint32_t s_arena(jsontape_t *self, size_t len) {
    ASSERT(len <= JSONTAPE_MAX_STRING_BYTES - self->bytes_len - 1);
    if (self->bytes_len + len + JSONTAPE_PAD > self->bytes_cap) {
        size_t want = self->bytes_len + len + JSONTAPE_PAD;
        self->bytes_cap = want > 2 * self->bytes_cap ? want : 2 * self->bytes_cap;
        self->bytes = mem_realloc(self->bytes, self->bytes_cap);
    }
    uint32_t off = (uint32_t)self->bytes_len;
    memset(self->bytes + off + len, 0, JSONTAPE_PAD);
    self->bytes_len += len + 1;
    return off;
}

uint32_t jsontape_add_text_real(jsontape_t *self, const char *lit, size_t len, double d,
                                bool integral) {
    uint32_t off = s_arena(self, len);
    memcpy(self->bytes + off, lit, len);
    jsontape_entry_t *e = s_add(self, JSONTAPE_REAL);
    e->flags = (uint8_t)(JSONTAPE_F_TEXT | (integral ? JSONTAPE_F_INTEGRAL : 0));
    e->size = (uint32_t)len;
    e->text_off = off;
    e->u.d = d;
    return (uint32_t)self->count - 1;
}

static uint32_t s_chars(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    }
    return (uint32_t)n;
}

uint32_t jsontape_add_string(jsontape_t *self, const char *s, size_t len) {
    return jsontape_add_text(self, s, len, s_chars(s, len));
}

uint32_t jsontape_add_text(jsontape_t *self, const char *s, size_t len, size_t chars) {
    ASSERT(chars <= len);
    uint32_t off = s_arena(self, len);
    jsontape_entry_t *e = s_add(self, JSONTAPE_STRING);
    e->size = (uint32_t)len;
    e->hash = s_copy_hash(self->bytes + off, s, len);
    e->u.s.off = off;
    e->u.s.chars = (uint32_t)chars;
    return (uint32_t)self->count - 1;
}

uint32_t jsontape_open(jsontape_t *self, jsontape_type_t type) {
    ASSERT(type == JSONTAPE_ARRAY || type == JSONTAPE_OBJECT);
    s_add(self, type);
    return (uint32_t)self->count - 1;
}

void jsontape_close(jsontape_t *self, uint32_t index, uint32_t size) {
    ASSERT(index < self->count);
    self->entries[index].size = size;
    self->entries[index].next = (uint32_t)self->count;
}

/* --- jansson --- */

/* Whether v fits in what is left of the tape: entries and string bytes. */
static bool s_fits(const jsontape_t *self, size_t entries, size_t bytes) {
    return entries < JSONTAPE_MAX_ENTRIES - self->count &&
           bytes < JSONTAPE_MAX_STRING_BYTES - self->bytes_len;
}

static bool s_from_json(jsontape_t *self, const json_t *v) {
    switch (json_typeof(v)) {
        case JSON_OBJECT: {
            if (!s_fits(self, 1 + 2 * json_object_size(v), 0)) {
                return false;
            }
            uint32_t at = jsontape_open(self, JSONTAPE_OBJECT);
            const char *key = NULL;
            size_t len = 0;
            json_t *m = NULL;
            json_object_keylen_foreach((json_t *)v, key, len, m) {
                if (!s_fits(self, 1, len + 1)) {
                    return false;
                }
                jsontape_add_string(self, key, len);
                if (!s_from_json(self, m)) {
                    return false;
                }
            }
            jsontape_close(self, at, (uint32_t)json_object_size(v));
            return true;
        }
        case JSON_ARRAY: {
            if (!s_fits(self, 1 + json_array_size(v), 0)) {
                return false;
            }
            uint32_t at = jsontape_open(self, JSONTAPE_ARRAY);
            for (size_t i = 0; i < json_array_size(v); i++) {
                if (!s_from_json(self, json_array_get(v, i))) {
                    return false;
                }
            }
            jsontape_close(self, at, (uint32_t)json_array_size(v));
            return true;
        }
        case JSON_STRING:
            if (!s_fits(self, 1, json_string_length(v) + 1)) {
                return false;
            }
            jsontape_add_string(self, json_string_value(v), json_string_length(v));
            return true;
        default:
            if (!s_fits(self, 1, 0)) {
                return false;
            }
            size_t len = 0;
            const char *lit = jsonnumber_text(v, &len);
            if (lit && !s_fits(self, 1, len + 1)) {
                return false;
            }
            if (lit) {
                jsondecimal_t *dec = mem_alloc(sizeof *dec);
                jsondecimal_of_literal(lit, len, dec);
                jsontape_add_text_real(self, lit, len, json_real_value(v),
                                       jsondecimal_is_integer(dec));
                free(dec);
            } else if (json_is_integer(v)) {
                jsontape_add_integer(self, json_integer_value(v));
            } else if (json_is_real(v)) {
                jsontape_add_real(self, json_real_value(v));
            } else {
                jsontape_add_literal(self, json_is_null(v)   ? JSONTAPE_NULL
                                           : json_is_true(v) ? JSONTAPE_TRUE
                                                             : JSONTAPE_FALSE);
            }
            return true;
    }
}

long jsontape_from_json(jsontape_t *self, const json_t *v) {
    size_t start = self->count;
    size_t start_bytes = self->bytes_len;
    if (!s_from_json(self, v)) {
        self->count = start;
        self->bytes_len = start_bytes;
        return -1;
    }
    return (long)start;
}

json_t *jsontape_to_json(const jsontape_t *self, uint32_t index) {
    const jsontape_entry_t *e = jsontape_at(self, index);
    switch ((jsontape_type_t)e->type) {
        case JSONTAPE_NULL:
            return json_null();
        case JSONTAPE_FALSE:
            return json_false();
        case JSONTAPE_TRUE:
            return json_true();
        case JSONTAPE_INTEGER:
            return json_integer(e->u.i);
        case JSONTAPE_REAL:
            return e->flags & JSONTAPE_F_TEXT
                       ? jsonnumber_text_real(self->bytes + e->text_off, e->size, e->u.d)
                       : json_real(e->u.d);
        case JSONTAPE_STRING: /* the builder's callers guarantee UTF-8 without NUL */
            return json_stringn_nocheck(jsontape_str(self, e), e->size);
        case JSONTAPE_ARRAY: {
            json_t *arr = json_array();
            for (uint32_t i = index + 1; arr && i < e->next; i = self->entries[i].next) {
                if (json_array_append_new(arr, jsontape_to_json(self, i)) != 0) {
                    json_decref(arr);
                    arr = NULL;
                }
            }
            return arr;
        }
        case JSONTAPE_OBJECT: {
            json_t *obj = json_object();
            for (uint32_t k = index + 1; obj && k < e->next; k = self->entries[k + 1].next) {
                const jsontape_entry_t *key = &self->entries[k];
                if (json_object_setn_new_nocheck(obj, jsontape_str(self, key), key->size,
                                                 jsontape_to_json(self, k + 1)) != 0) {
                    json_decref(obj);
                    obj = NULL;
                }
            }
            return obj;
        }
    }
    return NULL;
}

/* --- semantics --- */

void jsontape_num_decimal(jsontape_num_t n, jsondecimal_t *out) {
    if (n.text) {
        jsondecimal_of_literal(n.text, n.len, out);
    } else if (n.is_int) {
        jsondecimal_of_int64(n.i, out);
    } else {
        jsondecimal_of_double(n.d, out);
    }
}

int jsontape_num_cmp_exact(jsontape_num_t a, jsontape_num_t b) {
    jsondecimal_t dec[2]; /* a leaf: no recursion below it */
    jsontape_num_decimal(a, &dec[0]);
    jsontape_num_decimal(b, &dec[1]);
    return jsondecimal_cmp(&dec[0], &dec[1]);
}

static bool s_same_string(const jsontape_t *a, const jsontape_entry_t *ea, const jsontape_t *b,
                          const jsontape_entry_t *eb) {
    return ea->size == eb->size && ea->hash == eb->hash &&
           memcmp(jsontape_str(a, ea), jsontape_str(b, eb), ea->size) == 0;
}

/* The index of the value whose key equals the key entry at a[ka] in the object b[ib], or 0. */
static uint32_t s_member(const jsontape_t *a, uint32_t ka, const jsontape_t *b, uint32_t ib) {
    const jsontape_entry_t *key = &a->entries[ka];
    for (uint32_t k = ib + 1; k < b->entries[ib].next; k = b->entries[k + 1].next) {
        if (s_same_string(a, key, b, &b->entries[k])) {
            return k + 1;
        }
    }
    return 0;
}

bool jsontape_equal(const jsontape_t *a, uint32_t ia, const jsontape_t *b, uint32_t ib) {
    const jsontape_entry_t *ea = &a->entries[ia];
    const jsontape_entry_t *eb = &b->entries[ib];
    if (jsontape_is_number(ea) && jsontape_is_number(eb)) {
        return jsontape_num_cmp(jsontape_num(a, ea), jsontape_num(b, eb)) == 0;
    }
    if (ea->type != eb->type) {
        return false;
    }
    switch ((jsontape_type_t)ea->type) {
        case JSONTAPE_STRING:
            return s_same_string(a, ea, b, eb);
        case JSONTAPE_ARRAY:
            if (ea->size != eb->size) {
                return false;
            }
            for (uint32_t i = ia + 1, j = ib + 1; i < ea->next;
                 i = a->entries[i].next, j = b->entries[j].next) {
                if (!jsontape_equal(a, i, b, j)) {
                    return false;
                }
            }
            return true;
        case JSONTAPE_OBJECT:
            if (ea->size != eb->size) {
                return false;
            }
            for (uint32_t k = ia + 1; k < ea->next; k = a->entries[k + 1].next) {
                uint32_t vb = s_member(a, k, b, ib);
                if (!vb || !jsontape_equal(a, k + 1, b, vb)) {
                    return false;
                }
            }
            return true;
        default:
            return true; /* null, true, false: same type is same value */
    }
}

/* A word-at-a-time hash (lookups run once per instance member, so it must be cheap on short
 * keys): 8-byte words, the last one overlapping; keys under 8 bytes are read as two
 * overlapping 4-byte words or, under 4, as three bytes, which with the length determine them. */
uint32_t jsontape_hash(const char *key, size_t len) {
    if (len >= 4 && len <= 16) {
        return len >= 8 ? s_hash_by_ends(NULL, key, len, 8) : s_hash_by_ends(NULL, key, len, 4);
    }
    if (len < 4) {
        return s_hash_small(key, len);
    }
    uint64_t w = 0;
    uint64_t h = (uint64_t)len * S_HASH_K;
    for (size_t i = 0; i + 8 < len; i += 8) {
        memcpy(&w, key + i, sizeof w);
        h = (h ^ w) * S_HASH_K;
        h ^= h >> 29;
    }
    memcpy(&w, key + len - 8, sizeof w);
    return s_hash_final((h ^ w) * S_HASH_K);
}

/* The hash of a double's value, or of an int64 (|i| <= 2^53) as the double it equals. */
static uint32_t s_double_hash(jsontape_num_t n) {
    if (!n.is_int && n.d != trunc(n.d)) {
        uint64_t bits = 0;
        memcpy(&bits, &n.d, sizeof bits);
        return (uint32_t)(bits ^ (bits >> 32)) * 2654435761u;
    }
    int64_t i = n.is_int ? n.i : (int64_t)n.d;
    return (uint32_t)((uint64_t)i ^ ((uint64_t)i >> 32)) * 2654435761u;
}

/* A hash that agrees with jsontape_num_cmp. A value that is the shortest form of a double of
 * magnitude up to 2^53 (every int64 that small, and where all but rare values fall) hashes by
 * that double, as before text reals; any other by its decimal. */
static uint32_t s_number_hash(jsontape_num_t n) {
    const double exact = 0x1p53;
    if (!n.text && (n.is_int ? n.i >= -(1LL << 53) && n.i <= (1LL << 53) : fabs(n.d) <= exact)) {
        return s_double_hash(n);
    }
    jsondecimal_t dec[2]; /* a leaf: no recursion below it */
    jsontape_num_decimal(n, &dec[0]);
    bool as_double = false;
    if (n.text && fabs(n.d) <= exact) { /* 1.50 hashes as 1.5 */
        jsondecimal_of_double(n.d, &dec[1]);
        as_double = jsondecimal_cmp(&dec[0], &dec[1]) == 0;
    }
    return as_double ? s_double_hash((jsontape_num_t){.d = n.d}) : jsondecimal_hash(&dec[0]);
}

uint32_t jsontape_value_hash(const jsontape_t *self, uint32_t index) {
    const jsontape_entry_t *e = &self->entries[index];
    switch ((jsontape_type_t)e->type) {
        case JSONTAPE_INTEGER:
        case JSONTAPE_REAL:
            return s_number_hash(jsontape_num(self, e));
        case JSONTAPE_STRING:
            return e->hash;
        case JSONTAPE_ARRAY: {
            uint32_t h = 0x9e3779b9u;
            for (uint32_t i = index + 1; i < e->next; i = self->entries[i].next) {
                h = (h ^ jsontape_value_hash(self, i)) * 16777619u;
            }
            return h;
        }
        case JSONTAPE_OBJECT: {
            uint32_t h = 0x85ebca6bu; /* order-independent: members are summed */
            for (uint32_t k = index + 1; k < e->next; k = self->entries[k + 1].next) {
                h += self->entries[k].hash * 31u + jsontape_value_hash(self, k + 1);
            }
            return h;
        }
        default:
            return (uint32_t)(e->type + 1) * 0x27d4eb2du;
    }
}

bool jsontape_unique(const jsontape_t *self, uint32_t v) {
    size_t n = self->entries[v].size;
    if (n < 2) {
        return true;
    }
    size_t cap = 16;
    while (cap < 2 * n) {
        cap *= 2;
    }
    uint32_t *slots = mem_calloc(cap, sizeof *slots); /* an item's entry index (never 0) */
    bool unique = true;
    for (uint32_t it = v + 1; it < self->entries[v].next && unique; it = self->entries[it].next) {
        size_t h = jsontape_value_hash(self, it) & (cap - 1);
        for (; slots[h]; h = (h + 1) & (cap - 1)) {
            if (jsontape_equal(self, it, self, slots[h])) {
                unique = false;
                break;
            }
        }
        slots[h] = it;
    }
    free(slots);
    return unique;
}

size_t jsontape_escape(char *out, const char *src, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '~' || src[i] == '/') {
            out[n++] = '~';
            out[n++] = src[i] == '~' ? '0' : '1';
        } else {
            out[n++] = src[i];
        }
    }
    return n;
}

/* Appends "/" and src[0..len) escaped per RFC 6901 to out (used *n of cap, NUL kept after);
 * false, appending nothing, when the whole segment does not fit. */
static bool s_segment(char *out, size_t cap, size_t *n, const char *src, size_t len) {
    size_t need = 1;
    for (size_t i = 0; i < len; i++) {
        need += src[i] == '~' || src[i] == '/' ? 2 : 1;
    }
    if (*n + need + 1 > cap) {
        return false;
    }
    out[(*n)++] = '/';
    *n += jsontape_escape(out + *n, src, len);
    out[*n] = '\0';
    return true;
}

/* Descends from root through the one child whose entries contain v. A pointer that does not
 * fit keeps the segments that fit before "/...". */
void jsontape_pointer(const jsontape_t *self, uint32_t root, uint32_t v, char *out, size_t cap) {
    const jsontape_entry_t *e = self->entries;
    size_t n = 0;
    out[0] = '\0';
    bool fits = true;
    for (uint32_t at = root; at != v && fits;) {
        if (e[at].type == JSONTAPE_OBJECT) {
            uint32_t k = at + 1;
            while (e[k + 1].next <= v) {
                k = e[k + 1].next;
            }
            fits = s_segment(out, cap, &n, jsontape_str(self, &e[k]), e[k].size);
            at = k == v ? v : k + 1; /* v is the member's name (propertyNames) or inside it */
        } else {
            uint32_t it = at + 1;
            size_t index = 0;
            for (; e[it].next <= v; it = e[it].next) {
                index++;
            }
            char num[24];
            int len = snprintf(num, sizeof num, "%zu", index);
            fits = s_segment(out, cap, &n, num, (size_t)len);
            at = it;
        }
    }
    while (!fits && n > 0 && n + 5 > cap) { /* room for "/..." and the NUL */
        while (out[--n] != '/') {
        }
        out[n] = '\0';
    }
    if (!fits) {
        (void)s_segment(out, cap, &n, "...", 3);
    }
}
