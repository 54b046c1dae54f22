-- flow-hold: no job of the queue starts for $3 ms from now; a longer hold in place is kept.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text    $3 hold bigint ms
INSERT INTO {{schema}}.flow_queues (queue, held_until) VALUES ($2, {{schema}}.now_ms($1) + $3::bigint)
ON CONFLICT (queue) DO UPDATE
SET held_until = greatest(coalesce({{schema}}.flow_queues.held_until, 0), excluded.held_until)
