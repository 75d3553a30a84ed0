/* cluster: a whole cluster of real processes for tests; see cluster.h. */
#include "cluster.h"
#include <jansson.h>
#include "db.h"
#include "id.h"
#include "mem.h"
#include "migration.h"
#include "proc.h"
#include "testdb.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int starts;
    int port; /* gateways */
    char log[160];
} proc_t;

struct cluster {
    char name[64];
    char build[512];
    testdb_t *db;   /* the fixture's database, or NULL with a private PostgreSQL */
    char *pg_dir;   /* the private PostgreSQL's directory, or NULL */
    char *pg_url;   /* its chatfleet database */
    char *pg_admin; /* its postgres database */
    int pg_ha;      /* the private PostgreSQL is deploy/pgha's */
    char *pg_log;   /* its server log (pgcluster writes DIR/server.log) */
    PGconn *conn;
    char *token;
    char pub[64];
    char sub[64];
    char relay[64];
    char urls[CLUSTER_GATEWAYS_MAX][64];
    char *ca;   /* the CA the harness trusts (https or pg_tls), or NULL */
    char *cert; /* the gateways' certificate and key with https, or NULL */
    char *key;
    char **env;      /* the full environment list every process gets */
    char *curve_dir; /* keys and allow directory with CURVE, or NULL */
    proc_t broker;
    proc_t gateways[CLUSTER_GATEWAYS_MAX];
    proc_t workers[CLUSTER_WORKERS_MAX];
    int ngateways;
    int nworkers;
};

static proc_t *s_proc(cluster_t *self, cluster_role_t role, int i) {
    if (role == CLUSTER_BROKER) {
        return &self->broker;
    }
    if (role == CLUSTER_GATEWAY) {
        ASSERT(i >= 0 && i < self->ngateways);
        return &self->gateways[i];
    }
    ASSERT(i >= 0 && i < self->nworkers);
    return &self->workers[i];
}

static const char *s_role_name(cluster_role_t role) {
    return role == CLUSTER_BROKER ? "broker" : role == CLUSTER_GATEWAY ? "gateway" : "worker";
}

static void s_env(cluster_t *self, const cluster_opts_t *o) {
    static const char *const defaults[] = {
        "CHATFLEET_LEASE_STALE_MS=3000", "CHATFLEET_HEARTBEAT_MS=1000",
        "CHATFLEET_ACQUIRE_POLL_MS=500", "CHATFLEET_STREAM_POLL_MS=1000",
        "CHATFLEET_SIM_CHUNK_MS=0", "CHATFLEET_WORKER_SYNC_MS=200",
        "CHATFLEET_PUSH_ALLOW_CIDRS=127.0.0.0/8,::1/128",
        /* suites create many chats as one user; the
           limit has its own (test_gateway_auth_limit) */
        "CHATFLEET_CHATS_PER_MIN=0", NULL};
    int n = 0;
    self->env = mem_calloc(64, sizeof(char *));
    self->env[n++] = mem_printf("CHATFLEET_DATABASE_URL=%s", cluster_db_url(self));
    self->env[n++] = mem_printf("CHATFLEET_BROKER_PUB=%s", self->pub);
    self->env[n++] = mem_printf("CHATFLEET_BROKER_SUB=%s", self->sub);
    self->env[n++] = mem_printf("CHATFLEET_BROKER_RELAY=%s", self->relay);
    for (int i = 0; defaults[i]; i++) {
        self->env[n++] = mem_strdup(defaults[i]);
    }
    /* Caller settings come last: setenv in the child makes the last one win. */
    for (int i = 0; o->env && o->env[i] && n < 62; i++) {
        self->env[n++] = mem_strdup(o->env[i]);
    }
}

/* Runs chatfleet-broker keygen for NAME in the cluster's key directory. */
static void s_keygen(cluster_t *self, const char *role, const char *name) {
    char bin[600];
    snprintf(bin, sizeof bin, "%s/broker/chatfleet-broker", self->build);
    char *argv[] = {bin, "keygen", "--role", (char *)role, (char *)name, self->curve_dir, NULL};
    char *out = proc_output(argv, NULL);
    if (!out) {
        fprintf(stderr, "cluster: keygen %s %s failed\n", role, name);
        abort();
    }
    free(out);
    if (strcmp(role, "broker") != 0) { /* admitted: its public certificate in the allow directory */
        char *cp[] = {"/bin/cp", mem_printf("%s/%s.cert", self->curve_dir, name),
                      mem_printf("%s/allow/", self->curve_dir), NULL};
        char *o = proc_output(cp, NULL);
        ASSERT(o);
        free(o);
        free(cp[1]);
        free(cp[2]);
    }
}

static void s_curve(cluster_t *self, const cluster_opts_t *o) {
    char tmpl[] = "/tmp/cfcurve.XXXXXX";
    ASSERT(mkdtemp(tmpl));
    self->curve_dir = mem_strdup(tmpl);
    char *allow = mem_printf("%s/allow", self->curve_dir);
    ASSERT(mkdir(allow, 0700) == 0);
    free(allow);
    s_keygen(self, "broker", "broker");
    char name[32];
    for (int i = 0; i < o->gateways; i++) {
        snprintf(name, sizeof name, "gateway%d", i);
        s_keygen(self, "gateway", name);
    }
    for (int i = 0; i < o->workers; i++) {
        snprintf(name, sizeof name, "worker%d", i);
        s_keygen(self, "worker", name);
    }
}

/* Says on stderr why gateway i is not ready: whether it still runs, and its log's last
 * lines (a CI run keeps only the test's own output). */
static void s_report_unready(proc_t *p, int i) {
    int status = 0;
    pid_t r = waitpid(p->pid, &status, WNOHANG);
    fprintf(stderr, "cluster: gateway %d (pid %d) did not become ready: %s; its log %s ends:\n", i,
            (int)p->pid, r == 0 ? "still running" : "exited", p->log);
    char *text = proc_file_text(p->log);
    size_t len = strlen(text);
    const char *tail = text + (len > 4000 ? len - 4000 : 0);
    fprintf(stderr, "%s\n", len ? tail : "(empty: the process wrote nothing)");
    free(text);
}

void cluster_start(cluster_t *self, cluster_role_t role, int i) {
    proc_t *p = s_proc(self, role, i);
    ASSERT(p->pid == 0);
    p->starts++;
    char log[sizeof p->log]; /* built aside: gcc cannot tell p->log from self->name */
    snprintf(log, sizeof log, "%s.%s%d.%d.log", self->name, s_role_name(role), i, p->starts);
    memcpy(p->log, log, sizeof log);
    unlink(p->log);
    char bin[600];
    const char *sub = role == CLUSTER_BROKER    ? "broker/chatfleet-broker"
                      : role == CLUSTER_GATEWAY ? "api-gateway/chatfleet-gateway"
                                                : "worker/chatfleet-worker";
    snprintf(bin, sizeof bin, "%s/%s", self->build, sub);
    char listen[64] = "";
    char *extra[74]; /* the environment (at most 63), listen, two key and two TLS settings, NULL */
    int n = 0;
    for (; self->env[n]; n++) {
        extra[n] = self->env[n];
    }
    if (role == CLUSTER_GATEWAY) {
        snprintf(listen, sizeof listen, "CHATFLEET_HTTP_LISTEN=127.0.0.1:%d", p->port);
        extra[n++] = listen;
    }
    char *keys[2] = {NULL, NULL};
    if (self->curve_dir && role == CLUSTER_BROKER) {
        keys[0] = mem_printf("CHATFLEET_CURVE_SERVER_KEY=%s/broker.cert_secret", self->curve_dir);
        keys[1] = mem_printf("CHATFLEET_CURVE_ALLOW_DIR=%s/allow", self->curve_dir);
    } else if (self->curve_dir) {
        keys[0] = mem_printf("CHATFLEET_CURVE_CERT=%s/%s%d.cert_secret", self->curve_dir,
                             s_role_name(role), i);
        keys[1] = mem_printf("CHATFLEET_CURVE_SERVER_PUBLIC=%s/broker.cert", self->curve_dir);
    }
    if (keys[0]) {
        extra[n++] = keys[0];
        extra[n++] = keys[1];
    }
    char *cert = NULL;
    char *key = NULL;
    if (role == CLUSTER_GATEWAY && self->cert) {
        extra[n++] = cert = mem_printf("CHATFLEET_HTTP_TLS_CERT=%s", self->cert);
        extra[n++] = key = mem_printf("CHATFLEET_HTTP_TLS_KEY=%s", self->key);
    }
    extra[n] = NULL;
    char *argv[] = {bin, role == CLUSTER_GATEWAY ? "serve" : NULL, NULL};
    p->pid = proc_spawn(argv, extra, p->log);
    free(keys[0]);
    free(keys[1]);
    free(cert);
    free(key);
    if (role == CLUSTER_GATEWAY) {
        char ready[96];
        snprintf(ready, sizeof ready, "%s/readyz", self->urls[i]);
        if (proc_wait_https(ready, self->cert ? self->ca : NULL, 15000) != 0) {
            s_report_unready(p, i);
            abort();
        }
    }
}

void cluster_signal(cluster_t *self, cluster_role_t role, int i, int sig) {
    proc_t *p = s_proc(self, role, i);
    if (p->pid == 0) {
        return;
    }
    kill(p->pid, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
        int status;
        waitpid(p->pid, &status, 0);
        p->pid = 0;
    }
}

char *cluster_user_add(cluster_t *self, bool admin, const char *name) {
    char bin[600];
    snprintf(bin, sizeof bin, "%s/api-gateway/chatfleet-gateway", self->build);
    char *with[] = {bin, "user-add", "--admin", (char *)name, NULL};
    char *without[] = {bin, "user-add", (char *)name, NULL};
    char *out = proc_output(admin ? with : without, self->env);
    ASSERT(out);
    out[strcspn(out, "\n")] = '\0';
    ASSERT(strncmp(out, "cf_", 3) == 0); /* a token, not a message */
    return out;
}

static char *s_user(cluster_t *self) {
    char name[40];
    snprintf(name, sizeof name, "u%lld", (long long)(id_now_ms() % 1000000000));
    return cluster_user_add(self, false, name);
}

/* Runs deploy/TOOL CMD DIR [ARG]; its stdout (caller frees) or NULL when it failed. */
static char *s_deploy(const char *tool, const char *cmd, const char *dir, const char *arg) {
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    ASSERT(src); /* ctest sets it; a manual run must too */
    char bin[600];
    snprintf(bin, sizeof bin, "%s/deploy/%s", src, tool);
    char *argv[] = {bin, (char *)cmd, (char *)dir, (char *)arg, NULL};
    return proc_output(argv, NULL);
}

/* deploy/pgcluster CMD DIR [ARG], or deploy/pgha for a cluster with pg_ha. */
static char *s_pgcluster(const cluster_t *self, const char *cmd, const char *arg) {
    return s_deploy(self->pg_ha ? "pgha" : "pgcluster", cmd, self->pg_dir, arg);
}

/* Appends "max_connections = N" to the initialised cluster's postgresql.conf: pgcluster
 * writes its own setting there at init, and PostgreSQL takes the last one in the file. */
static void s_pg_max_connections(cluster_t *self, int n) {
    char path[600];
    snprintf(path, sizeof path, "%s/data/postgresql.conf", self->pg_dir);
    FILE *f = fopen(path, "a");
    if (!f || fprintf(f, "max_connections = %d\n", n) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cluster: cannot set max_connections in %s\n", path);
        abort();
    }
}

/* A PostgreSQL of the cluster's own in a temporary directory, with a migrated database. */
static void s_private_pg(cluster_t *self, const cluster_opts_t *o) {
    char tmpl[] = "/tmp/cfchaos.XXXXXX";
    ASSERT(mkdtemp(tmpl));
    self->pg_dir = mem_strdup(tmpl);
    self->pg_ha = o->pg_ha;
    /* deploy/pgha: the first member's Patroni log, which tells its postgres's story. */
    self->pg_log = mem_printf(o->pg_ha ? "%s/pg0/patroni.log" : "%s/server.log", self->pg_dir);
    char *out = s_pgcluster(self, "init", "--fast");
    if (!out) {
        fprintf(stderr, "cluster: pgcluster init %s failed\n", self->pg_dir);
        abort();
    }
    free(out);
    if (o->pg_max_connections > 0) {
        s_pg_max_connections(self, o->pg_max_connections);
    }
    if (o->pg_tls && cluster_pg_tls(self, tlsca_cert(o->tls), tlsca_key(o->tls)) != 0) {
        fprintf(stderr, "cluster: pgcluster tls %s failed\n", self->pg_dir);
        abort();
    }
    out = s_pgcluster(self, "start", NULL);
    if (!out) {
        fprintf(stderr, "cluster: pgcluster start %s failed\n", self->pg_dir);
        abort();
    }
    out[strcspn(out, "\r\n")] = '\0';
    char *slash = strrchr(out, '/');
    ASSERT(slash);
    if (o->pg_tls) {
        /* The host name the certificate names, verified against the test CA. */
        char *at = strstr(out, "@127.0.0.1:");
        ASSERT(at);
        char *port = at + strlen("@127.0.0.1");
        char *q = mem_printf("sslmode=verify-full&sslrootcert=%s", self->ca);
        self->pg_admin = mem_printf("%.*s@localhost%.*s/postgres?%s", (int)(at - out), out,
                                    (int)(slash - port), port, q);
        self->pg_url = mem_printf("%.*s@localhost%.*s/chatfleet?%s", (int)(at - out), out,
                                  (int)(slash - port), port, q);
        free(q);
        free(out);
    } else {
        /* pgha's URL names every member and ends in "?target_session_attrs=read-write". */
        const char *query = strchr(slash, '?');
        self->pg_admin = out;
        self->pg_url = mem_printf("%.*s/chatfleet%s", (int)(slash - out), out, query ? query : "");
    }
    PGconn *admin = db_connect(self->pg_admin, "cluster");
    ASSERT(admin);
    char err[256];
    if (testdb_try(admin, "CREATE DATABASE chatfleet", err, sizeof err) != 0) {
        fprintf(stderr, "cluster: %s\n", err);
        abort();
    }
    PQfinish(admin);
    /* libpq tries a multi-host URL's hosts in order and gives up on the first that refuses
     * the session: a standby that has not replayed the CREATE DATABASE yet (a synchronous
     * commit waits for its flush, not its replay) says the database does not exist. */
    PGconn *conn = db_connect(self->pg_url, "cluster");
    for (int i = 0; !conn && o->pg_ha && i < 100; i++) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        conn = db_connect(self->pg_url, "cluster");
    }
    ASSERT(conn);
    if (migration_apply(conn) < 0) {
        fprintf(stderr, "cluster: migrations failed on %s\n", self->pg_url);
        abort();
    }
    PQfinish(conn);
}

static void s_private_pg_destroy(cluster_t *self) {
    free(s_pgcluster(self, "stop", NULL));
    /* The server log outlives the directory, next to the processes' logs (NAME.postgres.log):
     * a failed run is read from it. */
    char *keep = mem_printf("%s.postgres.log", self->name);
    char *cp[] = {"/bin/cp", self->pg_log, keep, NULL};
    free(proc_output(cp, NULL)); /* best effort, as the removal below */
    free(keep);
    char *argv[] = {"/bin/rm", "-rf", self->pg_dir, NULL};
    free(proc_output(argv, NULL)); /* best effort: a temporary directory */
    free(self->pg_dir);
    free(self->pg_log);
    free(self->pg_url);
    free(self->pg_admin);
}

int cluster_pg_tls(cluster_t *self, const char *cert, const char *key) {
    ASSERT(self->pg_dir && self->ca);
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    ASSERT(src);
    char bin[600];
    snprintf(bin, sizeof bin, "%s/deploy/pgcluster", src);
    char *argv[] = {bin, "tls", self->pg_dir, (char *)cert, (char *)key, NULL};
    char *out = proc_output(argv, NULL);
    free(out);
    return out ? 0 : -1;
}

int cluster_pg_failover(cluster_t *self, bool host_lost, char member[16]) {
    ASSERT(self->pg_ha);
    char *out = s_pgcluster(self, host_lost ? "kill" : "crash", NULL);
    if (!out) {
        return -1;
    }
    snprintf(member, 16, "%.*s", (int)strcspn(out, "\r\n"), out);
    free(out);
    return 0;
}

int cluster_pg_revive(cluster_t *self, const char *member) {
    ASSERT(self->pg_ha);
    char *out = s_pgcluster(self, "revive", member);
    free(out);
    return out ? 0 : -1;
}

int64_t cluster_pg_promoted(cluster_t *self, const char *old, int64_t timeout_ms, char leader[16]) {
    ASSERT(self->pg_ha);
    int64_t t0 = id_now_ms();
    for (;;) {
        char *out = s_pgcluster(self, "leader", NULL);
        snprintf(leader, 16, "%.*s", out ? (int)strcspn(out, "\r\n") : 0, out ? out : "");
        free(out);
        if (leader[0] && strcmp(leader, old) != 0) {
            return id_now_ms() - t0;
        }
        if (id_now_ms() - t0 > timeout_ms) {
            return -1;
        }
        struct timespec ts = {0, 200 * 1000 * 1000}; /* Patroni's API, polled */
        nanosleep(&ts, NULL);
    }
}

int64_t cluster_pg_ha_wait(cluster_t *self, int timeout_s) {
    ASSERT(self->pg_ha);
    int64_t t0 = id_now_ms();
    char secs[16];
    snprintf(secs, sizeof secs, "%d", timeout_s);
    char *out = s_pgcluster(self, "wait", secs);
    if (!out) {
        return -1;
    }
    free(out);
    PQreset(self->conn);
    return id_now_ms() - t0;
}

int64_t cluster_pg_restart(cluster_t *self) {
    ASSERT(self->pg_dir); /* only a private PostgreSQL may be restarted */
    int64_t t0 = id_now_ms();
    ASSERT(!self->pg_ha); /* Patroni runs that PostgreSQL: cluster_pg_failover() */
    char *out = s_pgcluster(self, "restart", NULL);
    if (!out) {
        return -1;
    }
    free(out);
    PQreset(self->conn);
    return id_now_ms() - t0;
}

cluster_t *cluster_new(const cluster_opts_t *o) {
    ASSERT(o->gateways >= 1 && o->gateways <= CLUSTER_GATEWAYS_MAX);
    ASSERT(o->workers >= 0 && o->workers <= CLUSTER_WORKERS_MAX);
    ASSERT(o->pg_max_connections == 0 || o->private_pg); /* the fixture's server is shared */
    ASSERT(!(o->https || o->pg_tls) || o->tls);
    ASSERT(!o->pg_tls || o->private_pg);
    ASSERT(!o->pg_ha || (o->private_pg && !o->pg_tls && !o->pg_max_connections));
    cluster_t *self = mem_calloc(1, sizeof *self);
    if (o->https || o->pg_tls) {
        self->ca = mem_strdup(tlsca_ca(o->tls));
    }
    if (o->https) {
        self->cert = mem_strdup(tlsca_cert(o->tls));
        self->key = mem_strdup(tlsca_key(o->tls));
    }
    snprintf(self->name, sizeof self->name, "%s", o->name ? o->name : "cluster");
    const char *build = getenv("CHATFLEET_BUILD_DIR");
    ASSERT(build);
    snprintf(self->build, sizeof self->build, "%s", build);
    if (o->private_pg) {
        s_private_pg(self, o);
        self->conn = db_connect(self->pg_url, "cluster");
        ASSERT(self->conn);
        PQclear(PQexec(self->conn, "SET client_min_messages = warning"));
    } else {
        self->db = testdb_new();
        self->conn = testdb_connect(self->db);
    }
    snprintf(self->pub, sizeof self->pub, "tcp://127.0.0.1:%d", proc_free_port());
    snprintf(self->sub, sizeof self->sub, "tcp://127.0.0.1:%d", proc_free_port());
    snprintf(self->relay, sizeof self->relay, "tcp://127.0.0.1:%d", proc_free_port());
    s_env(self, o);
    const char *curve_env = getenv("CHATFLEET_TEST_CURVE");
    if (o->curve || (curve_env && strcmp(curve_env, "1") == 0)) {
        s_curve(self, o);
    }
    self->ngateways = o->gateways;
    self->nworkers = o->workers;
    self->token = s_user(self);
    cluster_start(self, CLUSTER_BROKER, 0);
    for (int i = 0; i < o->gateways; i++) {
        self->gateways[i].port = proc_free_port();
        snprintf(self->urls[i], sizeof self->urls[i], "%s://127.0.0.1:%d",
                 self->cert ? "https" : "http", self->gateways[i].port);
        cluster_start(self, CLUSTER_GATEWAY, i);
    }
    for (int i = 0; i < o->workers; i++) {
        cluster_start(self, CLUSTER_WORKER, i);
    }
    return self;
}

static int s_stop(proc_t *p) {
    if (p->pid == 0) {
        return 0;
    }
    kill(p->pid, SIGCONT); /* a stopped process cannot act on SIGTERM */
    int rc = proc_stop(p->pid, 10000);
    p->pid = 0;
    return rc == 0 ? 0 : 1;
}

int cluster_destroy(cluster_t **self_p) {
    cluster_t *self = *self_p;
    if (!self) {
        return 0;
    }
    int unclean = 0;
    for (int i = 0; i < self->nworkers; i++) {
        unclean += s_stop(&self->workers[i]);
    }
    for (int i = 0; i < self->ngateways; i++) {
        unclean += s_stop(&self->gateways[i]);
    }
    unclean += s_stop(&self->broker);
    PQfinish(self->conn);
    if (self->pg_dir) {
        s_private_pg_destroy(self);
    } else {
        testdb_destroy(&self->db);
    }
    for (int i = 0; self->env[i]; i++) {
        free(self->env[i]);
    }
    free(self->env);
    if (self->curve_dir) {
        char *argv[] = {"/bin/rm", "-rf", self->curve_dir, NULL};
        free(proc_output(argv, NULL)); /* best effort: a temporary directory */
        free(self->curve_dir);
    }
    free(self->token);
    free(self->ca);
    free(self->cert);
    free(self->key);
    free(self);
    *self_p = NULL;
    return unclean;
}

const char *cluster_url(const cluster_t *self, int gateway) {
    ASSERT(gateway >= 0 && gateway < self->ngateways);
    return self->urls[gateway];
}

const char *cluster_ca(const cluster_t *self) {
    return self->ca;
}

const char *cluster_token(const cluster_t *self) {
    return self->token;
}

const char *cluster_db_url(const cluster_t *self) {
    return self->pg_url ? self->pg_url : testdb_url(self->db);
}

PGconn *cluster_db(cluster_t *self) {
    return self->conn;
}

pid_t cluster_pid(const cluster_t *self, cluster_role_t role, int i) {
    return s_proc((cluster_t *)self, role, i)->pid;
}

const char *cluster_log(const cluster_t *self, cluster_role_t role, int i) {
    return s_proc((cluster_t *)self, role, i)->log;
}

const char *cluster_endpoint(const cluster_t *self, const char *which) {
    return strcmp(which, "pub") == 0   ? self->pub
           : strcmp(which, "sub") == 0 ? self->sub
                                       : self->relay;
}

const char *cluster_curve_dir(const cluster_t *self) {
    return self->curve_dir;
}

const char *cluster_pg_log(const cluster_t *self) {
    return self->pg_log;
}

/* The first value of sql, or NULL (SQL NULL, no row, or a failed statement: a chaos run
 * restarts PostgreSQL under the harness, so the connection is reset and NULL returned). */
static char *s_scalar(cluster_t *self, const char *sql) {
    PGresult *res = PQexec(self->conn, sql);
    char *out = NULL;
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
            out = mem_strdup(PQgetvalue(res, 0, 0));
        }
    } else if (PQstatus(self->conn) != CONNECTION_OK) {
        PQreset(self->conn);
    } else {
        fprintf(stderr, "cluster: %s: %s", sql, PQresultErrorMessage(res));
    }
    PQclear(res);
    return out;
}

char *cluster_sql(cluster_t *self, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *q = mem_vprintf(fmt, ap);
    va_end(ap);
    char *v = s_scalar(self, q);
    free(q);
    return v;
}

int64_t cluster_wait(cluster_t *self, const char *sql, const char *want, int64_t timeout_ms) {
    int64_t t0 = id_now_ms();
    for (;;) {
        char *v = s_scalar(self, sql);
        int ok = v && !strcmp(v, want);
        free(v);
        if (ok) {
            return id_now_ms() - t0;
        }
        if (id_now_ms() - t0 > timeout_ms) {
            return -1;
        }
        struct timespec ts = {0, 5 * 1000 * 1000}; /* poll interval, not a wait for state */
        nanosleep(&ts, NULL);
    }
}

/* POSTs body to path of gateway gw; the status (-1 without an answer), the answer into *out. */
static long s_post(cluster_t *self, int gw, const char *path, const char *body, json_t **out) {
    char url[512];
    snprintf(url, sizeof url, "%s%s", cluster_url(self, gw), path);
    proc_http_t r;
    if (proc_http("POST", url, cluster_token(self), body, &r) != 0) {
        return -1;
    }
    if (out) {
        *out = json_loads(r.body, 0, NULL);
    }
    long status = r.status;
    proc_http_free(&r);
    return status;
}

/* The body of one user message text. Caller frees. */
static char *s_text_body(const char *text) {
    return mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
}

long cluster_post_chat(cluster_t *self, int gw, const char *body, char chat[ID_UUID_LEN + 1]) {
    json_t *v = NULL;
    long status = s_post(self, gw, "/api/v2/chats", body, &v);
    const char *id = json_string_value(json_object_get(v, "id"));
    snprintf(chat, ID_UUID_LEN + 1, "%s", status == 201 && id ? id : "");
    json_decref(v);
    return status;
}

long cluster_create_chat(cluster_t *self, int gw, const char *text, char chat[ID_UUID_LEN + 1]) {
    char *body = s_text_body(text);
    long status = cluster_post_chat(self, gw, body, chat);
    free(body);
    return status;
}

long cluster_send(cluster_t *self, int gw, const char *chat, const char *text, json_t **out) {
    char path[128];
    snprintf(path, sizeof path, "/api/v2/chats/%s/messages", chat);
    char *body = s_text_body(text);
    long status = s_post(self, gw, path, body, out);
    free(body);
    return status;
}

int cluster_wait_status(cluster_t *self, const char *chat, const char *want, int64_t timeout_ms,
                        char *got, size_t got_len) {
    char *q =
        mem_printf("SELECT status || ':' || (worker_id IS NULL) FROM chats WHERE id = '%s'", chat);
    int rc = cluster_wait(self, q, want, timeout_ms) < 0 ? -1 : 0;
    if (rc != 0 && got) {
        char *last = cluster_sql(self, "%s", q);
        snprintf(got, got_len, "%s", last ? last : "(none)");
        free(last);
    }
    free(q);
    return rc;
}
