/**
 * `npm run bench -- --backend redis --scale [--sizes 10000,100000,1000000] [--runs 3] [--samples 100] [--only conveyor]`
 *
 * How Redis claim+complete throughput and enqueue-to-start latency grow with the backlog,
 * Conveyor beside BullMQ (bench/scale.ts: the shapes, the loop, the table, the curves), each cell
 * under a fresh key prefix of one Redis (a throwaway one without persistence unless REDIS_URL),
 * deleted afterwards. BullMQ runs with its defaults (bench/redis.ts): concurrency 10, completed
 * jobs kept, as Conveyor keeps them; its latency work is another queue, as Conveyor's is.
 * `--retained` is not offered here (PostgreSQL and SQLite only). Writes
 * docs/performance-redis-scale.svg.
 */
import { Queue as BullQueue, Worker as BullWorker } from "bullmq";
import { RedisBackend } from "../src/backend/redis/index.js";
import { silentLogger } from "../src/index.js";
import { deletePrefix, startThrowawayRedis, type ThrowawayRedis } from "../testkit/servers/redis.js";
import { chunks, deferred, FILL_CHUNK, latencySamples, peerVersions, sleep } from "./lib.js";
import { bullConnection } from "./redis.js";
import { conveyorScale, PREFETCH, runScale, TAKE, type ScaleOptions, type ScaleSystem } from "./scale.js";

let prefixCounter = 0;
const freshPrefix = (label: string) => `scale-${label}-${process.pid}-${prefixCounter++}`;

function conveyor(url: string): ScaleSystem {
  return conveyorScale(
    "Conveyor",
    async () => {
      const prefix = freshPrefix("conveyor");
      const backend = new RedisBackend({ connection: url, prefix, logger: silentLogger });
      await backend.migrate();
      return {
        backend,
        producer: () => new RedisBackend({ connection: url, prefix, logger: silentLogger }),
        async drop() {
          await backend.close();
          await deletePrefix(url, prefix);
        },
      };
    },
    { prefetch: PREFETCH },
  );
}

function bullmq(url: string): ScaleSystem {
  const connection = bullConnection(url);
  const jobs = (start: number, n: number, delay?: number) =>
    Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: start + k }, ...(delay ? { opts: { delay } } : {}) }));
  return {
    name: "BullMQ",
    async open({ waiting, delayed, retained }) {
      if (retained > 0) throw new Error("--retained is measured on PostgreSQL and SQLite only");
      const prefix = freshPrefix("bullmq");
      const q = new BullQueue("bench", { connection, prefix });
      await q.waitUntilReady();
      const add = async (n: number, delay?: number) => {
        for (const [s, len] of chunks(n, FILL_CHUNK)) await q.addBulk(jobs(s, len, delay));
      };
      await add(delayed, 86_400_000);
      await add(waiting);
      return {
        async throughput() {
          const done = deferred();
          let completed = 0;
          const t0 = performance.now();
          const worker = new BullWorker("bench", async () => undefined, { connection, prefix, concurrency: 10 });
          // "completed" fires once the job has been moved to completed in Redis.
          worker.on("completed", () => {
            if (++completed === TAKE) done.resolve();
          });
          await done.promise;
          const rate = TAKE / ((performance.now() - t0) / 1000);
          await worker.close();
          return { rate, consumed: completed };
        },
        refill: (n) => add(n),
        async latency(samples) {
          const lq = new BullQueue("latency", { connection, prefix });
          let onStart: (() => void) | null = null;
          const worker = new BullWorker("latency", async () => void onStart?.(), { connection, prefix, concurrency: 10 });
          await worker.waitUntilReady();
          await sleep(200);
          try {
            return await latencySamples(
              [],
              samples,
              (i) => lq.add("ping", { i }),
              (fn) => (onStart = fn),
            );
          } finally {
            await worker.close();
            await lq.close();
          }
        },
        async close() {
          await q.close();
          await deletePrefix(url, prefix);
        },
      };
    },
  };
}

export async function main(options: ScaleOptions & { svgPath: string }): Promise<void> {
  let server: ThrowawayRedis | null = null;
  let url = process.env.REDIS_URL;
  if (!url) {
    server = await startThrowawayRedis({ persistence: "none" });
    url = server.url;
  }
  try {
    await runScale("Redis growth", peerVersions(["bullmq"]), [conveyor(url), bullmq(url)], options);
  } finally {
    await server?.stop();
  }
}
