/* nodejs: JavaScript clients from C tests; see nodejs.h. */
#include "nodejs.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nodejs_install(const char *dir, const char *packages) {
    char *cmd = mem_printf("mkdir -p '%s' && npm install --no-audit --no-fund --prefix '%s' %s"
                           " > '%s/npm.log' 2>&1",
                           dir, dir, packages, dir);
    int rc = system(cmd);
    free(cmd);
    if (rc == 0) {
        return 0;
    }
    if (system("npm ping > /dev/null 2>&1") != 0) {
        fprintf(stderr, "the npm registry cannot be reached: skipped\n");
        return 77;
    }
    fprintf(stderr, "npm install of %s failed (see %s/npm.log)\n", packages, dir);
    return -1;
}

bool nodejs_run(const char *cmd, const char *ok_prefix, nodejs_line_fn on_line, void *ctx) {
    char *full = mem_printf("%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    free(full);
    if (!p) {
        return false;
    }
    char line[8192];
    bool ok = false;
    while (fgets(line, sizeof line, p)) {
        printf("  node: %s", line);
        ok |= strncmp(line, ok_prefix, strlen(ok_prefix)) == 0;
        if (on_line) {
            on_line(ctx, line);
        }
    }
    return pclose(p) == 0 && ok;
}
