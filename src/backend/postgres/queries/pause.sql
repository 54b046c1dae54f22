-- pause: pauses or resumes a queue (idempotent); resuming wakes its workers.
--
-- $1 queue text    $2 paused boolean
--
-- Returns one row: (woken bigint).
WITH changed AS (
  INSERT INTO {{schema}}.queues (name, paused) VALUES ($1, $2)
  ON CONFLICT (name) DO UPDATE SET paused = excluded.paused
)
SELECT count(pg_notify({{channel}}, $1)) AS woken WHERE NOT $2::boolean
