-- 0014_sqlite_flow_recent_starts: a claim's starts go to a small table first, and move to the
-- rate windows' log (flow_starts) together, a few hundred at a time.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- flow_starts_window (0005) is ordered by window, then time: a claim that starts jobs of ten
-- limiter keys and a rated queue adds a row at the end of eleven windows, eleven places in an
-- index of thousands of rows, so it wrote eleven index pages for eleven rows of a few bytes
-- (11.9 of the 39.3 pages a keyed claim of 50 wrote; docs/flow-control.md, "Session 14"). In
-- this table, which holds only the starts since the last move (at most a few hundred rows, three
-- or four pages), the same rows land on one or two pages; a move writes each window's rows of
-- many claims to flow_starts at once (flow.ts, recordStarts). A window's starts are the rows of
-- both tables, its count flow_counts' as before; every read and forget of a window reads both.
CREATE TABLE {{prefix}}flow_starts_recent (
  queue TEXT    NOT NULL,
  at    INTEGER NOT NULL,
  n     INTEGER NOT NULL
) STRICT;
CREATE INDEX {{prefix}}flow_starts_recent_window ON {{prefix}}flow_starts_recent (queue, at);
