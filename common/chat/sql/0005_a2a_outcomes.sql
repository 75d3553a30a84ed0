-- A2A task outcomes that the chat rows cannot say (ARCHITECTURE.md §8, "A2A"): a text turn or
-- a queued message canceled by CancelTask (an interrupted text turn otherwise reads as a
-- finished one), and a request refused before it reached a model (an invalid schema: the task
-- exists and has failed). The gateway writes a row in the bundle that makes the outcome true
-- (the interrupt, the queue deletion), or alone for a refused request; a row is final.
-- task_id is the task's canonical id (a2a_task_id_canonical): a message id, "q" and a queued
-- message id, or "r" and a refused request's number.
CREATE TABLE a2a_task_outcomes (
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    task_id text NOT NULL CHECK (task_id ~ '^[qr]?[1-9][0-9]{0,18}$'),
    context_id uuid NOT NULL,
    state text NOT NULL CHECK (state IN ('canceled', 'failed')),
    code text,
    message text,
    detail jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, task_id)
);
CREATE SEQUENCE a2a_refused_task_seq;
