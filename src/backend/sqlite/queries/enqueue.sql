-- enqueue: stores one job unless a job with its id exists.
--
-- ?1 id text    ?2 queue text    ?3 name text    ?4 payload JSON text    ?5 meta JSON text or NULL
-- ?6 state text ('waiting' or 'scheduled')    ?7 priority integer    ?8 run_at ms    ?9 created_at ms
-- ?10 max_attempts integer    ?11 backoff JSON text    ?12 timeout_ms or NULL
-- ?13 retain_completed_ms or NULL (kept forever)    ?14 retain_dead_ms or NULL (kept forever)
-- (positional `?` in this order)
--
-- Changes one row when stored, none for a duplicate id.
INSERT INTO {{prefix}}jobs (id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts,
                            backoff, timeout_ms, retain_completed_ms, retain_dead_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING
