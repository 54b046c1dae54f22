-- poll-settle: record a round's outcome, in the round's transaction (COMMIT follows).
--
-- $1 bigint[]  seq of the events the target confirmed: deleted
-- $2 bigint[]  seq of the events the target refused for good: moved to outbox_dead
-- $3 text[]    the refusal of each event of $2, in the same order
-- $4 text      the target's description
-- Events of the round in neither list stay, unlocked at COMMIT, to be claimed again.
WITH refused AS (
  SELECT r.seq, r.error FROM unnest($2::bigint[], $3::text[]) AS r (seq, error)
),
set_aside AS (
  INSERT INTO {{schema}}.outbox_dead (id, topic, key, payload, headers, created_at, failed_at, target, error)
  SELECT o.id, o.topic, o.key, o.payload, o.headers, o.created_at,
         floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint, $4, r.error
  FROM {{schema}}.outbox o JOIN refused r ON r.seq = o.seq
  ON CONFLICT (id) DO UPDATE SET failed_at = excluded.failed_at, target = excluded.target, error = excluded.error
  RETURNING id
)
-- The seq range as well as the list, so the delete walks the primary key even on a table never
-- analyzed (a fresh outbox with a large backlog: without statistics, a list alone of 500 seqs
-- is planned as a scan of the whole table; so was an OR with a subquery at any size).
DELETE FROM {{schema}}.outbox
WHERE seq = ANY ($1::bigint[] || $2::bigint[])
  AND seq BETWEEN (SELECT min(s) FROM unnest($1::bigint[] || $2::bigint[]) s)
              AND (SELECT max(s) FROM unnest($1::bigint[] || $2::bigint[]) s)
