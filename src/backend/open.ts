/**
 * Turns a backend URL (the CLI's `--db`, `CONVEYOR_DB`) into a Backend.
 *
 * Backends are imported on demand, so a user who never opens SQLite never needs better-sqlite3
 * installed, nor pg without PostgreSQL (both are optional peer dependencies).
 */
import type { Backend } from "./contract.js";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/logger.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import { eventLogUrlParam } from "./event-log-switch.js";

/** Options of {@link openBackend}. */
export interface OpenBackendOptions {
  /** Source of "now" for the backend. Default: the system clock. */
  clock?: Clock;
  /**
   * For one call and done (the CLI's commands other than worker, serve and relay): a Redis that
   * cannot be reached fails the first call after one reconnect attempt, with one line saying what
   * could not be reached (RedisBackendOptions.failFast): a server (`redis://`, `rediss://`) instead
   * of after ioredis' 20 attempts (about 10 s), a Cluster's startup nodes (`redis-cluster://`) or
   * the sentinels (`redis-sentinel://`) instead of never. Default `false`: a long-lived process
   * waits through an outage.
   */
  failFast?: boolean;
  /**
   * Where the PostgreSQL and Redis backends report connection loss and recovery. Default: JSON
   * lines on stderr (warnings and errors).
   */
  logger?: Logger;
}

const SUPPORTED =
  "supported: sqlite:PATH (e.g. sqlite:./jobs.db or sqlite:/var/lib/app/jobs.db), sqlite::memory:, " +
  "a file path ending in .db, .sqlite or .sqlite3, sqlite:PATH[?eventLog=off], postgres://user:password@host:5432/database[?schema=NAME&eventLog=off], " +
  "redis://[user:password@]host:6379[/db][?prefix=NAME&eventLog=off] (rediss:// for TLS), " +
  "redis-cluster://host:port,host:port[?prefix=NAME], redis-sentinel://host:port,host:port/MASTER[?prefix=NAME], " +
  "amqp://user:password@host:5672/vhost[?prefix=NAME&queues=a,b&deliveryLimit=N] (RabbitMQ; amqps:// for TLS), " +
  "or kafka://host:9092[,host2:9092][?prefix=NAME&group=GROUP&queues=a,b&partition_key=queue|id] (Kafka)";

/**
 * Opens the backend a URL names:
 * - `sqlite:PATH`: a SQLite file, created and migrated if missing; `sqlite:PATH?eventLog=off`
 *   turns its event log off (SqliteBackendOptions.eventLog);
 * - `sqlite::memory:`: a private in-memory SQLite store (this process only);
 * - a bare path ending in `.db`, `.sqlite` or `.sqlite3`: the same as `sqlite:PATH`;
 * - `postgres://…` or `postgresql://…`: a PostgreSQL database, its schema (`?schema=NAME`,
 *   default "conveyor") created and migrated if missing;
 * - `redis://…` or `rediss://…` (TLS): a Redis server, keys under `?prefix=NAME` (default
 *   "conveyor"); it must run with maxmemory-policy noeviction;
 * - `redis-cluster://host:port,host:port,…`: a Redis Cluster, from these seed nodes;
 * - `redis-sentinel://host:port,host:port,…/MASTER`: the primary the sentinels monitor as MASTER,
 *   followed across failovers;
 * - `amqp://…` or `amqps://…` (TLS): RabbitMQ, queues named `<prefix>~<queue>` (`?prefix=NAME`,
 *   default "conveyor"); `?queues=a,b` names queues for stats and dead-letter commands;
 *   `?deliveryLimit=N` sets the work queues' `x-delivery-limit` (default 20);
 * - `kafka://host:9092[,host2:9092]`: Kafka, topics named `<prefix>.<queue>` (`?prefix=NAME`,
 *   default "conveyor"), consumer group `?group=NAME` (default `<prefix>.workers`); see
 *   src/backend/kafka/open.ts.
 *
 * Throws InvalidInputError for anything else.
 */
export async function openBackend(url: string, options: OpenBackendOptions = {}): Promise<Backend> {
  if (typeof url === "string" && /^postgres(?:ql)?:\/\//i.test(url)) return openPostgres(url, options);
  if (typeof url === "string" && /^rediss?(?:-cluster|-sentinel)?:\/\//i.test(url)) return openRedis(url, options);
  if (typeof url === "string" && /^amqps?:\/\//i.test(url)) return openAmqp(url, options);
  if (typeof url === "string" && /^kafka:\/\//i.test(url)) return migrated((await import("./kafka/open.js")).openKafkaBackend(url, options));
  const { path, eventLog } = sqliteTarget(url);
  const { SqliteBackend } = await importSqlite();
  try {
    return new SqliteBackend({ path, ...(eventLog !== undefined ? { eventLog } : {}), ...(options.clock ? { clock: options.clock } : {}) });
  } catch (error) {
    // better-sqlite3 loads its native addon on first use, so a binary built for another Node
    // version surfaces here rather than at import.
    if (error instanceof Error && /NODE_MODULE_VERSION|better_sqlite3\.node|bindings file/.test(error.message)) {
      throw new ConveyorError(
        `better-sqlite3's native module does not load in this Node.js (${process.version}): ` +
          `run "npm rebuild better-sqlite3" (needs g++, make and python3)`,
        { cause: error },
      );
    }
    throw error;
  }
}

/**
 * The SQLite path a URL names, with `?eventLog=on|off` taken off the end of a `sqlite:` URL (the
 * only parameter: any other text after `?` stays part of the path, which may hold a `?`).
 */
function sqliteTarget(url: string): { path: string; eventLog: boolean | undefined } {
  const path = sqlitePath(url);
  const param = url.startsWith("sqlite:") ? /\?eventLog=([^&?]*)$/.exec(path) : null;
  if (param === null) return { path, eventLog: undefined };
  const rest = path.slice(0, param.index);
  if (rest === "") throw new InvalidInputError(`sqlite: needs a path; ${SUPPORTED}`);
  return { path: rest, eventLog: eventLogUrlParam(param[1]) };
}

/** The SQLite path a URL names, or an InvalidInputError saying what is accepted. */
function sqlitePath(url: string): string {
  if (typeof url !== "string" || url.trim() === "") {
    throw new InvalidInputError(`no backend URL given; ${SUPPORTED}`);
  }
  if (url.startsWith("sqlite:")) {
    const path = url.slice("sqlite:".length);
    // "sqlite://x" reads as a URL with host "x" in some tools and as the path "//x" in others:
    // refuse it rather than guess.
    if (path.startsWith("//")) {
      throw new InvalidInputError(`write sqlite:PATH without "//"; ${SUPPORTED}`);
    }
    if (path === "") throw new InvalidInputError(`sqlite: needs a path; ${SUPPORTED}`);
    return path;
  }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme !== undefined) {
    // Only the scheme goes into the message: the rest of a server URL may hold a password.
    throw new InvalidInputError(`unsupported backend URL scheme "${scheme}://"; ${SUPPORTED}`);
  }
  if (/\.(?:db|sqlite3?)$/i.test(url)) return url;
  throw new InvalidInputError(`cannot tell which backend ${JSON.stringify(url)} names; ${SUPPORTED}`);
}

async function importSqlite(): Promise<typeof import("./sqlite/index.js")> {
  return importDriver(() => import("./sqlite/index.js"), /better-sqlite3/, "the SQLite backend", "better-sqlite3@12");
}

/**
 * Imports a backend module, turning "its driver is not installed" (drivers are optional peer
 * dependencies) into an error that says which package to install.
 */
async function importDriver<T>(load: () => Promise<T>, driver: RegExp, what: string, install: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code === "ERR_MODULE_NOT_FOUND" && error instanceof Error && driver.test(error.message)) {
      const name = install.replace(/@[^@]*$/, "");
      throw new ConveyorError(`${what} needs the ${name} package, an optional peer dependency of Conveyor: install ${install} (npm install ${install})`, {
        cause: error,
      });
    }
    throw error;
  }
}

/**
 * Takes `?name=value` out of a server URL, so the driver never sees a parameter that is ours.
 * A string that is neither a WHATWG URL nor has a query string (a unix socket path as host, say)
 * is left to the driver.
 */
function takeParam(url: string, name: string): { url: string; value: string | undefined } {
  try {
    const parsed = new URL(url);
    const value = parsed.searchParams.get(name);
    if (value === null) return { url, value: undefined };
    parsed.searchParams.delete(name);
    return { url: parsed.toString(), value };
  } catch {
    // A URL listing several hosts (postgres://a:5432,b:5432/db, redis-cluster://a:1,b:2) is no
    // WHATWG URL, but its query string reads the same way.
    const q = url.indexOf("?");
    if (q < 0) return { url, value: undefined };
    const params = new URLSearchParams(url.slice(q + 1));
    const value = params.get(name);
    if (value === null) return { url, value: undefined };
    params.delete(name);
    const rest = params.toString();
    return { url: url.slice(0, q) + (rest ? `?${rest}` : ""), value };
  }
}

/** Migrates (and checks) a new backend; closes it when that fails, so no connection leaks. */
async function migrated(backend: Backend): Promise<Backend> {
  try {
    await backend.migrate();
  } catch (error) {
    await backend.close();
    throw error;
  }
  return backend;
}

/**
 * A PostgreSQL backend for `postgres://…`, migrated. `?schema=NAME` picks the schema and is taken
 * out of the URL before node-postgres reads it; every other parameter (sslmode, …) is pg's.
 */
async function openPostgres(url: string, options: OpenBackendOptions): Promise<Backend> {
  const { url: withoutSchema, value: schema } = takeParam(url, "schema");
  const { url: connectionString, value: eventLogParam } = takeParam(withoutSchema, "eventLog");
  const eventLog = eventLogUrlParam(eventLogParam);
  const { PostgresBackend } = await importDriver(() => import("./postgres/index.js"), /['"]pg['"]/, "the PostgreSQL backend", "pg@8");
  return migrated(
    new PostgresBackend({
      connectionString,
      ...(schema !== undefined ? { schema } : {}),
      ...(eventLog !== undefined ? { eventLog } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
    }),
  );
}

/**
 * A Redis backend for `redis://…` or `rediss://…`, checked (server version, eviction policy) before
 * it is returned. `?prefix=NAME` picks the key prefix, `?wait_replicas=N[&wait_timeout_ms=T]`
 * turns on `waitForReplicas`, `?eventLog=off` turns the event log off (RedisBackendOptions.eventLog);
 * they are taken out of the URL before ioredis reads it; every other
 * part of the URL is ioredis'.
 */
async function openRedis(url: string, options: OpenBackendOptions): Promise<Backend> {
  const { url: withoutPrefix, value: prefix } = takeParam(url, "prefix");
  const { url: withoutWait, value: waitReplicas } = takeParam(withoutPrefix, "wait_replicas");
  const { url: withoutTimeout, value: waitTimeout } = takeParam(withoutWait, "wait_timeout_ms");
  const { url: connection, value: eventLogParam } = takeParam(withoutTimeout, "eventLog");
  const eventLog = eventLogUrlParam(eventLogParam);
  const { RedisBackend } = await importDriver(() => import("./redis/index.js"), /['"]ioredis['"]/, "the Redis backend", "ioredis@5");
  const waitForReplicas =
    waitReplicas !== undefined ? { replicas: Number(waitReplicas), ...(waitTimeout !== undefined ? { timeoutMs: Number(waitTimeout) } : {}) } : undefined;
  return migrated(
    new RedisBackend({
      connection,
      ...(prefix !== undefined ? { prefix } : {}),
      ...(waitForReplicas ? { waitForReplicas } : {}),
      ...(eventLog !== undefined ? { eventLog } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
      ...(options.failFast ? { failFast: true } : {}),
    }),
  );
}

/**
 * A RabbitMQ backend for `amqp://…` or `amqps://…`, connected (and the named queues declared)
 * before it is returned. `?prefix=NAME`, `?queues=a,b` and `?deliveryLimit=N` are ours and taken out of the URL;
 * every other parameter (frameMax, heartbeat, …) is amqplib's.
 */
async function openAmqp(url: string, options: OpenBackendOptions): Promise<Backend> {
  const { url: withoutPrefix, value: prefix } = takeParam(url, "prefix");
  const { url: withoutQueues, value: queues } = takeParam(withoutPrefix, "queues");
  const { url: connection, value: deliveryLimit } = takeParam(withoutQueues, "deliveryLimit");
  const { AmqpBackend } = await importDriver(() => import("./amqp/index.js"), /['"]amqplib['"]/, "the RabbitMQ backend", "amqplib@2");
  return migrated(
    new AmqpBackend({
      url: connection,
      ...(prefix !== undefined ? { prefix } : {}),
      ...(queues !== undefined ? { queues: queues.split(",").filter((q) => q !== "") } : {}),
      // Checked by the backend like the option: a positive integer.
      ...(deliveryLimit !== undefined ? { deliveryLimit: Number(deliveryLimit) } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
    }),
  );
}
