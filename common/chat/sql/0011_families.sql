-- Chat families (issue 36; ARCHITECTURE.md §3, "Families"): a subagent chat names its parent
-- and its family's root, and how deep it sits (a root is depth 0 with neither). The family of
-- a root is every chat whose root_chat_id is that root; archive applies to it as one.
ALTER TABLE chats
    ADD COLUMN parent_chat_id uuid REFERENCES chats (id),
    ADD COLUMN root_chat_id uuid REFERENCES chats (id),
    ADD COLUMN depth int NOT NULL DEFAULT 0,
    ADD CONSTRAINT chats_family_shape CHECK (
        (parent_chat_id IS NULL AND root_chat_id IS NULL AND depth = 0)
        OR (parent_chat_id IS NOT NULL AND root_chat_id IS NOT NULL AND depth > 0));

-- A parent's children (fan-out counts, the embedded children list) and a root's family
-- (archive) by index; both partial, since most chats are roots.
CREATE INDEX chats_children ON chats (parent_chat_id, created_at) WHERE parent_chat_id IS NOT NULL;
CREATE INDEX chats_family ON chats (root_chat_id) WHERE root_chat_id IS NOT NULL;
