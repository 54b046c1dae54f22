-- flow-lock: the flow rows of the queues a claim asks for, locked until the claim commits, and
-- the time the claim runs at (flow control, 0003_flow_control).
--
-- $1 now: bigint ms, NULL = the database clock    $2 queues text[]
--
-- Returns (queue, rate_max, rate_duration_ms, max_running, max_running_per_name, held_until, lanes,
-- lane_cursor, now)
-- per queue with a row, in queue order (one lock order for every claimer: no deadlocks).
SELECT f.queue, f.rate_max, f.rate_duration_ms, f.max_running, f.max_running_per_name, f.held_until, f.lanes, f.lane_cursor,
       {{schema}}.now_ms($1) AS now
FROM {{schema}}.flow_queues AS f
WHERE f.queue = ANY ($2::text[])
ORDER BY f.queue
FOR UPDATE
