/**
 * Turns the URLs `conveyor relay` takes into a source, a target and a set-aside store. Drivers
 * are imported on demand (each is an optional peer dependency).
 */
import type Database from "better-sqlite3";
import { openBackend } from "../backend/open.js";
import { InvalidInputError } from "../core/errors.js";
import type { JobDefaults } from "../core/spec.js";
import { OutboxDeadLetters } from "./dead.js";
import type { CdcSourceOptions } from "./relay-cdc.js";
import type { OutboxSource } from "./relay.js";
import type { Target } from "./target.js";

/** Where the outbox lives, as a URL says. */
export type OutboxLocation = { kind: "postgres"; connectionString: string; schema: string } | { kind: "sqlite"; path: string; tablePrefix: string };

/** `postgres://…[?schema=S]` or `sqlite:PATH` (or a path ending in .db/.sqlite/.sqlite3). */
export function outboxLocation(dbUrl: string): OutboxLocation {
  if (/^postgres(?:ql)?:\/\//i.test(dbUrl)) {
    const parsed = new URL(dbUrl);
    const schema = parsed.searchParams.get("schema") ?? "conveyor";
    parsed.searchParams.delete("schema");
    return { kind: "postgres", connectionString: parsed.toString(), schema };
  }
  if (dbUrl.startsWith("sqlite:") && !dbUrl.startsWith("sqlite://")) return { kind: "sqlite", path: dbUrl.slice("sqlite:".length), tablePrefix: "conveyor_" };
  if (/\.(?:db|sqlite3?)$/i.test(dbUrl)) return { kind: "sqlite", path: dbUrl, tablePrefix: "conveyor_" };
  throw new InvalidInputError("the outbox lives in PostgreSQL (postgres://…[?schema=NAME]) or SQLite (sqlite:PATH); Redis has no transactions to share");
}

/** Runs the migrations that create the outbox tables (as `conveyor migrate` does). */
export async function migrateOutbox(dbUrl: string): Promise<void> {
  const backend = await openBackend(dbUrl);
  await backend.close();
}

export interface SourceChoice {
  mode: "poll" | "cdc";
  topics?: readonly string[];
  cdc?: Omit<CdcSourceOptions, "connectionString" | "schema" | "topics">;
  /** SQLite: the relay's lease on the outbox, ms (SqlitePollSource `leaseMs`; default 30000). */
  sqliteLeaseMs?: number;
}

export async function openSource(dbUrl: string, choice: SourceChoice): Promise<OutboxSource> {
  const where = outboxLocation(dbUrl);
  if (where.kind === "sqlite") {
    if (choice.mode === "cdc") throw new InvalidInputError("--mode cdc needs PostgreSQL (logical replication); SQLite relays by polling (--mode poll)");
    const { SqlitePollSource } = await import("./relay-polling.js");
    return new SqlitePollSource({
      path: where.path,
      tablePrefix: where.tablePrefix,
      topics: choice.topics ?? [],
      ...(choice.sqliteLeaseMs !== undefined ? { leaseMs: choice.sqliteLeaseMs } : {}),
    });
  }
  if (choice.mode === "cdc") {
    const { CdcSource } = await import("./relay-cdc.js");
    return new CdcSource({ connectionString: where.connectionString, schema: where.schema, topics: choice.topics ?? [], ...choice.cdc });
  }
  const { PostgresPollSource } = await import("./relay-polling.js");
  return new PostgresPollSource({ connectionString: where.connectionString, schema: where.schema, topics: choice.topics ?? [] });
}

/** Options of the targets, as the CLI collects them. */
export interface TargetChoice {
  /** conveyor+…: the queue receiving the jobs. */
  queue?: string;
  jobDefaults?: JobDefaults;
  /** amqp: exchange, and a quorum queue to declare. */
  exchange?: string;
  declareQueue?: string;
  bindingKey?: string;
  /** redis: stream name prefix and approximate MAXLEN. */
  streamPrefix?: string;
  maxLen?: number;
  /** webhook: signing secret(s) and SSRF allow-list. */
  webhookSecrets?: string[];
  allow?: string[];
  /** kafka: topic = prefix + the event's topic (unless the URL names one topic). */
  topicPrefix?: string;
}

const TARGETS =
  "amqp://user:pass@host:5672/vhost (RabbitMQ), redis://host:6379 (Redis Streams), https://… (webhook), " +
  "kafka://host:9092[,host:9092][/topic] (Kafka), or conveyor+postgres://… / conveyor+redis://… / conveyor+sqlite:PATH (a Conveyor queue; give --queue)";

export async function openTarget(url: string, choice: TargetChoice = {}): Promise<Target> {
  if (/^amqps?:\/\//i.test(url)) {
    const { AmqpTarget } = await import("./targets/amqp.js");
    return new AmqpTarget({
      url,
      ...(choice.exchange ? { exchange: choice.exchange } : {}),
      ...(choice.declareQueue ? { declare: { queue: choice.declareQueue, ...(choice.bindingKey ? { bindingKey: choice.bindingKey } : {}) } } : {}),
    });
  }
  if (/^rediss?:\/\//i.test(url)) {
    const { RedisStreamTarget } = await import("./targets/redis-stream.js");
    return new RedisStreamTarget({
      url,
      ...(choice.streamPrefix ? { streamPrefix: choice.streamPrefix } : {}),
      ...(choice.maxLen ? { maxLen: choice.maxLen } : {}),
    });
  }
  if (/^https?:\/\//i.test(url)) {
    if (!choice.webhookSecrets?.length)
      throw new InvalidInputError("a webhook target needs a signing secret: --webhook-secret whsec_… (or CONVEYOR_WEBHOOK_SECRET)");
    const { WebhookTarget } = await import("./targets/webhook.js");
    return new WebhookTarget({ url, secrets: choice.webhookSecrets, ssrf: { allow: choice.allow ?? [] } });
  }
  if (/^kafka:\/\//i.test(url)) {
    const { KafkaTarget } = await import("./targets/kafka.js");
    return new KafkaTarget({ url, ...(choice.topicPrefix ? { topicPrefix: choice.topicPrefix } : {}) });
  }
  if (url.startsWith("conveyor+")) {
    if (!choice.queue) throw new InvalidInputError("a Conveyor queue target needs --queue NAME");
    const backend = await openBackend(url.slice("conveyor+".length));
    const { QueueTarget } = await import("./targets/queue.js");
    try {
      return new QueueTarget({ backend, queue: choice.queue, closeBackend: true, ...(choice.jobDefaults ? { jobDefaults: choice.jobDefaults } : {}) });
    } catch (error) {
      await backend.close();
      throw error;
    }
  }
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1];
  throw new InvalidInputError(`unsupported target${scheme ? ` scheme "${scheme}:"` : ""}; ${TARGETS}`);
}

/** The set-aside store of the outbox at `dbUrl`, and how to close it. */
export async function openDeadLetters(dbUrl: string): Promise<{ dead: OutboxDeadLetters; close: () => Promise<void> }> {
  const where = outboxLocation(dbUrl);
  if (where.kind === "sqlite") {
    const { default: DatabaseCtor } = await import("better-sqlite3");
    const db: Database.Database = new DatabaseCtor(where.path, { fileMustExist: true, timeout: 5_000 });
    return { dead: OutboxDeadLetters.sqlite(db, { tablePrefix: where.tablePrefix }), close: async () => void db.close() };
  }
  const { default: pg } = await import("pg");
  const pool = new pg.Pool({ connectionString: where.connectionString, max: 2 });
  pool.on("error", () => undefined);
  return { dead: OutboxDeadLetters.postgres(pool, { schema: where.schema }), close: () => pool.end() };
}
