-- The concurrency limiter's slots (ARCHITECTURE.md §6.2). With CHATFLEET_WORKER_MAX_CHATS = N
-- a chat holds slot s (1..N) while its heartbeat row has slot s; a fresh row's slot is taken,
-- a stale row's is free and goes to whoever deletes that row first. The unique index is the
-- limiter: two acquisitions claiming one slot are decided by it, not by a lock, so no
-- acquisition or renewal waits on another worker's unless they touch the same row or slot.
-- NULL when the limiter is off (N = 0); NULLs never collide.
ALTER TABLE chat_heartbeats ADD COLUMN slot int CHECK (slot > 0);
CREATE UNIQUE INDEX chat_heartbeats_slot_key ON chat_heartbeats (slot);
