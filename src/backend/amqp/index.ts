/**
 * `conveyor-jobs/amqp`: the RabbitMQ backend (amqplib, an optional peer dependency). Jobs are
 * persistent messages on durable quorum queues; see docs/amqp.md.
 *
 * ```ts
 * import { AmqpBackend } from "conveyor-jobs/amqp";
 * const backend = new AmqpBackend({ url: process.env.AMQP_URL });
 * ```
 */
export { AmqpBackend, type AmqpBackendOptions } from "./backend.js";
