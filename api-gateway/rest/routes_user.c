/* routes_user: the caller's own account (GET /api/v2/users/me): who a token signs in as, for
 * clients that show it (the console) and scripts that check a token. */
#include "rest.h"

static void s_me(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    const char *p[] = {req->user_id};
    PGconn *conn = pool_get(gw->pool);
    json_t *rows = gateway_rows(conn,
                                "SELECT jsonb_build_object('id', id, 'name', name, 'is_admin',"
                                " is_admin, 'created_at', created_at) FROM users WHERE id = $1",
                                1, p, resp);
    pool_put(gw->pool, conn);
    if (!rows) {
        return;
    }
    json_t *me = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    if (me) {
        http_json(resp, 200, me);
    } else { /* the user was removed after the token was checked */
        http_error(resp, 401, "Unauthorized.", "the token's user no longer exists");
    }
}

const http_route_t user_route_table[] = {
    {"GET", "/api/v2/users/me", s_me, false, NULL, NULL},
};
const int user_route_count = sizeof user_route_table / sizeof user_route_table[0];
