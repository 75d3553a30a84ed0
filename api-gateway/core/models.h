/*
 * models: the model configs the deployment offers, from the config file (ARCHITECTURE.md §10) or
 * the built-in `sim` model, written into model_configs at start so chats can reference them.
 */
#ifndef CHATFLEET_MODELS_H
#define CHATFLEET_MODELS_H

#include <jansson.h>
#include <libpq-fe.h>

/* Reads path (NULL: the built-in sim model only), validates every entry, and upserts them
 * with exactly one default. A base_url must be http(s) with no control character and an
 * api_key_env a portable variable name: both reach the worker's outgoing requests. Returns 0,
 * or -1 after printing the field path ("models[0].base_url") and reason. */
int models_sync(PGconn *conn, const char *path);

/* The names of the MCP servers the config file at path configures ("mcp_servers", an object by
 * name; the worker checks the entries, ARCHITECTURE.md §7.9): a new object whose keys are the
 * names, empty when path is NULL or the file has none, NULL when the file cannot be read. */
json_t *models_mcp_servers(const char *path);

#endif
