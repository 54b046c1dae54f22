-- 0003_flow_control: per-queue flow limits, enforced by every claim (src/core/flow.ts).
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

-- Running counts per queue and name, read from the index alone; only active rows are in it.
CREATE INDEX {{prefix}}jobs_running ON {{prefix}}jobs (queue, name) WHERE state = 'active';
