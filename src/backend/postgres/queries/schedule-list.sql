-- schedule-list: every schedule, or those of one queue, ordered by queue then id.
--
-- $1 queue text, NULL for every queue
SELECT queue, id, definition, anchor_at, last_tick_at, version, created_at, updated_at
FROM {{schema}}.schedules
WHERE $1::text IS NULL OR queue = $1::text
ORDER BY queue, id
