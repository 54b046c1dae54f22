-- 0001_init: jobs, queues, idempotency keys and the clock function.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs. migrate.ts runs it in
-- one transaction, under the schema's advisory lock, together with its row in `migrations`.
--
-- Times are bigint milliseconds since the epoch on the backend's clock (the database's, or the
-- clock injected for tests): the contract speaks in ms, and integers compare and index cheaply.

-- The store's "now" in ms. Every statement takes the injected test clock's value as a parameter,
-- NULL in production; statement_timestamp() is stable within a statement, so every use of "now"
-- in one statement agrees, and it is the statement's time even deep inside a long transaction
-- (ctx.tx), unlike now(). A one-line SQL function: the planner inlines it.
CREATE FUNCTION {{schema}}.now_ms(injected bigint) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT coalesce(injected, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) $$;

-- One row per job, from enqueue until the pruner deletes it.
--
-- Fixed-width columns first (after the key), then variable ones: little alignment padding.
CREATE TABLE {{schema}}.jobs (
  -- The job's id, given by the producer or generated (time-sortable, so inserts land on the
  -- right-hand edge of this index). The primary key: it is the dedup key and the key every settle
  -- call presents. COLLATE "C": ids, queue and job names are compared byte-wise, which is what
  -- they are, and far cheaper than a linguistic collation in a database that has one.
  id                  text     COLLATE "C" PRIMARY KEY,
  -- Insertion order: the final tie-breaker of claim order (it is in jobs_claim) and the order of
  -- list(). Deliberately not indexed on its own: that index would cost every insert and every
  -- state change, while only list() would read it.
  seq                 bigint   GENERATED ALWAYS AS IDENTITY,
  run_at              bigint   NOT NULL,
  created_at          bigint   NOT NULL,
  -- Fencing token: +1 on every claim, never reset, so a late settle from an old claim is refused.
  lease_token         bigint   NOT NULL DEFAULT 0,
  lease_expires_at    bigint,
  started_at          bigint,
  finished_at         bigint,
  -- Retention deadline of a finished row. NULL: not finished, or kept until removed by hand.
  expires_at          bigint,
  timeout_ms          bigint,
  -- Retention once finished: NULL keeps the row forever, 0 deletes it as it finishes.
  retain_completed_ms bigint,
  retain_dead_ms      bigint,
  priority            integer  NOT NULL,
  attempt             integer  NOT NULL DEFAULT 0,
  max_attempts        integer  NOT NULL,
  -- Lease expiries in a row (the quarantine counter) and replays out of `dead`.
  stalls              integer  NOT NULL DEFAULT 0,
  replays             integer  NOT NULL DEFAULT 0,
  worker_pid          integer,
  -- Stored state. A 'scheduled' row whose run_at has passed is claimable and reported as
  -- 'waiting'; promoteDue only relabels it. text + CHECK rather than an enum type: a later state
  -- is one migration away without ALTER TYPE's transaction restrictions.
  state               text     NOT NULL CHECK (state IN ('scheduled', 'waiting', 'active', 'completed', 'dead', 'cancelled')),
  queue               text     COLLATE "C" NOT NULL,
  name                text     COLLATE "C" NOT NULL,
  -- Who ran the current or last attempt; kept after finishing for dead-letter forensics.
  worker_id           text,
  worker_host         text,
  -- JSON documents written once and read whole are `json`, not `jsonb`: json keeps the text as
  -- given (the payload comes back exactly as the producer serialised it) and only validates it
  -- on the way in, where jsonb would re-encode every value of every enqueue and completion. Both
  -- can be queried with ->, ->> and friends.
  payload             json     NOT NULL,
  -- JSON object given at enqueue as options.meta (trace context, callback URL), or NULL.
  meta                json,
  backoff             json     NOT NULL,
  progress            json,
  result              json,
  -- The last attempt's error. jsonb like history, whose entries carry the same objects.
  error               jsonb,
  -- Every finished attempt, oldest first, appended with `history || jsonb_build_array(...)`.
  history             jsonb    NOT NULL DEFAULT '[]'
) WITH (
  -- A job row is rewritten three or more times in its life (claim, heartbeats, settle) and then
  -- deleted: this is a queue, not a ledger. Leaving a fifth of every page free lets an updated
  -- row stay on its page, where heartbeats and progress reports (which touch no indexed column)
  -- become HOT updates with no index writes at all, and where page pruning reclaims the dead
  -- versions without waiting for VACUUM.
  fillfactor = 80,
  -- The defaults vacuum once 20% of the rows are dead. Here most rows are dead most of the time
  -- (a busy queue has few live rows and a stream of dead versions), so vacuum on an absolute
  -- count instead, every autovacuum round that has work, and let each run do ten times the
  -- default I/O before it pauses: a vacuum that falls behind a queue table never catches up.
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 5000,
  autovacuum_vacuum_cost_limit = 2000,
  -- Plans depend on how many rows wait and how many are finished, which swings from zero to
  -- millions and back within minutes; keep the statistics current.
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 10000
);

-- claim, waiting jobs: per queue, already in claim order, so a claim reads exactly the rows it
-- takes (plus any a concurrent claim holds locked) and stops. Partial: only rows that are
-- waiting are in it, so the index is as small as the backlog, whatever the retention. A waiting
-- row is always due (run_at <= now), so no run_at filter is needed while walking it.
CREATE INDEX jobs_claim ON {{schema}}.jobs (queue, priority, run_at, seq) WHERE state = 'waiting';

-- claim, due scheduled jobs (retries and delayed jobs whose time has come but which promoteDue
-- has not relabelled yet), and promoteDue itself: a range scan over the due ones only. Future
-- jobs are never walked past, however many there are.
CREATE INDEX jobs_scheduled ON {{schema}}.jobs (run_at) WHERE state = 'scheduled';

-- rescueExpired: the running jobs. Keyed on id, not lease_expires_at, on purpose: with no index
-- on lease_expires_at a heartbeat changes no indexed column and is a HOT update. The active set
-- is bounded by the fleet's total concurrency, so the rescuer filters it from the heap.
CREATE INDEX jobs_active ON {{schema}}.jobs (id) WHERE state = 'active';

-- prune by age: finished rows with a retention deadline, soonest first.
CREATE INDEX jobs_expires ON {{schema}}.jobs (expires_at) WHERE expires_at IS NOT NULL;

-- prune by count: per queue, newest first, one index per bucket (completed + cancelled, and
-- dead), so "everything after the newest N" is one index range. Rows kept forever (expires_at
-- NULL) are exempt from the count and in neither. Two partial indexes rather than one on
-- (queue, state = 'dead', ...): the planner folds `NOT (state = 'dead')` into `state <> 'dead'`,
-- which no longer matches such an index expression. Each row enters at most one of them.
CREATE INDEX jobs_done ON {{schema}}.jobs (queue, finished_at DESC, seq DESC)
  WHERE expires_at IS NOT NULL AND state IN ('completed', 'cancelled');
CREATE INDEX jobs_dead ON {{schema}}.jobs (queue, finished_at DESC, seq DESC)
  WHERE expires_at IS NOT NULL AND state = 'dead';

-- Every queue ever enqueued to or paused, so stats() lists queues that are empty right now and
-- claim can skip paused ones.
CREATE TABLE {{schema}}.queues (
  name   text    COLLATE "C" PRIMARY KEY,
  paused boolean NOT NULL DEFAULT false
);

-- idempotency.once(): a key is taken until expires_at. Churns like the jobs table (every key is
-- inserted, then deleted by prune), so it is vacuumed on the same absolute threshold.
CREATE TABLE {{schema}}.idempotency_keys (
  key        text   COLLATE "C" PRIMARY KEY,
  expires_at bigint NOT NULL
) WITH (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000
);

CREATE INDEX idempotency_keys_expires ON {{schema}}.idempotency_keys (expires_at);

-- One attempt's record for `history`, as a one-element array to append with `||`. In one place
-- so every transition that ends an attempt writes the same shape (AttemptRecord in core/job.ts).
-- Takes the ending attempt's columns: in an UPDATE's SET list they still hold the old row.
-- STABLE, as jsonb_build_object is: a function declared more strictly than its body is never
-- inlined, and a call per row costs more than the whole rest of a settle.
CREATE FUNCTION {{schema}}.attempt_entry(
  attempt integer, worker_id text, worker_host text, worker_pid integer, started_at bigint,
  finished_at bigint, outcome text, error jsonb
) RETURNS jsonb
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT jsonb_build_array(jsonb_build_object(
    'attempt', attempt, 'workerId', worker_id, 'host', worker_host, 'pid', worker_pid,
    'startedAt', started_at, 'finishedAt', finished_at, 'outcome', outcome, 'error', error)) $$;
