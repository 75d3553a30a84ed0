/*
 * console: serves the operator console's static files (console/ in the repository;
 * ARCHITECTURE.md §11, "Operator console") under /console/ (/console redirects to
 * /console/index.html; a path ending in '/' matches no route): index.html, JS modules and CSS
 * read from the directory CHATFLEET_CONSOLE_DIR (default: the source tree's console/), no
 * build step. Open routes: the page signs in with a token it sends on every API call. Only
 * a plain file name of the directory is served (letters, digits, '-', '_', one extension of
 * html, js, css, svg), at most CONSOLE_FILE_MAX_BYTES; anything else is 404. Every file goes
 * out with its type, nosniff, a same-origin Content-Security-Policy, no framing
 * (frame-ancestors 'none', X-Frame-Options: DENY) and no Referer (tests/integration/
 * test_redteam.c).
 */
#ifndef CHATFLEET_CONSOLE_H
#define CHATFLEET_CONSOLE_H

#include "gateway.h"

#define CONSOLE_FILE_MAX_BYTES (1024 * 1024) /* a console file larger than this is 404 */

extern const http_route_t console_route_table[];
extern const int console_route_count;

/* The content type of a console file name, or NULL when the name is not one the console
 * serves (exposed for unit tests). */
const char *console_content_type(const char *name);

#endif
