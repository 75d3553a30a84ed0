/*
 * cluster: a whole chatfleet cluster for end-to-end tests and chaos runs, as real processes:
 * a fresh database in the fixture's private PostgreSQL (or, with private_pg, in a PostgreSQL of
 * its own that the cluster may restart), one broker, G gateways and W workers (sim model), and
 * a user with a token. Every process can be killed, stopped, continued and restarted on the
 * same endpoints; logs go to files named after the cluster and process.
 */
#ifndef CHATFLEET_CLUSTER_H
#define CHATFLEET_CLUSTER_H

#include <libpq-fe.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "id.h"
#include "tlsca.h"

#define CLUSTER_GATEWAYS_MAX 4
#define CLUSTER_WORKERS_MAX  8

typedef struct {
    const char *name;       /* log file prefix, e.g. "test_chaos" */
    int gateways;           /* 1..CLUSTER_GATEWAYS_MAX */
    int workers;            /* 0..CLUSTER_WORKERS_MAX */
    const char *const *env; /* extra "K=V" for every process (NULL-terminated), or NULL */
    /* Nonzero: run on a PostgreSQL of its own (deploy/pgcluster init --fast and start in a
     * temporary directory, found through CHATFLEET_SOURCE_DIR) instead of a database in the
     * shared fixture, so that cluster_pg_restart() disturbs no other test. */
    int private_pg;
    /* With private_pg: PostgreSQL's max_connections (written into its postgresql.conf after
     * pgcluster init, where the last setting wins); 0 keeps pgcluster's (300). */
    int pg_max_connections;
    /* Nonzero: CURVE on the bus (ARCHITECTURE.md §9 "Trust"). The harness makes a broker key,
     * one certificate per gateway and worker (role metadata), and an allow directory holding
     * the gateways' and workers' public certificates, in a temporary directory; each process
     * gets its own. The environment CHATFLEET_TEST_CURVE=1 turns it on for every cluster, so
     * existing suites (test_chaos) run with CURVE unchanged. */
    int curve;
    /* A test CA (tlsca.h) for the two options below; the harness trusts its CA only. */
    const tlsca_t *tls;
    /* Nonzero (with tls): every gateway serves HTTPS with tls's localhost certificate, and
     * cluster_url() is https://127.0.0.1:PORT. */
    int https;
    /* Nonzero (with tls and private_pg): PostgreSQL serves TLS with tls's localhost
     * certificate and refuses TCP without it (deploy/pgcluster tls), and every URL, the
     * processes' included, is postgresql://postgres@localhost:PORT/DB?sslmode=verify-full&
     * sslrootcert=CA. */
    int pg_tls;
    /* Nonzero (with private_pg, without pg_tls and pg_max_connections): that PostgreSQL is a
     * Patroni pair with a synchronous standby (deploy/pgha init --fast, start), and every
     * process gets its multi-host URL (target_session_attrs=read-write); see
     * cluster_pg_failover(). */
    int pg_ha;
} cluster_opts_t;

typedef enum { CLUSTER_BROKER = 0, CLUSTER_GATEWAY, CLUSTER_WORKER } cluster_role_t;

typedef struct cluster cluster_t;

/* Starts everything and waits until the gateways answer /readyz. Aborts the test on failure.
 * Defaults (overridable through env): lease 3000 ms, heartbeat 1000, acquire poll 500,
 * stream poll 1000, sim pace 0 ms. */
cluster_t *cluster_new(const cluster_opts_t *opts);

/* Stops every process (SIGTERM, then SIGKILL) and drops the database. Returns the number of
 * processes that did not exit cleanly on SIGTERM. */
int cluster_destroy(cluster_t **self_p);

const char *cluster_url(const cluster_t *self, int gateway); /* "http(s)://127.0.0.1:PORT" */
const char *cluster_ca(const cluster_t *self); /* the CA file clients trust, or NULL (plain) */
const char *cluster_token(const cluster_t *self);
/* A new user NAME (an operator with admin) by `chatfleet-gateway user-add [--admin]`: its
 * token (caller frees). Aborts the test when the command fails or prints no token. */
char *cluster_user_add(cluster_t *self, bool admin, const char *name);
const char *cluster_db_url(const cluster_t *self);
PGconn *cluster_db(cluster_t *self); /* the harness's own connection, for assertions */

/* The process of (role, index): its pid (0 when not running) and its current log file. */
pid_t cluster_pid(const cluster_t *self, cluster_role_t role, int index);
const char *cluster_log(const cluster_t *self, cluster_role_t role, int index);

/* The broker's endpoints: "pub" (publishers connect), "sub" (subscribers) or "relay". */
const char *cluster_endpoint(const cluster_t *self, const char *which);

/* With CURVE: the directory of the keys (DIR/broker.cert, DIR/gateway0.cert_secret,
 * DIR/worker1.cert_secret, ... and DIR/allow/, the broker's allow directory); NULL without. */
const char *cluster_curve_dir(const cluster_t *self);

/* The server log of the cluster's own PostgreSQL (private_pg), or NULL on the fixture's. */
const char *cluster_pg_log(const cluster_t *self);

/* Sends sig (SIGKILL, SIGSTOP, SIGCONT, SIGTERM) to the process. A killed or terminated
 * process is reaped; restart it with cluster_start. */
void cluster_signal(cluster_t *self, cluster_role_t role, int index, int sig);

/* (Re)starts the process on its original endpoints; waits for a gateway to be ready. */
void cluster_start(cluster_t *self, cluster_role_t role, int index);

/* Serves the private PostgreSQL's TLS with cert and key from now on (pg_tls only): new
 * connections see them; open ones keep theirs. Returns 0, or -1 when pgcluster failed. */
int cluster_pg_tls(cluster_t *self, const char *cert, const char *key);

/* Fast restart of the cluster's own PostgreSQL on the same port (private_pg only): every
 * connection is dropped, and the harness's own connection is reset. Returns the milliseconds
 * the restart took, or -1 when pgcluster failed. */
int64_t cluster_pg_restart(cluster_t *self);

/* With pg_ha: kill -9 the primary's postmaster (deploy/pgha crash), or with host_lost its
 * Patroni too (deploy/pgha kill: the leader key then expires after Patroni's ttl), so that
 * Patroni promotes the synchronous standby; names the member killed ("pg0") in member. Returns
 * at once: 0, or -1 when there was no primary to kill. */
int cluster_pg_failover(cluster_t *self, bool host_lost, char member[16]);

/* With pg_ha: starts member's Patroni again after a host_lost failover (deploy/pgha revive):
 * it rejoins as a standby. 0, or -1 when the script failed. */
int cluster_pg_revive(cluster_t *self, const char *member);

/* With pg_ha: waits (up to timeout_ms) until Patroni names a primary other than old, whose
 * name it writes in leader. The milliseconds it waited, or -1. */
int64_t cluster_pg_promoted(cluster_t *self, const char *old, int64_t timeout_ms, char leader[16]);

/* With pg_ha: waits (up to timeout_s) until a primary runs and every member streams from it,
 * the old primary rejoined as the synchronous standby, and reconnects the harness's own
 * connection. The milliseconds it took, or -1. */
int64_t cluster_pg_ha_wait(cluster_t *self, int timeout_s);

/* The first column of the first row of sql (printf-style), newly allocated, or NULL (also on
 * a failed statement; a lost connection is reset for the next call). */
char *cluster_sql(cluster_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Polls sql until its value equals want; the milliseconds it took, or -1 past timeout_ms. */
int64_t cluster_wait(cluster_t *self, const char *sql, const char *want, int64_t timeout_ms);

/* POST /api/v2/chats with one user message text (put in the JSON as is) through gateway gw:
 * the HTTP status (-1 when no answer came), and the new chat's id into chat on 201. */
long cluster_create_chat(cluster_t *self, int gw, const char *text, char chat[ID_UUID_LEN + 1]);

/* POST /api/v2/chats with body (a whole JSON request) through gateway gw: as
 * cluster_create_chat. */
long cluster_post_chat(cluster_t *self, int gw, const char *body, char chat[ID_UUID_LEN + 1]);

/* POST /api/v2/chats/{chat}/messages with text through gateway gw: the HTTP status (-1 when
 * no answer came), and the parsed answer into *out when out is given (the caller decrefs). */
long cluster_send(cluster_t *self, int gw, const char *chat, const char *text, json_t **out);

/* Waits until the chat's "<status>:<owner is null>" equals want (e.g. "waiting:true"): 0, or
 * -1 past timeout_ms with what it was last into got (got_len bytes). */
int cluster_wait_status(cluster_t *self, const char *chat, const char *want, int64_t timeout_ms,
                        char *got, size_t got_len);

#endif
