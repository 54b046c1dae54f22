-- latest-event-cursor: a cursor at the end of the event log ("from now on"): before every event
-- of a transaction still running or not yet begun, after every event already readable.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xid
