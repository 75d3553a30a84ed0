/*
 * routes: the gateway's route tables. routes_chat.c holds the chat-level routes (create,
 * list, get, update, interrupt, tool-results, compact, clear, reconcile-invalid, models,
 * health); routes_message.c the message and queue routes; routes_config.c a user's own
 * settings under /api/v2/chats/config (compaction thresholds); admin.c the admin API;
 * console.c the operator console's files; routes.c joins them, config routes first.
 */
#ifndef CHATFLEET_ROUTES_H
#define CHATFLEET_ROUTES_H

#include "gateway.h"

extern const http_route_t chat_route_table[];
extern const int chat_route_count;
extern const http_route_t message_route_table[];
extern const int message_route_count;
extern const http_route_t config_route_table[];
extern const int config_route_count;

/* A newly allocated table of every route (caller frees); *count receives its length. */
http_route_t *routes_all(int *count);

#endif
