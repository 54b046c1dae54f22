-- enqueue-many: stores a fixed number of jobs in one statement, skipping ids that exist.
--
-- The rows placeholder after VALUES is filled when prepared (job-inserts.ts) with that many
-- `(?, …)` rows of enqueue.sql's 14 parameters each, bound in enqueue.sql's order.
--
-- Returns the id of every row stored; a duplicate id is left out (a batch naming one id twice
-- stores its first row). One statement instead of one per job because the event log's
-- AUTOINCREMENT counter (events_added, migration 0004) is written back once per statement, and
-- the statement's setup and trigger program are paid once per batch: about twice the rows per
-- CPU second (docs/performance-sqlite.md).
INSERT INTO {{prefix}}jobs (id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts,
                            backoff, timeout_ms, retain_completed_ms, retain_dead_ms)
VALUES {{rows}}
ON CONFLICT (id) DO NOTHING
RETURNING id
