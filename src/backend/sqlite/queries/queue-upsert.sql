-- queue-upsert: records a queue (listed by stats and prune) without waking it.
--
-- ?1 queue text
INSERT OR IGNORE INTO {{prefix}}queues (name) VALUES (?)
