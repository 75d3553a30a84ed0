-- W3C trace context of the request that made a user message (issue 40): the gateway stores
-- the request's traceparent (or one it made) with the message, queued or inserted, and a
-- promotion carries it over; the worker's turn span joins that trace. Best-effort
-- observability data: NULL for rows from before this migration and rows no request made.
ALTER TABLE chat_messages ADD COLUMN traceparent text;
ALTER TABLE chat_queued_messages ADD COLUMN traceparent text;
