-- cancel: cancels one job that has not finished.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job id text
-- $3 queue text: only that queue's job (another queue's is "no such job"); NULL = any queue
--
-- Returns one row, (state), the job's state before the call, or no row when there is no such
-- job. The caller reads the outcome from it: waiting, scheduled, waiting-children or active were cancelled;
-- completed, dead or cancelled were already finished and are left alone.
--
-- A waiting, scheduled or waiting-children job becomes `cancelled` (deleted at once with retention 0). An active
-- job becomes `cancelled` too, keeping its lease token so its worker's late settle is refused;
-- its row outlives the lease even with retention 0, so the worker's next heartbeat can still
-- tell "cancelled" from "gone". The row lock taken first makes the state read and the change
-- one step.
WITH target AS MATERIALIZED (
  SELECT id, state, retain_completed_ms FROM {{schema}}.jobs WHERE id = $2 AND ($3::text IS NULL OR queue = $3) FOR UPDATE
),
removed AS (
  DELETE FROM {{schema}}.jobs AS j
  USING target t
  WHERE j.id = t.id AND t.state IN ('waiting', 'scheduled', 'waiting-children') AND t.retain_completed_ms = 0
),
cancelled_pending AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'cancelled',
      finished_at = {{schema}}.now_ms($1),
      expires_at = {{schema}}.now_ms($1) + j.retain_completed_ms
  FROM target t
  WHERE j.id = t.id AND t.state IN ('waiting', 'scheduled', 'waiting-children') AND t.retain_completed_ms IS DISTINCT FROM 0
),
cancelled_active AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'cancelled',
      finished_at = {{schema}}.now_ms($1),
      lease_expires_at = NULL,
      -- greatest() ignores NULLs; a job kept forever (NULL retention) must stay NULL.
      expires_at = CASE WHEN j.retain_completed_ms IS NULL THEN NULL
                        ELSE greatest({{schema}}.now_ms($1) + j.retain_completed_ms, j.lease_expires_at) END,
      history = j.history || {{schema}}.attempt_entry(j.attempt, j.worker_id, j.worker_host, j.worker_pid,
                                                      j.started_at, {{schema}}.now_ms($1), 'cancelled', NULL)
  FROM target t
  WHERE j.id = t.id AND t.state = 'active'
)
SELECT state FROM target
