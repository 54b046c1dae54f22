/**
 * vitest globalSetup: the Redis server shared by every test file that needs one.
 *
 * With REDIS_URL set, tests use that server (each test under its own key prefix). Otherwise a
 * throwaway `redis-server` is started on a free port, without persistence, and killed after the
 * run. Tests read the URL with `inject("redisUrl")`. Tests that kill, restart or reconfigure a
 * server start private ones (testkit/servers/redis.ts).
 *
 * When neither is possible (no REDIS_URL, no redis-server installed), the other tests still run:
 * `redisUrl` is empty and `redisUnavailable` says why, for the Redis tests to report.
 */
import type { TestProject } from "vitest/node";
import { findRedisServer, startThrowawayRedis } from "../../testkit/servers/redis.js";
import { provideSharedServer } from "./shared-server.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The Redis tests use; "" when none is available. */
    redisUrl: string;
    /** Why there is no Redis ("" when there is one). */
    redisUnavailable: string;
  }
}

export default function setup(project: TestProject): Promise<() => Promise<void>> {
  return provideSharedServer(project, {
    envVar: "REDIS_URL",
    urlKey: "redisUrl",
    unavailableKey: "redisUnavailable",
    installed: () => findRedisServer() !== null,
    missing: "no Redis: set REDIS_URL, or install redis-server (apt-get install redis-server, brew install redis)",
    start: () => startThrowawayRedis(),
  });
}
