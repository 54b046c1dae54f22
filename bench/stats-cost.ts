/**
 * `npm run bench -- --metrics --stats-cost [--backlog 100000]`
 *
 * What one scrape costs the store: `backend.stats()` (the one query behind the depth and
 * oldest-age gauges, cached ≥ 1 s per process) timed on SQLite, PostgreSQL and Redis holding a
 * backlog of `--backlog` waiting jobs in one queue plus 1 000 completed ones in another.
 * Throwaway servers are started unless DATABASE_URL / REDIS_URL name them. Median of 15 calls.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openBackend } from "../src/backend/open.js";
import { Queue, silentLogger, Worker, type Backend } from "../src/index.js";
import { randomSchema, startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRedis, testPrefix } from "../testkit/servers/redis.js";
import { deferred, fmt, median } from "./lib.js";

async function measure(label: string, backend: Backend, backlog: number): Promise<void> {
  try {
    await backend.migrate();
    const waiting = new Queue("stats-backlog", { backend });
    for (let i = 0; i < backlog; i += 1_000) await waiting.addBulk(Array.from({ length: Math.min(1_000, backlog - i) }, () => ({ name: "noop", data: null })));
    const done = new Queue("stats-done", { backend });
    await done.addBulk(Array.from({ length: 1_000 }, () => ({ name: "noop", data: null })));
    const finished = deferred();
    let n = 0;
    const worker = new Worker({
      backend,
      queues: "stats-done",
      concurrency: 50,
      logger: silentLogger,
      maintenance: false,
      handlers: { noop: () => (++n === 1_000 ? finished.resolve() : null) },
    });
    await finished.promise;
    await worker.close();
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      const t0 = performance.now();
      await backend.stats();
      times.push(performance.now() - t0);
    }
    console.log(`  ${label.padEnd(12)} ${fmt(median(times))} ms per stats()   (min ${fmt(Math.min(...times))}, max ${fmt(Math.max(...times))})`);
  } finally {
    await backend.close();
  }
}

export async function main(backlog: number): Promise<void> {
  console.log(`store statistics query (one per scrape per process, cached >= 1 s): ${backlog} waiting + 1000 completed jobs\n`);
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-stats-"));
  try {
    await measure("sqlite", await openBackend(`sqlite:${join(dir, "bench.db")}`), backlog);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const pg = process.env.DATABASE_URL ? null : await startThrowawayPostgres({ database: "bench" });
  try {
    const url = new URL(process.env.DATABASE_URL ?? pg!.url);
    url.searchParams.set("schema", randomSchema("stats"));
    await measure("postgres", await openBackend(url.toString()), backlog);
  } finally {
    await pg?.stop();
  }
  const redis = process.env.REDIS_URL ? null : await startThrowawayRedis({ persistence: "none" });
  try {
    const url = new URL(process.env.REDIS_URL ?? redis!.url);
    url.searchParams.set("prefix", testPrefix("stats"));
    await measure("redis", await openBackend(url.toString()), backlog);
  } finally {
    await redis?.stop();
  }
}
