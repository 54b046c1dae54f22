-- poll-claim: lock the next batch of outbox events for one relay round (inside its transaction).
--
-- $1 int     batch size: rows locked, at most as many returned
-- $2 text[]  topics this relay handles, or NULL for every topic
-- $3 bigint[] seq of the events of this relay's batches still open (claimed ahead of their
--             settle, in other transactions of the same relay): held by this relay, so they do
--             not stop their keys here; empty when none
-- Returns the events in seq order (seq and created_at as text: bigint).
--
-- The oldest $1 rows not locked by another relay are locked (SKIP LOCKED: relays side by side
-- split the table). Of each key, only the rows BEFORE the key's first row this round does not
-- hold are returned: if another relay holds an earlier row of the key (or an earlier row fell
-- outside this window), nothing of the key is, so a key is never published out of order nor by
-- two relays at once. Rows locked but not returned stay locked until COMMIT and wait for the
-- next round. publish() commits one key's rows in seq order, so no earlier row of a key can
-- become visible after a later one. Keyless rows are all returned. The rows of this relay's
-- open batches ($3) are locked by their own transactions, so SKIP LOCKED passes over them, and
-- they count as held: a key's later rows are returned behind them (the relay publishes this
-- batch only after those, and gives it back if those were not all published and recorded).
--
-- Cost: one index probe (outbox_key_seq) per distinct key of the batch, which stops at the first
-- row of the key this round does not hold — about as many rows as the batch holds of that key.
WITH locked AS (
  SELECT o.seq, o.key
  FROM {{schema}}.outbox o
  WHERE $2::text[] IS NULL OR o.topic = ANY ($2::text[])
  ORDER BY o.seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
),
bounds AS (
  SELECT k.key,
         (SELECT min(p.seq) FROM {{schema}}.outbox p
           WHERE p.key = k.key
             AND ($2::text[] IS NULL OR p.topic = ANY ($2::text[]))
             AND p.seq NOT IN (SELECT seq FROM locked)
             AND p.seq <> ALL ($3::bigint[])) AS first_not_held
  FROM (SELECT DISTINCT key FROM locked WHERE key IS NOT NULL) k
)
SELECT o.seq::text AS seq, o.id, o.topic, o.key, o.payload::text AS payload, o.headers::text AS headers,
       o.created_at::text AS created_at
FROM locked l
JOIN {{schema}}.outbox o ON o.seq = l.seq
LEFT JOIN bounds b ON b.key = l.key
WHERE l.key IS NULL OR b.first_not_held IS NULL OR l.seq < b.first_not_held
ORDER BY o.seq
