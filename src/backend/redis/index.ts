/**
 * `conveyor-jobs/redis`: the Redis backend (ioredis, an optional peer dependency).
 *
 * ```ts
 * import { RedisBackend } from "conveyor-jobs/redis";
 * const backend = new RedisBackend({ connection: process.env.REDIS_URL });
 * ```
 */
export { RedisBackend, type RedisBackendOptions } from "./backend.js";
export { ReplicaWaitError, type WaitForReplicas } from "./replica-wait.js";
