-- stats-queues: every known queue and whether it is paused.
--
-- No parameters.
--
-- Returns (name, paused 0 or 1), by name.
SELECT name, paused FROM {{prefix}}queues ORDER BY name
