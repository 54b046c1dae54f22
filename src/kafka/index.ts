/**
 * `conveyor-jobs/kafka`: Conveyor handlers consuming a Kafka topic through a consumer group, with
 * retry and dead-letter topics (kafkajs, an optional peer dependency). Not a Backend: a log has
 * no jobs to get, list or cancel (docs/kafka.md says what the transport promises instead).
 *
 * ```ts
 * import { KafkaWorker } from "conveyor-jobs/kafka";
 * const worker = new KafkaWorker({ url: "kafka://localhost:9092", topic: "orders", groupId: "billing",
 *   handlers: { orders: async (job) => charge(job.data) } });
 * ```
 */
export { KafkaWorker, type KafkaWorkerOptions, type PartitionLag } from "./worker.js";
export { HEADER as KAFKA_HEADERS } from "./headers.js";
export { parseKafkaUrl, type KafkaLocation } from "./client.js";
