-- paused-among: which of some queues are paused.
--
-- ?1 queue names, one JSON array text
--
-- Returns one value (the name) per paused queue.
SELECT name FROM {{prefix}}queues WHERE paused = 1 AND name IN (SELECT value FROM json_each(?))
