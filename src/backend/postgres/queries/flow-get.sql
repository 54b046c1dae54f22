-- flow-get: one queue's flow row.
--
-- $1 queue text
SELECT rate_max, rate_duration_ms, max_running, max_running_per_name, held_until
FROM {{schema}}.flow_queues WHERE queue = $1
