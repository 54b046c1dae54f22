-- dedup: decides the jobs of a batch that carry a dedup window (rules: src/backend/dedup.ts),
-- each through dedup_window() (migration 0003), in the order given. Runs in the same transaction
-- as the enqueue.sql that then stores the jobs let through, so both commit or roll back together;
-- the window rows stay locked until then.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text[]    $3 dedup key text[]
-- $4 job id text[]    $5 ttl_ms bigint[]    $6 mode text[]    $7 payload text[] (JSON)
-- $8 run_at bigint[] (NULL = now + delay_ms)    $9 delay_ms bigint[]
-- Element i of $2..$9 describes job i. The caller sends each (queue, key) once, sorted by it, so
-- two batches lock their windows in one order and never deadlock.
--
-- Returns (ord, outcome, window_job_id) per job, ord counting from 1: outcome 'opened' means
-- "store this job"; 'dropped', 'extended' or 'replaced' mean it was taken in by the window of
-- window_job_id.
WITH clock AS MATERIALIZED (
  SELECT {{schema}}.now_ms($1) AS now
)
SELECT i.ord, d.outcome, d.window_job_id
FROM clock c,
     unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::bigint[], $9::bigint[])
       WITH ORDINALITY AS i(queue, key, job_id, ttl_ms, mode, payload, run_at, delay_ms, ord),
     LATERAL {{schema}}.dedup_window(i.queue, i.key, i.job_id, i.ttl_ms, i.mode, i.payload::json,
                                     coalesce(i.run_at, c.now + i.delay_ms), c.now, {{channel}}) AS d
ORDER BY i.ord
