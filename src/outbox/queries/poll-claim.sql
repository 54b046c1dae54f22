-- poll-claim: lock the next batch of outbox events for one relay round (inside its transaction).
--
-- $1 int     batch size: events returned (heads first locked, then the events behind them)
-- $2 text[]  topics this relay handles, or NULL for every topic
-- Returns the events in seq order (seq and created_at as text: bigint).
--
-- A HEAD is an event with no earlier event of its key left in the table; keyless events are
-- all heads. Heads are locked with SKIP LOCKED, so relays side by side split them. The events
-- behind a locked head are then locked too (without SKIP LOCKED: no other relay can hold them,
-- since none of them is a head while the locked head exists; publish() commits one key's
-- events in seq order, so no earlier event of the key can appear later). Another relay thus
-- never takes an event of a key this round holds, and a key is published in order.
WITH heads AS (
  SELECT o.seq, o.key
  FROM {{schema}}.outbox o
  WHERE ($2::text[] IS NULL OR o.topic = ANY ($2::text[]))
    AND (o.key IS NULL OR NOT EXISTS (
      SELECT 1 FROM {{schema}}.outbox p
      WHERE p.key = o.key AND p.seq < o.seq AND ($2::text[] IS NULL OR p.topic = ANY ($2::text[]))
    ))
  ORDER BY o.seq
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
),
followers AS (
  SELECT f.seq
  FROM {{schema}}.outbox f
  JOIN heads h ON f.key = h.key AND f.seq > h.seq
  WHERE ($2::text[] IS NULL OR f.topic = ANY ($2::text[]))
  ORDER BY f.seq
  LIMIT $1
  FOR UPDATE OF f
)
SELECT o.seq::text AS seq, o.id, o.topic, o.key, o.payload::text AS payload, o.headers::text AS headers,
       o.created_at::text AS created_at
FROM {{schema}}.outbox o
WHERE o.seq IN (SELECT seq FROM heads UNION ALL SELECT seq FROM followers)
ORDER BY o.seq
-- At most $1 events: a prefix in seq order keeps every key's head before its followers. Rows
-- locked beyond it stay locked (so unclaimable by others) until this round's COMMIT, then wait
-- for the next round.
LIMIT $1
