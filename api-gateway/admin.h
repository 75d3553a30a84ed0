/*
 * admin: the operator's API (ARCHITECTURE.md §11, "Admin API"), for users whose is_admin
 * flag is set (0006_user_admin.sql; `chatfleet-gateway user-add --admin`); any other caller
 * gets 403. GET /api/v2/admin/cluster is the cluster view: the chats held by each worker
 * with their leases (heartbeat age, fresh or stale against CHATFLEET_LEASE_STALE_MS, slot)
 * read from chats and chat_heartbeats in one statement, the count of chats per status, and
 * the runnable chats waiting for an owner. Read-only: it takes no lock a worker waits on.
 */
#ifndef CHATFLEET_ADMIN_H
#define CHATFLEET_ADMIN_H

#include "gateway.h"

extern const http_route_t admin_route_table[];
extern const int admin_route_count;

#endif
