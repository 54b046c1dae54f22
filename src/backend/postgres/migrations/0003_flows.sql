-- 0003_flows: dedup windows (JobOptions.dedup).
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- One row per (queue, dedup key) whose window was ever opened: the job it was opened for and when
-- it ends (ms, store clock). An ended window is as good as none; prune-dedup.sql deletes ended
-- rows. The rules are in src/backend/dedup.ts.
CREATE TABLE {{schema}}.dedup_windows (
  queue      text   COLLATE "C" NOT NULL,
  key        text   COLLATE "C" NOT NULL,
  job_id     text   COLLATE "C" NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (queue, key)
);

CREATE INDEX dedup_windows_expires ON {{schema}}.dedup_windows (expires_at);

-- Decides one job that carries a dedup window, in the caller's transaction, holding the window's
-- row lock until it commits: a concurrent producer with the same key waits here, then sees this
-- one's outcome. Returns ('opened', the job's id) when the caller must store the job (the window
-- now belongs to it), or ('dropped' | 'extended' | 'replaced', the window's job id).
--
-- The row is made to exist first (INSERT ... ON CONFLICT DO NOTHING waits for a concurrent
-- inserter of the same key to commit or roll back) and then locked: a lock on a missing row would
-- lock nothing, and two producers would both open a window. VOLATILE, so each statement inside
-- sees what the one before it (and a producer it waited for) committed.
CREATE FUNCTION {{schema}}.dedup_window(
  p_queue text, p_key text, p_job_id text, p_ttl_ms bigint, p_mode text, p_payload json, p_run_at bigint,
  p_now bigint, p_channel text
) RETURNS TABLE (outcome text, window_job_id text)
  LANGUAGE plpgsql VOLATILE
  AS $$
DECLARE
  w record;
BEGIN
  LOOP
    INSERT INTO {{schema}}.dedup_windows (queue, key, job_id, expires_at)
    VALUES (p_queue, p_key, p_job_id, p_now + p_ttl_ms)
    ON CONFLICT (queue, key) DO NOTHING;
    IF FOUND THEN
      RETURN QUERY SELECT 'opened'::text, p_job_id;
      RETURN;
    END IF;
    SELECT d.job_id, d.expires_at INTO w
    FROM {{schema}}.dedup_windows d WHERE d.queue = p_queue AND d.key = p_key
    FOR UPDATE;
    EXIT WHEN FOUND;
    -- Pruned between the two statements: start again.
  END LOOP;

  IF w.expires_at > p_now THEN
    IF p_mode = 'drop' THEN
      RETURN QUERY SELECT 'dropped'::text, w.job_id;
      RETURN;
    END IF;
    IF p_mode = 'extend' THEN
      UPDATE {{schema}}.dedup_windows SET expires_at = p_now + p_ttl_ms WHERE queue = p_queue AND key = p_key;
      RETURN QUERY SELECT 'extended'::text, w.job_id;
      RETURN;
    END IF;
    -- replace: only a job that has not started (a claim holding its row makes this wait, then
    -- re-check the state).
    UPDATE {{schema}}.jobs
    SET payload = p_payload,
        run_at = p_run_at,
        state = CASE WHEN p_run_at > p_now THEN 'scheduled' ELSE 'waiting' END
    WHERE id = w.job_id AND state IN ('waiting', 'scheduled');
    IF FOUND THEN
      UPDATE {{schema}}.dedup_windows SET expires_at = p_now + p_ttl_ms WHERE queue = p_queue AND key = p_key;
      IF p_run_at <= p_now THEN PERFORM pg_notify(p_channel, p_queue); END IF;
      RETURN QUERY SELECT 'replaced'::text, w.job_id;
      RETURN;
    END IF;
  END IF;

  UPDATE {{schema}}.dedup_windows SET job_id = p_job_id, expires_at = p_now + p_ttl_ms
  WHERE queue = p_queue AND key = p_key;
  RETURN QUERY SELECT 'opened'::text, p_job_id;
END
$$;

-- Flows (queue.addFlow; rules in src/backend/flows.ts). A child names its parent; a parent counts
-- the children that have not settled and keeps its failure policy ('fail' | 'continue').
ALTER TABLE {{schema}}.jobs
  ADD COLUMN pending_children integer NOT NULL DEFAULT 0,
  ADD COLUMN parent_id text COLLATE "C",
  ADD COLUMN parent_queue text COLLATE "C",
  ADD COLUMN on_child_failure text CHECK (on_child_failure IN ('fail', 'continue'));
ALTER TABLE {{schema}}.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_state_check
  CHECK (state IN ('scheduled', 'waiting', 'waiting-children', 'active', 'completed', 'dead', 'cancelled'));

-- Cancelling a parent finds its children through this; only jobs of flows are in it.
CREATE INDEX jobs_parent ON {{schema}}.jobs (parent_id) WHERE parent_id IS NOT NULL;

-- One row per (parent, child), written with the flow; the child's outcome is copied in when it
-- settles (state NULL until then), so the parent reads its children's results even after the
-- children were pruned. Deleted with the parent.
CREATE TABLE {{schema}}.flow_children (
  parent_id   text    COLLATE "C" NOT NULL,
  child_id    text    COLLATE "C" NOT NULL,
  -- Order the children were added in.
  position    integer NOT NULL,
  child_queue text    COLLATE "C" NOT NULL,
  child_name  text    COLLATE "C" NOT NULL,
  state       text,
  result      json,
  error       jsonb,
  PRIMARY KEY (parent_id, child_id)
);

-- A child's final settle, by whatever statement (complete, fail, rescue, cancel), releases its
-- parent inside that same statement: an AFTER trigger runs before the statement ends, in its
-- transaction, so no crash can fall between the two. The parent's row lock orders children that
-- settle at once in different transactions: each sees the count the one before it left. Only a
-- child's first settle counts for its parent (a replayed child settles again: its outcome record
-- is updated, the parent left alone). The parent becomes 'scheduled' at its own run_at (claimable
-- at once unless its delay has not passed) and its queue is woken, or becomes 'dead' at once when
-- the child failed and its policy is 'fail'. NEW.finished_at is the settle's "now" on the store
-- clock (the injected one in tests).
CREATE FUNCTION {{schema}}.flow_child_settled() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
DECLARE
  fails boolean := NEW.state <> 'completed';
  released text;
BEGIN
  UPDATE {{schema}}.jobs AS p
  SET pending_children = p.pending_children - 1,
      state = CASE WHEN fails AND p.on_child_failure = 'fail' THEN 'dead'
                   WHEN p.pending_children = 1 THEN 'scheduled'
                   ELSE p.state END,
      error = CASE WHEN fails AND p.on_child_failure = 'fail'
                   THEN jsonb_build_object('name', 'ChildFailedError',
                                           'message', 'child ' || OLD.id || ' (' || OLD.name || ' in queue ' || OLD.queue
                                                      || ') ended ' || NEW.state || '; the flow''s policy is "fail"',
                                           'stack', NULL)
                   ELSE p.error END,
      finished_at = CASE WHEN fails AND p.on_child_failure = 'fail' THEN NEW.finished_at ELSE p.finished_at END,
      expires_at = CASE WHEN fails AND p.on_child_failure = 'fail' THEN NEW.finished_at + p.retain_dead_ms ELSE p.expires_at END
  WHERE p.id = OLD.parent_id AND p.state = 'waiting-children'
    AND EXISTS (SELECT 1 FROM {{schema}}.flow_children c
                WHERE c.parent_id = OLD.parent_id AND c.child_id = OLD.id AND c.state IS NULL)
  RETURNING p.state INTO released;
  IF released = 'scheduled' THEN
    -- The channel every backend of this schema listens on (see backend.ts).
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_wake', OLD.parent_queue);
  END IF;
  UPDATE {{schema}}.flow_children AS c
  SET state = NEW.state,
      result = CASE WHEN NEW.state = 'completed' THEN NEW.result END,
      error = CASE WHEN NEW.state = 'dead' THEN NEW.error END
  WHERE c.parent_id = OLD.parent_id AND c.child_id = OLD.id;
  RETURN NULL;
END
$$;

CREATE TRIGGER flow_child_settled
  AFTER UPDATE OF state ON {{schema}}.jobs
  FOR EACH ROW
  WHEN (OLD.parent_id IS NOT NULL
        AND NEW.state IN ('completed', 'dead', 'cancelled')
        AND OLD.state NOT IN ('completed', 'dead', 'cancelled'))
  EXECUTE FUNCTION {{schema}}.flow_child_settled();

-- Cancelling a parent that waits for its children cancels the children that have not started
-- (and, through this same trigger, theirs). Running children carry on; their settles are recorded.
CREATE FUNCTION {{schema}}.flow_parent_cancelled() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  UPDATE {{schema}}.jobs
  SET state = 'cancelled', finished_at = NEW.finished_at, expires_at = NEW.finished_at + retain_completed_ms
  WHERE parent_id = NEW.id AND state IN ('waiting', 'scheduled', 'waiting-children');
  RETURN NULL;
END
$$;

CREATE TRIGGER flow_parent_cancelled
  AFTER UPDATE OF state ON {{schema}}.jobs
  FOR EACH ROW
  WHEN (NEW.state = 'cancelled' AND OLD.state = 'waiting-children')
  EXECUTE FUNCTION {{schema}}.flow_parent_cancelled();

CREATE FUNCTION {{schema}}.flow_parent_deleted() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  DELETE FROM {{schema}}.flow_children WHERE parent_id = OLD.id;
  RETURN NULL;
END
$$;

CREATE TRIGGER flow_parent_deleted
  AFTER DELETE ON {{schema}}.jobs
  FOR EACH ROW
  WHEN (OLD.on_child_failure IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.flow_parent_deleted();
