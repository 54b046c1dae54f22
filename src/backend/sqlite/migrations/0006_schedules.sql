-- 0006_schedules: cron schedules (queue.schedule, conveyor schedules, /v1/schedules).
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- One row per schedule. `last_tick_at` is the newest tick fired; a firing moves it forward and
-- enqueues the tick's jobs in one transaction, only when it still holds the value the scheduler
-- read (compare-and-set), so of several schedulers racing for a tick exactly one enqueues it,
-- and a tick whose job was pruned long ago is never fired again. Times are ms since the epoch.
CREATE TABLE {{prefix}}schedules (
  queue        TEXT    NOT NULL,
  id           TEXT    NOT NULL,
  -- The definition as JSON (cron, tz, name, data, options, misfire); see src/core/schedule.ts.
  definition   TEXT    NOT NULL,
  -- Pattern and time zone: when an upsert changes them, anchor_at moves to now.
  timing       TEXT    NOT NULL,
  -- Ticks at or before anchor_at never fire (creation, or the last pattern change).
  anchor_at    INTEGER NOT NULL,
  last_tick_at INTEGER,
  -- Bumped by every upsert; a firing computed from an older version is refused.
  version      INTEGER NOT NULL DEFAULT 1,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL,
  PRIMARY KEY (queue, id)
) STRICT;
