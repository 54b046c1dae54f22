-- rescue-busy-workers: workers running more than one job (buffered ones left out).
--
-- No parameters.
--
-- Returns one value (the worker id) per such worker: their expiries say nothing about which job
-- killed them (see RescueOptions.maxStalls).
SELECT worker_id FROM {{prefix}}jobs WHERE state = 'active' AND excused_token IS NOT lease_token
GROUP BY worker_id HAVING count(*) > 1
