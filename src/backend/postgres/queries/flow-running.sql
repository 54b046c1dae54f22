-- flow-running: active jobs of one queue per name (expired leases not yet rescued included:
-- they hold their slot until the rescue). Reads the active rows through jobs_active, a set
-- bounded by the fleet's concurrency.
--
-- $1 queue text
SELECT name, count(*)::int AS n
FROM {{schema}}.jobs
WHERE state = 'active' AND queue = $1
GROUP BY name
