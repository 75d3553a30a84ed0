/*
 * command: the chatfleet subcommands other than ask: `chat create|list|show|send|edit|
 * interrupt|archive|queue` (one REST call each, the answer printed as JSON on stdout) and
 * `watch [CHAT]` (a chat's stream, or every chat's, one JSON line per event, redialed like
 * ask's). `chat create`, `send` and `edit` take --file PATH (repeatable): each file is uploaded
 * (upload.h) and named by a file part after the message's text. They return an exit status:
 * COMMAND_OK, COMMAND_USAGE (the caller prints the usage), COMMAND_REFUSED when the gateway
 * refused (an upload included), or COMMAND_BAD_FILE, a --file refused before anything was sent
 * (the reason is on stderr; the caller exits 2 without the usage).
 */
#ifndef CHATFLEET_CLI_COMMAND_H
#define CHATFLEET_CLI_COMMAND_H

#include <signal.h>

#include "client.h"

enum { COMMAND_OK = 0, COMMAND_USAGE = 2, COMMAND_REFUSED = 3, COMMAND_BAD_FILE = -2 };

int command_chat(client_t *client, int argc, char **argv);
int command_watch(client_t *client, int argc, char **argv, volatile sig_atomic_t *cancel);

#endif
