/**
 * `npx tsx bench/flowctl-explain.ts [--jobs 20000] [--claimed 10000] [--analyze]`
 *
 * EXPLAIN (ANALYZE, BUFFERS) of the PostgreSQL laned read (flow-read-lanes.sql) at a backlog:
 * the flowctl-profile run's queue (limits that never bind, ten groups, ten limiter keys),
 * `--jobs` enqueued, `--claimed` of them claimed and completed 50 at a time through the backend,
 * then the read a claim of 50 makes next, explained (the plan printed, and the mean time of 20
 * more runs of it). `--analyze` runs ANALYZE first (by default the table is as a freshly filled
 * one is: autovacuum may or may not have analysed it). A diagnostic, not a figure of the issue.
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { openBackend } from "../src/backend/open.js";
import { Queue } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, FILL_CHUNK, noopJobs } from "./lib.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    claimed: { type: "string", default: "10000" },
    analyze: { type: "boolean", default: false },
  },
});
const jobs = Number(values.jobs);
const claimed = Number(values.claimed);

const server = process.env.DATABASE_URL === undefined ? await startThrowawayPostgres() : null;
const url = process.env.DATABASE_URL ?? server!.url;
const backend = await openBackend(url);
const client = new pg.Client({ connectionString: url });
try {
  await backend.migrate();
  const q = new Queue("bench", { backend });
  await q.setLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } });
  for (const [start, length] of chunks(jobs, FILL_CHUNK)) {
    await q.addBulk(
      noopJobs(start, length).map((job, k) => ({
        ...job,
        options: { group: { key: `g${(start + k) % 10}`, concurrency: 10_000 }, limiter: { key: `k${(start + k) % 10}`, max: 1_000_000, durationMs: 1_000 } },
      })),
    );
  }
  const worker = { id: "explain", host: "localhost", pid: process.pid };
  for (let done = 0; done < claimed;) {
    const got = await backend.claim({ queues: ["bench"], names: ["noop"], limit: 50, leaseMs: 60_000, worker });
    if (got.length === 0) break;
    await backend.complete(got.map((job) => ({ lease: job.lease, result: null })));
    done += got.length;
  }
  await client.connect();
  if (values.analyze) await client.query("ANALYZE conveyor.jobs");
  // The statement as the backend runs it (schema filled in), with the parameters a claim of 50 sends.
  const sql = (backend as unknown as { sql: Record<string, string> }).sql["flow-read-lanes"]!;
  // The read takes the lane cursor and the rate window from the queue's flow row itself.
  const total = 50;
  const maxLanes = total + 2;
  const heads = Array.from({ length: maxLanes + 1 }, (_, lanes) => (lanes <= 4 ? total : Math.ceil(total / lanes) + 2));
  const params = ["bench", Date.now(), maxLanes, ["noop"], heads, total, "bench\nk:"];
  await client.query("PREPARE read_lanes AS " + sql.replace(/^--.*$/gm, ""));
  const literal = (v: unknown): string =>
    Array.isArray(v)
      ? client.escapeLiteral(`{${v.map((x) => JSON.stringify(x)).join(",")}}`)
      : typeof v === "number"
        ? String(v)
        : client.escapeLiteral(String(v));
  const exec = `EXECUTE read_lanes(${params.map(literal).join(", ")})`;
  // Six runs first, so the plan explained is the one a pool's prepared statement settles on.
  for (let i = 0; i < 6; i++) await client.query(exec);
  const plan = await client.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${exec}`);
  for (const row of plan.rows as Array<{ "QUERY PLAN": string }>) console.log(row["QUERY PLAN"]);
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    // Inside a transaction rolled back, as a claim runs it: no commit (and its WAL flush) timed.
    await client.query("BEGIN");
    const t = performance.now();
    await client.query(exec);
    times.push(performance.now() - t);
    await client.query("ROLLBACK");
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(
    `20 more runs (round trip included, no commit): mean ${(times.reduce((a, b) => a + b, 0) / times.length).toFixed(2)} ms, median ${sorted[10]!.toFixed(2)}, min ${sorted[0]!.toFixed(2)} (jobs ${jobs}, claimed ${claimed}, analyze ${values.analyze})`,
  );
} finally {
  await client.end().catch(() => undefined);
  await backend.close();
  await server?.stop();
}
