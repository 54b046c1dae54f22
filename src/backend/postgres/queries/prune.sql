-- prune: deletes finished jobs past their retention deadline or beyond their queue's count
-- limits, and expired idempotency keys; at most $4 of each per call.
--
-- $1 now: bigint ms, NULL = the database clock    $2 max completed + cancelled per queue int
-- $3 max dead per queue int    $4 limit int
--
-- Returns one row: (jobs bigint, idempotency_keys bigint), the rows deleted.
--
-- By count: per queue, jobs_finished (migration pg_settle_finished_index) yields the finished rows
-- of each state newest first (completed and cancelled, counted together, as two ranges merged in
-- order), and OFFSET skips the ones to keep. Rows kept forever (expires_at NULL) are neither
-- counted nor deleted (filtered from the heap, which the walk reads for the ids anyway).
-- Concurrent prunes are harmless: a row two of them pick is deleted, and counted, once.
WITH expired AS (
  SELECT id FROM {{schema}}.jobs
  WHERE expires_at <= {{schema}}.now_ms($1)
  ORDER BY expires_at
  LIMIT $4
  FOR UPDATE SKIP LOCKED
),
beyond_count AS (
  SELECT c.id
  FROM {{schema}}.queues q
  CROSS JOIN LATERAL (
    (SELECT d.id FROM (
       (SELECT id, finished_at, seq FROM {{schema}}.jobs
        WHERE queue = q.name AND state = 'completed' AND expires_at IS NOT NULL
        ORDER BY finished_at DESC, seq DESC
        LIMIT $2 + $4)
       UNION ALL
       (SELECT id, finished_at, seq FROM {{schema}}.jobs
        WHERE queue = q.name AND state = 'cancelled' AND expires_at IS NOT NULL
        ORDER BY finished_at DESC, seq DESC
        LIMIT $2 + $4)
     ) AS d
     ORDER BY d.finished_at DESC, d.seq DESC
     OFFSET $2 LIMIT $4)
    UNION ALL
    (SELECT id FROM {{schema}}.jobs
     WHERE queue = q.name AND expires_at IS NOT NULL AND state = 'dead'
     ORDER BY finished_at DESC, seq DESC
     OFFSET $3 LIMIT $4)
  ) AS c
),
victims AS (
  SELECT id FROM expired
  UNION
  SELECT id FROM beyond_count
  LIMIT $4
),
deleted AS (
  -- The finished-state test again: a victim picked by count is not locked, and if it was
  -- replayed meanwhile, PostgreSQL re-checks this WHERE against the replayed row and skips it.
  DELETE FROM {{schema}}.jobs
  WHERE id IN (SELECT id FROM victims)
    AND expires_at IS NOT NULL AND state IN ('completed', 'cancelled', 'dead')
  RETURNING 1
),
deleted_keys AS (
  DELETE FROM {{schema}}.idempotency_keys
  WHERE key IN (
    SELECT key FROM {{schema}}.idempotency_keys
    WHERE expires_at <= {{schema}}.now_ms($1)
    LIMIT $4
    FOR UPDATE SKIP LOCKED
  )
  RETURNING 1
),
-- stats()' job counts (migration 0007): folded to one row per (queue, state) by the writers'
-- own fold (migration 0010, fold_job_counts: it skips rows a concurrent fold holds, never waits).
folded_counts AS (
  SELECT {{schema}}.fold_job_counts()
)
SELECT (SELECT count(*) FROM deleted) AS jobs, (SELECT count(*) FROM deleted_keys) AS idempotency_keys FROM folded_counts
