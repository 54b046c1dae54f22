-- queue-signal: bumps a queue's wake counter (recording the queue if new).
--
-- ?1 queue text
--
-- Returns one value: the counter after the bump. Other processes watching the file wake the
-- queues whose counter moved (wakeups.ts).
INSERT INTO {{prefix}}queues (name, wake) VALUES (?, 1)
ON CONFLICT (name) DO UPDATE SET wake = wake + 1
RETURNING wake
