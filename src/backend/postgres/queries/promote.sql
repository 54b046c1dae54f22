-- promote: relabels due `scheduled` jobs as `waiting`, at most $2 per call, and wakes their
-- queues.
--
-- $1 now: bigint ms, NULL = the database clock    $2 limit int
--
-- Returns one row: (promoted bigint, queues text[]), how many were promoted and in which queues.
--
-- Claims already take due scheduled jobs, so this is housekeeping: it moves them onto the claim
-- index proper and wakes workers that would otherwise find them only at their next poll. SKIP
-- LOCKED: a concurrent claim or promoter holding a row has it in hand already.
WITH due AS (
  SELECT id FROM {{schema}}.jobs
  WHERE state = 'scheduled' AND run_at <= {{schema}}.now_ms($1)
  ORDER BY run_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
),
promoted AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'waiting'
  FROM due d
  WHERE j.id = d.id
  RETURNING j.queue
),
woken AS (
  SELECT count(pg_notify({{channel}}, queue)) AS n FROM (SELECT DISTINCT queue FROM promoted) AS q
)
SELECT (SELECT count(*) FROM promoted) AS promoted,
       ARRAY(SELECT DISTINCT queue FROM promoted) AS queues,
       (SELECT n FROM woken) AS woken
