-- list: jobs newest first (or, with a reverse cursor, oldest first), one page at a time.
--
-- The filter terms present, in this order, each with its parameter: queue = ? ; name = ? ;
-- a state term (`waiting` includes due `scheduled` jobs: run_at <= ? now; `scheduled` only
-- future ones: run_at > ? now; any other state: state = 'that state', written in by list.ts) ; seq < ? (the `after` cursor) ;
-- seq > ? (the `before` cursor) ; created_at >= ? ; created_at < ?. Then ? limit and ? offset.
--
-- The WHERE clause and the direction (placeholders below) are filled by list.ts, one prepared statement per filter shape:
-- a single statement with "(? IS NULL OR col = ?)" terms would stop SQLite from using any
-- index. The cursor is a seq bound, so a page after it reads the rowid (or index) from there
-- on, whatever its depth.
--
-- Returns the rows (all columns).
SELECT * FROM {{prefix}}jobs {{where}}
ORDER BY seq {{direction}} LIMIT ? OFFSET ?
