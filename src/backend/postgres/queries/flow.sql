-- flow: a job's parent and its children with their outcomes.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job id text
-- $3 queue text: only that queue's job; NULL = any queue
--
-- Returns no row when there is no such job; otherwise one row per child in the order they were
-- added (child columns NULL when it has none), each carrying the job's own flow columns and
-- observed_at, against which a due `scheduled` child is reported as `waiting`.
SELECT j.parent_id, j.parent_queue, j.on_child_failure, j.pending_children, {{schema}}.now_ms($1) AS observed_at,
       c.child_id, c.child_queue, c.child_name, c.state, c.result, c.error, k.state AS live_state, k.run_at
FROM {{schema}}.jobs j
LEFT JOIN {{schema}}.flow_children c ON c.parent_id = j.id
LEFT JOIN {{schema}}.jobs k ON k.id = c.child_id
WHERE j.id = $2 AND ($3::text IS NULL OR j.queue = $3)
ORDER BY c.position
