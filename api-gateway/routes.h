/*
 * routes: every route the gateway serves, joined from the wings' tables: rest/ (config routes
 * first, then chat, message, admin and console) and a2a/.
 */
#ifndef CHATFLEET_ROUTES_H
#define CHATFLEET_ROUTES_H

#include "gateway.h"

/* A newly allocated table of every route (caller frees); *count receives its length. */
http_route_t *routes_all(int *count);

#endif
