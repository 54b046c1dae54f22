-- flow-hold-key: holds the limiter key of job $4 (of queue $2) for $3 ms from now: the key's
-- bucket (see limiterBucket) gets a flow_queues row of its own, which lane claims read
-- (flow-windows.sql). A job without a limiter key holds nothing.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text    $3 hold bigint ms    $4 job id text
INSERT INTO {{schema}}.flow_queues (queue, held_until)
SELECT j.queue || E'\nk:' || j.limiter_key, {{schema}}.now_ms($1) + $3::bigint
FROM {{schema}}.jobs AS j
WHERE j.id = $4 AND j.queue = $2 AND j.limiter_key IS NOT NULL
ON CONFLICT (queue) DO UPDATE
SET held_until = greatest(coalesce({{schema}}.flow_queues.held_until, 0), excluded.held_until)
