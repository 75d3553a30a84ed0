/*
 * idcache: ids this gateway found by a query recently, by key, so that asking again costs no
 * query while the answer is fresh: a bearer token's user (ARCHITECTURE.md §11,
 * "Authentication") and a model config's id by name (§10, "Model configs").
 *
 * Only found ids are kept, each for ttl_ms from the query that found it: a row deleted or
 * changed in the database is seen by every gateway at most ttl_ms later, and a key that found
 * nothing is asked again next time. Entries are keyed by the key's SHA-256, never the key (a
 * token is a secret). At most IDCACHE_MAX entries: when full, expired ones are dropped, and a
 * key that still finds no room is simply asked again next time. Thread-safe.
 */
#ifndef CHATFLEET_IDCACHE_H
#define CHATFLEET_IDCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "id.h"

#define IDCACHE_MAX 65536

typedef struct idcache idcache_t;

/* A cache keeping each entry ttl_ms (0: keeps nothing, every lookup queries). */
idcache_t *idcache_new(int64_t ttl_ms);
void idcache_destroy(idcache_t **self_p);

/* True with id filled when key's id was found less than ttl_ms before now_ms. */
bool idcache_get(idcache_t *self, const char *key, int64_t now_ms, char id[ID_UUID_LEN + 1]);

/* Records that a query found id for key at now_ms (when the query ran). */
void idcache_put(idcache_t *self, const char *key, const char *id, int64_t now_ms);

/* The entries held (for tests and metrics). */
int idcache_size(idcache_t *self);

#endif
