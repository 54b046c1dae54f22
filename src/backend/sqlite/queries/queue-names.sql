-- queue-names: every known queue's name, in order.
--
-- No parameters.
SELECT name FROM {{prefix}}queues ORDER BY name
