/**
 * `conveyor-jobs/kafka`: Conveyor handlers consuming a Kafka topic through a consumer group, with
 * retry and dead-letter topics (kafkajs, an optional peer dependency); and `KafkaBackend`, the same
 * log behind the `Backend` contract (what a log cannot do is declared in its capabilities).
 * docs/kafka.md says what each promises.
 *
 * ```ts
 * import { KafkaWorker } from "conveyor-jobs/kafka";
 * const worker = new KafkaWorker({ url: "kafka://localhost:9092", topic: "orders", groupId: "billing",
 *   handlers: { orders: async (job) => charge(job.data) } });
 * ```
 */
export { KafkaWorker, type KafkaWorkerOptions } from "./worker.js";
export { KafkaBackend, type KafkaBackendOptions } from "../backend/kafka/index.js";
export type { LagSource, PartitionLag } from "./lag.js";
export { HEADER as KAFKA_HEADERS } from "./headers.js";
export { parseKafkaUrl, type KafkaLocation } from "./client.js";
