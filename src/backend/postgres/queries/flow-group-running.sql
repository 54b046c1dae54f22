-- flow-group-running: active jobs of queue $1 per group (through jobs_active, a set bounded by
-- the fleet's concurrency); expired leases not yet rescued hold their slot.
--
-- $1 queue text
SELECT group_key, count(*)::int AS n
FROM {{schema}}.jobs
WHERE state = 'active' AND queue = $1 AND group_key IS NOT NULL
GROUP BY group_key
