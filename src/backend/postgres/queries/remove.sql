-- remove: deletes one finished job (completed, dead or cancelled) ahead of its retention.
--
-- $1 job id text    $2 queue text: only that queue's job (another queue's is not found); NULL = any queue
--
-- Returns one row (removed boolean) when the job exists: true when it was deleted, false when it
-- has not finished (left alone); no row when there is no such job. The row lock makes the state
-- check and the delete one step.
WITH target AS MATERIALIZED (
  SELECT id, state FROM {{schema}}.jobs WHERE id = $1 AND ($2::text IS NULL OR queue = $2) FOR UPDATE
),
deleted AS (
  DELETE FROM {{schema}}.jobs AS j
  USING target t
  WHERE j.id = t.id AND t.state IN ('completed', 'dead', 'cancelled')
  RETURNING j.id
)
SELECT EXISTS (SELECT 1 FROM deleted) AS removed FROM target;
