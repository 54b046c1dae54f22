/**
 * A test file's Redis stores on the shared test server (test/setup/redis.ts): each a RedisBackend
 * under a key prefix of its own, closed after its test; every prefix's keys are deleted after the
 * file. Backends are not migrated here (a Redis store needs no migration to run; tests that check
 * migrate() call it themselves).
 *
 * Call once per file at its top level, before the file's own afterEach hooks: vitest runs
 * afterEach hooks last registered first, so a file's hook that closes its workers runs before
 * this one closes the backends they use.
 */
import { Redis } from "ioredis";
import { afterAll, afterEach, inject } from "vitest";
import { RedisBackend, type RedisBackendOptions } from "../../src/backend/redis/backend.js";
import { silentLogger } from "../../src/core/logger.js";
import { deletePrefix, requireRedis, testPrefix } from "./redis.js";

export interface RedisTestStores {
  /** The shared server's URL. */
  readonly url: string;
  /** A client of the shared server for the test's own commands, made on first use and quit after the file. */
  readonly admin: Redis;
  /**
   * A backend on the shared server with the file's defaults and `options`, under a fresh prefix
   * unless `options.prefix` names one; that prefix's keys are deleted after the file.
   */
  backend(options?: Partial<RedisBackendOptions>): RedisBackend;
}

export function redisTestStores(
  defaults: Partial<RedisBackendOptions> = {},
  options: {
    /** The label of the prefixes made by `backend` (see testPrefix); default "t". */
    prefixLabel?: string;
  } = {},
): RedisTestStores {
  const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
  const prefixes: string[] = [];
  const backends: RedisBackend[] = [];
  let admin: Redis | null = null;

  afterEach(async () => {
    await Promise.all(backends.splice(0).map((b) => b.close()));
  });
  afterAll(async () => {
    for (const prefix of prefixes) await deletePrefix(url, prefix);
    await admin?.quit();
  });

  return {
    url,
    get admin() {
      admin ??= new Redis(url);
      return admin;
    },
    backend(particular = {}) {
      const prefix = particular.prefix ?? testPrefix(options.prefixLabel);
      if (!prefixes.includes(prefix)) prefixes.push(prefix);
      const backend = new RedisBackend({ connection: url, logger: silentLogger, ...defaults, ...particular, prefix });
      backends.push(backend);
      return backend;
    },
  };
}
