/*
 * authcache: bearer tokens this gateway verified recently, so that a request's token costs no
 * query while its entry is fresh (ARCHITECTURE.md §11, "Authentication").
 *
 * Only successful checks are kept, each for ttl_ms from the query that found it: a token
 * deleted from api_tokens is refused by every gateway at most ttl_ms later, and a token
 * added is accepted at once. Entries are keyed by the token's SHA-256, never the token. At
 * most AUTHCACHE_MAX entries: when full, expired ones are dropped, and a token that still
 * finds no room is simply checked again next time. Thread-safe.
 */
#ifndef CHATFLEET_AUTHCACHE_H
#define CHATFLEET_AUTHCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "id.h"

#define AUTHCACHE_MAX 65536

typedef struct authcache authcache_t;

/* A cache keeping each entry ttl_ms (0: keeps nothing, every check queries). */
authcache_t *authcache_new(int64_t ttl_ms);
void authcache_destroy(authcache_t **self_p);

/* True with user_id filled when token was verified less than ttl_ms before now_ms. */
bool authcache_get(authcache_t *self, const char *token, int64_t now_ms,
                   char user_id[ID_UUID_LEN + 1]);

/* Records that token belonged to user_id at now_ms (when the query ran). */
void authcache_put(authcache_t *self, const char *token, const char *user_id, int64_t now_ms);

/* The entries held (for tests and metrics). */
int authcache_size(authcache_t *self);

#endif
