/*
 * agentcheck: the chaos run's subagent invariant, agent_waits_resume_once (README.md, invariant
 * 10; ARCHITECTURE.md §3, "Agent waits"). After quiescence it reads every wait_agent call of
 * every chat from PostgreSQL and checks that each was answered at most once (exactly once while
 * its row stands), that a resumption names exactly the children its call named with each one's
 * final answer and structured value as the child holds them now, that no chat is left in an
 * agent wait and that every child ended idle. Read-only; prints its counts.
 */
#ifndef CHATFLEET_CHAOS_AGENTCHECK_H
#define CHATFLEET_CHAOS_AGENTCHECK_H

#include <libpq-fe.h>

/* What the clients did, printed beside what the database holds. */
typedef struct {
    int turns;      /* subagent turns sent */
    int accepted;   /* of them, answered with a 2xx */
    int children;   /* children the accepted ones asked for ([sim:spawn K]) */
    int waits_seen; /* GET /chats/{id} answers that showed an agent wait */
} agentcheck_sent_t;

/* Checks the invariant against conn, printing its counts and, when it fails, each offending
 * chat id with its call id. Returns 1 when it failed (a query that fails counts), else 0. */
int agentcheck_check(PGconn *conn, const agentcheck_sent_t *sent);

#endif
