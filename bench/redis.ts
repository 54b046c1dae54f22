/**
 * Redis: Conveyor and BullMQ side by side on one Redis (a throwaway one without persistence from
 * testkit/servers/redis.ts, or REDIS_URL). Every measurement uses a key prefix of its own, deleted
 * afterwards, so neither system sees the other's keys and a shared server is left as found.
 */
import { Queue as BullQueue, Worker as BullWorker, type ConnectionOptions } from "bullmq";
import { Redis } from "ioredis";
import { RedisBackend } from "../src/backend/redis/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { deletePrefix, startThrowawayRedis, type ThrowawayRedis } from "../testkit/servers/redis.js";
import {
  type BenchSizes,
  fmt,
  chunks,
  conveyorLatency,
  conveyorThroughput,
  deferred,
  FILL_CHUNK,
  latencySamples,
  machineLine,
  noopJobs,
  peerVersions,
  pairedRatio,
  printReport,
  rate,
  type Report,
  runSideBySide,
  sleep,
  type Subject,
  type WithFreshBackend,
} from "./lib.js";

/** Conveyor's `prefetch` in processing runs (jobs claimed ahead of free slots). */
const PREFETCH = 100;

/** Key prefixes, one per measurement, deleted after it. */
export class Prefixes {
  private n = 0;

  constructor(private readonly url: string) {}

  /** Runs `fn` with a fresh prefix and deletes every key under it afterwards. */
  async with<T>(label: string, fn: (prefix: string) => Promise<T>): Promise<T> {
    const prefix = `bench-${label}-${process.pid}-${this.n++}`;
    try {
      return await fn(prefix);
    } finally {
      await deletePrefix(this.url, prefix);
    }
  }
}

/** `used_memory` from INFO memory: what the server holds in all. */
async function usedMemory(admin: Redis): Promise<number> {
  return Number(/used_memory:(\d+)/.exec(await admin.info("memory"))?.[1] ?? NaN);
}

/** Sum of MEMORY USAGE (exact: SAMPLES 0) over every key under `prefix`. */
async function keyBytes(admin: Redis, prefix: string): Promise<number> {
  let total = 0;
  for (const pattern of [`${prefix}:*`, `{${prefix}:*`]) {
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      cursor = next;
      const pipeline = admin.pipeline();
      for (const key of keys) pipeline.call("MEMORY", "USAGE", key, "SAMPLES", "0");
      for (const [error, bytes] of (await pipeline.exec()) ?? []) if (!error) total += Number(bytes);
    } while (cursor !== "0");
  }
  return total;
}

/**
 * Bytes per waiting job: enqueue one job first (so the queue's fixed keys exist), then `jobs`
 * more, and divide the growth by `jobs`, by two measures: INFO used_memory (everything the server
 * allocated, allocator overhead included) and the sum of MEMORY USAGE over the prefix's keys.
 */
async function memoryPerJob(
  admin: Redis,
  prefix: string,
  jobs: number,
  enqueue: (start: number, n: number) => Promise<unknown>,
): Promise<Record<string, number>> {
  await enqueue(0, 1);
  const used0 = await usedMemory(admin);
  const keys0 = await keyBytes(admin, prefix);
  for (const [start, length] of chunks(jobs, FILL_CHUNK)) await enqueue(1 + start, length);
  const used1 = await usedMemory(admin);
  const keys1 = await keyBytes(admin, prefix);
  return { "INFO used_memory delta": (used1 - used0) / jobs, "MEMORY USAGE sum": (keys1 - keys0) / jobs };
}

/** `eventLog: false` measures Conveyor with its event log off (RedisBackendOptions.eventLog, `?eventLog=off`). */
function conveyor(url: string, prefixes: Prefixes, admin: Redis, eventLog = true): Subject {
  const backendFor = async (prefix: string) => {
    const backend = new RedisBackend({ connection: url, prefix, logger: silentLogger, eventLog });
    await backend.migrate();
    return backend;
  };
  const withFreshBackend: WithFreshBackend = (fn) =>
    prefixes.with("conveyor", async (prefix) => {
      const backend = await backendFor(prefix);
      try {
        return await fn(backend);
      } finally {
        await backend.close();
      }
    });
  return {
    name: eventLog ? "Conveyor" : "Conveyor log off",
    // Conveyor's documented setting for many short jobs (`prefetch`); BullMQ has none to set:
    // its worker already fetches the next job in the script that completes the last one.
    ...conveyorThroughput(withFreshBackend, PREFETCH),
    latency: (samples) =>
      prefixes.with("conveyor", async (prefix) => {
        // A second connection: the wake-up goes through Redis pub/sub, as BullMQ's does.
        const workerBackend = await backendFor(prefix);
        return conveyorLatency(workerBackend, new RedisBackend({ connection: url, prefix, logger: silentLogger, eventLog }), samples);
      }),
    memory: (jobs) =>
      prefixes.with("conveyor", async (prefix) => {
        const backend = await backendFor(prefix);
        const q = new Queue("bench", { backend });
        const out = await memoryPerJob(admin, prefix, jobs, (start, n) => q.addBulk(noopJobs(start, n)));
        await backend.close();
        return out;
      }),
  };
}

/** BullMQ's connection options for the Redis at `url` (`maxRetriesPerRequest: null` is required for its workers). */
export function bullConnection(url: string): ConnectionOptions {
  const parsed = new URL(url);
  return {
    host: parsed.hostname,
    port: Number(parsed.port || 6379),
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    maxRetriesPerRequest: null,
  };
}

/**
 * BullMQ 6.7 with its defaults, which are already its fast path: its open-source worker has no
 * batching to turn on (batches are a BullMQ Pro feature), it takes the next job in the same Lua
 * script that completes the last one, and an idle worker waits in a blocking BZPOPMIN, woken the
 * moment a job is added. `concurrency` is its per-worker concurrency; completed jobs are kept
 * (as Conveyor keeps them) and the events stream is capped at 10,000, as its docs start from.
 * `maxRetriesPerRequest: null` is required for its workers.
 */
export function bullmq(url: string, prefixes: Prefixes, admin: Redis): Subject {
  const connection = bullConnection(url);
  const queueFor = async (prefix: string) => {
    const q = new BullQueue("bench", { connection, prefix });
    await q.waitUntilReady();
    return q;
  };
  return {
    name: "BullMQ",
    bulk: (n) =>
      prefixes.with("bullmq", async (prefix) => {
        const q = await queueFor(prefix);
        const all = noopJobs(0, n);
        const r = await rate(n, () => q.addBulk(all));
        await q.close();
        return r;
      }),
    single: (n) =>
      prefixes.with("bullmq", async (prefix) => {
        const q = await queueFor(prefix);
        const r = await rate(n, async () => {
          for (let i = 0; i < n; i++) await q.add("noop", { i });
        });
        await q.close();
        return r;
      }),
    processing: (n, concurrency) =>
      prefixes.with("bullmq", async (prefix) => {
        const q = await queueFor(prefix);
        for (const [start, length] of chunks(n, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
        const done = deferred();
        let completed = 0;
        let worker: BullWorker | undefined;
        // "completed" fires once the job has been moved to completed in Redis.
        const r = await rate(n, async () => {
          worker = new BullWorker("bench", async () => undefined, { connection, prefix, concurrency });
          worker.on("completed", () => {
            if (++completed === n) done.resolve();
          });
          await done.promise;
        });
        await worker?.close();
        await q.close();
        return r;
      }),
    latency: (samples) =>
      prefixes.with("bullmq", async (prefix) => {
        const q = await queueFor(prefix);
        let onStart: (() => void) | null = null;
        const worker = new BullWorker("bench", async () => void onStart?.(), { connection, prefix, concurrency: 10 });
        await worker.waitUntilReady();
        await sleep(200);
        const out = await latencySamples(
          [],
          samples,
          (i) => q.add("noop", { i }),
          (fn) => (onStart = fn),
        );
        await worker.close();
        await q.close();
        return out;
      }),
    memory: (jobs) =>
      prefixes.with("bullmq", async (prefix) => {
        const q = await queueFor(prefix);
        const out = await memoryPerJob(admin, prefix, jobs, (start, n) => q.addBulk(noopJobs(start, n)));
        await q.close();
        return out;
      }),
  };
}

/** Which Conveyor subjects a run measures: the event log on (the default), off, or both side by side. */
export type EventLogChoice = "on" | "off" | "both";

/**
 * `options.only: "memory"` runs only the memory figure (bench/redis-memory.ts): seconds, not minutes.
 * `options.eventLog` (`--event-log on|off|both`, default on): with both, Conveyor with the log on
 * and with it off run interleaved beside BullMQ, and a second table gives the log-off subject's
 * ratios to BullMQ.
 */
export async function main(sizes: BenchSizes, options: { only?: "memory"; eventLog?: EventLogChoice } = {}): Promise<void> {
  const eventLog = options.eventLog ?? "on";
  let server: ThrowawayRedis | null = null;
  let url = process.env.REDIS_URL;
  if (!url) {
    server = await startThrowawayRedis({ persistence: "none" });
    url = server.url;
  }
  const admin = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    const version = /redis_version:(\S+)/.exec(await admin.info("server"))?.[1];
    console.log(
      `Redis ${version} (${server ? "throwaway server, no persistence" : "REDIS_URL"}); ${peerVersions(["bullmq"])}; ` +
        `${sizes.jobs} jobs; ${machineLine()}\n`,
    );
    const prefixes = new Prefixes(url);
    const subjects = [
      ...(eventLog !== "off" ? [conveyor(url, prefixes, admin)] : []),
      ...(eventLog !== "on" ? [conveyor(url, prefixes, admin, false)] : []),
      bullmq(url, prefixes, admin),
    ];
    const report = await runSideBySide(subjects, sizes, options);
    console.log("");
    printReport(subjects, report);
    if (subjects.length === 3) printPairRatios(subjects[1]!.name, subjects[2]!.name, report, 1, 2);
  } finally {
    admin.disconnect();
    await server?.stop();
  }
}

/** One more ratio column for a three-subject run: subject `a` over subject `b`, paired round by round as printReport's. */
function printPairRatios(aName: string, bName: string, report: Report, a: number, b: number): void {
  console.log(`\n${aName}/${bName}, paired as above:\n`);
  for (const r of report.rows) {
    const x = pairedRatio(r.runs[a]!, r.runs[b]!);
    console.log(`  ${r.label}: ${fmt(r.values[a]!)} / ${fmt(r.values[b]!)} ${r.unit} = ${Number.isFinite(x) ? `${x.toFixed(2)}x` : "-"}`);
  }
}
