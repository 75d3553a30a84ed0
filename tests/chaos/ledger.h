/*
 * ledger: what a chaos run's clients did and saw, and the invariant checker that judges it.
 * Every API call (operation, HTTP status, the ids in its response), every snapshot_version a
 * client observed, and every stream connection of one SSE client per chat (with the
 * Last-Event-ID it resumed from) go in; after quiescence, ledger_check() compares them with
 * the database and the worker logs and prints each invariant with its counts.
 *
 * Thread-safe: the recording calls take one mutex; the checks run alone, after the clients
 * have stopped.
 */
#ifndef CHATFLEET_LEDGER_H
#define CHATFLEET_LEDGER_H

#include "sse.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#define LEDGER_CHATS_MAX    64
#define LEDGER_SEGMENTS_MAX 64       /* stream connections per chat */
#define LEDGER_TAG_PREFIX   "cftag-" /* every user text carries LEDGER_TAG_PREFIX + 6 digits */
#define LEDGER_SLOW_MAX     5000     /* chats of the slow phase */
#define LEDGER_WORKERS_MAX  8        /* worker processes whose connections are sampled */

typedef enum {
    LEDGER_CREATE = 0,
    LEDGER_SEND,           /* POST /messages, busy_behavior queue */
    LEDGER_SEND_INTERRUPT, /* POST /messages, busy_behavior interrupt */
    LEDGER_EDIT,           /* PATCH /messages/{mid} */
    LEDGER_QUEUE_DELETE,   /* DELETE /queue/{qid} */
    LEDGER_INTERRUPT,      /* POST /interrupt */
    LEDGER_TOOL_RESULTS,   /* POST /tool-results */
    LEDGER_GET,            /* GET /chats/{id} */
    LEDGER_COMPACT,        /* POST /compact */
    LEDGER_OPS
} ledger_op_t;

/* One API call as the client saw it. status is the HTTP status, or -1 when no response
 * arrived (the gateway died or the connection failed: the outcome is unknown). */
typedef struct {
    ledger_op_t op;
    int chat; /* the chat's index in the run */
    long status;
    int tag;            /* the tag in the sent text, or -1 */
    int64_t target;     /* edit: the edited message id; queue delete: the queued id */
    int64_t message_id; /* the inserted user message (send, edit), or 0 */
    int64_t queued_id;  /* the queued message (a send that queued), or 0 */
    char rid[40];       /* the structured request UUID, or "" */
    int schema;         /* index into the caller's schema list for structured sends, or -1 */
    json_t *deleted;    /* edit: deleted_message_ids (owned by the ledger), or NULL */
    int agents;         /* send: a subagent turn asking for this many children, or 0 */
    bool agent_wait;    /* get: the chat answered in an agent wait ("waiting_on_agents") */
    int64_t at_ms;      /* when the response arrived (monotonic) */
} ledger_call_t;

typedef struct ledger ledger_t;

/* A ledger for nchats chats. calls_log, when not NULL, receives one line per call. */
ledger_t *ledger_new(int nchats, const char *calls_log);
void ledger_destroy(ledger_t **self_p);

/* Records call (copied; call->deleted is taken over). */
void ledger_add(ledger_t *self, const ledger_call_t *call);

/* The chat's UUID (set once, when it is created). */
void ledger_set_chat(ledger_t *self, int chat, const char *chat_id);
const char *ledger_chat_id(ledger_t *self, int chat);

/* One snapshot_version observation of chat by its client; after_write says the client had a
 * 2xx write answered since its previous observation, so the version must have grown. */
void ledger_snapshot(ledger_t *self, int chat, int64_t version, bool after_write);

/* A new stream connection of chat's client (takes over sse), resumed after after_id. */
void ledger_stream_add(ledger_t *self, int chat, int gateway, int64_t after_id, sse_t **sse);
/* Whether chat's current connection has shown no event at all stale_ms after it was opened
 * (it never connected: every stream starts with the chat's rows and status). */
bool ledger_stream_dead(ledger_t *self, int chat, int64_t stale_ms);
/* The gateway of chat's current connection, or -1. */
int ledger_stream_gateway(ledger_t *self, int chat);
/* The id of the last event with an id the chat's client received (its Last-Event-ID). */
int64_t ledger_stream_last_id(ledger_t *self, int chat);
/* The tool calls of the latest action_required event (a new reference), or NULL. */
json_t *ledger_stream_action(ledger_t *self, int chat);

/* Calls of op answered with a 2xx, and all calls of op. */
int ledger_count(ledger_t *self, ledger_op_t op, int *total);

/* What the clients did and saw of subagents. */
typedef struct {
    int turns;      /* subagent turns sent (calls with agents > 0) */
    int accepted;   /* of them, answered with a 2xx */
    int children;   /* children the accepted ones asked for */
    int waits_seen; /* GET /chats/{id} answers that showed an agent wait */
} ledger_agents_t;

ledger_agents_t ledger_agent_counts(ledger_t *self);

/* The schemas a structured send may name (ledger_call_t.schema indexes them): response_format
 * JSON texts, borrowed for the ledger's life. */
void ledger_set_schemas(ledger_t *self, const char *const *formats, int n);

/* One chat of the slow phase (README.md, "The slow phase"): created with its one slow turn,
 * no stream and no client after that. */
typedef struct {
    char chat_id[40]; /* "" when the create had no 2xx */
    long status;      /* of POST /chats; -1 when no response arrived */
    int tag;
    int schema; /* index into the schema list for a structured turn, or -1 (the create's
                 * response names no request UUID: the checker reads it from the tagged row) */
} ledger_slow_t;

/* Records a slow-phase chat (copied). */
void ledger_slow_add(ledger_t *self, const ledger_slow_t *chat);

/* The run's phases, for the samples: the seeded workload, then the slow phase. */
typedef enum { LEDGER_PHASE_WORKLOAD = 0, LEDGER_PHASE_SLOW, LEDGER_PHASES } ledger_phase_t;

/* One sample of the workers' PostgreSQL connections and of the turns in flight. */
typedef struct {
    int worker_conns; /* client backends whose application_name is LIKE 'chatfleet-worker%' */
    int orphans;      /* of them, backends whose client connection no live worker holds (a
                       * worker killed while its backend waited, e.g. on a row lock) */
    int held;         /* worker_conns - orphans: what the workers hold */
    int by_app[4];    /* of them: acquirer, heartbeater, sync, task (over every worker) */
    int sock[LEDGER_WORKERS_MAX]; /* each worker process's TCP connections to the database */
    int running;                  /* chats running */
    int in_flight; /* running with a model call started, under a fresh lease of their runner */
} ledger_sample_t;

/* The connection cap the samples are judged against: workers x db_conns in pg_stat_activity,
 * db_conns per worker process. */
void ledger_set_workers(ledger_t *self, int workers, int db_conns);

/* Keeps the peaks of a sample taken in phase; s NULL: the database did not answer. */
void ledger_sample(ledger_t *self, ledger_phase_t phase, const ledger_sample_t *s);

/* Waits up to timeout_ms for every chat's stream client to show the committed history, then
 * checks every invariant against conn and the worker logs (NULL-terminated paths), printing
 * each with its counts and, when it fails, the offending ids: the six of the workload, the
 * slow phase's turns (slow_min_in_flight: the peak of turns in flight it must have reached),
 * the workers' connections, compactions and agent waits (agentcheck.h). Returns the number of
 * failed invariants. */
int ledger_check(ledger_t *self, PGconn *conn, const char *const *worker_logs, int timeout_ms,
                 int slow_min_in_flight);

#endif
