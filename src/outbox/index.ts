/**
 * `conveyor-jobs/outbox`: the transactional outbox and its relay.
 *
 * ```ts
 * import { PostgresOutbox, Relay, PostgresPollSource, AmqpTarget } from "conveyor-jobs/outbox";
 * const outbox = new PostgresOutbox();                       // schema "conveyor" (backend.migrate() made the table)
 * await client.query("BEGIN");
 * await client.query("INSERT INTO orders …", […]);
 * await outbox.publish(client, { topic: "order.created", key: orderId, payload: { orderId } });
 * await client.query("COMMIT");
 *
 * const relay = new Relay({ source: new PostgresPollSource({ connectionString }), target: new AmqpTarget({ url }) });
 * await relay.start();
 * ```
 *
 * Drivers load only for what you use: `pg`, `better-sqlite3`, `amqplib`, `ioredis`,
 * `pg-logical-replication` (cdc) are optional peer dependencies. See docs/outbox.md.
 */
export { PostgresOutbox, SqliteOutbox, type PostgresOutboxOptions, type SqliteOutboxOptions, type SqlExecutor } from "./writer.js";
export { DEFAULT_MAX_PAYLOAD_BYTES, type DeadOutboxEvent, type OutboxEvent, type OutboxEventInput } from "./event.js";
export {
  Relay,
  type ClaimedBatch,
  type OutboxSource,
  type RejectedEvent,
  type RelayEvents,
  type RelayOptions,
  type RelayStats,
  type SourceHooks,
  type SourceLag,
} from "./relay.js";
export { PostgresPollSource, SqlitePollSource, type PostgresPollSourceOptions, type SqlitePollSourceOptions } from "./relay-polling.js";
export { RejectedEventError, type PublishOutcome, type Target } from "./target.js";
export { QueueTarget, type QueueTargetOptions } from "./targets/queue.js";
export { AmqpTarget, type AmqpTargetOptions, type AmqpTopology } from "./targets/amqp.js";
export { RedisStreamTarget, type RedisStreamTargetOptions } from "./targets/redis-stream.js";
export { KafkaTarget, type KafkaTargetOptions } from "./targets/kafka.js";
export { WebhookTarget, type WebhookTargetOptions } from "./targets/webhook.js";
export { OutboxDeadLetters } from "./dead.js";
