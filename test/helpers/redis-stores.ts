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

interface Closable {
  close(): Promise<unknown>;
}

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
  /** A fresh prefix (see testPrefix) whose keys are deleted after the file: for data a test writes before it opens a backend. */
  prefix(label?: string): string;
  /** Closes `closable` (a backend opened otherwise, e.g. by openBackend) after the test, with the others; returns it. */
  readonly closeAfterTest: <T extends Closable>(closable: T) => T;
  /** The shared server's clock (TIME), ms: what stream ids and event times are stamped with. */
  redisNow(): Promise<number>;
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
  const toClose: Closable[] = [];
  let admin: Redis | null = null;

  afterEach(async () => {
    await Promise.all(toClose.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    for (const prefix of prefixes) await deletePrefix(url, prefix);
    await admin?.quit();
  });

  const deleteAfterFile = (prefix: string): string => {
    if (!prefixes.includes(prefix)) prefixes.push(prefix);
    return prefix;
  };
  const closeAfterTest = <T extends Closable>(closable: T): T => {
    toClose.push(closable);
    return closable;
  };
  return {
    url,
    get admin() {
      admin ??= new Redis(url);
      return admin;
    },
    backend(particular = {}) {
      const prefix = deleteAfterFile(particular.prefix ?? testPrefix(options.prefixLabel));
      return closeAfterTest(new RedisBackend({ connection: url, logger: silentLogger, ...defaults, ...particular, prefix }));
    },
    prefix: (label) => deleteAfterFile(testPrefix(label)),
    closeAfterTest,
    async redisNow() {
      admin ??= new Redis(url);
      const [seconds, micros] = await admin.time();
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    },
  };
}
