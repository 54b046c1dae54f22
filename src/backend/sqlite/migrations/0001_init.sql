-- 0001_init: jobs, queues and idempotency keys.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_") before this runs.
-- Runs inside one IMMEDIATE transaction together with its row in {{prefix}}migrations.
--
-- One row per job. Times are ms since the epoch on the backend's clock. JSON columns hold text
-- exactly as produced by JSON.stringify, so `payload` round-trips byte for byte. STRICT makes a
-- stray REAL or TEXT in a time column an error instead of a silently mis-sorting value.
CREATE TABLE {{prefix}}jobs (
  -- Insertion order: the final tie-breaker of claim order, and the rowid (no extra index).
  seq                 INTEGER PRIMARY KEY,
  id                  TEXT    NOT NULL UNIQUE,
  queue               TEXT    NOT NULL,
  name                TEXT    NOT NULL,
  payload             TEXT    NOT NULL,
  -- JSON object given at enqueue as options.meta (trace context, callback URL), or NULL.
  meta                TEXT,
  -- Stored state. A 'scheduled' row whose run_at has passed is claimable and reported as
  -- 'waiting'; promoteDue only relabels it.
  state               TEXT    NOT NULL,
  priority            INTEGER NOT NULL,
  run_at              INTEGER NOT NULL,
  created_at          INTEGER NOT NULL,
  attempt             INTEGER NOT NULL DEFAULT 0,
  max_attempts        INTEGER NOT NULL,
  backoff             TEXT    NOT NULL,
  timeout_ms          INTEGER,
  -- Retention once finished: NULL keeps the row forever, 0 deletes it as it finishes.
  retain_completed_ms INTEGER,
  retain_dead_ms      INTEGER,
  -- Fencing token: +1 on every claim, never reset, so a late settle from an old claim is refused.
  lease_token         INTEGER NOT NULL DEFAULT 0,
  lease_expires_at    INTEGER,
  -- Who ran the current or last attempt; kept after finishing for dead-letter forensics.
  worker_id           TEXT,
  worker_host         TEXT,
  worker_pid          INTEGER,
  started_at          INTEGER,
  finished_at         INTEGER,
  -- Retention deadline of a finished row (NULL: not finished, or kept forever).
  expires_at          INTEGER,
  stalls              INTEGER NOT NULL DEFAULT 0,
  replays             INTEGER NOT NULL DEFAULT 0,
  progress            TEXT,
  result              TEXT,
  error               TEXT,
  -- JSON array of attempt records, appended with json_insert(history, '$[#]', ...).
  history             TEXT    NOT NULL DEFAULT '[]'
) STRICT;

-- Claim: per queue, already in claim order (priority, run_at, seq), so a claim reads only the
-- rows it takes. Partial, so finished rows cost nothing here and the index stays as small as the
-- backlog. `state` after `seq` does not disturb that order but makes the index covering for the
-- waiting/scheduled counts of stats(), which then never touch the table.
CREATE INDEX {{prefix}}jobs_claim ON {{prefix}}jobs (queue, priority, run_at, seq, state)
  WHERE state IN ('waiting', 'scheduled');

-- promoteDue: a range scan over future jobs only; rows enqueued as 'waiting' never enter it.
CREATE INDEX {{prefix}}jobs_due ON {{prefix}}jobs (run_at)
  WHERE state = 'scheduled';

-- rescueExpired: only running jobs, oldest lease first.
CREATE INDEX {{prefix}}jobs_lease ON {{prefix}}jobs (lease_expires_at)
  WHERE state = 'active';

-- prune by age: only finished rows with a retention deadline.
CREATE INDEX {{prefix}}jobs_expires ON {{prefix}}jobs (expires_at)
  WHERE expires_at IS NOT NULL;

-- prune by count: newest first per queue, in two buckets (completed + cancelled, and dead) so
-- one index range yields each bucket already in order. Only rows with a retention deadline are
-- in it: rows kept forever are exempt from the count and cost the pruner nothing.
CREATE INDEX {{prefix}}jobs_prunable ON {{prefix}}jobs (queue, state = 'dead', finished_at)
  WHERE expires_at IS NOT NULL;

-- The finished counts of stats(), read from the index alone.
CREATE INDEX {{prefix}}jobs_finished ON {{prefix}}jobs (queue, state)
  WHERE state IN ('completed', 'cancelled', 'dead');

-- Every queue ever enqueued to or paused, so stats() can list queues that are empty right now.
CREATE TABLE {{prefix}}queues (
  name   TEXT    PRIMARY KEY,
  paused INTEGER NOT NULL DEFAULT 0,
  -- +1 in every commit that may make jobs claimable on this queue (enqueue, retry, release,
  -- rescue, replay, resume). Processes watching the file compare it to learn WHICH queues to
  -- wake, instead of waking every worker on every foreign commit (heartbeats included).
  wake   INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;

-- idempotency.once(): a key is taken until expires_at.
CREATE TABLE {{prefix}}idempotency (
  key        TEXT    PRIMARY KEY,
  expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX {{prefix}}idempotency_expires ON {{prefix}}idempotency (expires_at);
