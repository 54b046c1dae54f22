-- job-state: one job's stored state.
--
-- ?1 job id text
--
-- Returns one value, the state, or no row when there is no such job.
SELECT state FROM {{prefix}}jobs WHERE id = ?
