/*
 * agents: the subagent tools a model is offered (ARCHITECTURE.md §3, "Families" and "Agent
 * waits"; §7.3): spawn_agent, wait_agent, message_agent, interrupt_agent (close_agent its
 * deprecated alias), list_agents and list_subagent_models. Each works on the calling chat's own
 * children. They need the database, so a reply's calls of them are left pending and the next
 * step runs them with its connection (agents_run), each write in a transaction of its own;
 * wait_agent is never run: its calls are what an agent wait holds (chatstate.h), answered when
 * the children end.
 */
#ifndef CHATFLEET_AGENTS_H
#define CHATFLEET_AGENTS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "chatstate.h"

/* True for the seven names (close_agent included). */
bool agents_is_tool(const char *name);

/* True for the tools that change nothing (plan mode offers only those): list_agents,
 * list_subagent_models and wait_agent, which reads its children's answers. Not spawn_agent,
 * message_agent, interrupt_agent or close_agent. */
bool agents_changes_nothing(const char *name);

/* A new array of the tools' specs ({"name", "description", "input_schema"}; close_agent is
 * not offered), sharing specs built once: read them, never change them. */
json_t *agents_specs(void);

/* What the tools act with: the calling chat and the caps. */
typedef struct {
    const char *chat_id; /* the calling chat, the parent of what it spawns */
    const cs_settings_t *settings;
    const hint_sink_t *sink; /* where committed hints go */
    int max_depth;           /* CHATFLEET_SUBAGENT_MAX_DEPTH; 0: every call is an error */
    int max_children;        /* CHATFLEET_SUBAGENT_MAX_CHILDREN */
    int max_queue;           /* CHATFLEET_QUEUE_MAX, for message_agent's queued sends */
    /* The traceparent the prompt a spawn_agent or message_agent makes is stored with (trace.h;
     * the calling turn's trace), or NULL: none. */
    const char *traceparent;
} agents_ctx_t;

/* Runs one call (a tool-call part of the chat's history): the result (new reference) with
 * *is_error; bad arguments, a refused move or a cap give an error result for the model, with
 * nothing created. NULL when the database failed: the step retries, and a spawn_agent that ran
 * before finds the child it created (chats.spawn_call_id). */
json_t *agents_run(PGconn *conn, const agents_ctx_t *a, const json_t *call, bool *is_error);

#endif
