/*
 * admin: the operator's API (ARCHITECTURE.md §11, "Admin API"), for users whose is_admin
 * flag is set (0006_user_admin.sql; `chatfleet-gateway user-add --admin`); any other caller
 * gets 403. GET /api/v2/admin/cluster is the cluster view: the chats held by each worker
 * with their leases (heartbeat age, fresh or stale against CHATFLEET_LEASE_STALE_MS, slot)
 * read from chats and chat_heartbeats in one statement, the count of chats per status, and
 * the runnable chats waiting for an owner, and the broker's counters (asked through the
 * gateway's relay client, 250 ms at most; {"reachable": false} without an answer; a late
 * answer to a timed-out request may serve the next one, so they can be one read old).
 * GET /api/v2/admin/costs?group=day|user|model&from=YYYY-MM-DD&to=YYYY-MM-DD is the cost view
 * (ARCHITECTURE.md §7.7): every model call of the deployment (the message rows with usage, by
 * their chat's owner, and chat_usage's calls that wrote no message) summed by UTC day (the
 * default), by user or by model config, with the total; from and to are optional, both days
 * included. Read-only: they take no lock a worker waits on.
 */
#ifndef CHATFLEET_ADMIN_H
#define CHATFLEET_ADMIN_H

#include "gateway.h"

/* The sums of a group of calls u (columns usage jsonb, message bool) as jsonb_build_object
 * members: "messages" (message rows), "calls" (every call: message rows and calls that wrote no
 * message), the token kinds and "total_cost_micros". Shared by the cost view and a chat's
 * usage (routes_message.c), so that the two sum alike. */
#define ADMIN_USAGE_SUMS_SQL                                                                       \
    " 'messages', count(*) FILTER (WHERE u.message), 'calls', count(*),"                           \
    " 'input_tokens', coalesce(sum((u.usage ->> 'input_tokens')::bigint), 0),"                     \
    " 'output_tokens', coalesce(sum((u.usage ->> 'output_tokens')::bigint), 0),"                   \
    " 'cache_read_tokens', coalesce(sum((u.usage ->> 'cache_read_tokens')::bigint), 0),"           \
    " 'cache_creation_tokens', coalesce(sum((u.usage ->> 'cache_creation_tokens')::bigint), 0),"   \
    " 'reasoning_tokens', coalesce(sum((u.usage ->> 'reasoning_tokens')::bigint), 0),"             \
    " 'total_cost_micros', coalesce(sum((u.usage ->> 'total_cost_micros')::bigint), 0)"

extern const http_route_t admin_route_table[];
extern const int admin_route_count;

#endif
