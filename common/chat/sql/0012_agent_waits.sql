-- Subagent waits (issue 36; ARCHITECTURE.md §3, "Families", and §4, the agent wait): a parent
-- whose only pending tool calls are wait_agent calls sits in requires_action with no owner, no
-- lease, no limiter slot and no deadline, marked waiting_on_agents, until the bundle that
-- answers them (chatstate_agents.c) resumes it. No acquirer may take such a chat.
ALTER TABLE chats
    ADD COLUMN waiting_on_agents boolean NOT NULL DEFAULT false,
    ADD COLUMN spawn_call_id text,
    ADD CONSTRAINT chats_agent_wait_unowned CHECK (NOT waiting_on_agents OR worker_id IS NULL),
    ADD CONSTRAINT chats_spawn_shape CHECK (spawn_call_id IS NULL OR parent_chat_id IS NOT NULL);

-- spawn_agent is idempotent per tool call: a takeover that runs the call again finds the
-- child the first run created.
CREATE UNIQUE INDEX chats_spawned_by ON chats (parent_chat_id, spawn_call_id)
    WHERE spawn_call_id IS NOT NULL;

-- The sweep that resumes a parent whose wake was lost to a crash reads waiting parents only.
CREATE INDEX chats_agent_waits ON chats (updated_at, id) WHERE waiting_on_agents;

-- The acquirer's candidates leave agent waits out (its statements repeat these predicates).
-- On a large table an operator builds the new indexes CONCURRENTLY first
-- (deploy/OPERATIONS.md, "Upgrades and migrations").
DROP INDEX IF EXISTS chats_unowned_candidates;
CREATE INDEX chats_unowned_candidates ON chats (updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action')
    AND worker_id IS NULL AND NOT waiting_on_agents;
DROP INDEX IF EXISTS chats_runnable_by_age;
CREATE INDEX chats_runnable_by_age ON chats (updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action')
    AND NOT waiting_on_agents;
