/*
 * chatfleet-gateway: the API gateway process (ARCHITECTURE.md §1.1, §11).
 *
 *   chatfleet-gateway [serve]       serve HTTP on CHATFLEET_HTTP_LISTEN (HTTPS with
 *                                   CHATFLEET_HTTP_TLS_CERT and _KEY, ARCHITECTURE.md §1.1)
 *   chatfleet-gateway migrate       apply migrations and exit (safe to run concurrently)
 *   chatfleet-gateway user-add [--admin] NAME
 *                                   create a user (an operator with --admin: the admin API);
 *                                   print a new API token (only) on stdout
 *   chatfleet-gateway user-weight NAME W
 *                                   set a user's share of worker slots (users.chat_weight,
 *                                   1..1000; ARCHITECTURE.md §6.2, "Fair share")
 */
#include "config.h"
#include "db.h"
#include "a2a_push.h"
#include "gateway.h"
#include "hex.h"
#include "log.h"
#include "mem.h"
#include "migration.h"
#include "models.h"
#include "bus.h"
#include "routes.h"
#include "sigs.h"
#include "feed.h"
#include "stream.h"
#include "watch.h"
#include "httpd.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GATEWAY_POOL_SIZE 16 /* database connections shared by the HTTP threads */

static volatile sig_atomic_t s_stop = 0;

static void s_on_signal(int sig) {
    (void)sig;
    s_stop = 1;
}

static PGconn *s_connect(const config_t *cfg, const char *what) {
    if (!cfg->database_url) {
        fprintf(stderr, "chatfleet-gateway: CHATFLEET_DATABASE_URL is required\n");
        return NULL;
    }
    return db_connect(cfg->database_url, what);
}

static int s_migrate(const config_t *cfg) {
    PGconn *conn = s_connect(cfg, "chatfleet-gateway migrate");
    if (!conn) {
        return 1;
    }
    int applied = migration_apply(conn);
    PQfinish(conn);
    return applied < 0 ? 1 : 0;
}

/* Creates user name (an operator when admin: the admin API's is_admin, 0006_user_admin.sql)
 * and prints its new token. */
static int s_user_add(const config_t *cfg, const char *name, bool admin) {
    PGconn *conn = s_connect(cfg, "chatfleet-gateway user-add");
    if (!conn) {
        return 1;
    }
    char uid[ID_UUID_LEN + 1];
    char tid[ID_UUID_LEN + 1];
    unsigned char raw[32];
    char token[3 + 2 * sizeof raw + 1] = "cf_";
    ASSERT(id_uuid_new(uid) == 0 && id_uuid_new(tid) == 0 && id_random(raw, sizeof raw) == 0);
    hex_encode(raw, sizeof raw, token + 3);
    char err[256];
    const char *p[] = {uid, name, tid, token, admin ? "true" : "false"};
    /* Only the SHA-256 of the token is stored (PostgreSQL's sha256()). */
    db_err_t rc = db_exec(conn, err, sizeof err,
                          "WITH u AS (INSERT INTO users (id, name, is_admin) VALUES ($1, $2, $5)"
                          " RETURNING id) INSERT INTO api_tokens (id, user_id, token_sha256)"
                          " SELECT $3, u.id, sha256(convert_to($4, 'UTF8')) FROM u",
                          5, p);
    PQfinish(conn);
    if (rc != DB_OK) {
        fprintf(stderr, "chatfleet-gateway: user-add %s failed: %s\n", name, err);
        return 1;
    }
    log_info("user_added", "user_id=%s name=%s admin=%s", uid, name, admin ? "true" : "false");
    printf("%s\n", token);
    return 0;
}

/* Sets user name's weight in the fair share of worker slots. 0, 1 (no such user, a database
 * failure) or 2 (a weight outside 1..1000), each told on stderr. */
static int s_user_weight(const config_t *cfg, const char *name, const char *weight) {
    char *end = NULL;
    errno = 0;
    long w = strtol(weight, &end, 10);
    if (errno != 0 || end == weight || *end != '\0' || w < 1 || w > 1000) {
        fprintf(stderr,
                "chatfleet-gateway: user-weight: W must be an integer 1..1000 (got \"%s\")\n",
                weight);
        return 2;
    }
    PGconn *conn = s_connect(cfg, "chatfleet-gateway user-weight");
    if (!conn) {
        return 1;
    }
    char err[256];
    char text[16];
    snprintf(text, sizeof text, "%ld", w);
    const char *p[] = {name, text};
    db_err_t e;
    PGresult *res =
        db_query(conn, &e, err, sizeof err,
                 "UPDATE users SET chat_weight = $2::int WHERE name = $1 RETURNING id", 2, p);
    PQfinish(conn);
    int found = res ? PQntuples(res) : -1;
    if (found == 1) {
        log_info("user_weight_set", "user_id=%s name=%s chat_weight=%ld", PQgetvalue(res, 0, 0),
                 name, w);
    }
    PQclear(res);
    if (found != 1) {
        fprintf(stderr, "chatfleet-gateway: user-weight %s failed: %s\n", name,
                found == 0 ? "no such user" : err);
        return 1;
    }
    return 0;
}

/* The token's user while its cache entry is fresh, HTTP_AUTH_DENIED while the token is
 * remembered as finding no user, HTTP_AUTH_UNAVAILABLE otherwise (only s_auth can tell).
 * Answered on the socket threads: no request job and no database for either. */
static int s_auth_cached(void *app, const char *token, char user_id[ID_UUID_LEN + 1]) {
    gateway_t *gw = app;
    int64_t now = id_now_ms();
    char none[ID_UUID_LEN + 1];
    if (strlen(token) > 128) {
        return HTTP_AUTH_DENIED;
    }
    return idcache_get(gw->auth, token, now, user_id)        ? 0
           : idcache_get(gw->auth_unknown, token, now, none) ? HTTP_AUTH_DENIED
                                                             : HTTP_AUTH_UNAVAILABLE;
}

/* The token's user: from memory while it is known (s_auth_cached), else from api_tokens,
 * and then kept, found or not (ARCHITECTURE.md §7.1, "Authentication"). */
static int s_auth(void *app, const char *token, char user_id[ID_UUID_LEN + 1]) {
    gateway_t *gw = app;
    int known = s_auth_cached(app, token, user_id);
    if (known != HTTP_AUTH_UNAVAILABLE) {
        return known;
    }
    int64_t now = id_now_ms();
    const char *p[] = {token};
    PGresult *res = NULL;
    /* A pooled connection may have died with a PostgreSQL restart: putting it back resets
     * it, so one more try runs on a fresh one. */
    for (int tries = 0; !res && tries < 2; tries++) {
        PGconn *conn = pool_get(gw->pool);
        db_err_t e;
        res = db_query(conn, &e, NULL, 0,
                       "SELECT user_id FROM api_tokens"
                       " WHERE token_sha256 = sha256(convert_to($1, 'UTF8'))",
                       1, p);
        pool_put(gw->pool, conn);
    }
    if (!res) {
        return HTTP_AUTH_UNAVAILABLE;
    }
    int ok = PQntuples(res) == 1;
    if (ok) {
        snprintf(user_id, ID_UUID_LEN + 1, "%s", PQgetvalue(res, 0, 0));
        idcache_put(gw->auth, token, user_id, now);
    } else {
        idcache_put(gw->auth_unknown, token, "", now);
    }
    PQclear(res);
    return ok ? 0 : HTTP_AUTH_DENIED;
}

static int64_t s_open_streams(void *hub) {
    return hub ? hub_count(hub) : 0;
}

static httpd_t *s_httpd; /* for the gauges below; set once while serving */

static int64_t s_http_stat(void *which) {
    httpd_stats_t st = {0};
    if (s_httpd) {
        httpd_stats(s_httpd, &st);
    }
    const char *w = which;
    return !strcmp(w, "open")      ? st.open
           : !strcmp(w, "refused") ? st.refused
           : !strcmp(w, "cut")     ? st.cut
                                   : st.handlers_queued;
}

static int64_t s_stream_jobs(void *pool) {
    return workpool_queued(pool);
}

static int64_t s_stream_reads(void *gw) {
    return atomic_load(&((gateway_t *)gw)->stream_reads);
}

static void s_gauges(gateway_t *gw) {
    metrics_gauge(gw->metrics, "chatfleet_open_streams", "Open stream and watch connections.",
                  s_open_streams, gw->hub);
    metrics_gauge(gw->metrics, "chatfleet_http_connections", "Open HTTP connections.", s_http_stat,
                  (void *)"open");
    metrics_gauge(gw->metrics, "chatfleet_http_refused_total",
                  "Connections answered 503 at a connection cap.", s_http_stat, (void *)"refused");
    metrics_gauge(gw->metrics, "chatfleet_http_cut_total",
                  "Connections cut at the head or body deadline.", s_http_stat, (void *)"cut");
    metrics_gauge(gw->metrics, "chatfleet_http_requests_queued",
                  "Requests waiting for a request thread.", s_http_stat, (void *)"queued");
    metrics_gauge(gw->metrics, "chatfleet_stream_jobs_queued",
                  "Stream and watch reads waiting for a stream thread.", s_stream_jobs,
                  gw->streams);
    metrics_gauge(gw->metrics, "chatfleet_stream_reads_total",
                  "Database reads made by chat streams (syncs).", s_stream_reads, gw);
}

/* Lets the process hold as many sockets as the connection cap needs (the soft limit up to
 * the hard one). */
static void s_raise_nofile(const config_t *cfg) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return;
    }
    rlim_t want = (rlim_t)cfg->http_max_connections + 1024;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        log_warn("nofile_low", "limit=%lld wanted=%lld", (long long)rl.rlim_cur, (long long)want);
    }
}

static void s_teardown(gateway_t *gw, bus_publisher_t **pub) {
    pool_destroy(&gw->pool);
    hub_destroy(&gw->hub);
    workpool_destroy(&gw->streams);
    watch_cache_destroy(&gw->watch_cache);
    relay_client_destroy(&gw->relay);
    pthread_mutex_destroy(&gw->relay_lock);
    bus_publisher_destroy(pub);
    metrics_destroy(&gw->metrics);
    json_decref(gw->mcp_servers);
    sniffer_destroy(&gw->sniffer);
    gw->mcp_servers = NULL;
    hooks_destroy(&gw->hooks);
    idcache_destroy(&gw->auth);
    idcache_destroy(&gw->auth_unknown);
    idcache_destroy(&gw->models);
    ratelimit_destroy(&gw->creates);
}

#define S_PEM_MAX_BYTES (1024 * 1024) /* a certificate chain or key file; more is refused */

/* Reads the PEM file named by setting (path) into *out, which must hold marker. 0, or -1
 * with the setting, the path and the reason on stderr. */
static int s_read_pem(const char *setting, const char *path, const char *marker, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "chatfleet-gateway: %s=%s: cannot read: %s\n", setting, path,
                strerror(errno));
        return -1;
    }
    char *buf = mem_calloc(1, S_PEM_MAX_BYTES + 1);
    size_t n = fread(buf, 1, S_PEM_MAX_BYTES + 1, f);
    int err = ferror(f);
    fclose(f);
    const char *why = err                    ? "read error"
                      : n > S_PEM_MAX_BYTES  ? "larger than 1 MiB"
                      : !strstr(buf, marker) ? "no PEM block of the expected kind"
                                             : NULL;
    if (why) {
        fprintf(stderr, "chatfleet-gateway: %s=%s: %s (want %s)\n", setting, path, why, marker);
        memset(buf, 0, S_PEM_MAX_BYTES + 1);
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

/* The TLS material the configuration names, read before anything else starts: 0 with
 * *tls filled (or left NULL for plain HTTP), or -1 with the reason on stderr. */
static int s_tls_load(const config_t *cfg, httpd_tls_t *tls, const httpd_tls_t **use) {
    *use = NULL;
    if (!cfg->http_tls_cert) {
        return 0;
    }
    char *cert = NULL;
    char *key = NULL;
    if (s_read_pem("CHATFLEET_HTTP_TLS_CERT", cfg->http_tls_cert, "-----BEGIN CERTIFICATE-----",
                   &cert) != 0 ||
        s_read_pem("CHATFLEET_HTTP_TLS_KEY", cfg->http_tls_key, "PRIVATE KEY-----", &key) != 0) {
        free(cert);
        return -1;
    }
    *tls = (httpd_tls_t){cert, key, cfg->http_tls_priorities};
    *use = tls;
    return 0;
}

static void s_tls_free(httpd_tls_t *tls) {
    if (tls->key_pem) {
        memset((char *)tls->key_pem, 0, strlen(tls->key_pem));
    }
    free((char *)tls->key_pem);
    free((char *)tls->cert_pem);
    *tls = (httpd_tls_t){0};
}

/* The advertised base URL: CHATFLEET_PUBLIC_URL without a trailing slash, or the scheme and
 * the listen address. */
static char *s_public_url(const config_t *cfg) {
    if (cfg->public_url) {
        size_t n = strlen(cfg->public_url);
        while (n > 0 && cfg->public_url[n - 1] == '/') {
            n--;
        }
        return mem_strndup(cfg->public_url, n);
    }
    return mem_printf("%s://%s", cfg->http_tls_cert ? "https" : "http", cfg->http_listen);
}

static int s_serve_with(const config_t *cfg, const httpd_tls_t *tls) {
    PGconn *conn = s_connect(cfg, "chatfleet-gateway");
    if (!conn) {
        return 1;
    }
    int rc = models_sync(conn, cfg->config_path);
    PQfinish(conn);
    if (rc != 0) {
        return 2;
    }
    s_raise_nofile(cfg);
    bus_publisher_t *pub = bus_publisher_new(cfg->broker_pub);
    gateway_t gw = {
        .sink = pub ? bus_publisher_sink(pub) : hint_sink_log,
        .max_queue = (int)cfg->queue_max,
        .hub = hub_new(cfg->broker_sub, cfg->stream_poll_ms, cfg->streams_per_user, &feed_hub_ops),
        .streams = workpool_new("streams", (int)cfg->stream_threads),
        .watch_cache = watch_cache_new(),
        .relay_endpoint = cfg->broker_relay,
        .metrics = metrics_new(),
        .mcp_servers = models_mcp_servers(cfg->config_path),
        .auth = idcache_new(cfg->auth_cache_ms),
        .auth_unknown = idcache_new(cfg->auth_cache_ms),
        .models = idcache_new(GATEWAY_MODEL_CACHE_MS),
        .creates = cfg->chats_per_min > 0
                       ? ratelimit_new((double)cfg->chats_per_min / 60.0,
                                       (double)cfg->chats_per_min, GATEWAY_CREATE_LIMIT_USERS)
                       : NULL};
    char *public_url = s_public_url(cfg);
    gw.public_url = public_url;
    gw.lease_stale_ms = cfg->lease_stale_ms;
    /* The console's files: CHATFLEET_CONSOLE_DIR, "off" for none, or the source tree's
     * console/ (ARCHITECTURE.md §11, "Operator console"). */
    gw.console_dir = !cfg->console_dir                 ? CHATFLEET_CONSOLE_DIR_DEFAULT
                     : strcmp(cfg->console_dir, "off") ? cfg->console_dir
                                                       : NULL;
    pthread_mutex_init(&gw.relay_lock, NULL);
    /* The lifecycle hooks a request dispatches before it commits (ARCHITECTURE.md §7.10). */
    hooks_config_t hc;
    char why[256];
    if (hooks_config_read(&hc, cfg->http_threads, why, sizeof why) != 0) {
        fprintf(stderr, "chatfleet-gateway: %s\n", why);
        s_teardown(&gw, &pub);
        free(public_url);
        return 2;
    }
    gw.hooks = hooks_new(&hc, NULL);
    hooks_config_clear(&hc);
    hooks_log_config(gw.hooks);
    gw.chat_settings = (cs_settings_t){.lease_stale_ms = cfg->lease_stale_ms,
                                       .requires_action_deadline_ms = 5 * 60 * 1000,
                                       .max_attachments = (int)cfg->chat_max_attachments};
    gw.file_quota_bytes = cfg->file_quota_bytes;
    gw.sniffer = sniffer_new();
    gw.pool = pool_new(cfg->database_url, GATEWAY_POOL_SIZE, "chatfleet-gateway");
    if (gw.hub && gw.pool) {
        hub_set_versions(gw.hub, stream_versions, &gw);
    }
    if (!pub || !gw.hub || !gw.pool || !gw.streams || !gw.mcp_servers || !gw.sniffer) {
        fprintf(stderr, "chatfleet-gateway: cannot start (%s)\n",
                !pub              ? "bad CHATFLEET_BROKER_PUB"
                : !gw.hub         ? "bad CHATFLEET_BROKER_SUB"
                : !gw.pool        ? "database unreachable"
                : !gw.mcp_servers ? "config file unreadable"
                : !gw.sniffer     ? "libmagic cannot load its database"
                                  : "no stream threads");
        s_teardown(&gw, &pub);
        free(public_url);
        return 1;
    }
    int nroutes = 0;
    http_route_t *routes = routes_all(&nroutes);
    ratelimit_t *auth_limit =
        cfg->auth_checks_per_s > 0
            ? ratelimit_new((double)cfg->auth_checks_per_s, (double)cfg->auth_checks_burst,
                            GATEWAY_AUTH_LIMIT_ADDRESSES)
            : NULL;
    http_router_t router = {routes, nroutes, s_auth, &gw, s_auth_cached, auth_limit};
    httpd_limits_t limits = {.max_connections = (int)cfg->http_max_connections,
                             .max_per_address = (int)cfg->http_max_per_address,
                             .head_timeout_ms = cfg->http_head_timeout_ms,
                             .body_timeout_ms = cfg->http_body_timeout_ms,
                             .io_threads = (int)cfg->http_io_threads,
                             .request_threads = (int)cfg->http_threads};
    s_httpd = httpd_new(cfg->http_listen, &limits, tls, &router, gw.metrics);
    if (!s_httpd) {
        free(routes);
        ratelimit_destroy(&auth_limit);
        s_teardown(&gw, &pub);
        free(public_url);
        return 1;
    }
    /* A2A push deliveries (a2a_push.h): from the database, so any gateway sends them. */
    a2a_pusher_t *pusher = a2a_pusher_new(gw.pool);
    if (!pusher) {
        log_warn("a2a_pusher_failed", "push notifications wait for another gateway");
    }
    s_gauges(&gw);
    /* SA_RESTART, as signal() gave it (glibc's BSD semantics): the signal may land on an HTTP
     * thread, whose interrupted calls then restart; pause() below returns either way. */
    sigs_install(s_on_signal, (const int[]){SIGTERM, SIGINT, 0}, SA_RESTART, SIGS_PIPE_IGNORE);
    while (!s_stop) {
        pause();
    }
    log_info("gateway_stopping", "reason=signal streams=%d", hub_count(gw.hub));
    /* Streams end first (and no new one opens), so that no connection is left suspended when
     * the server stops; then the server, whose handlers finish; then what they used. */
    hub_close_all(gw.hub);
    a2a_pusher_destroy(&pusher);
    httpd_t *httpd = s_httpd;
    s_httpd = NULL;
    httpd_destroy(&httpd);
    free(routes);
    ratelimit_destroy(&auth_limit);
    s_teardown(&gw, &pub);
    free(public_url);
    return 0;
}

static int s_serve(const config_t *cfg) {
    /* The push delivery policy (a2a_push.h): an allow-list that is not CIDRs stops the start. */
    char push_why[320];
    if (a2a_push_configure(cfg, push_why, sizeof push_why) != 0) {
        fprintf(stderr, "chatfleet-gateway: %s\n", push_why);
        return 2;
    }
    httpd_tls_t tls_mem = {0};
    const httpd_tls_t *tls = NULL;
    if (s_tls_load(cfg, &tls_mem, &tls) != 0) {
        return 2;
    }
    int served = s_serve_with(cfg, tls);
    s_tls_free(&tls_mem);
    return served;
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
    /* CURVE on the bus when both key settings are given (ARCHITECTURE.md §9 "Trust"); one
     * without the other, or an unusable file, is a configuration error. */
    curve_t *keys = NULL;
    if (curve_start("chatfleet-gateway", "gateway", &keys) != 0) {
        config_destroy(&cfg);
        return 2;
    }
    if (strcmp(cmd, "migrate") == 0) {
        rc = s_migrate(cfg);
    } else if (strcmp(cmd, "user-add") == 0 && argc == 3) {
        rc = s_user_add(cfg, argv[2], false);
    } else if (strcmp(cmd, "user-add") == 0 && argc == 4 && !strcmp(argv[2], "--admin")) {
        rc = s_user_add(cfg, argv[3], true);
    } else if (strcmp(cmd, "user-weight") == 0 && argc == 4) {
        rc = s_user_weight(cfg, argv[2], argv[3]);
    } else if (strcmp(cmd, "serve") == 0) {
        rc = s_serve(cfg);
    } else {
        fprintf(stderr, "usage: chatfleet-gateway [serve | migrate | user-add [--admin] NAME |"
                        " user-weight NAME W]\n");
        rc = 2;
    }
    curve_set_default(NULL);
    curve_destroy(&keys);
    config_destroy(&cfg);
    return rc;
}
