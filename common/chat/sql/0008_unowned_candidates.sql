-- The acquirer's quick pass (ARCHITECTURE.md §6.2, "Quick and full passes"): runnable chats
-- without any owner, oldest first, found without visiting the chats other workers hold, so a
-- pass costs the same with ten or ten thousand turns in flight. The full pass keeps
-- chats_acquisition_candidates for stale leases. IF NOT EXISTS: an operator may have built it
-- first with CREATE INDEX CONCURRENTLY (deploy/OPERATIONS.md, "Upgrades and migrations").
CREATE INDEX IF NOT EXISTS chats_unowned_candidates ON chats (updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action')
    AND worker_id IS NULL;
