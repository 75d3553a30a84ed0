-- Files and attachments (issue 37; ARCHITECTURE.md §3, "Files"). An upload is a chat_files
-- row and its bytes in chat_file_chunks, written chunk by chunk as the body arrives, so the
-- gateway never holds a whole file; complete turns true when the last chunk is in and the
-- bytes were checked. chat_id is the file's one link: a file belongs to at most one chat, and
-- the link is written inside the transition that persists the message naming the file
-- (chatfile_link). Deleting a chat deletes its files; evicting a file deletes its row.
CREATE TABLE chat_files (
    id uuid PRIMARY KEY,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    chat_id uuid REFERENCES chats (id) ON DELETE CASCADE,
    name text NOT NULL DEFAULT '' CHECK (length(name) <= 255),
    mime_type text NOT NULL,
    size_bytes bigint NOT NULL DEFAULT 0 CHECK (size_bytes >= 0),
    sha256 bytea CHECK (sha256 IS NULL OR length(sha256) = 32),
    complete boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT chat_files_complete_shape CHECK (NOT complete OR sha256 IS NOT NULL),
    CONSTRAINT chat_files_linked_complete CHECK (chat_id IS NULL OR complete)
);

-- The cap and eviction read a chat's files in upload order.
CREATE INDEX chat_files_by_chat ON chat_files (chat_id, created_at, id) WHERE chat_id IS NOT NULL;
-- The quota sums an owner's files; the sweep finds abandoned uploads.
CREATE INDEX chat_files_by_owner ON chat_files (owner_id);
CREATE INDEX chat_files_incomplete ON chat_files (created_at) WHERE NOT complete;

CREATE TABLE chat_file_chunks (
    file_id uuid NOT NULL REFERENCES chat_files (id) ON DELETE CASCADE,
    seq int NOT NULL CHECK (seq >= 0),
    data bytea NOT NULL,
    PRIMARY KEY (file_id, seq)
);
-- Chunks are written once and read whole: no compression of bytes that are mostly
-- compressed already (PNG, JPEG, PDF streams).
ALTER TABLE chat_file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- The media types a model takes as file parts (models.c fills the provider's default when the
-- config names none); the gateway refuses a send whose files the chat's model does not take.
ALTER TABLE model_configs ADD COLUMN media_types text[];
