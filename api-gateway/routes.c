/* routes: joins the route tables of routes_config.c, routes_chat.c and routes_message.c; see
 * routes.h. */
#include "routes.h"
#include "mem.h"

#include <string.h>

http_route_t *routes_all(int *count) {
    *count = config_route_count + chat_route_count + message_route_count;
    http_route_t *all = mem_calloc((size_t)*count, sizeof *all);
    http_route_t *at = all;
    memcpy(at, config_route_table, (size_t)config_route_count * sizeof *all);
    at += config_route_count;
    memcpy(at, chat_route_table, (size_t)chat_route_count * sizeof *all);
    at += chat_route_count;
    memcpy(at, message_route_table, (size_t)message_route_count * sizeof *all);
    return all;
}
