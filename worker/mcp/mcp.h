/*
 * mcp: one client connection to one MCP server (ARCHITECTURE.md §7.9): JSON-RPC 2.0 over the
 * stdio transport (one message per line, on the standard input and output of a child process
 * the connection starts itself, with only its configured environment and sandboxed as sandbox.h
 * says) or the Streamable HTTP transport (mcphttp.h). It runs the handshake
 * (initialize, notifications/initialized), reads the tool list (tools/list, following nextCursor),
 * and carries any number of tools/call requests at once, each with a deadline; a call that is
 * cancelled or runs out of time is answered locally and the server is told with
 * notifications/cancelled.
 *
 * One I/O thread per connection owns the child (or the HTTP transfers): it writes requests,
 * reads and screens every message with the strict JSON boundary, and restarts the server (a
 * new HTTP session) with backoff when it exits or its transfer fails, it writes garbage, or it
 * does not finish its handshake. Every call in flight on a server that fails
 * ends with an error; a call never waits past its deadline. The number of threads does not
 * grow with the calls in flight.
 *
 * Thread-safety: every function may be called from any thread. A call's done callback runs on
 * the I/O thread (never inside mcp_call), exactly once unless mcp_cancel took the call first.
 */
#ifndef CHATFLEET_MCP_H
#define CHATFLEET_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "mcphttp.h"
#include "sandbox.h"

/* One message from a server, on either transport; longer is garbage. The value is the HTTP
 * transport's (mcphttp.h), so that the transport needs nothing of this header. */
#define MCP_LINE_MAX_BYTES MCPHTTP_MESSAGE_MAX_BYTES

#define MCP_RESULT_MAX_BYTES (64 * 1024) /* a tool result as the model sees it */
#define MCP_TOOLS_MAX        128         /* tools read from one server */
#define MCP_LIST_PAGES_MAX   64          /* tools/list pages read from one server */
#define MCP_HANDSHAKE_MS     15000       /* initialize and tools/list, all pages */
#define MCP_BACKOFF_MIN_MS   500         /* the first restart's wait, doubled per failure */
#define MCP_BACKOFF_MAX_MS   30000       /* the restart backoff's cap */
#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_ARGS_MAX         64 /* arguments of a server's command */

/* How a server is reached (the deployment's configuration, ARCHITECTURE.md §10): a command
 * over stdio, or a URL over Streamable HTTP (mcphttp.h). */
typedef struct {
    const char *name;           /* ^[a-z0-9-]{1,24}$: the tools' prefix (mcpset.h) */
    const char *command;        /* stdio: an absolute path, or a name looked up on the PATH */
    const char *const *args;    /* stdio: NULL-terminated, without the command itself */
    sandbox_conf_t sandbox;     /* stdio: its environment and confinement (sandbox.h) */
    const char *url;            /* Streamable HTTP (command NULL): the MCP endpoint */
    const char *const *headers; /* Streamable HTTP: "Name: value", NULL-terminated */
    int64_t call_timeout_ms;    /* a tools/call's deadline */
} mcp_conf_t;

typedef struct mcp mcp_t;

/* Ends a call: is_error is true for a tool's own error result and for every failure of the
 * server (result then is {"error": "..."}). result is a new reference the callee owns, at most
 * MCP_RESULT_MAX_BYTES as JSON text. */
typedef void(mcp_done_fn)(void *arg, json_t *result, bool is_error);

/* Copies conf and starts the I/O thread, which starts the server. NULL when the thread could
 * not be made. */
mcp_t *mcp_new(const mcp_conf_t *conf);

/* Stops the server (SIGKILL to its process group) and joins the I/O thread; calls still in
 * flight end with an error first. Safe on NULL; nulls *self_p. */
void mcp_destroy(mcp_t **self_p);

/* The tools the server offered at its last handshake: a new array of its tools/list entries
 * ({"name", "description", "inputSchema"}); empty while the server is down. */
json_t *mcp_tools(mcp_t *self);

/* Starts tools/call of tool with arguments args (an object; NULL: {}), ending by
 * deadline_ms (monotonic, id_now_ms() scale). While the server is starting the call waits for
 * it, within the same deadline. Returns the call's id (never 0). */
uint64_t mcp_call(mcp_t *self, const char *tool, const json_t *args, int64_t deadline_ms,
                  mcp_done_fn *done, void *arg);

/* Takes the call back: true when its done had not run and never will (the server is sent
 * notifications/cancelled when the request had reached it); false when done ran or runs. */
bool mcp_cancel(mcp_t *self, uint64_t id);

/* What the connection did so far (for tests and logs). */
typedef struct {
    int64_t starts;   /* processes started */
    int64_t ready;    /* handshakes completed */
    int64_t calls;    /* tools/call requests written */
    int64_t timeouts; /* calls that ran out of time */
    int pid;          /* the server's process, 0 while it is down */
} mcp_stats_t;

void mcp_stats(mcp_t *self, mcp_stats_t *out);

#endif
