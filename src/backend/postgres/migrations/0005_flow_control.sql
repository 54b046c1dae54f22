-- 0005_flow_control: per-queue flow limits, enforced by every claim (src/core/flow.ts).
--
-- One row per queue with limits or a hold. The plain claim (claim.sql) skips queues that have a
-- row; their claims lock the row (flow-lock.sql), size the claim from the counts below, run
-- claim.sql for that queue and record the starts, in one transaction. The lock serialises the
-- claims of one limited queue across every worker, so no two can both see the last free slot.
CREATE TABLE {{schema}}.flow_queues (
  queue                text    COLLATE "C" PRIMARY KEY,
  -- Rate: at most rate_max starts in any window of rate_duration_ms (both NULL: no rate limit).
  rate_max             integer,
  rate_duration_ms     bigint,
  -- Active jobs of the queue at once (NULL: no cap).
  max_running          integer,
  -- Job name -> active jobs of that name at once.
  max_running_per_name jsonb   NOT NULL DEFAULT '{}',
  -- No job starts before this time, ms (RetryLater with pause: "queue"); NULL: not held.
  held_until           bigint,
  -- True once the queue has had keyed jobs (group or limiter): its claims take turns across
  -- lanes (flow.ts); lane_cursor is the last lane served.
  lanes                boolean NOT NULL DEFAULT false,
  lane_cursor          text    COLLATE "C"
);

-- The rate window: one row per start of a rate-limited queue, at the claim's time. A claim
-- deletes the rows that left the window before it counts: at most rate_max rows per queue.
CREATE TABLE {{schema}}.flow_starts (
  queue text   COLLATE "C" NOT NULL,
  at    bigint NOT NULL
);
CREATE INDEX flow_starts_window ON {{schema}}.flow_starts (queue, at);
-- How many rows flow_starts holds per window (its `queue` column: a queue, or a limiter key's
-- bucket), kept in step by every claim under the queue's flow row lock, so a claim reads the
-- count instead of counting a window of thousands of starts.
CREATE TABLE {{schema}}.flow_counts (
  bucket text    COLLATE "C" PRIMARY KEY,
  n      integer NOT NULL
);
-- Running counts come from jobs_active (0001): no new index on jobs, so claims and settles of
-- queues without limits cost what they did.

-- Groups and limiter keys (job options `group`, `limiter`), kept with the job. `lane` is the
-- group (or, without one, the limiter key) the job waits in. Columns without defaults: adding
-- them rewrites nothing.
ALTER TABLE {{schema}}.jobs
  ADD COLUMN lane                text COLLATE "C",
  ADD COLUMN group_key           text COLLATE "C",
  ADD COLUMN group_concurrency   integer,
  ADD COLUMN limiter_key         text COLLATE "C",
  ADD COLUMN limiter_max         integer,
  ADD COLUMN limiter_duration_ms bigint;

-- The waiting jobs of each lane in claim order, and the lanes themselves (a skip scan, see
-- flow-lanes.sql). Only keyed rows are in it: queues without groups pay nothing for it.
CREATE INDEX jobs_lanes ON {{schema}}.jobs (queue, lane, priority, run_at, seq)
  WHERE lane IS NOT NULL AND state IN ('waiting', 'scheduled');
