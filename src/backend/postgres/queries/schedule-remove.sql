-- schedule-remove: deletes one schedule. Jobs it already enqueued stay.
--
-- $1 queue text    $2 id text
--
-- Returns one row when a schedule was deleted, none when there was none.
DELETE FROM {{schema}}.schedules WHERE queue = $1 AND id = $2 RETURNING 1 AS removed
