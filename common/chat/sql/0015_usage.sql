-- Title regeneration and the operators' cost view (issue 38; ARCHITECTURE.md §7.7, §7.8).

-- POST /chats/{id}/title/regenerate: the owner's request for a new generated title. A durable
-- marker: a worker serves it (the next model step's title side call, or, for an idle chat, the
-- acquirer's title pass and the abandon task) and clears it only in the bundle that writes the
-- title or records why none came, so a request survives any crash before that.
ALTER TABLE chats ADD COLUMN title_requested_at timestamptz;

-- The acquirer's title pass (worker/lease/leasedb.c): idle chats with a pending request, oldest
-- first. Almost always empty, so the pass costs a probe.
CREATE INDEX chats_title_requests ON chats (updated_at, id) WHERE title_requested_at IS NOT NULL;

-- GET /api/v2/admin/costs reads the rows that carry usage by time; only replies and summary
-- calls carry it, so the index is a fraction of the table.
CREATE INDEX chat_messages_usage_by_time ON chat_messages (created_at) WHERE usage IS NOT NULL;
