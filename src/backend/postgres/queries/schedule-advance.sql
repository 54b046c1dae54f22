-- schedule-advance: the compare-and-set of a firing. Runs in the transaction that then enqueues
-- the tick's jobs (PostgresBackend.scheduleFire), so the cursor and the jobs commit together.
--
-- $1 tick_at bigint (the new last_tick_at)    $2 queue text    $3 id text
-- $4 version integer (the one the firing was computed from)
-- $5 expected last_tick_at bigint, NULL for "never fired"
--
-- Returns one row when applied, none when another scheduler fired first or the schedule changed.
-- Two transactions racing: the second waits on the row lock, then re-checks the WHERE against
-- the committed row (READ COMMITTED), finds last_tick_at moved, and updates nothing.
UPDATE {{schema}}.schedules
SET last_tick_at = $1::bigint
WHERE queue = $2 AND id = $3 AND version = $4::integer
  AND last_tick_at IS NOT DISTINCT FROM $5::bigint
  AND (last_tick_at IS NULL OR last_tick_at < $1::bigint)
RETURNING 1 AS applied
