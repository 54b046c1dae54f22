/**
 * What stall blame's buffer marks (`Backend.markBuffered`, src/runtime/buffer-marks.ts) cost on
 * PostgreSQL: the processing figure of bench/postgres.ts (no-op jobs, one Worker, prefetch 500)
 * with the marks as they are, and with the backend's `markBuffered` hidden from the worker (it
 * then sends none, as on a store without stall counting), and a third arm "separate": the marks
 * as they were before claims recorded them (`capabilities.claimMarksBuffered` hidden, so the
 * worker sends every buffered mark as its own statement). Each run gets a fresh schema on one
 * throwaway server; runs alternate on/off so load on a shared machine hits both alike; medians
 * of `--runs` and the median of per-round ratios (lib.ts pairedRatio).
 *
 * `nice -n 10 npx tsx bench/ab-mark-buffered.ts [--jobs 20000] [--runs 5] [--concurrency 10,50]`
 */
import { parseArgs } from "node:util";
import pg from "pg";
import type { Backend } from "../src/backend/contract.js";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { conveyorProcessing, fmt, machineLine, median, pairedRatio } from "./lib.js";

const PREFETCH = 500;
const { values } = parseArgs({
  options: { jobs: { type: "string", default: "20000" }, runs: { type: "string", default: "5" }, concurrency: { type: "string", default: "10,50" } },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);
const concurrencies = values.concurrency.split(",").map(Number);

const server = await startThrowawayPostgres({ database: "bench" });
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
let n = 0;

type Arm = "on" | "off" | "separate";

/** jobs/s of one processing run on a fresh schema; "off" hides markBuffered from the worker, "separate" claimMarksBuffered. */
async function processing(arm: Arm, concurrency: number): Promise<number> {
  const schema = `ab_marks_${process.pid}_${n++}`;
  const backend = new PostgresBackend({ connectionString: server.url, schema, logger: silentLogger });
  await backend.migrate();
  try {
    // An object on top of the backend (the checking facade lets such an object shadow a method):
    // without markBuffered the worker's BufferMarks send nothing.
    const seen: Backend =
      arm === "on"
        ? backend
        : arm === "separate"
          ? Object.assign(Object.create(backend) as Backend, { capabilities: { ...backend.capabilities, claimMarksBuffered: false } })
          : Object.assign(Object.create(backend) as Backend, { markBuffered: undefined });
    return await conveyorProcessing(seen, jobs, concurrency, PREFETCH);
  } finally {
    await backend.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  }
}

const lines: string[] = [];
try {
  for (const concurrency of concurrencies) {
    const results: Record<Arm, number[]> = { on: [], off: [], separate: [] };
    const arms: Arm[] = ["on", "off", "separate"];
    for (let r = 0; r < runs; r++) {
      // Rotate which goes first, so none always runs on a warmer server.
      for (const arm of [...arms.slice(r % 3), ...arms.slice(0, r % 3)]) results[arm].push(await processing(arm, concurrency));
      process.stderr.write(`  .. concurrency ${concurrency} run ${r + 1}/${runs}: ${arms.map((a) => `${a} ${fmt(results[a].at(-1)!)}`).join(", ")} jobs/s\n`);
    }
    const { on, off, separate } = results;
    lines.push(
      `processing, concurrency ${String(concurrency).padEnd(3)} marks on ${fmt(median(on)).padStart(7)}  off ${fmt(median(off)).padStart(7)}  separate ${fmt(median(separate)).padStart(7)} jobs/s  ` +
        `on/off ${pairedRatio(on, off).toFixed(2)}x  separate/off ${pairedRatio(separate, off).toFixed(2)}x  ` +
        `(runs: on ${on.map(fmt).join(" / ")}; off ${off.map(fmt).join(" / ")}; separate ${separate.map(fmt).join(" / ")})`,
    );
  }
  console.log(`PostgreSQL, ${fmt(jobs)} no-op jobs, prefetch ${PREFETCH}, medians of ${runs} interleaved runs; ${machineLine()}\n${lines.join("\n")}`);
} finally {
  await admin.end();
  await server.stop();
}
