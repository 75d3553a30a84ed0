-- The search bench's generator (tests/bench/search/run), run once on a migrated database:
-- the vocabulary, the users with their tokens, and the search indexes set aside until the load
-- is done (built once at the end, as a restore would; index.sql builds them again).
--   psql -v users=N -f setup.sql
\set ON_ERROR_STOP on
CREATE SCHEMA bench;

-- Word number r (0 to 3,111,695): four consonant-vowel syllables out of 42. No such word is
-- an English stop word and the english stemmer leaves every one unchanged (each ends in a, o
-- or u), so a word is its own lexeme in chats' and messages' tsvectors.
CREATE FUNCTION bench.word(r int) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT s[1 + r % 42] || s[1 + (r / 42) % 42] || s[1 + (r / 1764) % 42]
           || s[1 + (r / 74088) % 42]
    FROM (SELECT '{ba,bo,bu,da,do,du,fa,fo,fu,ga,go,gu,ka,ko,ku,la,lo,lu,ma,mo,mu,na,no,nu,'
                 'pa,po,pu,ra,ro,ru,sa,so,su,ta,to,tu,va,vo,vu,za,zo,zu}'::text[] AS s) v
$$;

-- A word's rank drawn from a Zipf-like law over a million words, P(rank = r) ~ 1 / (r + 1):
-- rank 0 is 5% of all words, rank 100 0.07%, rank 100,000 one in 1.4 million, rank 999,999
-- one in 14 million; ranks from 1,000,000 up never occur.
CREATE FUNCTION bench.rank() RETURNS int LANGUAGE sql VOLATILE AS $$
    SELECT floor(exp(random() * ln(1000000)))::int - 1
$$;

-- n words drawn from that law, separated by spaces.
CREATE FUNCTION bench.words(n int) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT string_agg(bench.word(bench.rank()), ' ') FROM generate_series(1, n)
$$;

-- The users: bench_00000 ... with the token cf_bench_00000 (api_tokens keeps its SHA-256, as
-- chatfleet-gateway user-add does).
CREATE TABLE bench.users (n int PRIMARY KEY, id uuid NOT NULL, token text NOT NULL);
INSERT INTO bench.users
SELECT u, gen_random_uuid(), 'cf_bench_' || lpad(u::text, 5, '0')
FROM generate_series(0, :users - 1) u;
INSERT INTO users (id, name) SELECT id, substr(token, 4) FROM bench.users;
INSERT INTO api_tokens (id, user_id, token_sha256)
SELECT gen_random_uuid(), id, sha256(convert_to(token, 'UTF8')) FROM bench.users;

-- The GIN indexes of 0014, dropped for the load and built at its end from these definitions.
CREATE TABLE bench.indexes AS
SELECT indexname AS name, indexdef AS def FROM pg_indexes
WHERE schemaname = 'public'
  AND indexname IN ('chat_messages_search', 'chats_title_search', 'chats_labels');
SELECT 'DROP INDEX ' || name FROM bench.indexes \gexec
