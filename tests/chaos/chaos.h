/*
 * chaos: one seeded chaos run against a whole cluster (private PostgreSQL, broker, two
 * gateways, three workers): a mixed workload from one client thread per chat, faults on a
 * schedule printed at start, quiescence; then the slow phase (hundreds of slow turns in flight
 * together while workers are killed and stopped), quiescence again, then the ledger's
 * invariants. See README.md.
 */
#ifndef CHATFLEET_CHAOS_H
#define CHATFLEET_CHAOS_H

typedef struct {
    unsigned seed;    /* the fault schedule and every client's choices derive from it */
    int seconds;      /* how long the workload and the faults run */
    int chats;        /* concurrent clients, one chat each (1..LEDGER_CHATS_MAX) */
    int slow_turns;   /* chats of the slow phase, one slow turn each (0: no slow phase) */
    int slow_seconds; /* how long the slow phase's worker faults run */
    const char *name; /* log file prefix */
    /* Nonzero: every chat enables an MCP server (tests/mcp/paged_server.mjs over stdio, node
     * only) and the workload calls its tool too (ARCHITECTURE.md §7.9). */
    int mcp;
    /* Nonzero: every gateway and worker dispatches lifecycle hooks to a consumer the run
     * starts (hookcheck.h, ARCHITECTURE.md §7.10), which allows everything. */
    int hooks;
    /* Nonzero: the private PostgreSQL is a Patroni pair (deploy/pgha, cluster_opts_t.pg_ha)
     * and the PostgreSQL fault is pg_failover (kill -9 of the primary's postmaster, Patroni
     * promoting the standby, the old primary rejoining) instead of a fast restart. */
    int pg_ha;
} chaos_config_t;

/* The configuration from CHATFLEET_CHAOS_SEED (default: the clock), CHATFLEET_CHAOS_SECONDS
 * (default seconds), CHATFLEET_CHAOS_CHATS (default chats), CHATFLEET_CHAOS_SLOW_TURNS
 * (default slow_turns, 0..LEDGER_SLOW_MAX), CHATFLEET_CHAOS_SLOW_SECONDS (default 12) and
 * CHATFLEET_CHAOS_MCP (1: mcp), CHATFLEET_CHAOS_HOOKS (1: hooks) and CHATFLEET_CHAOS_PGHA
 * (1: pg_ha). */
chaos_config_t chaos_config_from_env(int seconds, int chats, int slow_turns, const char *name);

/* Runs it and prints progress, the schedule and each invariant with its counts. Returns the
 * number of failed invariants (0: the run passed). Aborts when the cluster cannot start. */
int chaos_run(const chaos_config_t *cfg);

#endif
