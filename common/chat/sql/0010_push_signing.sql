-- A2A push notifications made safe (security issue 34; ARCHITECTURE.md §8, "A2A push
-- notifications"): each config gets the Standard Webhooks secret its deliveries are signed
-- with ("whsec_" + base64 of the key; common/net/whsig.h). Configs made before this get a
-- 32-byte key from two random UUIDs' 244 random bits (gen_random_uuid is built in since
-- PostgreSQL 13; pgcrypto is not assumed); new ones get 24 bytes from the gateway's CSPRNG.
ALTER TABLE a2a_push_configs ADD COLUMN signing_secret text;
UPDATE a2a_push_configs SET signing_secret = 'whsec_' || encode(decode(
    replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), 'base64');
ALTER TABLE a2a_push_configs ALTER COLUMN signing_secret SET NOT NULL;

-- Deliveries per user per minute (CHATFLEET_PUSH_DELIVERIES_PER_MIN), shared by every
-- gateway's pusher: one fixed one-minute window per user. A delivery over the rate is deferred
-- to the window's end, never dropped nor counted as a failed attempt.
CREATE TABLE a2a_push_rate (
    owner_id uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    deliveries int NOT NULL
);
