-- When a user message waited in the queue (issue 40, the queue_wait stage): the queue row's
-- creation, carried over when the row is promoted into history, so that the turn it starts
-- can tell how long it waited (its created_at is the promotion). NULL for a message that
-- never queued, and for rows from before this migration. Additive: no rewrite.
ALTER TABLE chat_messages ADD COLUMN queued_at timestamptz;
