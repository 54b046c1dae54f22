-- 0014_flow_unkeyed_claim: jobs_claim holds only jobs without a lane (no group, no limiter key).
--
-- A laned queue's claim (flow-read-lanes.sql) takes its keyed jobs lane by lane from jobs_lanes
-- (0005) and its unkeyed jobs from jobs_claim. With every waiting job in jobs_claim, finding the
-- unkeyed ones meant walking past the keyed ones: the read looked at the first 256 waiting jobs
-- of the queue and kept those without a lane, so a queue of keyed jobs paid 256 rows (and the dead
-- entries of its claimed jobs before them) on every claim to find none, and more as the backlog
-- grew (docs/flow-control.md, "Fifth round"). With keyed jobs out of jobs_claim that walk reads
-- unkeyed jobs only.
--
-- Queues without groups or limiter keys store lane NULL in every job: their index entries are the
-- ones they had, and the plain claim (claim.sql, which now says `lane IS NULL` so the planner may
-- use this index) reads what it read. Keyed jobs only live in laned queues, which the plain claim
-- never reads (their flow_queues row sends them to the lane path).
--
-- An unkeyed job keeps lane NULL whenever it is enqueued (before or after its queue's first keyed
-- job), retried or replayed, so no race between an unkeyed enqueue and a queue turning laned
-- exists: the lane path finds every unkeyed job here. Rebuilding the index reads the waiting jobs
-- once; writes to jobs wait for it (a migration runs in one transaction).
DROP INDEX {{schema}}.jobs_claim;
CREATE INDEX jobs_claim ON {{schema}}.jobs (queue, priority, run_at, seq) WHERE state = 'waiting' AND lane IS NULL;

-- The active jobs of a flow-limited queue per name and per group: what every claim of such a
-- queue reads for maxRunning, maxRunningPerName and group concurrency (flow-counts.sql,
-- flow-read-lanes.sql), under the queue's flow row lock.
--
-- Read through jobs_active (0001) by a plain index scan, never a bitmap scan: a bitmap scan
-- visits the heap page of every entry, dead ones included, and never marks one dead, so each
-- claim paid for every job that finished since the last vacuum (10,182 entries, 1,481 heap
-- pages, 2-9 ms per claim after 19,000 jobs; docs/flow-control.md, "Fifth round"). An index scan
-- marks the dead entries it meets, and later claims step over them without reading the heap.
-- The settings hold for this function's own plan only.
CREATE FUNCTION {{schema}}.flow_running(q text) RETURNS TABLE (kind text, key text, n integer)
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
BEGIN
  RETURN QUERY
    SELECT CASE WHEN grouping(j.name) = 0 THEN 'name' ELSE 'group' END, coalesce(j.name, j.group_key)::text, count(*)::integer
    FROM {{schema}}.jobs AS j
    WHERE j.state = 'active' AND j.queue = q
    GROUP BY GROUPING SETS ((j.name), (j.group_key))
    HAVING grouping(j.name) = 0 OR j.group_key IS NOT NULL;
END
$$;
