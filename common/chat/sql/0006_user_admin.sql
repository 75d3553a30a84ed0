-- Operators (ARCHITECTURE.md §11, "Admin API"): a user with is_admin may read the cluster
-- view (GET /api/v2/admin/cluster: every worker's leases and the chats they hold, of all
-- users). Set by `chatfleet-gateway user-add --admin NAME`; everyone else gets 403 there.
ALTER TABLE users ADD COLUMN is_admin boolean NOT NULL DEFAULT false;
