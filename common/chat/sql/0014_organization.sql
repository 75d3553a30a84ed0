-- Chat organization and steering (issue 38; ARCHITECTURE.md §3, "Metadata"): search, labels,
-- pins, read markers, reasoning effort, plan mode, and the usage of background model calls.
-- Labels, pins and plan mode are metadata: they never move a version.

-- Reasoning effort on the global scale (chatd's order: none < minimal < ... < max).
CREATE DOMAIN reasoning_effort AS text
    CHECK (VALUE IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'));

-- The effort's rank on that scale, for clamping in SQL.
CREATE FUNCTION reasoning_effort_rank(e text) RETURNS int AS $$
    SELECT array_position(ARRAY['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'], e)
$$ LANGUAGE sql IMMUTABLE;

ALTER TABLE chats
    ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(labels) = 'object'),
    ADD COLUMN pin_order int NOT NULL DEFAULT 0 CHECK (pin_order >= 0),
    ADD COLUMN plan_mode boolean NOT NULL DEFAULT false,
    ADD COLUMN last_reasoning_effort reasoning_effort,
    -- Search over the title (the messages carry their own vector below).
    ADD COLUMN title_search tsvector
        GENERATED ALWAYS AS (to_tsvector('english'::regconfig, title)) STORED;

ALTER TABLE chat_messages ADD COLUMN reasoning_effort reasoning_effort;
ALTER TABLE chat_queued_messages ADD COLUMN reasoning_effort reasoning_effort;

-- The text a user can search: the text parts of the user's and the assistant's messages that
-- the user sees (model-only rows, tool calls and results are not searched).
ALTER TABLE chat_messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    CASE WHEN role IN ('user', 'assistant') AND visibility <> 'model'
         THEN jsonb_to_tsvector('english'::regconfig,
                                jsonb_path_query_array(content, '$[*] ? (@.type == "text").text'),
                                '["string"]')
    END) STORED;

-- A BEFORE trigger sees generated columns not yet computed (NULL in NEW): the no-op test of
-- the revision trigger (0001) leaves them out.
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
        IF to_jsonb(OLD) - 'search' = to_jsonb(NEW) - 'search' THEN
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

CREATE INDEX chat_messages_search ON chat_messages USING gin (search) WHERE NOT deleted;
CREATE INDEX chats_title_search ON chats USING gin (title_search);
-- label=key:value filters are containment (labels @> {...}).
CREATE INDEX chats_labels ON chats USING gin (labels jsonb_path_ops);

-- Where the owner last read each chat: has_unread is an assistant message past it.
CREATE TABLE chat_read_markers (
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    last_read_message_id bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (chat_id, user_id)
);

-- Model calls that write no message row (a generated title, a regenerated one): their usage,
-- counted with the messages' in a chat's usage and the operators' cost view.
CREATE TABLE chat_usage (
    id bigserial PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    model_config_id uuid REFERENCES model_configs (id),
    kind text NOT NULL CHECK (kind IN ('title')),
    usage jsonb NOT NULL CHECK (jsonb_typeof(usage) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_usage_by_chat ON chat_usage (chat_id);
CREATE INDEX chat_usage_by_day ON chat_usage (created_at);
