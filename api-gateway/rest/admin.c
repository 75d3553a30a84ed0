/* admin: the operator's API; see admin.h. */
#include "admin.h"
#include "db.h"
#include "mem.h"
#include "relay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The cluster view in one read-only statement: $1 is the lease stale threshold in ms. A
 * lease is the heartbeat row of the chat's current runner (ARCHITECTURE.md §6); a held chat
 * without one (its row swept after going stale) shows fresh = false and no age. */
static const char s_cluster_sql[] =
    "WITH held AS (SELECT c.id, c.worker_id, c.runner_id, c.status, c.title, u.name AS owner,"
    " h.slot, (extract(epoch FROM statement_timestamp() - h.heartbeat_at) * 1000)::bigint AS age,"
    " coalesce(h.heartbeat_at > statement_timestamp() - make_interval(secs => $1::bigint /"
    " 1000.0), false) AS fresh, c.generation_attempt, c.history_version"
    " FROM chats c JOIN users u ON u.id = c.owner_id LEFT JOIN chat_heartbeats h"
    " ON h.chat_id = c.id AND h.runner_id = c.runner_id WHERE c.worker_id IS NOT NULL)"
    " SELECT jsonb_build_object('lease_stale_ms', $1::bigint, 'now', statement_timestamp(),"
    " 'workers', (SELECT coalesce(jsonb_agg(w ORDER BY w ->> 'worker_id'), '[]'::jsonb) FROM"
    " (SELECT jsonb_build_object('worker_id', worker_id, 'chats', count(*), 'fresh',"
    " count(*) FILTER (WHERE fresh), 'newest_heartbeat_age_ms', min(age), 'leases',"
    " jsonb_agg(jsonb_build_object('chat_id', id, 'runner_id', runner_id, 'status', status,"
    " 'title', title, 'owner', owner, 'slot', slot, 'heartbeat_age_ms', age, 'fresh', fresh,"
    " 'history_version', history_version, 'generation_attempt', generation_attempt)"
    " ORDER BY id)) AS w FROM held GROUP BY worker_id) x),"
    " 'chats_by_status', (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb) FROM"
    " (SELECT status, count(*) AS n FROM chats WHERE NOT archived GROUP BY status) s),"
    " 'awaiting_owner', (SELECT count(*) FROM chats WHERE NOT archived AND worker_id IS NULL"
    " AND status IN ('running', 'interrupting', 'requires_action')))";

/* How long the cluster view waits for the broker's counters: short, since stream catch-ups
 * share the gateway's one relay client (and its lock) meanwhile. */
#define S_BROKER_TIMEOUT_MS 250

/* The broker's counters (wire_stats_t, proto/README.md "Counters") through the gateway's
 * relay client, or {"reachable": false} when it did not answer in time. */
static json_t *s_broker(gateway_t *gw) {
    wire_stats_t st;
    int rc = -1;
    pthread_mutex_lock(&gw->relay_lock);
    if (!gw->relay && gw->relay_endpoint) {
        gw->relay = relay_client_new(gw->relay_endpoint);
    }
    if (gw->relay) {
        rc = relay_client_stats(gw->relay, S_BROKER_TIMEOUT_MS, &st);
    }
    pthread_mutex_unlock(&gw->relay_lock);
    if (rc != 0) {
        return json_pack("{s:b}", "reachable", 0);
    }
    return json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "reachable", 1, "workers",
                     (json_int_t)st.workers, "uptime_ms", (json_int_t)st.uptime_ms, "pub_in",
                     (json_int_t)st.pub_in, "pub_out", (json_int_t)st.pub_out, "relay_in",
                     (json_int_t)st.relay_in, "relay_out", (json_int_t)st.relay_out, "dropped",
                     (json_int_t)st.dropped, "refused", (json_int_t)st.refused, "forbidden",
                     (json_int_t)st.forbidden);
}

/* 0 when the caller is an admin; else -1 with 403 (or 500) in resp. */
static int s_require_admin(PGconn *conn, const http_req_t *req, http_resp_t *resp) {
    const char *p[] = {req->user_id};
    db_err_t e;
    PGresult *res = db_query(conn, &e, NULL, 0, "SELECT is_admin FROM users WHERE id = $1", 1, p);
    if (!res) {
        http_error(resp, 500, "Internal error.", "database unavailable");
        return -1;
    }
    bool admin = PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (!admin) {
        http_error(resp, 403, "Forbidden.", "the admin API needs a user with is_admin");
        return -1;
    }
    return 0;
}

static void s_cluster(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    PGconn *conn = pool_get(gw->pool);
    json_t *rows = NULL;
    if (s_require_admin(conn, req, resp) == 0) {
        char stale[DB_PARAM_INT64_LEN];
        const char *p[] = {db_param_int64(stale, gw->lease_stale_ms)};
        rows = gateway_rows(conn, s_cluster_sql, 1, p, resp);
    }
    pool_put(gw->pool, conn);
    if (rows) {
        /* Asked after the connection went back to the pool: the broker may be slow. */
        json_t *view = json_incref(json_array_get(rows, 0));
        json_object_set_new(view, "broker", s_broker(gw)); /* steals the new object */
        http_json(resp, 200, view);
        json_decref(rows);
    }
}

const http_route_t admin_route_table[] = {
    {"GET", "/api/v2/admin/cluster", s_cluster, false, NULL, NULL},
};
const int admin_route_count = sizeof admin_route_table / sizeof admin_route_table[0];
