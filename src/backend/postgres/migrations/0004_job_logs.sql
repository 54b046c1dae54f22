-- 0004_job_logs: the lines handlers write with ctx.log(line), kept with their job.
--
-- One row per line; `seq` orders a job's lines. The bounds (lines per job, characters per line)
-- are applied by queries/append-logs.sql with the rules of src/core/job-log.ts. The foreign key
-- deletes a log with its job, whoever deletes the job (prune, remove, retention 0); its index is
-- the one below, so a cascade is one index probe per deleted job.
CREATE TABLE {{schema}}.job_logs (
  seq     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id  text    COLLATE "C" NOT NULL REFERENCES {{schema}}.jobs (id) ON DELETE CASCADE,
  -- When the store received the line (ms since the epoch), and the attempt that wrote it.
  at      bigint  NOT NULL,
  attempt integer NOT NULL,
  line    text    NOT NULL
);

CREATE INDEX job_logs_job ON {{schema}}.job_logs (job_id, seq);

-- The queue event log: one row per job event (added, active, progress, completed, retrying,
-- dead, released, stalled, cancelled, replayed, waiting), written by the trigger below in the
-- transaction of the change itself, so an event exists exactly when its change committed,
-- whoever made it. Read by queries/read-events.sql (queue.events(), GET /v1/events).
--
-- Order and cursors. A sequence number is taken when a row is inserted, not when it commits,
-- so a reader that went by `seq` alone could pass a lower number whose transaction commits
-- later and never see it. Rows therefore carry their transaction id, and readers take only rows
-- of transactions older than every transaction still running (pg_snapshot_xmin), in (xid, seq)
-- order: any row that becomes visible later has a larger xid than all of those, so a cursor
-- (xid, seq) never passes an event it has not seen. The price: an event waits until every
-- transaction that began before it ended (the longest open transaction bounds the latency).
CREATE TABLE {{schema}}.events (
  xid     xid8    NOT NULL DEFAULT pg_current_xact_id(),
  seq     bigint  GENERATED ALWAYS AS IDENTITY,
  -- Store time in ms of the change where the row records one, else the database clock.
  at      bigint  NOT NULL,
  type    text    NOT NULL,
  queue   text    COLLATE "C" NOT NULL,
  name    text    COLLATE "C" NOT NULL,
  job_id  text    COLLATE "C" NOT NULL,
  attempt integer NOT NULL,
  -- JSON object with the event's details (see QueueEvent in src/core/queue-events.ts), or NULL.
  data    json,
  PRIMARY KEY (xid, seq)
) WITH (
  -- Appended to and pruned from the front, like the jobs table churns.
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 5000
);

CREATE FUNCTION {{schema}}.record_job_event() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  event_type text;
  event_at   bigint;
  details    json;
  outcome    text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    VALUES (NEW.created_at, 'added', NEW.queue, NEW.name, NEW.id, NEW.attempt,
            json_build_object('state', NEW.state, 'runAt', NEW.run_at, 'priority', NEW.priority));
    RETURN NULL;
  END IF;
  IF NEW.state IS DISTINCT FROM OLD.state THEN
    outcome := NEW.history -> -1 ->> 'outcome';
    event_type := CASE
      WHEN NEW.state IN ('active', 'completed', 'dead', 'cancelled') THEN NEW.state
      WHEN OLD.state = 'active' THEN CASE outcome WHEN 'failed' THEN 'retrying' WHEN 'released' THEN 'released' ELSE 'stalled' END
      WHEN OLD.state = 'dead' THEN 'replayed'
      ELSE 'waiting' END;
    event_at := coalesce(
      CASE WHEN NEW.state = 'active' THEN NEW.started_at
           WHEN NEW.state IN ('completed', 'dead', 'cancelled') THEN NEW.finished_at
           WHEN OLD.state = 'active' THEN (NEW.history -> -1 ->> 'finishedAt')::bigint END,
      {{schema}}.now_ms(NULL));
    details := CASE event_type
      WHEN 'active' THEN json_build_object('workerId', NEW.worker_id)
      WHEN 'completed' THEN json_build_object('result', NEW.result)
      WHEN 'retrying' THEN json_build_object('error', NEW.error, 'runAt', NEW.run_at)
      WHEN 'dead' THEN json_build_object('error', NEW.error)
      WHEN 'cancelled' THEN json_build_object('previousState', OLD.state)
      ELSE NULL END;
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    VALUES (event_at, event_type, NEW.queue, NEW.name, NEW.id, NEW.attempt, details);
  ELSIF NEW.state = 'active' AND NEW.progress IS NOT NULL
        AND NEW.progress::text IS DISTINCT FROM OLD.progress::text THEN
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    VALUES ({{schema}}.now_ms(NULL), 'progress', NEW.queue, NEW.name, NEW.id, NEW.attempt,
            json_build_object('progress', NEW.progress));
  END IF;
  RETURN NULL;
END $$;

-- Heartbeats touch neither column, so they fire nothing (and stay HOT updates).
CREATE TRIGGER jobs_events AFTER INSERT OR UPDATE OF state, progress ON {{schema}}.jobs
  FOR EACH ROW EXECUTE FUNCTION {{schema}}.record_job_event();

-- conveyor.add_job(queue, name, payload, options): enqueue from SQL — a trigger, a procedure,
-- psql — with the rules of the TypeScript enqueue (buildJobSpec in src/core/spec.ts): the same
-- option names as queue.add's JobOptions, the same defaults, the same bounds, the same id
-- format; see docs/sql-enqueue.md. A bad argument raises SQLSTATE 22023 (invalid_parameter_value)
-- naming the option, so the statement (and the trigger's transaction) fails rather than
-- storing a job no worker could read. Returns the job's id; an id that exists already stores
-- nothing (the dedup rule of enqueue) and returns that id too.

-- A time-sortable id like newJobId() (src/core/ids.ts): 10 base32 characters of ms since the
-- epoch, then 12 random ones (the TypeScript ids spend 4 of those on a per-process counter).
CREATE FUNCTION {{schema}}.new_job_id(now_ms bigint) RETURNS text
  LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  alphabet constant text := '0123456789abcdefghjkmnpqrstvwxyz';
  out text := '';
  t bigint := now_ms;
BEGIN
  FOR i IN 1..10 LOOP
    out := substr(alphabet, (t % 32)::int + 1, 1) || out;
    t := t / 32;
  END LOOP;
  FOR i IN 1..12 LOOP
    out := out || substr(alphabet, floor(random() * 32)::int + 1, 1);
  END LOOP;
  RETURN out;
END $$;

-- An integer option within bounds, or the default when absent.
CREATE FUNCTION {{schema}}.add_job_int(options jsonb, field text, path text[], low bigint, high bigint, fallback bigint)
  RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := options #> path;
BEGIN
  IF v IS NULL THEN RETURN fallback; END IF;
  IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric <> trunc((v #>> '{}')::numeric)
     OR (v #>> '{}')::numeric < low OR (v #>> '{}')::numeric > high THEN
    RAISE EXCEPTION 'conveyor.add_job: option % must be an integer from % to %; got %', field, low, high, v
      USING ERRCODE = '22023';
  END IF;
  RETURN (v #>> '{}')::bigint;
END $$;

-- Retention as removeOnComplete / removeOnFail take it: true (0), false (NULL: kept), { ageMs }.
CREATE FUNCTION {{schema}}.add_job_retention(options jsonb, field text, fallback bigint)
  RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := options -> field;
BEGIN
  IF v IS NULL THEN RETURN fallback; END IF;
  IF v = 'true'::jsonb THEN RETURN 0; END IF;
  IF v = 'false'::jsonb THEN RETURN NULL; END IF;
  IF jsonb_typeof(v) = 'object' AND v ? 'ageMs' THEN
    RETURN {{schema}}.add_job_int(options, field || '.ageMs', ARRAY[field, 'ageMs'], 0, 315360000000, NULL);
  END IF;
  RAISE EXCEPTION 'conveyor.add_job: option % must be true, false or {"ageMs": N}; got %', field, v USING ERRCODE = '22023';
END $$;

CREATE FUNCTION {{schema}}.add_job(queue text, name text, payload json DEFAULT '{}', options jsonb DEFAULT '{}')
  RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  max_delay constant bigint := 315360000000; -- 10 years in ms, MAX_DELAY of spec.ts
  latest_run_at constant bigint := 253402300799999; -- 9999-12-31T23:59:59.999Z, LATEST_RUN_AT
  max_payload_bytes constant int := 262144; -- DEFAULT_MAX_PAYLOAD_BYTES
  name_pattern constant text := '^[A-Za-z0-9][A-Za-z0-9._:\-/]{0,127}$';
  known constant text[] := ARRAY['jobId', 'delayMs', 'runAt', 'priority', 'attempts', 'backoff', 'timeoutMs',
                                 'removeOnComplete', 'removeOnFail', 'meta'];
  now bigint := {{schema}}.now_ms(NULL);
  opts jsonb := coalesce(options, '{}');
  unknown_key text;
  job_id text;
  run_at bigint;
  b jsonb;
  backoff_delay bigint;
  backoff json;
  meta json;
  inserted_state text;
BEGIN
  IF queue IS NULL OR queue !~ name_pattern THEN
    RAISE EXCEPTION 'conveyor.add_job: queue name must be 1-128 characters of letters, digits and . _ : - / starting with a letter or digit; got %', quote_nullable(queue)
      USING ERRCODE = '22023';
  END IF;
  IF name IS NULL OR name !~ name_pattern THEN
    RAISE EXCEPTION 'conveyor.add_job: job name must be 1-128 characters of letters, digits and . _ : - / starting with a letter or digit; got %', quote_nullable(name)
      USING ERRCODE = '22023';
  END IF;
  IF jsonb_typeof(opts) <> 'object' THEN
    RAISE EXCEPTION 'conveyor.add_job: options must be a JSON object; got %', opts USING ERRCODE = '22023';
  END IF;
  SELECT k INTO unknown_key FROM jsonb_object_keys(opts) AS k WHERE k <> ALL (known) LIMIT 1;
  IF unknown_key IS NOT NULL THEN
    RAISE EXCEPTION 'conveyor.add_job: unknown job option "%"; known options: %', unknown_key, array_to_string(known, ', ')
      USING ERRCODE = '22023';
  END IF;

  IF opts ? 'jobId' THEN
    job_id := opts ->> 'jobId';
    IF jsonb_typeof(opts -> 'jobId') <> 'string' OR length(job_id) NOT BETWEEN 1 AND 255 OR job_id ~ '[\x01-\x1f\x7f]' THEN
      RAISE EXCEPTION 'conveyor.add_job: option jobId must be a non-empty string of at most 255 characters, without control characters; got %', opts -> 'jobId'
        USING ERRCODE = '22023';
    END IF;
  ELSE
    job_id := {{schema}}.new_job_id(now);
  END IF;

  IF opts ? 'runAt' THEN
    -- ms since the epoch, or (SQL being SQL) an ISO 8601 timestamp string.
    IF jsonb_typeof(opts -> 'runAt') = 'string' THEN
      BEGIN
        run_at := floor(extract(epoch FROM (opts ->> 'runAt')::timestamptz) * 1000)::bigint;
      EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'conveyor.add_job: option runAt must be milliseconds since the epoch or an ISO 8601 timestamp; got %', opts -> 'runAt'
          USING ERRCODE = '22023';
      END;
      IF run_at < 0 OR run_at > latest_run_at THEN
        RAISE EXCEPTION 'conveyor.add_job: option runAt must be no earlier than 1970 and no later than 9999-12-31T23:59:59.999Z; got %', opts -> 'runAt'
          USING ERRCODE = '22023';
      END IF;
    ELSIF jsonb_typeof(opts -> 'runAt') = 'number' AND (opts ->> 'runAt')::numeric BETWEEN 0 AND latest_run_at THEN
      run_at := floor((opts ->> 'runAt')::numeric)::bigint;
    ELSE
      RAISE EXCEPTION 'conveyor.add_job: option runAt must be milliseconds since the epoch (0 to %) or an ISO 8601 timestamp; got %', latest_run_at, opts -> 'runAt'
        USING ERRCODE = '22023';
    END IF;
  ELSE
    run_at := now + {{schema}}.add_job_int(opts, 'delayMs', '{delayMs}', 0, max_delay, 0);
  END IF;

  b := opts -> 'backoff';
  IF b IS NULL THEN
    backoff := '{"type":"exponential","delayMs":1000,"maxDelayMs":60000}';
  ELSIF jsonb_typeof(b) = 'object' AND b ->> 'type' = 'exponential' THEN
    backoff_delay := {{schema}}.add_job_int(opts, 'backoff.delayMs', '{backoff,delayMs}', 0, max_delay, 1000);
    backoff := json_build_object('type', 'exponential', 'delayMs', backoff_delay,
      'maxDelayMs', {{schema}}.add_job_int(opts, 'backoff.maxDelayMs', '{backoff,maxDelayMs}', 0, max_delay, greatest(60000, backoff_delay)));
  ELSIF jsonb_typeof(b) = 'object' AND b ->> 'type' = 'fixed' THEN
    IF NOT b ? 'delayMs' THEN
      RAISE EXCEPTION 'conveyor.add_job: option backoff.delayMs must be an integer from 0 to %; got null', max_delay USING ERRCODE = '22023';
    END IF;
    backoff := json_build_object('type', 'fixed', 'delayMs', {{schema}}.add_job_int(opts, 'backoff.delayMs', '{backoff,delayMs}', 0, max_delay, NULL));
  ELSE
    RAISE EXCEPTION 'conveyor.add_job: option backoff must be {"type": "exponential" | "fixed", "delayMs": N}; got %', b USING ERRCODE = '22023';
  END IF;

  IF opts ? 'meta' THEN
    IF jsonb_typeof(opts -> 'meta') <> 'object' THEN
      RAISE EXCEPTION 'conveyor.add_job: option meta must be a plain JSON object; got %', opts -> 'meta' USING ERRCODE = '22023';
    END IF;
    meta := (opts -> 'meta')::json;
  END IF;
  IF octet_length(coalesce(payload::text, 'null')) + coalesce(octet_length(meta::text), 0) > max_payload_bytes THEN
    RAISE EXCEPTION 'conveyor.add_job: payload of job "%" (with its meta) is % bytes, over the limit of %; enqueue ids and load the data in the worker',
      name, octet_length(coalesce(payload::text, 'null')) + coalesce(octet_length(meta::text), 0), max_payload_bytes USING ERRCODE = '22023';
  END IF;

  INSERT INTO {{schema}}.jobs AS j (id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts,
                                    backoff, timeout_ms, retain_completed_ms, retain_dead_ms)
  VALUES (job_id, queue, name, coalesce(payload, 'null'::json), meta,
          CASE WHEN run_at > now THEN 'scheduled' ELSE 'waiting' END,
          {{schema}}.add_job_int(opts, 'priority', '{priority}', -1000000, 1000000, 0)::int,
          run_at, now,
          {{schema}}.add_job_int(opts, 'attempts', '{attempts}', 1, 1000000, 3)::int,
          backoff,
          {{schema}}.add_job_int(opts, 'timeoutMs', '{timeoutMs}', 1, max_delay, NULL),
          {{schema}}.add_job_retention(opts, 'removeOnComplete', 86400000),
          {{schema}}.add_job_retention(opts, 'removeOnFail', 604800000))
  ON CONFLICT (id) DO NOTHING
  RETURNING j.state INTO inserted_state;

  INSERT INTO {{schema}}.queues (name) VALUES (queue) ON CONFLICT DO NOTHING;
  IF inserted_state = 'waiting' THEN
    -- The wake-up channel of queries/enqueue.sql: "<schema name>_wake", delivered at commit.
    PERFORM pg_notify((SELECT nspname FROM pg_namespace WHERE oid = '{{schema}}'::regnamespace) || '_wake', queue);
  END IF;
  RETURN job_id;
END $$;
