-- 0010_pg_perf: job_counts (0007) stays bounded without maintenance.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- 0007's count triggers append one delta row per (queue, state) a statement changes, and only
-- prune (maintenance) folded them: a deployment running no maintenance grew job_counts by a few
-- rows per statement forever, and stats() summed all of them. Now the writers fold as they go:
-- every FOLD_EVERY-th statement that writes deltas (a sequence counts them, across every
-- connection) folds the table into one row per (queue, state) inside its own transaction. So the
-- table holds at most about FOLD_EVERY statements' deltas plus one row per (queue, state) and per
-- transaction still open, whatever runs or does not run maintenance.
--
-- The fold locks the rows it folds with FOR UPDATE SKIP LOCKED: two folds at once (or a fold
-- beside prune's) each take the rows the other does not hold and never wait for each other; a
-- delta not yet committed is invisible to it and stays. The sums it inserts become visible with
-- the deletions, at its commit, so every snapshot still sums to the counts of the jobs it sees.
CREATE SEQUENCE {{schema}}.job_counts_writes;

CREATE FUNCTION {{schema}}.fold_job_counts() RETURNS void
  LANGUAGE sql AS $$
  WITH picked AS (
    SELECT ctid FROM {{schema}}.job_counts FOR UPDATE SKIP LOCKED
  ),
  folded AS (
    DELETE FROM {{schema}}.job_counts
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
    RETURNING queue, state, n
  )
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, sum(n) FROM folded GROUP BY queue, state HAVING sum(n) <> 0
$$;

-- Called by the three count triggers after their INSERT: folds on every 64th call. 64: a fold
-- reads at most ~64 statements' deltas (a few hundred rows, well under a millisecond), once per
-- 64 statements; a sequence's nextval writes WAL once per 32 calls.
CREATE FUNCTION {{schema}}.count_written() RETURNS void
  LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('{{schema}}.job_counts_writes') % 64 = 0 THEN
    PERFORM {{schema}}.fold_job_counts();
  END IF;
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.count_added_jobs() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, count(*) FROM added_jobs GROUP BY queue, state;
  PERFORM {{schema}}.count_written();
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.count_changed_jobs() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  -- Rows whose state (and queue) did not change cancel out: a heartbeat adds nothing.
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, sum(n)
  FROM (SELECT queue, state, -1 AS n FROM changed_before
        UNION ALL
        SELECT queue, state, 1 FROM changed_after) AS d
  GROUP BY queue, state
  HAVING sum(n) <> 0;
  -- A statement that changed no count (a heartbeat, a progress write) wrote nothing to fold.
  IF FOUND THEN
    PERFORM {{schema}}.count_written();
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.count_removed_jobs() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, -count(*) FROM removed_jobs GROUP BY queue, state;
  PERFORM {{schema}}.count_written();
  RETURN NULL;
END $$;
