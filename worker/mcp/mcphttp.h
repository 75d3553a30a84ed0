/*
 * mcphttp: the MCP Streamable HTTP transport for one server (ARCHITECTURE.md §7.9), used by
 * mcp.c in place of a child process. Each JSON-RPC message is one POST to the server's URL
 * with Accept: application/json, text/event-stream; the answer is one JSON document, or an SSE
 * stream whose data events are messages (a request's response among them), or 202 with no
 * body. The session id the server gives in Mcp-Session-Id (on the initialize response) and the
 * negotiated protocol version (MCP-Protocol-Version) go on every later request, with the
 * configured headers. Every header is built through header.h (common/net): a session id that
 * is not visible ASCII, a protocol version or a configured header with a control character is
 * never sent; the transfer fails as the server's (or the configuration's) failure instead.
 *
 * Transfers run on a libcurl multi handle driven by the caller's thread (mcp's I/O thread):
 * mcphttp_wait, then mcphttp_perform. Not thread-safe: one thread uses it.
 */
#ifndef CHATFLEET_MCPHTTP_H
#define CHATFLEET_MCPHTTP_H

#include <stddef.h>
#include <stdint.h>

#define MCPHTTP_CONNECT_MS 10000 /* connecting to the server */
/* One message from a server, on either transport (mcp.h's MCP_LINE_MAX_BYTES is this): here the
 * unparsed bytes of one answer, a whole JSON document or the events not yet taken out of an SSE
 * stream. More fails the transfer. */
#define MCPHTTP_MESSAGE_MAX_BYTES (4 * 1024 * 1024)

typedef struct mcphttp mcphttp_t;

/* Receives one complete message (JSON text, not NUL-terminated). */
typedef void(mcphttp_msg_fn)(void *arg, const char *text, size_t len);

/* A transport for url with headers ("Name: value" strings, NULL-terminated; may be NULL).
 * Never NULL (aborts on exhaustion). */
mcphttp_t *mcphttp_new(const char *url, const char *const *headers);

/* Drops every transfer. Safe on NULL; nulls *self_p. */
void mcphttp_destroy(mcphttp_t **self_p);

/* POSTs the message text. id is the request's JSON-RPC id (mcphttp_abort drops it), or 0 for
 * a notification or a response. */
void mcphttp_post(mcphttp_t *self, const char *text, uint64_t id);

/* Drops the transfer of request id, if one is open. */
void mcphttp_abort(mcphttp_t *self, uint64_t id);

/* Drops every transfer and forgets the session and the protocol version (a new handshake
 * follows). Messages not yet delivered are dropped too. */
void mcphttp_reset(mcphttp_t *self);

/* The version initialize negotiated, sent from now on as MCP-Protocol-Version. One with a
 * control character or over 31 bytes is not kept: the next mcphttp_perform fails with why. */
void mcphttp_set_protocol(mcphttp_t *self, const char *version);

/* Waits up to timeout_ms for transfer I/O or for wake_fd to be readable. */
void mcphttp_wait(mcphttp_t *self, int wake_fd, int timeout_ms);

/* Moves the transfers on and hands each complete message to on_msg. Returns 0, or -1 with why
 * (bounded) when a transfer failed (no connection, an HTTP error status, an expired session, a
 * session id that is not visible ASCII) or a request could not be built (header.h refused a
 * value; nothing was sent and nothing is posted until then): the caller resets the session. */
int mcphttp_perform(mcphttp_t *self, mcphttp_msg_fn *on_msg, void *arg, char *why, size_t why_size);

#endif
