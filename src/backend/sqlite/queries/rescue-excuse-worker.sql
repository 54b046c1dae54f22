-- rescue-excuse-worker: a busy worker's expiry excuses every job it holds, also those rescued
-- later (the stall_blame migration).
--
-- ?1 worker id text
UPDATE {{prefix}}jobs SET excused_token = lease_token WHERE state = 'active' AND worker_id = ?
