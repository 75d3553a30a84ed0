/*
 * admin: the operator's API (ARCHITECTURE.md §11, "Admin API"), for users whose is_admin
 * flag is set (0006_user_admin.sql; `chatfleet-gateway user-add --admin`); any other caller
 * gets 403. GET /api/v2/admin/cluster is the cluster view: the chats held by each worker
 * with their leases (heartbeat age, fresh or stale against CHATFLEET_LEASE_STALE_MS, slot)
 * read from chats and chat_heartbeats in one statement, the count of chats per status, and
 * the runnable chats waiting for an owner, and the broker's counters (asked through the
 * gateway's relay client, 250 ms at most; {"reachable": false} without an answer; a late
 * answer to a timed-out request may serve the next one, so they can be one read old). Read-only:
 * it takes no lock a worker waits on.
 */
#ifndef CHATFLEET_ADMIN_H
#define CHATFLEET_ADMIN_H

#include "gateway.h"

extern const http_route_t admin_route_table[];
extern const int admin_route_count;

#endif
