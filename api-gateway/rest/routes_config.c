/* routes_config: a user's own chat settings under /api/v2/chats/config. Today the compaction
 * thresholds per model config (ARCHITECTURE.md §7.6): the automatic chat trigger of the
 * caller's chats on that model fires at this percent of its context_limit, over the model's
 * compression_threshold and the deployment's default. */
#include "rest.h"
#include "db.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One threshold row as JSON; $1 is the user. */
#define S_ROW_SQL                                                                                  \
    "SELECT jsonb_build_object('model_config_id', m.id, 'model', m.name, 'threshold_percent',"     \
    " t.threshold_percent, 'updated_at', t.updated_at) FROM user_compaction_thresholds t"          \
    " JOIN model_configs m ON m.id = t.model_config_id WHERE t.user_id = $1::uuid"

/* The model config the path names (by its name) into id. 0, or -1 with a 404 or a 500. */
static int s_model_id(gateway_t *gw, PGconn *conn, const char *name, char id[ID_UUID_LEN + 1],
                      http_resp_t *resp) {
    int found = gateway_model_find(gw, conn, name, id, resp);
    if (found == 0) {
        http_error(resp, 404, "Model config not found.", "no model config has this name");
    }
    return found == 1 ? 0 : -1;
}

/* GET: every threshold the caller set, by model name. */
static void s_list(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    PGconn *conn = pool_get(gw->pool);
    const char *p[] = {req->user_id};
    json_t *rows = gateway_rows(conn, S_ROW_SQL " ORDER BY m.name", 1, p, resp);
    pool_put(gw->pool, conn);
    if (rows) {
        http_json(resp, 200, json_pack("{s:o}", "thresholds", rows));
    }
}

/* PUT {"threshold_percent": 0..100}: sets the caller's threshold for the model; 200 with it. */
static void s_put(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    json_t *body = gateway_body(req, resp, false);
    if (!body) {
        return;
    }
    static const char *const fields[] = {"threshold_percent", NULL};
    const json_t *pct = json_object_get(body, "threshold_percent");
    PGconn *conn = pool_get(gw->pool);
    char id[ID_UUID_LEN + 1];
    if (gateway_only_fields(body, fields, "", resp) != 0) {
        goto done;
    }
    if (!json_is_integer(pct) || json_integer_value(pct) < 0 || json_integer_value(pct) > 100) {
        http_invalid(resp, "threshold_percent", "must be an integer from 0 to 100");
        goto done;
    }
    if (s_model_id(gw, conn, req->params[0], id, resp) != 0) {
        goto done;
    }
    char v[8];
    snprintf(v, sizeof v, "%d", (int)json_integer_value(pct));
    const char *p[] = {req->user_id, id, v};
    char err[200];
    if (db_exec(conn, err, sizeof err,
                "INSERT INTO user_compaction_thresholds (user_id, model_config_id,"
                " threshold_percent) VALUES ($1::uuid, $2::uuid, $3::int) ON CONFLICT (user_id,"
                " model_config_id) DO UPDATE SET threshold_percent = EXCLUDED.threshold_percent,"
                " updated_at = now()",
                3, p) != DB_OK) {
        http_error(resp, 500, "Internal error.", "database unavailable");
        goto done;
    }
    json_t *rows = gateway_rows(conn, S_ROW_SQL " AND m.id = $2::uuid", 2, p, resp);
    if (rows) {
        http_json(resp, 200, json_incref(json_array_get(rows, 0)));
        json_decref(rows);
    }
done:
    pool_put(gw->pool, conn);
    json_decref(body);
}

/* DELETE: the caller's threshold for the model goes; the model's own applies again. 204. */
static void s_delete(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    PGconn *conn = pool_get(gw->pool);
    char id[ID_UUID_LEN + 1];
    if (s_model_id(gw, conn, req->params[0], id, resp) == 0) {
        const char *p[] = {req->user_id, id};
        char err[200];
        if (db_exec(conn, err, sizeof err,
                    "DELETE FROM user_compaction_thresholds WHERE user_id = $1::uuid AND"
                    " model_config_id = $2::uuid",
                    2, p) == DB_OK) {
            http_json(resp, 204, NULL);
        } else {
            http_error(resp, 500, "Internal error.", "database unavailable");
        }
    }
    pool_put(gw->pool, conn);
}

/* Before the chat routes: "/api/v2/chats/{}" must not take "config". */
const http_route_t config_route_table[] = {
    {"GET", "/api/v2/chats/config/user-compaction-thresholds", s_list, false, NULL, NULL},
    {"PUT", "/api/v2/chats/config/user-compaction-thresholds/{}", s_put, false, NULL, NULL},
    {"DELETE", "/api/v2/chats/config/user-compaction-thresholds/{}", s_delete, false, NULL, NULL},
};
const int config_route_count = (int)(sizeof config_route_table / sizeof config_route_table[0]);
