-- replay: moves a dead job back to `waiting` with a fresh set of attempts, keeping its history
-- and last error, and wakes its queue.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job id text
-- $3 queue text: only that queue's job (another queue's is not found); NULL = any queue
--
-- Returns one row: (queue text, found boolean); queue is the replayed job's, NULL when nothing
-- was replayed.
WITH replayed AS (
  UPDATE {{schema}}.jobs
  SET state = 'waiting',
      run_at = {{schema}}.now_ms($1),
      attempt = 0,
      stalls = 0,
      replays = replays + 1,
      finished_at = NULL,
      expires_at = NULL,
      lease_expires_at = NULL
  WHERE id = $2 AND state = 'dead' AND ($3::text IS NULL OR queue = $3)
  RETURNING queue
),
woken AS (
  SELECT count(pg_notify({{channel}}, queue)) AS n FROM replayed
)
SELECT (SELECT queue FROM replayed) AS queue,
       EXISTS (SELECT 1 FROM {{schema}}.jobs WHERE id = $2 AND ($3::text IS NULL OR queue = $3)) AS found,
       (SELECT n FROM woken) AS woken
