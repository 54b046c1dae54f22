-- replay: sends a dead job back to `waiting` with fresh attempts.
--
-- ?1 now ms (its new run_at)    ?2 job id text
--
-- Returns one value, the job's queue (to wake), when replayed; no row when the job is not dead.
-- `error` is kept: until the replayed job's next attempt settles, the last error is still the
-- one that killed it, which is what an operator looking at a replayed job wants to see.
UPDATE {{prefix}}jobs
SET state = 'waiting', run_at = ?, attempt = 0, stalls = 0, replays = replays + 1,
    finished_at = NULL, expires_at = NULL, lease_expires_at = NULL
WHERE id = ? AND state = 'dead'
RETURNING queue
