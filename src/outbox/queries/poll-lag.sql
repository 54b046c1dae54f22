-- poll-lag: how far behind the relays are.
--
-- $1 text[]  topics, or NULL for every topic
-- Returns age_ms (of the oldest waiting event, NULL when none) and backlog (events waiting).
-- The oldest event is found through the primary key (seq order is insertion order).
SELECT
  (SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint - o.created_at
     FROM {{schema}}.outbox o
    WHERE $1::text[] IS NULL OR o.topic = ANY ($1::text[])
    ORDER BY o.seq LIMIT 1)::text AS age_ms,
  (SELECT count(*) FROM {{schema}}.outbox o WHERE $1::text[] IS NULL OR o.topic = ANY ($1::text[]))::text AS backlog
