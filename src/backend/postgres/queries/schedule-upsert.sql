-- schedule-upsert: creates or replaces a cron schedule (src/core/schedule.ts has the rules).
--
-- $1 now: bigint ms, NULL = the database clock
-- $2 queue text    $3 id text    $4 definition text (JSON)    $5 timing text (tz + pattern)
--
-- Returns the schedule's row; `inserted` is true for a new one. An update keeps last_tick_at,
-- bumps version (so a firing computed from the old definition is refused), and moves anchor_at to
-- now only when the timing changed: the new pattern starts at its next tick, the old one's missed
-- ticks are not replayed.
INSERT INTO {{schema}}.schedules AS s (queue, id, definition, timing, anchor_at, last_tick_at, version, created_at, updated_at)
SELECT $2, $3, $4, $5, c.now, NULL, 1, c.now, c.now FROM (SELECT {{schema}}.now_ms($1) AS now) AS c
ON CONFLICT (queue, id) DO UPDATE SET
  definition = excluded.definition,
  anchor_at = CASE WHEN s.timing = excluded.timing THEN s.anchor_at ELSE excluded.anchor_at END,
  timing = excluded.timing,
  version = s.version + 1,
  updated_at = excluded.updated_at
RETURNING s.queue, s.id, s.definition, s.anchor_at, s.last_tick_at, s.version, s.created_at, s.updated_at,
          (xmax = 0) AS inserted
