-- 0010_pg_perf: job_counts (0007) stays bounded without maintenance.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- 0007's count triggers append one delta row per (queue, state) a statement changes, and only
-- prune (maintenance) folded them: a deployment running no maintenance grew job_counts by a few
-- rows per statement forever, and stats() summed all of them. Now the writers fold as they go:
-- every 64th statement that changes jobs (a sequence counts them, across every connection)
-- folds the table into one row per (queue, state) inside its own transaction. So the table holds at most about 64 statements' deltas plus one row per (queue, state) and per
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

-- Folds on every 64th statement that changes jobs: a fold then reads at most ~64 statements'
-- deltas (a few hundred rows, well under a millisecond), once per 64 statements; a sequence's
-- nextval writes WAL once per 32 calls. A trigger of its own rather than a line in 0007's three
-- count functions (which stay as they are); PostgreSQL fires a table's AFTER statement triggers in
-- name order, and "then" sorts after "added", "changed" and "removed", so it runs after the
-- statement's own deltas are written and folds them too. Statements that change no
-- count (heartbeats) also advance the sequence: that only brings the next fold a little closer.
CREATE FUNCTION {{schema}}.fold_job_counts_every_64() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('{{schema}}.job_counts_writes') % 64 = 0 THEN
    PERFORM {{schema}}.fold_job_counts();
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_counts_then_fold AFTER INSERT OR UPDATE OR DELETE ON {{schema}}.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.fold_job_counts_every_64();
