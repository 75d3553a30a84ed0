/*
 * ask: one turn from the command line. It sends PROMPT (creating a chat unless --chat names
 * one), follows the chat's stream until the turn ends and prints the answer: on a terminal
 * the text as it streams, tool activity and the structured value in a fenced block; piped,
 * only the answer's text, or only the validated JSON value of a --schema request. Dynamic
 * tool calls are answered by running the --tool commands locally, so the turn never strands
 * in requires_action; a call with no local command is answered with an error result.
 *
 * Exit status (ask_run's return): ASK_OK, ASK_FAILED (a failed structured request, a value
 * the local validator refuses, or a turn that ended in error; the code goes to stderr),
 * ASK_CANCELED (a canceled request), ASK_USAGE (a --file refused before anything was sent
 * included), ASK_TRANSPORT (the gateway refused or could not be reached, a failed upload
 * included), ASK_INTERRUPTED (Ctrl-C: the server-side run was interrupted first).
 */
#ifndef CHATFLEET_CLI_ASK_H
#define CHATFLEET_CLI_ASK_H

#include <signal.h>
#include <stdbool.h>

#include "client.h"
#include "upload.h"

enum {
    ASK_OK = 0,
    ASK_FAILED = 1,
    ASK_USAGE = 2,
    ASK_TRANSPORT = 3,
    ASK_CANCELED = 4,
    ASK_INTERRUPTED = 130,
};

#define ASK_TOOLS_MAX 32 /* --tool options per invocation */

typedef struct {
    const char *name;
    const char *command;
} ask_tool_t;

typedef struct {
    const char *schema;  /* --schema: a file name, or JSON text when it starts with '{' */
    const char *chat_id; /* --chat, or NULL for a new chat */
    ask_tool_t tools[ASK_TOOLS_MAX];
    int ntools;
    upload_list_t files; /* --file: uploaded, then named by file parts after the prompt */
    const char *prompt;
    const char *model;  /* --model: a model config name, or NULL for the chat's (default) */
    const char *system; /* --system: the new chat's system prompt, or NULL */
    bool verbose;       /* -v: the chat's usage totals on stderr after the turn */
    bool tty;           /* render for a terminal */
} ask_opts_t;

/* Runs the turn; returns the exit status above. cancel is set by the SIGINT handler. */
int ask_run(client_t *client, const ask_opts_t *opts, volatile sig_atomic_t *cancel);

/* Reads --schema's argument into a parsed schema (new reference) through the strict
 * boundary with the schema caps; NULL with the reason on stderr. */
json_t *ask_load_schema(const char *arg);

#endif
