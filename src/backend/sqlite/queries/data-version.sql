-- data-version: SQLite's counter of commits by OTHER connections to this file.
--
-- No parameters.
--
-- Returns one value, an integer that changes only when another connection has committed since
-- this one last looked: the watcher (wakeups.ts) reads the wake counters only then.
PRAGMA data_version
