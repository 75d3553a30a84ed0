/*
 * tools: the worker's local tools, which run inside the generation task (ARCHITECTURE.md §7.3).
 *
 * A small, safe set: nothing here touches the file system, the network or the process.
 * Dynamic tools are not here: they are declared by the client on the chat and executed by
 * the client through requires_action. Thread-safe.
 */
#ifndef CHATFLEET_TOOLS_H
#define CHATFLEET_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

/* True when name is a local tool. */
bool tools_is_local(const char *name);

/* A new array of the local tools' specs: [{"name", "description", "input_schema"}]. The
 * specs are built once and shared by every array (jansson's reference counts are atomic): read
 * them, never change them. */
json_t *tools_local_specs(void);

/* Runs a local tool with args (a JSON value; may be NULL). Returns the result value (new
 * reference, never NULL) and sets *is_error; an unknown name or bad arguments give an error
 * result, never a failure, because the model must be told. */
json_t *tools_run(const char *name, const json_t *args, bool *is_error);

#endif
