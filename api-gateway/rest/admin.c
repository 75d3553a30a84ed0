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

/* --- The cost view (ARCHITECTURE.md §7.7). --- */

/* Every model call in a window of days as rows u (owner_id, model_config_id, created_at, usage,
 * message): the message rows with usage (their chat's owner) and the calls that wrote no
 * message (chat_usage), created from $1 until a day after $2 (timestamptz, each the start of
 * a day; NULL: unbounded). */
#define S_CALLS_SQL                                                                                \
    "WITH u AS (SELECT c.owner_id, m.model_config_id, m.created_at, m.usage, true AS message"      \
    " FROM chat_messages m JOIN chats c ON c.id = m.chat_id WHERE m.usage IS NOT NULL"             \
    " AND m.created_at >= coalesce($1::timestamptz, '-infinity')"                                  \
    " AND m.created_at < coalesce($2::timestamptz + interval '24 hours', 'infinity')"              \
    " UNION ALL SELECT cu.owner_id, cu.model_config_id, cu.created_at, cu.usage, false"            \
    " FROM chat_usage cu WHERE cu.created_at >= coalesce($1::timestamptz, '-infinity')"            \
    " AND cu.created_at < coalesce($2::timestamptz + interval '24 hours', 'infinity'))"

/* The view's statement for a grouping: each group's key members and sums, then the total (the
 * ROLLUP's row, last), one jsonb object a row. Keys come from this table, never from input. */
typedef struct {
    const char *name; /* the value of ?group= */
    const char *sql;
} s_grouping_t;

static const s_grouping_t s_groupings[] = {
    {"day", S_CALLS_SQL
     " SELECT jsonb_build_object('day', CASE WHEN grouping(d) = 0 THEN d END," ADMIN_USAGE_SUMS_SQL
     ") FROM (SELECT (u.created_at AT TIME ZONE 'UTC')::date"
     " AS d, u.* FROM u) u GROUP BY ROLLUP (d) ORDER BY grouping(d), d"},
    {"user", S_CALLS_SQL " SELECT jsonb_build_object('user_id', u.owner_id, 'user_name',"
                         " min(us.name)," ADMIN_USAGE_SUMS_SQL ") FROM u LEFT JOIN users us ON"
                         " us.id = u.owner_id GROUP BY ROLLUP (u.owner_id) ORDER BY"
                         " grouping(u.owner_id), min(us.name), u.owner_id"},
    {"model", S_CALLS_SQL " SELECT jsonb_build_object('model_config_id', u.model_config_id,"
                          " 'model', min(mc.name)," ADMIN_USAGE_SUMS_SQL ") FROM u LEFT JOIN"
                          " model_configs mc ON mc.id = u.model_config_id GROUP BY ROLLUP"
                          " (u.model_config_id) ORDER BY grouping(u.model_config_id),"
                          " min(mc.name), u.model_config_id"},
};

/* A calendar date "YYYY-MM-DD" (the Gregorian calendar; the view's days are UTC). */
static bool s_date(const char *v) {
    if (strlen(v) != 10 || v[4] != '-' || v[7] != '-') {
        return false;
    }
    for (int i = 0; i < 10; i++) {
        if (i != 4 && i != 7 && (v[i] < '0' || v[i] > '9')) {
            return false;
        }
    }
    int y = (int)strtol(v, NULL, 10);
    int m = (int)strtol(v + 5, NULL, 10);
    int d = (int)strtol(v + 8, NULL, 10);
    static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return y >= 1 && m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1] && (m != 2 || d < 29 || leap);
}

/* The window's days (?from= and ?to=, both included) as timestamptz text of their starts, 00:00
 * UTC ("" when not given). 0, or -1 with a 400 naming the field. */
static int s_window(const http_req_t *req, char from[32], char to[32], http_resp_t *resp) {
    const char *f = http_query(req, "from");
    const char *t = http_query(req, "to");
    from[0] = to[0] = '\0';
    if (f && !s_date(f)) {
        http_invalid(resp, "from", "must be a date, YYYY-MM-DD");
        return -1;
    }
    if (t && !s_date(t)) {
        http_invalid(resp, "to", "must be a date, YYYY-MM-DD");
        return -1;
    }
    if (f && t && strcmp(f, t) > 0) {
        http_invalid(resp, "to", "must not be before from");
        return -1;
    }
    if (f) {
        snprintf(from, 32, "%s 00:00:00+00", f);
    }
    if (t) {
        snprintf(to, 32, "%s 00:00:00+00", t);
    }
    return 0;
}

static void s_costs(void *app, http_req_t *req, http_resp_t *resp) {
    gateway_t *gw = app;
    const char *group = http_query(req, "group");
    const s_grouping_t *g = NULL;
    for (size_t i = 0; i < sizeof s_groupings / sizeof s_groupings[0]; i++) {
        if (!strcmp(group ? group : "day", s_groupings[i].name)) {
            g = &s_groupings[i];
        }
    }
    char from[32];
    char to[32];
    if (!g) {
        http_invalid(resp, "group", "must be \"day\", \"user\" or \"model\"");
        return;
    }
    if (s_window(req, from, to, resp) != 0) {
        return;
    }
    PGconn *conn = pool_get(gw->pool);
    json_t *rows = NULL;
    if (s_require_admin(conn, req, resp) == 0) {
        const char *p[] = {from[0] ? from : NULL, to[0] ? to : NULL};
        rows = gateway_rows(conn, g->sql, 2, p, resp);
    }
    pool_put(gw->pool, conn);
    if (!rows) {
        return;
    }
    /* The last row is the total; with no calls at all it is the only one. */
    size_t n = json_array_size(rows);
    json_t *total = json_incref(json_array_get(rows, n - 1));
    json_array_remove(rows, n - 1);
    const char *keys[] = {"day", "user_id", "user_name", "model_config_id", "model"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_object_del(total, keys[i]);
    }
    json_t *view = json_pack("{s:s, s:s?, s:s?, s:o, s:o}", "group", g->name, "from",
                             http_query(req, "from"), "to", http_query(req, "to"), "rows", rows,
                             "total", total); /* steals rows and total */
    http_json(resp, 200, view);
}

const http_route_t admin_route_table[] = {
    {"GET", "/api/v2/admin/cluster", s_cluster, false, NULL, NULL},
    {"GET", "/api/v2/admin/costs", s_costs, false, NULL, "group from to"},
};
const int admin_route_count = sizeof admin_route_table / sizeof admin_route_table[0];
