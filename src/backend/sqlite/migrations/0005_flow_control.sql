-- 0005_flow_control: per-queue flow limits, enforced by every claim (src/core/flow.ts).
--
-- One row per queue with limits or a hold. A claim reads the rows of its queues inside its
-- IMMEDIATE transaction, so the counts it limits by cannot change under it; a queue without a
-- row is claimed exactly as before.
CREATE TABLE {{prefix}}flow_queues (
  queue                TEXT    PRIMARY KEY,
  -- Rate: at most rate_max starts in any window of rate_duration_ms (both NULL: no rate limit).
  rate_max             INTEGER,
  rate_duration_ms     INTEGER,
  -- Active jobs of the queue at once (NULL: no cap).
  max_running          INTEGER,
  -- JSON object, job name -> active jobs of that name at once.
  max_running_per_name TEXT    NOT NULL DEFAULT '{}',
  -- No job starts before this time, ms (RetryLater with pause: "queue"); NULL: not held.
  held_until           INTEGER
) STRICT, WITHOUT ROWID;

-- The rate window: one row per start of a rate-limited queue, at the store's time of the claim.
-- A claim deletes the rows that left the window before it counts, so the table holds at most
-- rate_max rows per queue.
CREATE TABLE {{prefix}}flow_starts (
  queue TEXT    NOT NULL,
  at    INTEGER NOT NULL
) STRICT;
CREATE INDEX {{prefix}}flow_starts_window ON {{prefix}}flow_starts (queue, at);
-- How many rows flow_starts holds per window (its `queue` column: a queue, or a limiter key's
-- bucket), kept in step by every claim, so a claim reads the count instead of counting a window
-- of thousands of starts.
CREATE TABLE {{prefix}}flow_counts (
  bucket TEXT    PRIMARY KEY,
  n      INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Running counts read the active rows through jobs_lease (0001), a set bounded by the fleet's
-- concurrency: no new index every claim and settle of every queue would have to maintain.

-- Groups and limiter keys (job options `group`, `limiter`), kept with the job. `lane` is the
-- group (or, without one, the limiter key) the job waits in; claims take turns across lanes.
ALTER TABLE {{prefix}}jobs ADD COLUMN lane TEXT;
ALTER TABLE {{prefix}}jobs ADD COLUMN group_key TEXT;
ALTER TABLE {{prefix}}jobs ADD COLUMN group_concurrency INTEGER;
ALTER TABLE {{prefix}}jobs ADD COLUMN limiter_key TEXT;
ALTER TABLE {{prefix}}jobs ADD COLUMN limiter_max INTEGER;
ALTER TABLE {{prefix}}jobs ADD COLUMN limiter_duration_ms INTEGER;
-- A queue that has (had) keyed jobs: its claims take the lane path; the last lane served.
ALTER TABLE {{prefix}}flow_queues ADD COLUMN lanes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{prefix}}flow_queues ADD COLUMN lane_cursor TEXT;

-- The waiting jobs of each lane in claim order, and the lanes themselves (a skip scan): only
-- keyed rows are in it, so queues without groups pay nothing for it.
CREATE INDEX {{prefix}}jobs_lanes ON {{prefix}}jobs (queue, lane, priority, run_at, seq)
  WHERE lane IS NOT NULL AND state IN ('waiting', 'scheduled');
-- Running jobs per group.
CREATE INDEX {{prefix}}jobs_group_running ON {{prefix}}jobs (queue, group_key)
  WHERE state = 'active' AND group_key IS NOT NULL;
