-- lease-state: the state and lease token of one job, to tell why a lease was lost.
--
-- ?1 job id text
--
-- Returns (state, lease_token), or no row when the job is gone.
SELECT state, lease_token FROM {{prefix}}jobs WHERE id = ?
