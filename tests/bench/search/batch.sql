-- One batch of the search bench's load (tests/bench/search/run): chats :first to
-- :first + :per - 1, each with :msgs messages, user and assistant alternating, straight into
-- the schema in one transaction.
--   psql -v first=N -v per=N -v msgs=N -v users=N -f batch.sql
-- Chat i belongs to user i % :users. A chat was created at a random moment of the last year
-- and its messages are a minute apart; its title is 3 to 6 words, a user message 4 to 30 and
-- an assistant's 20 to 120 (Zipf-distributed, setup.sql). Messages go in by turn across the
-- batch, as a live system writes them, so one chat's rows are spread over the batch's pages.
-- history_version starts at the snapshot (1) that the revision trigger stamps on the rows, so
-- the history trigger has nothing to update; revision is left to its trigger.
\set ON_ERROR_STOP on
BEGIN;
CREATE TEMP TABLE bc ON COMMIT DROP AS
SELECT gen_random_uuid() AS id, u.id AS owner, bench.words(3 + floor(random() * 4)::int) AS title,
       now() - random() * interval '365 days' AS t0
FROM generate_series(:first, :first + :per - 1) i
JOIN bench.users u ON u.n = i % :users;

INSERT INTO chats (id, owner_id, title, title_source, title_updated_at, history_version,
                   created_at, updated_at)
SELECT id, owner, title, 'generated', t0, 1, t0, t0 + (:msgs - 1) * interval '1 minute'
FROM bc;

INSERT INTO chat_messages (chat_id, role, content, created_at)
SELECT bc.id, CASE WHEN k % 2 = 0 THEN 'user' ELSE 'assistant' END::chat_message_role,
       jsonb_build_array(jsonb_build_object('type', 'text', 'text', bench.words(
           CASE WHEN k % 2 = 0 THEN 4 + floor(random() * 27)
                ELSE 20 + floor(random() * 101) END::int))),
       bc.t0 + k * interval '1 minute'
FROM bc, generate_series(0, :msgs - 1) k
ORDER BY k, bc.t0;
COMMIT;
