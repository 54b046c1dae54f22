-- 0016_flow_window_scans: a laned claim reads and forgets its rate windows' starts by plain index scans.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- A claim of a laned queue with a queue rate and ten limiter keys counts eleven windows in its
-- read (flow-read-lanes.sql: flow_counts' n less the starts that left the window and are still
-- stored) and forgets those starts in its claim (flow-claim-lanes.sql). Planned inline, both
-- used the whole of flow_starts: the read a bitmap scan per window, which visits the heap page of
-- every index entry in range, dead ones included, and never marks one dead (144 entries and 12
-- heap pages per window after 10,000 claimed jobs); the claim two sequential scans of the table
-- (a hash join to find the rows, then `ctid = ANY`), which holds every start of the last second
-- of every window plus the dead rows until a vacuum (docs/flow-control.md, "Seventh round").
-- These functions read one window at a time through flow_starts_window by a plain index scan,
-- which marks the dead entries it meets so later claims step over them without the heap. The
-- settings hold for their own plans only (like flow_running, 0014).

-- For each window (buckets[i], cutoffs[i]): the starts that left it (at or before its cutoff)
-- and are still stored, and the oldest start inside it. One call for all the windows a read
-- counts (each call pays for its settings). STABLE: it reads in the caller's snapshot, the one
-- that read flow_counts' n, so n less `expired` is the window's count at that snapshot.
CREATE FUNCTION {{schema}}.flow_windows(buckets text[], cutoffs bigint[]) RETURNS TABLE (bucket text, expired bigint, oldest bigint)
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
BEGIN
  FOR i IN 1 .. coalesce(array_length(buckets, 1), 0) LOOP
    bucket := buckets[i];
    SELECT coalesce(sum(s.n), 0) INTO expired FROM {{schema}}.flow_starts AS s WHERE s.queue = buckets[i] AND s.at <= cutoffs[i];
    SELECT s.at INTO oldest FROM {{schema}}.flow_starts AS s WHERE s.queue = buckets[i] AND s.at > cutoffs[i] ORDER BY s.at LIMIT 1;
    RETURN NEXT;
  END LOOP;
END
$$;

-- Deletes the starts at or before each window's cutoff (buckets[i], cutoffs[i]) and returns them
-- (bucket, n), one window at a time: a join of the windows with flow_starts is planned as a hash
-- join over the whole table. NULL `buckets` deletes nothing.
CREATE FUNCTION {{schema}}.flow_forget(buckets text[], cutoffs bigint[]) RETURNS TABLE (bucket text, n integer)
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
BEGIN
  FOR i IN 1 .. coalesce(array_length(buckets, 1), 0) LOOP
    RETURN QUERY DELETE FROM {{schema}}.flow_starts AS s WHERE s.queue = buckets[i] AND s.at <= cutoffs[i] RETURNING s.queue::text, s.n;
  END LOOP;
END
$$;
