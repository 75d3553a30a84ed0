/* routes: joins the wings' route tables; see routes.h. */
#include "routes.h"
#include "a2a.h"
#include "admin.h"
#include "console.h"
#include "rest.h"
#include "mem.h"

#include <string.h>

http_route_t *routes_all(int *count) {
    const struct {
        const http_route_t *table;
        int n;
    } tables[] = {
        {config_route_table, config_route_count}, {file_route_table, file_route_count},
        {chat_route_table, chat_route_count},     {message_route_table, message_route_count},
        {admin_route_table, admin_route_count},   {console_route_table, console_route_count},
        {user_route_table, user_route_count},     {a2a_route_table, a2a_route_count}};
    *count = 0;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        *count += tables[i].n;
    }
    http_route_t *all = mem_calloc((size_t)*count, sizeof *all);
    int at = 0;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        memcpy(all + at, tables[i].table, (size_t)tables[i].n * sizeof *all);
        at += tables[i].n;
    }
    return all;
}
