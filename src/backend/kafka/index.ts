/**
 * The Kafka backend (kafkajs, an optional peer dependency): Conveyor jobs as records of Kafka
 * topics, claimed through a consumer group. Exported from `conveyor-jobs/kafka`; docs/kafka.md.
 */
export { KafkaBackend, type KafkaBackendOptions } from "./backend.js";
export { TopicNames } from "./topics.js";
