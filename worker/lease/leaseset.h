/*
 * leaseset: the (chat_id, runner_id) leases this worker's runners hold, shared by the
 * manager (which adds a lease when it spawns a runner and removes it at cleanup), the
 * heartbeater (which renews exactly these) and the manager's sync loop (which reads these
 * chats). Thread-safe.
 */
#ifndef CHATFLEET_LEASESET_H
#define CHATFLEET_LEASESET_H

#include <stdbool.h>
#include <stddef.h>

#include "id.h"

typedef struct {
    char chat_id[ID_UUID_LEN + 1];
    char runner_id[ID_UUID_LEN + 1];
} lease_t;

typedef struct leaseset leaseset_t;

/* A lease's key, "chat_id/runner_id": how the set and a renewal's match tell leases apart. */
#define LEASESET_KEY_LEN (2 * ID_UUID_LEN + 2)
void leaseset_key(const char *chat_id, const char *runner_id, char key[LEASESET_KEY_LEN]);

leaseset_t *leaseset_new(void);
void leaseset_destroy(leaseset_t **self_p);

/* Adds a lease; a duplicate is ignored. */
void leaseset_add(leaseset_t *self, const char *chat_id, const char *runner_id);
/* Removes a lease; returns true when it was there. */
bool leaseset_remove(leaseset_t *self, const char *chat_id, const char *runner_id);
bool leaseset_has(leaseset_t *self, const char *chat_id, const char *runner_id);

/* A copy of every lease (caller frees *out; NULL when empty); returns the count. */
size_t leaseset_snapshot(leaseset_t *self, lease_t **out);

size_t leaseset_size(leaseset_t *self);

#endif
