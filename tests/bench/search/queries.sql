-- The search bench's queries (tests/bench/search/run): :nq per band, each as a random user
-- (or, for "rare", the owner of a message with the word), in random order, as
--   band \t token \t user_id \t q
--   psql -At -F '<tab>' -v nq=N -v users=N -f queries.sql
-- Bands: common (word ranks 0-9: in most messages), medium (100-999: 0.2-2% of them), rare
-- (100,000-999,999: 3 to 30 messages of a million), absent (never written), two (two words of
-- one random message, AND), phrase (two adjacent words of one random message, quoted).
\set ON_ERROR_STOP on
SELECT setseed(0.38) \gset
CREATE TEMP TABLE q (band text, owner uuid, q text);

INSERT INTO q SELECT 'common', u.id, bench.word(r)
FROM (SELECT floor(random() * 10)::int AS r, floor(random() * :users)::int AS un
      FROM generate_series(1, :nq) OFFSET 0) x JOIN bench.users u ON u.n = x.un;
INSERT INTO q SELECT 'medium', u.id, bench.word(r)
FROM (SELECT 100 + floor(random() * 900)::int AS r, floor(random() * :users)::int AS un
      FROM generate_series(1, :nq) OFFSET 0) x JOIN bench.users u ON u.n = x.un;
INSERT INTO q SELECT 'absent', u.id, bench.word(r)
FROM (SELECT 2000000 + floor(random() * 1000000)::int AS r, floor(random() * :users)::int AS un
      FROM generate_series(1, :nq) OFFSET 0) x JOIN bench.users u ON u.n = x.un;

INSERT INTO q SELECT 'rare', o.owner_id, x.w
FROM (SELECT bench.word(100000 + floor(random() * 900000)::int) AS w
      FROM generate_series(1, :nq * 20) OFFSET 0) x
CROSS JOIN LATERAL (SELECT c.owner_id FROM chat_messages m JOIN chats c ON c.id = m.chat_id
                    WHERE m.search @@ to_tsquery('english', x.w) AND NOT m.deleted
                    LIMIT 1) o
LIMIT :nq;

-- Random messages' words (ids are dense after the load); each message gives one query.
CREATE TEMP TABLE mw AS
SELECT c.owner_id AS owner, string_to_array(m.content -> 0 ->> 'text', ' ') AS w
FROM (SELECT 1 + floor(random() * (SELECT max(id) FROM chat_messages))::bigint AS id
      FROM generate_series(1, :nq * 2) OFFSET 0) r
JOIN chat_messages m ON m.id = r.id JOIN chats c ON c.id = m.chat_id;
INSERT INTO q SELECT 'two', owner, w[i] || ' ' || w[1 + (i + j) % cardinality(w)]
FROM (SELECT owner, w, 1 + floor(random() * cardinality(w))::int AS i,
             floor(random() * (cardinality(w) - 1))::int AS j
      FROM mw LIMIT :nq OFFSET 0) x;
INSERT INTO q SELECT 'phrase', owner, '"' || w[i] || ' ' || w[i + 1] || '"'
FROM (SELECT owner, w, 1 + floor(random() * (cardinality(w) - 1))::int AS i
      FROM mw OFFSET :nq) x;

SELECT q.band, u.token, u.id, q.q FROM q JOIN bench.users u ON u.id = q.owner ORDER BY random();
