/*
 * rest: the REST API's route tables (api-gateway/rest/README.md). routes_chat.c holds the
 * chat-level routes (create, list, get, update, interrupt, tool-results, compact, clear,
 * reconcile-invalid, models, health, and the live routes watch and stream); routes_message.c
 * the message and queue routes; routes_config.c a user's own settings under
 * /api/v2/chats/config (compaction thresholds); routes_file.c the uploads and downloads of
 * chat files; routes_user.c the caller's own account; admin.h the admin API; console.h the operator
 * console's files.
 */
#ifndef CHATFLEET_REST_H
#define CHATFLEET_REST_H

#include "gateway.h"

extern const http_route_t chat_route_table[];
extern const int chat_route_count;
extern const http_route_t message_route_table[];
extern const int message_route_count;
extern const http_route_t file_route_table[];
extern const int file_route_count;
extern const http_route_t config_route_table[];
extern const int config_route_count;
extern const http_route_t user_route_table[];
extern const int user_route_count;

#endif
