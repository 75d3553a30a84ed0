/*
 * routes: the gateway's route tables. routes_chat.c holds the chat-level routes (create,
 * list, get, update, interrupt, tool-results, compact, clear, reconcile-invalid, models,
 * health); routes_message.c the message and queue routes; admin.c the admin API; console.c
 * the operator console's files; routes.c joins them.
 */
#ifndef CHATFLEET_ROUTES_H
#define CHATFLEET_ROUTES_H

#include "gateway.h"

extern const http_route_t chat_route_table[];
extern const int chat_route_count;
extern const http_route_t message_route_table[];
extern const int message_route_count;

/* A newly allocated table of every route (caller frees); *count receives its length. */
http_route_t *routes_all(int *count);

#endif
