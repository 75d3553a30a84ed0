-- Fair share of the limiter across users (ARCHITECTURE.md §6.2, "Fair share"; issue 42).
--
-- A user's weight: with CHATFLEET_WORKER_USER_MAX_CHATS = K a user holds at most K x weight
-- fresh leases, and a quick pass hands free slots to the users holding the fewest per weight.
ALTER TABLE users ADD COLUMN chat_weight int NOT NULL DEFAULT 1
    CHECK (chat_weight BETWEEN 1 AND 1000);

-- Whose a lease is: the chat's owner (a subagent's owner is its root's, chatstate_family.c),
-- so a user's fresh leases are one index range. NULL on rows of workers of an older release.
ALTER TABLE chat_heartbeats ADD COLUMN owner_id uuid;
CREATE INDEX chat_heartbeats_owner ON chat_heartbeats (owner_id, heartbeat_at)
    WHERE owner_id IS NOT NULL;

-- The quick pass walks the owners with chats to take (a skip scan on the leading column), then
-- each one's oldest; it replaces chats_unowned_candidates. The full pass only takes stale
-- leases over, so its index holds owned chats only: a backlog of new chats is not in its way.
-- On a large table an operator builds the new indexes CONCURRENTLY first
-- (deploy/OPERATIONS.md, "Upgrades and migrations").
CREATE INDEX IF NOT EXISTS chats_unowned_by_owner ON chats (owner_id, updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action')
    AND worker_id IS NULL AND NOT waiting_on_agents;
CREATE INDEX IF NOT EXISTS chats_owned_runnable_by_age ON chats (updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action')
    AND worker_id IS NOT NULL;
DROP INDEX IF EXISTS chats_unowned_candidates;
DROP INDEX IF EXISTS chats_runnable_by_age;
