/*
 * nodejs: runs JavaScript clients against a cluster from C tests (test_js_agent,
 * test_console): packages installed from npm into a directory of the build tree at test time,
 * and a node command whose output lines the test sees as they come.
 */
#ifndef CHATFLEET_NODEJS_H
#define CHATFLEET_NODEJS_H

#include <stdbool.h>

/* npm install of packages (space-separated, e.g. "ai@7 zod") with dir as the prefix, its
 * output in dir/npm.log. Returns 0 when installed, 77 when it failed and the npm registry
 * cannot be reached (the test is skipped), -1 on any other failure (the test fails). */
int nodejs_install(const char *dir, const char *packages);

/* Called with each output line of the command (newline included). */
typedef void (*nodejs_line_fn)(void *ctx, const char *line);

/* Runs cmd through the shell (stderr joined to stdout), printing each line as "  node: ..."
 * and handing it to on_line (may be NULL). True when a line started with ok_prefix and the
 * command exited 0. */
bool nodejs_run(const char *cmd, const char *ok_prefix, nodejs_line_fn on_line, void *ctx);

#endif
