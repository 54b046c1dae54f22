-- stats-queue: one queue and whether it is paused.
--
-- ?1 queue text
--
-- Returns (name, paused 0 or 1), or no row for a queue never used.
SELECT name, paused FROM {{prefix}}queues WHERE name = ?
