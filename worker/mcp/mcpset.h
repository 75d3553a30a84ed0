/*
 * mcpset: the deployment's MCP servers (ARCHITECTURE.md §7.9), one connection each (mcp.h) per
 * worker, shared by every chat. It names their tools for the model, mcp__<server>__<tool>, a
 * prefix no local, dynamic or finalizer tool can have (the gateway refuses dynamic tools named
 * so), and runs a step's pending MCP calls on the event loop as one asynchronous call that the
 * task machinery waits for like a model call (taskctx.h): no connection and no thread is held
 * while a server works.
 *
 * Configuration: "mcp_servers" in the config file (CHATFLEET_CONFIG), an object of
 * {"<name>": {"command": "...", "args": ["..."], "env": {"NAME": "value"}, "sandbox":
 * {"ro_paths": [...], "rw_paths": [...], "network": false}, "timeout_ms": N}} (stdio; env and
 * sandbox as sandbox.h) or {"url", "headers", "timeout_ms"}; CHATFLEET_MCP_SANDBOX chooses the
 * sandbox (auto, require, off). A chat uses the servers it named at creation (its mcp_servers
 * column, which a send may change for its next turns). Thread-safe.
 */
#ifndef CHATFLEET_MCPSET_H
#define CHATFLEET_MCPSET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "evloop.h"
#include "provider.h"

#define MCPSET_PREFIX             "mcp__"
#define MCPSET_SERVERS_MAX        16
#define MCPSET_TIMEOUT_DEFAULT_MS 30000

typedef struct mcpset mcpset_t;

/* Reads "mcp_servers" from the config file at path and starts a connection per server. A
 * missing path or member gives an empty set. NULL when the file or a field is malformed (err
 * names the field path and why: "mcp_servers.files.env.FOO: ..."), when CHATFLEET_MCP_SANDBOX
 * names no mode, or when it is require, a stdio server is configured and bwrap does not work. */
mcpset_t *mcpset_new(const char *path, char *err, size_t err_size);

/* Stops every server; calls in flight end with an error first. Safe on NULL; nulls *self_p. */
void mcpset_destroy(mcpset_t **self_p);

/* Logs the effective sandbox setting and one mcp_config line per server (name, timeout,
 * transport; for stdio the number of env variables and paths, and the network). */
void mcpset_log(const mcpset_t *self);

/* True when name is an MCP tool's name (it has the prefix). */
bool mcpset_is_tool(const char *name);

/* The tools of the enabled servers (a JSON array of server names; NULL: none) as specs on
 * offer: a new array of {"name", "description", "input_schema"}. A tool whose full name is not
 * ^[A-Za-z0-9_-]{1,64}$ is left out (and logged once per handshake). With read_only (plan
 * mode), only the tools whose tools/list entry has annotations.readOnlyHint true. */
json_t *mcpset_specs(mcpset_t *self, const json_t *enabled, bool read_only);

/* Runs calls (tool-call parts, each {"tool_call_id", "tool_name", "args"}) on loop, from the
 * loop's thread, as a provider call (provider.h): done runs once on the loop with PROVIDER_OK
 * and res->content an object {tool_call_id: {"result": value, "is_error": bool}} holding an
 * answer to every call (a call of a server the chat did not enable, or that is not configured,
 * is answered with an error), or with PROVIDER_CANCELLED through provider_cancel. */
provider_call_t *mcpset_start(mcpset_t *self, evloop_t *loop, const json_t *calls,
                              const json_t *enabled, provider_done_fn *done, void *ctx);

#endif
