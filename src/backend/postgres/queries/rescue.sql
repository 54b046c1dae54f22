-- rescue: fails the attempt of every running job whose lease expired ("lease expired"), at most
-- $3 per call, oldest expiry first.
--
-- $1 now: bigint ms, NULL = the database clock    $2 max_stalls int    $3 limit int
-- $4 the lease-expired error, text (JSON ErrorInfo)
-- $5 the quarantine message, text, with {stalls} standing for the number of expiries in a row
--
-- Returns (id, queue, name, state, attempt, worker_id) per job rescued; state is `waiting` when it
-- will run again, `dead` when its attempts ran out or it was quarantined (its lease expired
-- max_stalls times in a row: it keeps killing its workers). An expiry counts toward the stalls
-- only when the job had started (it was not held unstarted in a prefetch buffer: excused_token,
-- the stall_blame migration) and was the only started job of its worker: a worker that died running
-- several does not say which one killed it, and innocent jobs must not be quarantined with the
-- guilty one. Such a worker's other active jobs are excused here too, so those whose leases
-- expire later are not blamed once they are the last ones left.
--
-- FOR UPDATE SKIP LOCKED: any number of rescuers can run at once, each job is rescued by one,
-- and a rescuer never waits behind a heartbeat that is extending the very lease it looks at.
WITH busy AS MATERIALIZED (
  -- Workers running more than one job (one read of the active jobs, not one per expiry).
  SELECT worker_id FROM {{schema}}.jobs
  WHERE state = 'active' AND excused_token IS DISTINCT FROM lease_token
  GROUP BY worker_id HAVING count(*) > 1
),
expired AS MATERIALIZED (
  SELECT x.id,
         x.worker_id,
         s.stall,
         s.stall = 1 AND x.stalls + 1 >= $2 AS quarantined,
         (s.stall = 1 AND x.stalls + 1 >= $2) OR x.attempt >= x.max_attempts AS dead,
         -- Retention 0 deletes it; NULL (kept forever) must not make this NULL.
         x.retain_dead_ms IS NOT DISTINCT FROM 0 AS drop_when_dead
  FROM {{schema}}.jobs AS x
  CROSS JOIN LATERAL (
    SELECT CASE WHEN x.excused_token IS NOT DISTINCT FROM x.lease_token OR x.worker_id IN (SELECT worker_id FROM busy)
                THEN 0 ELSE 1 END AS stall
  ) AS s
  WHERE x.state = 'active' AND x.lease_expires_at <= {{schema}}.now_ms($1)
  ORDER BY x.lease_expires_at
  LIMIT $3
  FOR UPDATE OF x SKIP LOCKED
),
siblings AS MATERIALIZED (
  -- The other active jobs of busy workers with an expiry here: not blamed either when their
  -- leases expire later. SKIP LOCKED: a job another rescuer holds is that rescuer's to judge
  -- (waiting for it could deadlock two rescuers excusing each other's rows).
  SELECT j.id FROM {{schema}}.jobs AS j
  WHERE j.state = 'active'
    AND j.worker_id IN (SELECT worker_id FROM busy)
    AND j.worker_id IN (SELECT worker_id FROM expired)
    AND j.id NOT IN (SELECT id FROM expired)
  FOR UPDATE SKIP LOCKED
),
excused AS (
  UPDATE {{schema}}.jobs AS j
  SET excused_token = j.lease_token
  FROM siblings AS b
  WHERE j.id = b.id
),
requeued AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'waiting',
      run_at = {{schema}}.now_ms($1),
      error = $4::jsonb,
      lease_expires_at = NULL,
      stalls = j.stalls + e.stall,
      history = j.history || {{schema}}.attempt_entry(j.attempt, j.worker_id, j.worker_host, j.worker_pid,
                                                      j.started_at, {{schema}}.now_ms($1), 'lease-expired', $4::jsonb)
  FROM expired e
  WHERE j.id = e.id AND NOT e.dead
  RETURNING j.id, j.queue, j.name, j.state, j.attempt, j.worker_id
),
buried AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'dead',
      error = CASE WHEN e.quarantined
                   THEN jsonb_build_object('name', 'LeaseExpiredError',
                                           'message', replace($5::text, '{stalls}', (j.stalls + e.stall)::text),
                                           'stack', NULL)
                   ELSE $4::jsonb END,
      finished_at = {{schema}}.now_ms($1),
      lease_expires_at = NULL,
      stalls = j.stalls + e.stall,
      expires_at = {{schema}}.now_ms($1) + j.retain_dead_ms,
      history = j.history || {{schema}}.attempt_entry(j.attempt, j.worker_id, j.worker_host, j.worker_pid,
                                                      j.started_at, {{schema}}.now_ms($1), 'lease-expired', $4::jsonb)
  FROM expired e
  WHERE j.id = e.id AND e.dead AND NOT e.drop_when_dead
  RETURNING j.id, j.queue, j.name, j.state, j.attempt, j.worker_id
),
removed AS (
  DELETE FROM {{schema}}.jobs AS j
  USING expired e
  WHERE j.id = e.id AND e.dead AND e.drop_when_dead
  RETURNING j.id, j.queue, j.name, 'dead'::text AS state, j.attempt, j.worker_id, j.stalls
),
-- The event triggers fire on INSERT and UPDATE: a job deleted as it dies gets its 'dead' event
-- here, with the error `buried` would have stored.
removed_events AS (
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data, batch_events, batch_newest_at, batch_at,
                                 batch_type, batch_queue, batch_name, batch_job_id, batch_attempt, batch_data)
  SELECT r.*
  FROM (
    SELECT array_agg({{schema}}.now_ms($1)) AS ats, array_agg('dead'::text) AS types, array_agg(r.queue) AS queues,
           array_agg(r.name) AS names, array_agg(r.id) AS ids, array_agg(r.attempt) AS attempts,
           array_agg(json_build_object('error', CASE WHEN e.quarantined
                                                     THEN jsonb_build_object('name', 'LeaseExpiredError',
                                                                             'message', replace($5::text, '{stalls}', (r.stalls + e.stall)::text),
                                                                             'stack', NULL)
                                                     ELSE $4::jsonb END)) AS datas
    FROM removed r
    JOIN expired e ON e.id = r.id
    -- The constant below is false when the schema's event log is off (migration event_log_switch, backend.ts).
    WHERE {{event_log}}
  ) AS a
  -- One row for the statement's events (migration event_batches).
  CROSS JOIN LATERAL {{schema}}.event_row(a.ats, a.types, a.queues, a.names, a.ids, a.attempts, a.datas) AS r
),
woken AS (
  SELECT count(pg_notify({{channel}}, queue)) AS n FROM (SELECT DISTINCT queue FROM requeued) AS q
)
SELECT id, queue, name, state, attempt, worker_id FROM requeued, woken
UNION ALL
SELECT id, queue, name, state, attempt, worker_id FROM buried
UNION ALL
SELECT id, queue, name, state, attempt, worker_id FROM removed
