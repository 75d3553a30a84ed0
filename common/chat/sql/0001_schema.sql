-- chatfleet schema: DESIGN §4. Every write to chats, chat_messages and chat_queued_messages
-- goes through common/chatstate, inside a transaction that has already advanced
-- chats.snapshot_version; the triggers below derive the other versions from it.

CREATE TYPE chat_status AS ENUM ('waiting', 'running', 'interrupting', 'requires_action', 'error');
CREATE TYPE chat_message_role AS ENUM ('system', 'user', 'assistant', 'tool');
CREATE TYPE chat_message_visibility AS ENUM ('user', 'model', 'both');
CREATE TYPE chat_title_source AS ENUM ('fallback', 'generated', 'user');

CREATE TABLE users (
    id uuid PRIMARY KEY,
    name text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a token is stored; the token itself is shown once, at creation.
CREATE TABLE api_tokens (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_sha256 bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);

CREATE TABLE model_configs (
    id uuid PRIMARY KEY,
    name text NOT NULL UNIQUE,
    provider text NOT NULL,
    model text NOT NULL,
    base_url text,
    api_key_env text,
    is_default boolean NOT NULL DEFAULT false,
    context_limit bigint,
    native_structured_output boolean NOT NULL DEFAULT false,
    options jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX model_configs_one_default ON model_configs (is_default) WHERE is_default;

CREATE TABLE chats (
    id uuid PRIMARY KEY,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    title text NOT NULL DEFAULT 'New Chat',
    title_source chat_title_source NOT NULL DEFAULT 'fallback',
    title_updated_at timestamptz NOT NULL DEFAULT now(),
    status chat_status NOT NULL DEFAULT 'waiting',
    archived boolean NOT NULL DEFAULT false,
    worker_id uuid,
    runner_id uuid,
    snapshot_version bigint NOT NULL DEFAULT 1,
    history_version bigint NOT NULL DEFAULT 0,
    queue_version bigint NOT NULL DEFAULT 0,
    generation_attempt bigint NOT NULL DEFAULT 0,
    retry_state jsonb,
    retry_state_version bigint NOT NULL DEFAULT 0,
    last_error jsonb,
    requires_action_deadline_at timestamptz,
    compaction_requested_at timestamptz,
    model_config_id uuid REFERENCES model_configs (id),
    system_prompt text,
    dynamic_tools jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Keeps the acquirer's scan to runnable chats only.
CREATE INDEX chats_acquisition_candidates ON chats (status, updated_at, id)
    WHERE archived = false AND status IN ('running', 'interrupting', 'requires_action');
CREATE INDEX chats_owner_listing ON chats (owner_id, updated_at DESC, id DESC);

CREATE TABLE chat_messages (
    id bigserial PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    role chat_message_role NOT NULL,
    visibility chat_message_visibility NOT NULL DEFAULT 'both',
    content jsonb NOT NULL CHECK (jsonb_typeof(content) = 'array'),
    revision bigint NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    -- A context boundary (compaction summary or clear sentinel) or a row it replaced.
    compressed boolean NOT NULL DEFAULT false,
    queued_message_id bigint,
    created_by uuid,
    model_config_id uuid REFERENCES model_configs (id),
    usage jsonb,
    -- The request UUID a structured user message carries, or the one a receipt closes.
    structured_output_request_id uuid,
    -- Internal structured-output metadata (request, candidate, control, outcome); never
    -- written from client input.
    structured_output jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_messages_by_chat ON chat_messages (chat_id, id);
CREATE INDEX chat_messages_by_revision ON chat_messages (chat_id, revision);
-- The latest user turn bounds the outstanding-tool-call scan (common/chatstate.c).
CREATE INDEX chat_messages_user_turns ON chat_messages (chat_id, id)
    WHERE role = 'user' AND NOT deleted;
-- One terminal receipt per structured request, ever.
CREATE UNIQUE INDEX chat_messages_one_receipt ON chat_messages (structured_output_request_id)
    WHERE structured_output ->> 'type' = 'structured-output-outcome';

CREATE SEQUENCE chat_queued_messages_position_seq;
CREATE TABLE chat_queued_messages (
    id bigserial PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    position bigint NOT NULL DEFAULT nextval('chat_queued_messages_position_seq'),
    content jsonb NOT NULL CHECK (jsonb_typeof(content) = 'array'),
    created_by uuid NOT NULL,
    model_config_id uuid REFERENCES model_configs (id),
    response_format jsonb,
    structured_output_request_id uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_queued_messages_by_chat ON chat_queued_messages (chat_id, position);

-- Leases. UNLOGGED: after a crash every lease is gone, which is exactly right.
CREATE UNLOGGED TABLE chat_heartbeats (
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    runner_id uuid NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    PRIMARY KEY (chat_id, runner_id)
);
CREATE INDEX chat_heartbeats_heartbeat_at_idx ON chat_heartbeats (heartbeat_at);

-- Message revision: the snapshot_version of the bundle that last inserted or meaningfully
-- updated the row. Never assigned by callers.
CREATE FUNCTION set_chat_message_revision_before() RETURNS trigger AS $$
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
        IF OLD IS NOT DISTINCT FROM NEW THEN
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

CREATE TRIGGER trigger_set_chat_message_revision_on_insert
    BEFORE INSERT ON chat_messages FOR EACH ROW EXECUTE FUNCTION set_chat_message_revision_before();
CREATE TRIGGER trigger_set_chat_message_revision_on_update
    BEFORE UPDATE ON chat_messages FOR EACH ROW EXECUTE FUNCTION set_chat_message_revision_before();

-- history_version and generation_attempt. Statement-level, so one bundle's inserts touch the
-- chat row once. A terminal structured-output receipt (role assistant, visibility user,
-- outcome discriminator) is exempt on insert: a receipt for a queued request written during
-- unrelated work must not invalidate that work's fence (structured-output-plan §5.4).
CREATE FUNCTION update_chat_history_after_message_insert() RETURNS trigger AS $$
BEGIN
    UPDATE chats c
    SET history_version = c.snapshot_version, generation_attempt = 0
    FROM (SELECT DISTINCT n.chat_id FROM chat_message_history_new_rows n
          WHERE NOT (n.role = 'assistant' AND n.visibility = 'user'
                     AND n.structured_output IS NOT NULL
                     AND jsonb_typeof(n.structured_output) = 'object'
                     AND n.structured_output ->> 'type' = 'structured-output-outcome')) a
    WHERE c.id = a.chat_id
      AND (c.history_version IS DISTINCT FROM c.snapshot_version OR c.generation_attempt <> 0);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION update_chat_history_after_message_update() RETURNS trigger AS $$
BEGIN
    UPDATE chats c
    SET history_version = c.snapshot_version, generation_attempt = 0
    FROM (SELECT DISTINCT n.chat_id FROM chat_message_history_new_rows n
          JOIN chat_message_history_old_rows o ON o.id = n.id
          WHERE o IS DISTINCT FROM n) a
    WHERE c.id = a.chat_id
      AND (c.history_version IS DISTINCT FROM c.snapshot_version OR c.generation_attempt <> 0);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_update_chat_history_after_message_insert
    AFTER INSERT ON chat_messages REFERENCING NEW TABLE AS chat_message_history_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION update_chat_history_after_message_insert();
CREATE TRIGGER trigger_update_chat_history_after_message_update
    AFTER UPDATE ON chat_messages
    REFERENCING OLD TABLE AS chat_message_history_old_rows NEW TABLE AS chat_message_history_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION update_chat_history_after_message_update();

-- queue_version: the snapshot in which the queue last changed.
CREATE FUNCTION bump_chat_queue_version_on_queued_message_change() RETURNS trigger AS $$
DECLARE
    changed uuid;
BEGIN
    IF TG_OP = 'DELETE' THEN
        changed = OLD.chat_id;
    ELSE
        changed = NEW.chat_id;
    END IF;
    UPDATE chats SET queue_version = snapshot_version WHERE id = changed;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_insert
    AFTER INSERT ON chat_queued_messages
    FOR EACH ROW EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();
CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_update
    AFTER UPDATE OF content, model_config_id, position, created_by ON chat_queued_messages
    FOR EACH ROW EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();
CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_delete
    AFTER DELETE ON chat_queued_messages
    FOR EACH ROW EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();

-- Retry state is scoped to one generation attempt of a running turn: cleared when the
-- attempt changes or the chat leaves running; retry_state_version follows every change.
CREATE FUNCTION sync_chat_retry_state() RETURNS trigger AS $$
BEGIN
    IF OLD.retry_state_version IS DISTINCT FROM NEW.retry_state_version THEN
        RAISE EXCEPTION 'chats.retry_state_version must be assigned by trigger';
    END IF;
    IF NEW.generation_attempt IS DISTINCT FROM OLD.generation_attempt
       OR NEW.status <> 'running' THEN
        NEW.retry_state = NULL;
    END IF;
    IF NEW.retry_state IS DISTINCT FROM OLD.retry_state THEN
        NEW.retry_state_version = NEW.snapshot_version;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_sync_chat_retry_state
    BEFORE UPDATE OF retry_state, retry_state_version, generation_attempt, status ON chats
    FOR EACH ROW EXECUTE FUNCTION sync_chat_retry_state();
