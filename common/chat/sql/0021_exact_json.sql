-- JSON that a client or a model wrote is kept as written (issue 41; ARCHITECTURE.md §3,
-- "Stored JSON"): jsonb rewrites numbers (1e300 comes back as 301 digits, 1E2 as 100, -0 as
-- 0), json keeps a value's text byte for byte. The columns below carry tool results and
-- tool-call arguments, structured values and their schemas, queued prompts and dynamic tool
-- schemas; every read path emits them without passing through jsonb. Columns only the system
-- writes, with numbers of its own (usage, retry_state, last_error, labels, prices,
-- mcp_servers, a2a_task_outcomes.detail), stay jsonb. Rows written before this keep the text
-- jsonb already made of them. Each ALTER rewrites its table: on a large deployment, run it in
-- a maintenance window (deploy/OPERATIONS.md, "Upgrades and migrations").
--
-- json has no equality operator: no DISTINCT, GROUP BY, UNION (without ALL) or = on these
-- columns, and no row comparison of a row that holds one.

-- The checks call jsonb_typeof; they come back with json_typeof below.
ALTER TABLE chat_messages DROP CONSTRAINT chat_messages_content_check;
ALTER TABLE chat_queued_messages DROP CONSTRAINT chat_queued_messages_content_check;
ALTER TABLE chat_queued_messages DROP CONSTRAINT chat_queued_messages_hook_context_check;

-- The search vector (0014) is generated from content, and PostgreSQL does not change the type
-- of a column a generated column uses: it is dropped and made again from content::jsonb (the
-- text parts only; no number is emitted), with its index and statistics target (0017). The
-- one-receipt index (0001) is re-created by the ALTER itself: ->> works on json alike.
ALTER TABLE chat_messages
    DROP COLUMN search,
    ALTER COLUMN content TYPE json USING content::json,
    ALTER COLUMN structured_output TYPE json USING structured_output::json,
    ADD CONSTRAINT chat_messages_content_check CHECK (json_typeof(content) = 'array'),
    ADD COLUMN search tsvector GENERATED ALWAYS AS (
        CASE WHEN role IN ('user', 'assistant') AND visibility <> 'model'
             THEN jsonb_to_tsvector('english'::regconfig,
                                    jsonb_path_query_array(content::jsonb,
                                                           '$[*] ? (@.type == "text").text'),
                                    '["string"]')
        END) STORED;
CREATE INDEX chat_messages_search ON chat_messages USING gin (search) WHERE NOT deleted;
ALTER TABLE chat_messages ALTER COLUMN search SET STATISTICS 1000;

-- The queue-version trigger (0001) names content in its UPDATE OF list, which pins the
-- column's type: it is dropped and made again, unchanged, around the ALTER.
DROP TRIGGER trigger_bump_chat_queue_version_on_queued_message_update ON chat_queued_messages;
ALTER TABLE chat_queued_messages
    ALTER COLUMN content TYPE json USING content::json,
    ALTER COLUMN response_format TYPE json USING response_format::json,
    ALTER COLUMN hook_context TYPE json USING hook_context::json,
    ADD CONSTRAINT chat_queued_messages_content_check CHECK (json_typeof(content) = 'array'),
    ADD CONSTRAINT chat_queued_messages_hook_context_check
        CHECK (hook_context IS NULL OR json_typeof(hook_context) = 'array');
CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_update
    AFTER UPDATE OF content, model_config_id, position, created_by ON chat_queued_messages
    FOR EACH ROW EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();

ALTER TABLE chats ALTER COLUMN dynamic_tools TYPE json USING dynamic_tools::json;

-- The receipt exemption of the history trigger (0001), with json_typeof.
CREATE OR REPLACE FUNCTION update_chat_history_after_message_insert() RETURNS trigger AS $$
BEGIN
    UPDATE chats c
    SET history_version = c.snapshot_version, generation_attempt = 0
    FROM (SELECT DISTINCT n.chat_id FROM chat_message_history_new_rows n
          WHERE NOT (n.role = 'assistant' AND n.visibility = 'user'
                     AND n.structured_output IS NOT NULL
                     AND json_typeof(n.structured_output) = 'object'
                     AND n.structured_output ->> 'type' = 'structured-output-outcome')) a
    WHERE c.id = a.chat_id
      AND (c.history_version IS DISTINCT FROM c.snapshot_version OR c.generation_attempt <> 0);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- A row comparison needs an equality operator for every column, which json lacks: the rows
-- are compared by their text, which for json is the stored text, so an update that changes
-- only how a number is written is a change (the client reads the new text).
CREATE OR REPLACE FUNCTION update_chat_history_after_message_update() RETURNS trigger AS $$
BEGIN
    UPDATE chats c
    SET history_version = c.snapshot_version, generation_attempt = 0
    FROM (SELECT DISTINCT n.chat_id FROM chat_message_history_new_rows n
          JOIN chat_message_history_old_rows o ON o.id = n.id
          WHERE o::text IS DISTINCT FROM n::text) a
    WHERE c.id = a.chat_id
      AND (c.history_version IS DISTINCT FROM c.snapshot_version OR c.generation_attempt <> 0);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- The no-op test of the revision trigger (0014) compared the rows as jsonb, which would call
-- 1E2 and 100 the same: the json columns are compared by their text.
CREATE OR REPLACE FUNCTION set_chat_message_revision_before() RETURNS trigger AS $$
DECLARE
    v bigint;
BEGIN
    IF TG_OP = 'INSERT' AND NEW.revision IS NOT NULL THEN
        RAISE EXCEPTION 'chat_messages.revision must be assigned by trigger';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF OLD.chat_id IS DISTINCT FROM NEW.chat_id THEN
            RAISE EXCEPTION 'chat_messages.chat_id is immutable';
        END IF;
        IF OLD.revision IS DISTINCT FROM NEW.revision THEN
            RAISE EXCEPTION 'chat_messages.revision must be assigned by trigger';
        END IF;
        IF to_jsonb(OLD) - 'search' - 'content' - 'structured_output'
               = to_jsonb(NEW) - 'search' - 'content' - 'structured_output'
           AND OLD.content::text = NEW.content::text
           AND OLD.structured_output::text IS NOT DISTINCT FROM NEW.structured_output::text THEN
            RETURN NEW;
        END IF;
    END IF;
    SELECT snapshot_version INTO v FROM chats WHERE id = NEW.chat_id;
    IF v IS NULL THEN
        RAISE EXCEPTION 'chat % does not exist', NEW.chat_id;
    END IF;
    NEW.revision = v;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
