-- complete: marks a batch of jobs completed, each only under the exact lease it presents.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job ids text[]    $3 lease tokens bigint[]
-- $4 results text[] (JSON)
--
-- Returns (id, lease_token) of every completion applied; a lease missing from the result was
-- stale (the job was rescued, re-claimed, cancelled, settled already, or never had that token).
--
-- The fence is `lease_token = token AND state = 'active'`. Under READ COMMITTED, a row changed by
-- a concurrent rescue or cancel is re-checked against it after that change commits, so a stale
-- worker's late acknowledgement can never land. A job kept for 0 ms (removeOnComplete: true) is
-- deleted instead of updated (and its event written by removed_events); the two CTEs touch
-- disjoint rows.
--
-- The completed attempt is NOT appended to `history`: every field of its record (attempt,
-- worker, started_at, finished_at, outcome 'completed', no error) is in the row already, and the
-- backend adds the record when it reads a completed row (completedAttempt() in backend.ts).
-- Building and appending that jsonb cost a third of this statement's time per job, on the
-- hottest write of the backend (docs/performance-postgres.md). "now" is read once per statement
-- (clock), not three times per row: extract(epoch ...) is numeric arithmetic.
--
-- The fence compares state with `(SELECT 'active'::text)`, not the literal, on purpose: a literal
-- lets the planner walk the partial index jobs_active and join the batch to it, and the generic
-- plan of this prepared statement (estimates from an ANALYZE that saw no active job: 1 row, and
-- 10 for the unnest) made that a nested loop of every active job times every batch entry. With
-- 500 jobs prefetched and a batch of 500 that took 0.9 s per statement, and processing fell to
-- 1,100 jobs/s once delayed jobs sat in the table (docs/performance-postgres.md). Hidden behind an
-- InitPlan the state cannot match that index, and each batch entry is one jobs_pkey probe. (The
-- DELETE of jobs kept for 0 ms, `removed`, finds its jobs by a probe per job of the batch: see
-- `doomed`.)
WITH clock AS MATERIALIZED (
  SELECT {{schema}}.now_ms($1) AS now
),
input AS (
  SELECT * FROM unnest($2::text[], $3::bigint[], $4::text[]) AS i(id, token, result)
),
-- The batch's jobs kept for 0 ms, found by one probe per job of the batch (LIMIT 1 keeps the
-- subquery a probe the planner cannot fold into a join of its choosing), and only when some running
-- job is kept for 0 ms: the EXISTS is a one-time look at jobs_active_removed_on_complete (0013),
-- which holds only those jobs, so a deployment that never uses removeOnComplete reads one page of an
-- empty index here instead of a probe per job of every batch.
doomed AS MATERIALIZED (
  SELECT i.id, i.token, i.result, k.state, k.retain_completed_ms
  FROM input i
  CROSS JOIN LATERAL (
    SELECT r.state, r.retain_completed_ms
    FROM {{schema}}.jobs AS r
    WHERE r.id = i.id AND r.lease_token = i.token AND r.state = 'active' AND r.retain_completed_ms = 0
    LIMIT 1
  ) AS k
  WHERE EXISTS (SELECT FROM {{schema}}.jobs AS x WHERE x.state = 'active' AND x.retain_completed_ms = 0)
),
-- The delete compares the state and the retention with `doomed`'s columns: as join conditions they
-- are rechecked against a row another transaction changed meanwhile, as the fence needs, but cannot
-- narrow the planner's estimate of `jobs`. Compared as literals here they made `jobs` (or its
-- partial index) look like a row or two, on a table not analyzed yet or analyzed while no job ran,
-- and the plan compared every such running job, or every row, with every job of the batch: 1.8 s
-- per batch of 510 with 12,860 such jobs running (docs/performance-postgres.md, "Session 34").
removed AS (
  DELETE FROM {{schema}}.jobs AS j
  USING doomed d
  WHERE j.id = d.id AND j.lease_token = d.token AND j.state = d.state AND j.retain_completed_ms = d.retain_completed_ms
  RETURNING j.id, j.lease_token, j.queue, j.name, j.attempt, d.result
),
-- The event triggers (0007, 0017) fire on INSERT and UPDATE: a job deleted as it completes gets
-- its 'completed' event here, with the details the trigger would give, in the same statement.
removed_events AS (
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data, batch_events, batch_newest_at, batch_at,
                                 batch_type, batch_queue, batch_name, batch_job_id, batch_attempt, batch_data)
  SELECT r.*
  FROM (
    SELECT array_agg(c.now) AS ats, array_agg('completed'::text) AS types, array_agg(r.queue) AS queues, array_agg(r.name) AS names,
           array_agg(r.id) AS ids, array_agg(r.attempt) AS attempts, array_agg(json_build_object('result', r.result::json)) AS datas
    FROM removed r
    CROSS JOIN clock c
    -- The constant below is false when the schema's event log is off (migration event_log_switch, backend.ts).
    WHERE {{event_log}}
  ) AS a
  -- One row for the statement's events (migration event_batches).
  CROSS JOIN LATERAL {{schema}}.event_row(a.ats, a.types, a.queues, a.names, a.ids, a.attempts, a.datas) AS r
),
completed AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'completed',
      result = i.result::json,
      error = NULL,
      finished_at = c.now,
      lease_expires_at = NULL,
      stalls = 0,
      expires_at = c.now + j.retain_completed_ms
  FROM input i, clock c
  WHERE j.id = i.id AND j.lease_token = i.token AND j.state = (SELECT 'active'::text) AND j.retain_completed_ms IS DISTINCT FROM 0
  RETURNING j.id, j.lease_token
),
settled AS (
  SELECT id, lease_token FROM removed
  UNION ALL
  SELECT id, lease_token FROM completed
)
-- complete-and-claim.sql is this statement with its claim appended after `settled`: keep this
-- line the last one.
SELECT id, lease_token FROM settled
