/*
 * simagents: the subagent script of the sim provider (sim.h; worker/README.md, "The sim
 * provider"). With [sim:spawn N] a turn spawns N children, then optionally messages,
 * interrupts or lists them, then waits for them; each step is decided afresh from the tool
 * results since the latest real user message, so a retried or resumed step repeats the same
 * decision. When no call is left the sim answers as after any tool results. Pure computation
 * over the history's JSON; no I/O, thread-safe.
 */
#ifndef CHATFLEET_SIMAGENTS_H
#define CHATFLEET_SIMAGENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define SIMAGENTS_CHILDREN_MAX    8   /* [sim:child TEXT] directives kept; later ones ignored */
#define SIMAGENTS_CHILD_MAX_BYTES 160 /* one TEXT with its NUL (sim_parse cuts it at 153) */

/* [sim:agents VERB]: what the turn does with its children between spawning and waiting. */
typedef enum {
    SIMAGENTS_VERB_NONE = 0,
    SIMAGENTS_VERB_MESSAGE,   /* message_agent to each child */
    SIMAGENTS_VERB_INTERRUPT, /* interrupt_agent to each child */
    SIMAGENTS_VERB_LIST,      /* one list_agents */
    SIMAGENTS_VERB_MODELS,    /* one list_subagent_models */
} simagents_verb_t;

/* The subagent directives of one prompt (sim_parse fills them; all zero: no script). */
typedef struct {
    int spawn; /* [sim:spawn N]: N children (1..SIM_REPEAT_MAX); 0: no script */
    /* [sim:child TEXT], in order: children of them set. */
    char child[SIMAGENTS_CHILDREN_MAX][SIMAGENTS_CHILD_MAX_BYTES];
    int children;
    bool child_schema;     /* [sim:child-schema]: the spawns ask for a {"n": integer} result */
    bool nowait;           /* [sim:nowait]: never call wait_agent */
    bool wait_all;         /* [sim:wait-all]: wait_agent with {} (every child of the chat) */
    simagents_verb_t verb; /* [sim:agents VERB] */
} simagents_script_t;

/* The verb named word ("message", "interrupt", "list", "models"), or SIMAGENTS_VERB_NONE. */
simagents_verb_t simagents_verb(const char *word);

/* The calls of the next model step of the script sc, given the history msgs whose rows from
 * index from on are the turn so far, and clean, the prompt without directives. Returns a new
 * array (the caller owns it) of {"tool_name": NAME, "args": {...}} in the order to call them,
 * or NULL when sc has no script or the script has no call left. */
json_t *simagents_calls(const simagents_script_t *sc, const json_t *msgs, size_t from,
                        const char *clean);

/* How many of the model steps in msgs from index from on were script steps: assistant rows
 * that call one of the six subagent tools. */
int simagents_steps(const json_t *msgs, size_t from);

#endif
