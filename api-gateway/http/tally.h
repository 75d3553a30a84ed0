/*
 * tally: open counts by string key in a CZMQ hash (connections per client address, streams
 * per user). A key whose count falls to zero is removed, so the map holds only what is open.
 * Not thread-safe: the caller holds its own lock.
 */
#ifndef CHATFLEET_TALLY_H
#define CHATFLEET_TALLY_H

#include <czmq.h>
#include <stdint.h>

/* A map for tally_add (its values are freed with it). */
zhashx_t *tally_new(void);

/* Adds delta to key's count in map and returns the count after. */
int64_t tally_add(zhashx_t *map, const char *key, int delta);

#endif
