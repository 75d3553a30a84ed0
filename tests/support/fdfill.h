/*
 * fdfill: takes every file descriptor of the test process, under a lowered limit, for tests
 * of code that must work when none is left (the broker's revocation, ARCHITECTURE.md §9).
 */
#ifndef CHATFLEET_FDFILL_H
#define CHATFLEET_FDFILL_H

typedef struct fdfill fdfill_t;

/* Lowers RLIMIT_NOFILE's soft limit to limit and opens /dev/null until open fails with
 * EMFILE. NULL when the limit cannot be set or open fails otherwise (nothing is then held,
 * and the old limit is back). */
fdfill_t *fdfill_new(long limit);

/* Closes what it opened and restores the old limit. Returns 0, or -1 when a close or the
 * restore failed; *self_p is NULL either way. */
int fdfill_destroy(fdfill_t **self_p);

#endif
