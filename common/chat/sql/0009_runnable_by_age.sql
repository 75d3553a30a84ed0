-- The acquirer's full pass (ARCHITECTURE.md §6.2, "Quick and full passes"): runnable chats,
-- oldest first, read in index order so that a pass stops at its batch. The index it replaces
-- led with status, so the pass read and sorted every runnable chat (2,000 rows, 9 ms, for a
-- batch of 32 out of a backlog of 2,000) before it could stop. IF NOT EXISTS: an operator may
-- have built it first with CREATE INDEX CONCURRENTLY (deploy/OPERATIONS.md, "Upgrades and
-- migrations").
CREATE INDEX IF NOT EXISTS chats_runnable_by_age ON chats (updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action');
DROP INDEX IF EXISTS chats_acquisition_candidates;
