-- 0002_outbox: the transactional outbox (conveyor-jobs/outbox) and its set-aside events.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- An application writes one row per event inside its own transaction (Outbox.publish); a relay
-- publishes the rows to a target and DELETES them in the transaction that claimed them. Delete
-- rather than `published_at`: measured in bench/outbox.ts (`npm run bench -- --outbox`), a
-- published_at UPDATE leaves a dead row version plus a live row the partial index must skip,
-- and the table grows until a pruner runs; a DELETE leaves only the dead version, and the table
-- stays as small as the backlog. The history of what was published lives in the target.
CREATE TABLE {{schema}}.outbox (
  -- Commit order of one key (publish() holds a per-key transaction lock while it inserts, so a
  -- later commit of a key always gets a larger seq); the relay publishes each key in seq order.
  seq        bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- Time-sortable id (core/ids.ts): the message id every target carries, for consumers' dedup.
  id         text     COLLATE "C" NOT NULL UNIQUE,
  topic      text     COLLATE "C" NOT NULL,
  -- Ordering key: events of one key reach the target in commit order. NULL: no ordering.
  key        text     COLLATE "C",
  -- json, not jsonb: the payload is relayed byte for byte as the producer serialised it.
  payload    json     NOT NULL,
  headers    json,
  -- ms since the epoch on the database clock.
  created_at bigint   NOT NULL DEFAULT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint
) WITH (
  -- A queue table: rows are inserted, then deleted within milliseconds. Vacuum it often.
  autovacuum_vacuum_scale_factor = 0.0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0.0,
  autovacuum_vacuum_insert_threshold = 5000
);

-- The claim's head-of-key test ("no earlier event of this key is still here") is one probe here.
CREATE INDEX outbox_key_seq ON {{schema}}.outbox (key, seq) WHERE key IS NOT NULL;

-- Events a target refused for good (too large, malformed for it): kept with the error, out of the
-- way of the events behind them, until replayed (back to the outbox, at the end of its key) or
-- deleted by an operator.
CREATE TABLE {{schema}}.outbox_dead (
  id         text     COLLATE "C" PRIMARY KEY,
  topic      text     COLLATE "C" NOT NULL,
  key        text     COLLATE "C",
  payload    json     NOT NULL,
  headers    json,
  created_at bigint   NOT NULL,
  failed_at  bigint   NOT NULL,
  -- Which target refused it (its description, never a password) and why.
  target     text     NOT NULL,
  error      text     NOT NULL
);
CREATE INDEX outbox_dead_failed ON {{schema}}.outbox_dead (failed_at DESC, id DESC);
