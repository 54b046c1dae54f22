-- wake-counters: every queue's wake counter.
--
-- No parameters.
--
-- Returns (name, wake) per queue.
SELECT name, wake FROM {{prefix}}queues
