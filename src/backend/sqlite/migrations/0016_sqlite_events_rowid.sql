-- 0016_sqlite_events_rowid: the event log's `seq` without AUTOINCREMENT.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- AUTOINCREMENT (0004) keeps the largest seq ever handed out in sqlite_sequence and rewrites that
-- row in every statement that inserts an event: a page of sqlite_sequence in the WAL of every
-- transaction that writes one (a claim's, a completion's: one frame in nine of a claim of ten) and
-- about 0.85 µs per single-row insert (docs/performance-sqlite.md, "Session 16"). What it bought:
-- a seq is never handed out twice, even after the newest events were pruned, so a reader's cursor
-- (the last seq it read) never points past events it has not seen. A plain INTEGER PRIMARY KEY
-- hands out one more than the largest seq in the table, which gives the same as long as the newest
-- event is never deleted: pruneEvents keeps it (event-log.ts), and nothing else deletes events.
--
-- The table is rebuilt with its rows. A file whose newest events were pruned before this (the
-- table's largest seq below sqlite_sequence's) keeps that position with one row of type
-- '(cursor)' at sqlite_sequence's seq, which readers skip and the next prune drops once a newer
-- event exists. The event triggers (on jobs) name the table: legacy_alter_table lets the rename
-- leave them as they are (they resolve to the new table by name), where the default would refuse
-- the rename while they name a table that is, for a moment, gone.
PRAGMA legacy_alter_table = ON;
CREATE TABLE {{prefix}}events_rebuilt (
  seq     INTEGER PRIMARY KEY,
  -- Store time in ms of the change where the row records one, else SQLite's wall clock.
  at      INTEGER NOT NULL,
  type    TEXT    NOT NULL,
  queue   TEXT    NOT NULL,
  name    TEXT    NOT NULL,
  job_id  TEXT    NOT NULL,
  attempt INTEGER NOT NULL,
  -- JSON object with the event's details (see QueueEvent in src/core/queue-events.ts), or NULL.
  data    TEXT
) STRICT;
INSERT INTO {{prefix}}events_rebuilt (seq, at, type, queue, name, job_id, attempt, data)
  SELECT seq, at, type, queue, name, job_id, attempt, data FROM {{prefix}}events ORDER BY seq;
INSERT INTO {{prefix}}events_rebuilt (seq, at, type, queue, name, job_id, attempt, data)
  SELECT s.seq, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), '(cursor)', '', '', '', 0, NULL
  FROM sqlite_sequence AS s
  WHERE s.name = '{{prefix}}events' AND s.seq > (SELECT coalesce(max(seq), 0) FROM {{prefix}}events);
DROP TABLE {{prefix}}events;
ALTER TABLE {{prefix}}events_rebuilt RENAME TO {{prefix}}events;
DELETE FROM sqlite_sequence WHERE name = '{{prefix}}events';
PRAGMA legacy_alter_table = OFF;
