-- cancel-lookup: what cancel needs to know about one job.
--
-- ?1 job id text
--
-- Returns (state, retain_completed_ms), or no row when there is no such job.
SELECT state, retain_completed_ms FROM {{prefix}}jobs WHERE id = ?
