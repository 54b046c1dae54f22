-- lease-state: the state and lease token of some jobs, read with a fresh snapshot.
--
-- $1 job ids text[]
--
-- Returns (id, state, current_token) per job that exists. heartbeat uses it when its own snapshot
-- is too old to explain a lease it could not extend: under READ COMMITTED the UPDATE rechecks a
-- row that a concurrent transaction (a cancel, a rescue) changed, but the SELECT of the same
-- statement still sees the row as it was before that transaction committed.
SELECT id, state, lease_token AS current_token FROM {{schema}}.jobs WHERE id = ANY($1::text[]);
