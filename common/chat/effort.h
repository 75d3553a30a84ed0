/*
 * effort: the reasoning effort scale (ARCHITECTURE.md §3, "Metadata"; chatd-architecture.md,
 * "Reasoning effort"): none < minimal < low < medium < high < xhigh < max, the order the
 * database's reasoning_effort domain and reasoning_effort_rank() keep too (migration 0014).
 * A user picks an effort per message; a model config may carry {default, max}; the worker
 * sends the effective one, resolved here, in each provider's own field. Pure: no I/O.
 */
#ifndef CHATFLEET_EFFORT_H
#define CHATFLEET_EFFORT_H

#define EFFORT_NAME_MAX 8 /* the longest name, "minimal", and its NUL */
#define EFFORT_LEVELS   7 /* ranks 1 (none) to 7 (max) */

/* The scale's names in order, for messages: "none, minimal, low, medium, high, xhigh or max". */
#define EFFORT_NAMES_TEXT "none, minimal, low, medium, high, xhigh or max"

/* The rank of name on the scale, 1 (none) to EFFORT_LEVELS (max); 0 for NULL or any other
 * text (case matters: "High" is not on it). */
int effort_rank(const char *name);

/* The scale's own name of rank (a static string), or NULL outside 1..EFFORT_LEVELS. */
const char *effort_name(int rank);

/* The effort a model call is made with: chosen (the chat's last_reasoning_effort, NULL or ""
 * when unset) when it is on the scale, else dflt; then clamped to max. dflt and max are the
 * model config's reasoning_effort; when either is not on the scale (the config has none) the
 * result is NULL: no effort is sent and the user's choice is ignored. Returns a static name. */
const char *effort_resolve(const char *chosen, const char *dflt, const char *max);

#endif
