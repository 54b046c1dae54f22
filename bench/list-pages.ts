/**
 * `npm run bench:list-pages -- [--jobs 1000000] [--only sqlite,postgres,redis]`
 *
 * How long one page of a queue's waiting jobs takes (the dashboard's queue view, `GET
 * /v1/queues/:q/jobs?state=waiting`) when the queue holds `--jobs` waiting jobs (default one
 * million): the first page, the page 1000 pages deep by cursor (`after`), the page before it by
 * the reverse cursor (`before`), and, for contrast, that deep page by OFFSET. 50 jobs a page.
 * SQLite, PostgreSQL and Redis are filled the same way (batches of 5 000, in one queue) on
 * throwaway servers unless DATABASE_URL / REDIS_URL name them. Each figure is the median of 7
 * calls after one warm-up call. Not a test: run it by hand (filling 1M jobs takes minutes).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { Backend, Page } from "../src/backend/contract.js";
import { openBackend } from "../src/backend/open.js";
import { buildJobSpec } from "../src/core/spec.js";
import { randomSchema, startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRedis, testPrefix } from "../testkit/servers/redis.js";
import { fmt, median } from "./lib.js";

const QUEUE = "backlog";
const PAGE = 50;
const DEEP = 1_000;
const RUNS = 7;

async function timed(backend: Backend, page: Page): Promise<{ ms: number; ids: string[] }> {
  const filter = { queue: QUEUE, state: "waiting" as const };
  let ids = (await backend.list(filter, { limit: PAGE, ...page })).map((j) => j.id);
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    ids = (await backend.list(filter, { limit: PAGE, ...page })).map((j) => j.id);
    times.push(performance.now() - t0);
  }
  return { ms: median(times), ids };
}

async function measure(label: string, backend: Backend, jobs: number): Promise<void> {
  try {
    await backend.migrate();
    const t0 = performance.now();
    const ids: string[] = [];
    for (let i = 0; i < jobs; i += 5_000) {
      const specs = Array.from({ length: Math.min(5_000, jobs - i) }, (_, k) => buildJobSpec({ queue: QUEUE, name: "noop", data: { n: i + k } }));
      for (const r of await backend.enqueue(specs)) ids.push(r.id);
    }
    const fillS = (performance.now() - t0) / 1000;
    // Newest first: position p of the listing is the job enqueued (jobs - 1 - p)-th.
    const at = (position: number) => ids[jobs - 1 - position]!;
    const deepCursor = at(DEEP * PAGE - 1);
    const first = await timed(backend, {});
    const deep = await timed(backend, { after: deepCursor });
    const previous = await timed(backend, { before: deep.ids[0]! });
    const byOffset = await timed(backend, { offset: DEEP * PAGE });
    // The pages are the right ones, not merely fast.
    const expectIds = (name: string, got: string[], from: number) => {
      const want = Array.from({ length: PAGE }, (_, i) => at(from + i));
      if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${label}: ${name} returned the wrong jobs`);
    };
    expectIds("first page", first.ids, 0);
    expectIds("deep page", deep.ids, DEEP * PAGE);
    expectIds("previous page", previous.ids, (DEEP - 1) * PAGE);
    expectIds("offset page", byOffset.ids, DEEP * PAGE);
    console.log(
      `  ${label.padEnd(9)} ${fmt(first.ms).padStart(8)} ms  ${fmt(deep.ms).padStart(8)} ms  ${fmt(previous.ms).padStart(8)} ms  ${fmt(byOffset.ms).padStart(9)} ms   (filled ${jobs} in ${fmt(fillS)} s)`,
    );
  } finally {
    await backend.close();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { jobs: { type: "string", default: "1000000" }, only: { type: "string", default: "sqlite,postgres,redis" } } });
  const jobs = Number(values.jobs);
  if (!Number.isSafeInteger(jobs) || jobs < (DEEP + 1) * PAGE) throw new Error(`--jobs must be an integer of at least ${(DEEP + 1) * PAGE}`);
  const only = new Set(values.only.split(","));
  console.log(`one page (${PAGE} jobs) of a queue's waiting jobs, ${jobs} waiting; median of ${RUNS} calls\n`);
  console.log(
    `  ${"store".padEnd(9)} ${"first".padStart(11)}  ${`page ${DEEP} (after)`.padStart(11)}  ${"previous (before)".padStart(11)}  ${`page ${DEEP} (OFFSET)`.padStart(12)}`,
  );
  if (only.has("sqlite")) {
    const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-pages-"));
    try {
      await measure("sqlite", await openBackend(`sqlite:${join(dir, "bench.db")}`), jobs);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  if (only.has("postgres")) {
    const pg = process.env.DATABASE_URL ? null : await startThrowawayPostgres({ database: "bench" });
    try {
      const url = new URL(process.env.DATABASE_URL ?? pg!.url);
      url.searchParams.set("schema", randomSchema("pages"));
      await measure("postgres", await openBackend(url.toString()), jobs);
    } finally {
      await pg?.stop();
    }
  }
  if (only.has("redis")) {
    const redis = process.env.REDIS_URL ? null : await startThrowawayRedis({ persistence: "none" });
    try {
      const url = new URL(process.env.REDIS_URL ?? redis!.url);
      url.searchParams.set("prefix", testPrefix("pages"));
      await measure("redis", await openBackend(url.toString()), jobs);
    } finally {
      await redis?.stop();
    }
  }
}

await main();
