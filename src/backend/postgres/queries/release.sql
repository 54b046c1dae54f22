-- release: hands a batch of running jobs back to `waiting` without using an attempt (shutdown),
-- fenced like complete.sql.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job ids text[]    $3 lease tokens bigint[]
--
-- Returns (id, lease_token, queue) of every release applied. The job keeps its run_at, so it goes back
-- to the head of its queue, and its lease token, so the next claim's token is still greater.
--
-- The fence compares state with `(SELECT 'active'::text)`, not the literal, on purpose: a literal
-- lets the planner walk the partial index jobs_active and join the batch to it, and the generic
-- plan of this prepared statement (estimates from an ANALYZE that saw no active job: 1 row, and
-- 10 for the unnest) made that a nested loop of every active job times every batch entry. With
-- 500 jobs prefetched and a batch of 500 that took 0.9 s per statement, and processing fell to
-- 1,100 jobs/s once delayed jobs sat in the table (docs/performance-postgres.md). Hidden behind an
-- InitPlan the state cannot match that index, and each batch entry is one jobs_pkey probe.
WITH input AS (
  SELECT * FROM unnest($2::text[], $3::bigint[]) AS i(id, token)
),
released AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'waiting',
      attempt = j.attempt - 1,
      lease_expires_at = NULL,
      stalls = 0,
      history = j.history || {{schema}}.attempt_entry(j.attempt, j.worker_id, j.worker_host, j.worker_pid,
                                                      j.started_at, {{schema}}.now_ms($1), 'released', NULL)
  FROM input i
  WHERE j.id = i.id AND j.lease_token = i.token AND j.state = (SELECT 'active'::text)
  RETURNING j.id, j.lease_token, j.queue
),
woken AS (
  SELECT count(pg_notify({{channel}}, queue)) AS n FROM (SELECT DISTINCT queue FROM released) AS q
)
SELECT id, lease_token, queue FROM released, woken
