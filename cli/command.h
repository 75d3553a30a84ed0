/*
 * command: the chatfleet subcommands other than ask: `chat create|list|show|send|edit|
 * interrupt|archive|queue` (one REST call each, the answer printed as JSON on stdout) and
 * `watch [CHAT]` (a chat's stream, or every chat's, one JSON line per event, redialed like
 * ask's). They return an exit status: 0, 2 for usage, 3 when the gateway refused.
 */
#ifndef CHATFLEET_CLI_COMMAND_H
#define CHATFLEET_CLI_COMMAND_H

#include <signal.h>

#include "client.h"

int command_chat(client_t *client, int argc, char **argv);
int command_watch(client_t *client, int argc, char **argv, volatile sig_atomic_t *cancel);

#endif
