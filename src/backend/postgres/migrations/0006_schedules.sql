-- 0006_schedules: cron schedules (queue.schedule, conveyor schedules, /v1/schedules).
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- One row per schedule. `last_tick_at` is the newest tick fired; a firing moves it forward and
-- enqueues the tick's jobs in one transaction, only when it still holds the value the scheduler
-- read (compare-and-set), so of several schedulers racing for a tick exactly one enqueues it,
-- and a tick whose job was pruned long ago is never fired again. Times are ms since the epoch.
CREATE TABLE {{schema}}.schedules (
  queue        text    COLLATE "C" NOT NULL,
  id           text    COLLATE "C" NOT NULL,
  -- The definition as JSON text (cron, tz, name, data, options, misfire); see src/core/schedule.ts.
  definition   text    NOT NULL,
  -- Pattern and time zone: when an upsert changes them, anchor_at moves to now.
  timing       text    NOT NULL,
  -- Ticks at or before anchor_at never fire (creation, or the last pattern change).
  anchor_at    bigint  NOT NULL,
  last_tick_at bigint,
  -- Bumped by every upsert; a firing computed from an older version is refused.
  version      integer NOT NULL DEFAULT 1,
  created_at   bigint  NOT NULL,
  updated_at   bigint  NOT NULL,
  PRIMARY KEY (queue, id)
);
