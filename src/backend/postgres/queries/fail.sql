-- fail: records a batch of failed attempts (fenced like complete.sql): each job is retried after
-- its delay, or buried in `dead` when its delay is NULL.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job ids text[]    $3 lease tokens bigint[]
-- $4 errors text[] (JSON ErrorInfo)    $5 retry delays bigint[] (ms; NULL = dead)
--
-- Returns (id, lease_token, queue) of every failure applied, queue set only for a job that is
-- runnable again right away; leases missing from the result were stale.
--
-- A retry due at once goes straight to `waiting` (and wakes its queue); a later one waits in
-- `scheduled` until run_at. A dead job kept for 0 ms (removeOnFail: true) is deleted.
--
-- The fence compares state with `(SELECT 'active'::text)`, not the literal, on purpose: a literal
-- lets the planner walk the partial index jobs_active and join the batch to it, and the generic
-- plan of this prepared statement (estimates from an ANALYZE that saw no active job: 1 row, and
-- 10 for the unnest) made that a nested loop of every active job times every batch entry. With
-- 500 jobs prefetched and a batch of 500 that took 0.9 s per statement, and processing fell to
-- 1,100 jobs/s once delayed jobs sat in the table (docs/performance-postgres.md). Hidden behind an
-- InitPlan the state cannot match that index, and each batch entry is one jobs_pkey probe. (The
-- DELETE of jobs kept dead for 0 ms, `removed`, finds its jobs by a probe per job of the
-- batch: see `doomed`.)
WITH input AS (
  SELECT * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[]) AS i(id, token, error, delay_ms)
),
retried AS (
  UPDATE {{schema}}.jobs AS j
  SET state = CASE WHEN i.delay_ms > 0 THEN 'scheduled' ELSE 'waiting' END,
      run_at = {{schema}}.now_ms($1) + i.delay_ms,
      error = i.error::jsonb,
      lease_expires_at = NULL,
      stalls = 0,
      history = j.history || {{schema}}.attempt_entry(j.attempt, j.worker_id, j.worker_host, j.worker_pid,
                                                      j.started_at, {{schema}}.now_ms($1), 'failed', i.error::jsonb)
  FROM input i
  WHERE j.id = i.id AND j.lease_token = i.token AND j.state = (SELECT 'active'::text) AND i.delay_ms IS NOT NULL
  RETURNING j.id, j.lease_token, j.queue, j.state
),
-- The batch's jobs to bury that are kept dead for 0 ms, found and deleted as complete.sql's
-- `doomed` and `removed` do (see there), the one-time look at jobs_active_removed_on_fail (0013).
doomed AS MATERIALIZED (
  SELECT i.id, i.token, i.error, k.state, k.retain_dead_ms
  FROM input i
  CROSS JOIN LATERAL (
    SELECT r.state, r.retain_dead_ms
    FROM {{schema}}.jobs AS r
    WHERE r.id = i.id AND r.lease_token = i.token AND r.state = 'active' AND r.retain_dead_ms = 0
    LIMIT 1
  ) AS k
  WHERE i.delay_ms IS NULL
    AND EXISTS (SELECT FROM {{schema}}.jobs AS x WHERE x.state = 'active' AND x.retain_dead_ms = 0)
),
removed AS (
  DELETE FROM {{schema}}.jobs AS j
  USING doomed d
  WHERE j.id = d.id AND j.lease_token = d.token AND j.state = d.state AND j.retain_dead_ms = d.retain_dead_ms
  RETURNING j.id, j.lease_token, j.queue, j.name, j.attempt, d.error
),
-- The event triggers (0007, 0017) fire on INSERT and UPDATE: a job deleted as it dies gets its
-- 'dead' event here, with the details the trigger would give, in the same statement.
removed_events AS (
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data, batch_events, batch_newest_at, batch_at,
                                 batch_type, batch_queue, batch_name, batch_job_id, batch_attempt, batch_data)
  SELECT r.*
  FROM (
    SELECT array_agg({{schema}}.now_ms($1)) AS ats, array_agg('dead'::text) AS types, array_agg(r.queue) AS queues,
           array_agg(r.name) AS names, array_agg(r.id) AS ids, array_agg(r.attempt) AS attempts,
           array_agg(json_build_object('error', r.error::json)) AS datas
    FROM removed r
    -- The constant below is false when the schema's event log is off (migration event_log_switch, backend.ts).
    WHERE {{event_log}}
  ) AS a
  -- One row for the statement's events (migration event_batches).
  CROSS JOIN LATERAL {{schema}}.event_row(a.ats, a.types, a.queues, a.names, a.ids, a.attempts, a.datas) AS r
),
buried AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'dead',
      error = i.error::jsonb,
      finished_at = {{schema}}.now_ms($1),
      lease_expires_at = NULL,
      stalls = 0,
      expires_at = {{schema}}.now_ms($1) + j.retain_dead_ms,
      history = j.history || {{schema}}.attempt_entry(j.attempt, j.worker_id, j.worker_host, j.worker_pid,
                                                      j.started_at, {{schema}}.now_ms($1), 'dead', i.error::jsonb)
  FROM input i
  WHERE j.id = i.id AND j.lease_token = i.token AND j.state = (SELECT 'active'::text) AND i.delay_ms IS NULL
    AND j.retain_dead_ms IS DISTINCT FROM 0
  RETURNING j.id, j.lease_token
),
woken AS (
  SELECT count(pg_notify({{channel}}, queue)) AS n
  FROM (SELECT DISTINCT queue FROM retried WHERE state = 'waiting') AS q
)
SELECT id, lease_token, CASE WHEN state = 'waiting' THEN queue END AS queue FROM retried, woken
UNION ALL
SELECT id, lease_token, NULL FROM removed
UNION ALL
SELECT id, lease_token, NULL FROM buried
