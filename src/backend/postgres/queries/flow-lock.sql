-- flow-lock: the flow rows of the queues a claim asks for, locked until the claim commits, and
-- the time the claim runs at (flow control, 0003_flow_control).
--
-- $1 now: bigint ms, NULL = the database clock    $2 queues text[]
--
-- Returns (queue, rate_max, rate_duration_ms, max_running, max_running_per_name, held_until, lanes,
-- lane_cursor, now)
-- per queue with a row, in queue order (one lock order for every claimer: no deadlocks).
--
-- `now` is read from clock_timestamp() above the lock, so after the row is locked: a claim that
-- queued behind another claimer's lock counts the rate window, records its starts and says when
-- the next slot opens from the time it got the lock. now_ms() (statement_timestamp) is the time
-- the statement began, before that wait: a claim that waited saw a window older than the real
-- one (fewer slots open), recorded its starts before they happened and reported the next slot
-- late by the wait, which a strict sliding window never gets back (docs/flow-control.md). Rows
-- are locked in order, so the last row's reading is after every lock (flow.ts takes the latest).
SELECT l.*, coalesce($1::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
FROM (
  SELECT f.queue, f.rate_max, f.rate_duration_ms, f.max_running, f.max_running_per_name, f.held_until, f.lanes, f.lane_cursor
  FROM {{schema}}.flow_queues AS f
  WHERE f.queue = ANY ($2::text[])
  ORDER BY f.queue
  FOR UPDATE
) AS l
