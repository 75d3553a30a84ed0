-- A2A state that the chat tables do not hold (ARCHITECTURE.md §8, "A2A").

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

-- A2A push notification configurations (ARCHITECTURE.md §8, "A2A push notifications"): one row
-- per config of a task, and the delivery state a gateway's pusher keeps in it: the last state
-- delivered, the failed attempts in a row, when to try next, and the claim a pusher holds while
-- it posts (claimed_until; an expired claim is anyone's, so a killed gateway's delivery is
-- retried by another). done: the terminal state was delivered, or delivery gave up.
CREATE TABLE a2a_push_configs (
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    task_id text NOT NULL CHECK (task_id ~ '^[qr]?[1-9][0-9]{0,18}$'),
    id text NOT NULL CHECK (length(id) BETWEEN 1 AND 128),
    url text NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2048),
    token text CHECK (length(token) <= 1024),
    auth_scheme text CHECK (length(auth_scheme) <= 64),
    auth_credentials text CHECK (length(auth_credentials) <= 4096),
    sent_state text,
    attempts int NOT NULL DEFAULT 0,
    next_at timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,
    done boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, task_id, id)
);
CREATE INDEX a2a_push_configs_due ON a2a_push_configs (next_at) WHERE NOT done;
