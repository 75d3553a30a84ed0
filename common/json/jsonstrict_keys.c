/* jsonstrict_keys: duplicate object keys for the strict JSON boundary (jsonstrict.h): a scan of
 * the tape for small objects, and for big ones a seeded open-addressing table that the parser
 * owns, so that a big or crafted object costs one short probe per key; see
 * jsonstrict_internal.h. */
#include "id.h"
#include "jsonstrict_internal.h"
#include "mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One key of an open big object: the table is keyed by (object serial, key hash). A slot whose
 * serial is at most the table's retired serial is empty (calloc's zero among them). */
struct jsonstrict_keys_slot {
    uint32_t serial;
    uint32_t hash;
    uint32_t key; /* the key's tape entry */
};
typedef struct jsonstrict_keys_slot s_slot_t;

static bool s_same_key(const jsontape_t *tape, uint32_t a, uint32_t b) {
    const jsontape_entry_t *ea = jsontape_at(tape, a);
    const jsontape_entry_t *eb = jsontape_at(tape, b);
    return ea->hash == eb->hash && ea->size == eb->size &&
           memcmp(jsontape_str(tape, ea), jsontape_str(tape, eb), ea->size) == 0;
}

/* The process's secret for placing keys in the table, drawn once. The tape's key hashes are
 * unseeded, so without it an attacker could pick keys whose hashes share their low bits and
 * pile every key of a big object into one probe run (quadratic time); with it, only keys whose
 * 32-bit hashes are wholly equal collide, and those cost about 2^32 tries each to find. */
static uint32_t s_seed;
static pthread_once_t s_seed_once = PTHREAD_ONCE_INIT;

static void s_seed_init(void) {
    if (id_random(&s_seed, sizeof s_seed) != 0) {
        s_seed = 0x2545F491u; /* no kernel randomness: still correct, just not flood-proof */
    }
}

static size_t s_slot_home(uint32_t seed, uint32_t serial, uint32_t hash, size_t mask) {
    uint32_t h = hash ^ seed ^ (serial * 0x9E3779B9u);
    h ^= h >> 16; /* murmur3's finaliser: every bit of h reaches the low bits */
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return (size_t)h & mask;
}

/* Makes room for one more live slot: the table stays at most half full, so probes are short
 * and always end at an empty slot. */
static void s_reserve(jsonstrict_keys_t *tab) {
    if (2 * (tab->used + 1) <= tab->cap) {
        return;
    }
    if (tab->cap == 0) {
        int rc = pthread_once(&s_seed_once, s_seed_init);
        ASSERT(rc == 0);
        tab->seed = s_seed;
    }
    size_t cap = tab->cap ? 2 * tab->cap : 64;
    s_slot_t *slots = mem_calloc(cap, sizeof *slots);
    for (size_t i = 0; i < tab->cap; i++) {
        const s_slot_t *s = &tab->slots[i];
        if (s->serial > tab->retired) {
            size_t j = s_slot_home(tab->seed, s->serial, s->hash, cap - 1);
            while (slots[j].serial != 0) {
                j = (j + 1) & (cap - 1);
            }
            slots[j] = *s;
        }
    }
    free(tab->slots);
    tab->slots = slots;
    tab->cap = cap;
}

/* Whether the key at tape entry key is already in the table for serial; if not, adds it. */
static bool s_table_seen(jsonstrict_keys_t *tab, const jsontape_t *tape, uint32_t serial,
                         uint32_t key) {
    s_reserve(tab);
    uint32_t hash = jsontape_at(tape, key)->hash;
    size_t mask = tab->cap - 1;
    for (size_t i = s_slot_home(tab->seed, serial, hash, mask);; i = (i + 1) & mask) {
        s_slot_t *s = &tab->slots[i];
        if (s->serial <= tab->retired) {
            *s = (s_slot_t){.serial = serial, .hash = hash, .key = key};
            tab->used++;
            return false;
        }
        if (s->serial == serial && s->hash == hash && s_same_key(tape, s->key, key)) {
            return true;
        }
    }
}

void jsonstrict_keys_open(jsonstrict_keys_object_t *obj, uint32_t at) {
    *obj = (jsonstrict_keys_object_t){.at = at};
}

/* An object that reaches JSONSTRICT_SCAN_KEYS members moves its keys into the table, so a big
 * object costs one probe per key instead of a scan that would grow quadratically. */
bool jsonstrict_keys_seen_big(jsonstrict_keys_t *keys, jsonstrict_keys_object_t *obj,
                              const jsontape_t *tape, uint32_t key) {
    if (obj->serial == 0) {
        ASSERT(keys->last_serial < UINT32_MAX - 1);
        obj->serial = ++keys->last_serial;
        keys->open++;
        for (uint32_t k = obj->at + 1; k < key; k = jsontape_at(tape, k + 1)->next) {
            bool seen = s_table_seen(keys, tape, obj->serial, k);
            ASSERT(!seen); /* the scan has already told these keys apart */
        }
    }
    return s_table_seen(keys, tape, obj->serial, key);
}

void jsonstrict_keys_close(jsonstrict_keys_t *keys, const jsonstrict_keys_object_t *obj) {
    if (obj->serial == 0) {
        return;
    }
    ASSERT(keys->open > 0);
    if (--keys->open == 0) {
        keys->retired = keys->last_serial;
        keys->used = 0;
    }
}

void jsonstrict_keys_free(jsonstrict_keys_t *keys) {
    free(keys->slots);
    *keys = (jsonstrict_keys_t){0};
}
