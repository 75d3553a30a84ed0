/*
 * hookcheck: the chaos run's lifecycle hook consumer (CHATFLEET_CHAOS_HOOKS=1; ARCHITECTURE.md
 * §7.10). A tests/support/hookcons consumer that allows everything, the environment that
 * points every gateway and worker at it, and the check after the run: every delivery it kept
 * is signed with the run's secret, names a known event and a chat, and the workload's events
 * all arrived (prompts, tool calls, turn ends); repeated event ids (a step made again after a
 * takeover) are counted, never refused.
 */
#ifndef CHATFLEET_CHAOS_HOOKCHECK_H
#define CHATFLEET_CHAOS_HOOKCHECK_H

typedef struct hookcheck hookcheck_t;

/* Starts the consumer. Never NULL (aborts on failure). */
hookcheck_t *hookcheck_new(void);

/* The two environment entries ("CHATFLEET_HOOKS_URL=...", "CHATFLEET_HOOKS_SECRET=..."),
 * valid while self lives. */
const char *hookcheck_url_env(const hookcheck_t *self);
const char *hookcheck_secret_env(const hookcheck_t *self);

/* Prints what the consumer received and returns the number of checks that failed. */
int hookcheck_check(hookcheck_t *self);

/* Stops the consumer and frees it. Safe on NULL; nulls. */
void hookcheck_destroy(hookcheck_t **self_p);

#endif
