-- The lifecycle hook context of a queued prompt (ARCHITECTURE.md §7.10): the rows the
-- answer to its user_prompt_submit added, as the gateway would have inserted them right
-- after the prompt ([{"role","visibility","content","structured_output"}], written only by
-- chatstate), kept with the queued row and inserted right after the prompt when it is
-- promoted. NULL: none.
ALTER TABLE chat_queued_messages ADD COLUMN hook_context jsonb
    CHECK (hook_context IS NULL OR jsonb_typeof(hook_context) = 'array');
