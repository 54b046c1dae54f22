-- 0011_sqlite_flow_unkeyed_claim: jobs_claim holds only jobs without a lane, so a waiting job is
-- in one claim index, never two.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- A job of a laned queue (one that has had groups or limiter keys: flow_queues.lanes = 1) has a
-- lane: its group or limiter key, or '' when it has neither. The lane claim (flow.ts) reads such
-- jobs from jobs_lanes (0010) alone, yet they were in jobs_claim too, so every keyed claim deleted
-- one index entry more per job than a plain one and dirtied jobs_claim's pages as well as
-- jobs_lanes' (docs/flow-control.md, "Sixth round (SQLite)"). Now the two indexes split the
-- pending jobs between them: lane NULL here, any other lane in jobs_lanes.
--
-- Queues without lanes store lane NULL in every job: their entries are the ones they had, and the
-- plain claim (claim-candidates.sql, which says `lane IS NULL` so the planner may use this index)
-- reads what it read. A laned queue never goes back to unlaned, and every job of it that may wait
-- again has a lane (0010's repair and flow.ts' backfill), so no pending job is missed by both.
-- stats() counts both indexes (stats-pending.sql); listings read jobs_pending_seq (0007), which
-- still holds every pending job. `lane` is a column of the index (always NULL in it) so that reads
-- saying `lane IS NULL` (stats, pending-queues.sql) still find everything they need in the index
-- alone: SQLite counts a column the WHERE names as one to read from the table unless the index has
-- it. Rebuilding the index reads the pending jobs once.
DROP INDEX {{prefix}}jobs_claim;
CREATE INDEX {{prefix}}jobs_claim ON {{prefix}}jobs (queue, priority, run_at, seq, state, lane)
  WHERE state IN ('waiting', 'scheduled') AND lane IS NULL;
