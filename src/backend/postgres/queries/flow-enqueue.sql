-- flow-enqueue: stores the group and limiter key of new jobs and turns their queues' lane path
-- on. Runs in the enqueue's transaction, after enqueue.sql, for the jobs it stored.
--
-- $1 ids text[]    $2 lanes text[]    $3 group keys text[]    $4 group concurrencies int[]
-- $5 limiter keys text[]    $6 limiter maxima int[]    $7 limiter windows bigint[]    $8 queues text[]
WITH flows AS (
  UPDATE {{schema}}.jobs AS j
  SET lane = f.lane, group_key = f.group_key, group_concurrency = f.group_concurrency,
      limiter_key = f.limiter_key, limiter_max = f.limiter_max, limiter_duration_ms = f.limiter_duration_ms
  FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::bigint[])
       AS f(id, lane, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms)
  WHERE j.id = f.id
)
INSERT INTO {{schema}}.flow_queues (queue, lanes)
SELECT DISTINCT q, true FROM unnest($8::text[]) AS q
ON CONFLICT (queue) DO UPDATE SET lanes = true WHERE NOT {{schema}}.flow_queues.lanes
