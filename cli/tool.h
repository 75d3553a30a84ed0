/*
 * tool: runs a --tool COMMAND for a dynamic tool call: `/bin/sh -c COMMAND` with the call's
 * arguments (JSON text) on stdin; its stdout is the result. A result that is JSON is sent as
 * that JSON value, anything else as a string; a non-zero exit marks the result an error.
 */
#ifndef CHATFLEET_CLI_TOOL_H
#define CHATFLEET_CLI_TOOL_H

#include <jansson.h>
#include <stdbool.h>

#define TOOL_OUTPUT_MAX_BYTES (1024 * 1024) /* stdout kept; the rest is read and dropped */

/* Runs command with args on stdin. Returns the result value (new reference, never NULL) and
 * sets *is_error when the command failed (exit status, signal, or it could not start). */
json_t *tool_run(const char *command, const char *args, bool *is_error);

#endif
