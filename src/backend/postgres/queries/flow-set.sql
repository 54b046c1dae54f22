-- flow-set: sets a queue's limits, or (all NULL / empty) removes them; wakes the queue's workers,
-- since claims that found nothing under the old limits may find something under the new ones.
--
-- $1 queue text    $2 rate_max int    $3 rate_duration_ms bigint    $4 max_running int
-- $5 max_running_per_name jsonb    $6 unlimited boolean (every limit empty)
WITH upserted AS (
  INSERT INTO {{schema}}.flow_queues (queue, rate_max, rate_duration_ms, max_running, max_running_per_name)
  SELECT $1, $2, $3, $4, $5::jsonb WHERE NOT $6::boolean
  ON CONFLICT (queue) DO UPDATE SET rate_max = excluded.rate_max, rate_duration_ms = excluded.rate_duration_ms,
    max_running = excluded.max_running, max_running_per_name = excluded.max_running_per_name
),
cleared AS (
  -- No limits: the row goes unless a hold or keyed jobs keep it.
  UPDATE {{schema}}.flow_queues SET rate_max = NULL, rate_duration_ms = NULL, max_running = NULL,
    max_running_per_name = '{}'
  WHERE queue = $1 AND $6::boolean AND (held_until IS NOT NULL OR lanes)
),
dropped AS (
  DELETE FROM {{schema}}.flow_queues WHERE queue = $1 AND $6::boolean AND held_until IS NULL AND NOT lanes
),
window_dropped AS (
  -- A rate window outlives no rate limit.
  DELETE FROM {{schema}}.flow_starts WHERE queue = $1 AND $2::int IS NULL
),
count_dropped AS (
  DELETE FROM {{schema}}.flow_counts WHERE bucket = $1 AND $2::int IS NULL
)
SELECT pg_notify({{channel}}, $1) AS woken
