/* tally: see tally.h. */
#include "tally.h"
#include "mem.h"

zhashx_t *tally_new(void) {
    zhashx_t *map = zhashx_new();
    zhashx_set_destructor(map, (zhashx_destructor_fn *)zstr_free);
    return map;
}

int64_t tally_add(zhashx_t *map, const char *key, int delta) {
    int64_t *n = zhashx_lookup(map, key);
    if (!n) {
        n = mem_calloc(1, sizeof *n);
        zhashx_insert(map, key, n);
    }
    *n += delta;
    int64_t now = *n;
    if (now <= 0) {
        zhashx_delete(map, key);
    }
    return now;
}
