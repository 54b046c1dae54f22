-- pause: pauses or resumes a queue (idempotent), recording the queue if new.
--
-- ?1 queue text    ?2 paused: 1 pauses, 0 resumes
INSERT INTO {{prefix}}queues (name, paused) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused
