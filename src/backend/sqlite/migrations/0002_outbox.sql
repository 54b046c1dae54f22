-- 0002_outbox: the transactional outbox (conveyor-jobs/outbox) and its set-aside events.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- One row per event, written by Outbox.publish inside the application's transaction and deleted
-- by the relay once the target confirmed it (see the PostgreSQL migration for why delete rather
-- than published_at). SQLite has one writer at a time, so seq order is commit order.
CREATE TABLE {{prefix}}outbox (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  id         TEXT    NOT NULL UNIQUE,
  topic      TEXT    NOT NULL,
  key        TEXT,
  payload    TEXT    NOT NULL,
  headers    TEXT,
  created_at INTEGER NOT NULL
) STRICT;

-- One relay at a time publishes from an SQLite outbox (SQLite cannot hold row locks across the
-- publish without blocking every writer): the relay holding this lease, renewed while it runs.
-- A relay that dies is replaced once its lease expires.
CREATE TABLE {{prefix}}outbox_relay (
  name        TEXT    PRIMARY KEY,
  holder      TEXT    NOT NULL,
  expires_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE {{prefix}}outbox_dead (
  id         TEXT    PRIMARY KEY,
  topic      TEXT    NOT NULL,
  key        TEXT,
  payload    TEXT    NOT NULL,
  headers    TEXT,
  created_at INTEGER NOT NULL,
  failed_at  INTEGER NOT NULL,
  target     TEXT    NOT NULL,
  error      TEXT    NOT NULL
) STRICT;
CREATE INDEX {{prefix}}outbox_dead_failed ON {{prefix}}outbox_dead (failed_at DESC, id DESC);
