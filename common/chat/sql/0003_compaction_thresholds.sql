-- Automatic compaction (ARCHITECTURE.md §7.6): the chat trigger fires when the latest known
-- context size reaches threshold percent of the chat model's context_limit. The threshold is
-- the owner's own for that model when set, else the model's compression_threshold, else the
-- worker's default; 100 disables the chat trigger, 0 compacts before every model call.
ALTER TABLE model_configs ADD COLUMN compression_threshold int
    CHECK (compression_threshold BETWEEN 0 AND 100);

-- Usage and cost (ARCHITECTURE.md §7.7): USD per million tokens, {"input", "output",
-- "cache_read"?, "cache_write"?}; the worker stamps each reply's cost from them.
ALTER TABLE model_configs ADD COLUMN prices jsonb CHECK (jsonb_typeof(prices) = 'object');

CREATE TABLE user_compaction_thresholds (
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    model_config_id uuid NOT NULL REFERENCES model_configs (id) ON DELETE CASCADE,
    threshold_percent int NOT NULL CHECK (threshold_percent BETWEEN 0 AND 100),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, model_config_id)
);
