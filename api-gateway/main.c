/*
 * chatfleet-gateway: the API gateway process (DESIGN §7, §12).
 *
 *   chatfleet-gateway migrate   apply migrations and exit (safe to run concurrently)
 *
 * Serving HTTP arrives with the gateway issue; until then `serve` says so and fails.
 */
#include "config.h"
#include "db.h"
#include "log.h"
#include "migration.h"

#include <stdio.h>
#include <string.h>

static int s_migrate(const config_t *cfg) {
    if (!cfg->database_url) {
        fprintf(stderr, "chatfleet-gateway: CHATFLEET_DATABASE_URL is required\n");
        return 2;
    }
    PGconn *conn = db_connect(cfg->database_url, "chatfleet-gateway migrate");
    if (!conn) {
        return 1;
    }
    int applied = migration_apply(conn);
    PQfinish(conn);
    return applied < 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    config_t *cfg = config_new();
    if (!cfg) {
        return 2;
    }
    if (log_init("gateway", cfg->log_level) != 0) {
        fprintf(stderr, "chatfleet-gateway: CHATFLEET_LOG=%s is not debug|info|warn|error\n",
                cfg->log_level);
        config_destroy(&cfg);
        return 2;
    }
    const char *cmd = argc > 1 ? argv[1] : "serve";
    int rc;
    config_log(cfg);
    if (strcmp(cmd, "migrate") == 0) {
        rc = s_migrate(cfg);
    } else if (strcmp(cmd, "serve") == 0) {
        fprintf(stderr, "chatfleet-gateway: serving HTTP is not built yet (issue 5)\n");
        rc = 2;
    } else {
        fprintf(stderr, "usage: chatfleet-gateway [serve|migrate]\n");
        rc = 2;
    }
    config_destroy(&cfg);
    return rc;
}
