/**
 * `npx tsx bench/sqlite-flow-statements.ts [--jobs 20000] [--rounds 3]`
 *
 * Where a SQLite claim's time goes, statement by statement (docs/flow-control.md, "Sixth round
 * (SQLite)"): the loop of bench/flowctl-claim-loop.ts (claim 50, complete them, until the backlog
 * is gone; arms "plain" and "keyed") with every better-sqlite3 statement timed, BEGIN and COMMIT
 * included (better-sqlite3 runs them as statements too). Per arm, medians of --rounds: calls and
 * microseconds per 1,000 jobs of each statement, most time first. Wall time, so read it on a quiet
 * machine and as proportions; calls are exact whatever the load. A diagnostic, not a figure of
 * the issue (that is flowctl-profile's).
 */
import Database from "better-sqlite3";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { openBackend } from "../src/backend/open.js";
import { Queue } from "../src/index.js";
import { chunks, FILL_CHUNK, fmt, median, noopJobs } from "./lib.js";

const { values } = parseArgs({ options: { jobs: { type: "string", default: "20000" }, rounds: { type: "string", default: "3" } } });
const jobs = Number(values.jobs);
const rounds = Number(values.rounds);

/** CPU time of this process so far, ns (getrusage: a loaded machine's waits are not counted, unlike wall time). */
function cpuNs(): bigint {
  const { user, system } = process.cpuUsage();
  return BigInt(user + system) * 1000n;
}

/** Statement text (whitespace folded, cut short) → calls and CPU ns in the current measurement. */
let timings: Map<string, { calls: number; ns: bigint }> | null = null;
const probe = new Database(":memory:");
const statementPrototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<string, unknown>;
probe.close();
for (const method of ["run", "get", "all", "iterate"] as const) {
  const original = statementPrototype[method] as (this: { source: string }, ...args: unknown[]) => unknown;
  statementPrototype[method] = function (this: { source: string }, ...args: unknown[]): unknown {
    if (timings === null) return original.apply(this, args);
    const t0 = cpuNs();
    try {
      return original.apply(this, args);
    } finally {
      const key = this.source.replace(/\s+/g, " ").trim().slice(0, 110);
      const entry = timings.get(key) ?? { calls: 0, ns: 0n };
      entry.calls++;
      entry.ns += cpuNs() - t0;
      timings.set(key, entry);
    }
  };
}

const dir = await mkdtemp(join(tmpdir(), "conveyor-flow-statements-"));
let files = 0;
const arms = ["plain", "keyed"] as const;
type Arm = (typeof arms)[number];

interface Measured {
  statements: Map<string, { calls: number; ns: bigint }>;
  claimNs: number;
  completeNs: number;
}

async function run(arm: Arm): Promise<Measured> {
  const backend = await openBackend(`sqlite:${join(dir, `f${files++}.db`)}`);
  try {
    await backend.migrate();
    const queue = new Queue("bench", { backend });
    if (arm === "keyed") await queue.setLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } });
    for (const [start, length] of chunks(jobs, FILL_CHUNK)) {
      await queue.addBulk(
        noopJobs(start, length).map((job, k) => ({
          ...job,
          options:
            arm === "keyed"
              ? { group: { key: `g${(start + k) % 10}`, concurrency: 10_000 }, limiter: { key: `k${(start + k) % 10}`, max: 1_000_000, durationMs: 1_000 } }
              : {},
        })),
      );
    }
    const request = { queues: ["bench"], names: ["noop"], worker: { id: "loop", host: "bench", pid: process.pid }, limit: 50, leaseMs: 60_000 };
    timings = new Map();
    let claimNs = 0;
    let completeNs = 0;
    for (let done = 0; done < jobs;) {
      const t0 = cpuNs();
      const claimed = await backend.claim(request);
      const t1 = cpuNs();
      if (claimed.length === 0) throw new Error(`${arm}: a claim found nothing with ${jobs - done} jobs left`);
      await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
      completeNs += Number(cpuNs() - t1);
      claimNs += Number(t1 - t0);
      done += claimed.length;
    }
    const statements = timings;
    timings = null;
    return { statements, claimNs, completeNs };
  } finally {
    timings = null;
    await backend.close();
  }
}

const results = new Map<Arm, Measured[]>();
try {
  for (let round = 0; round < rounds; round++) for (const arm of arms) results.set(arm, [...(results.get(arm) ?? []), await run(arm)]);
} finally {
  await rm(dir, { recursive: true, force: true });
}
const per1000 = (ns: number): string => fmt(ns / 1000 / (jobs / 1000));
for (const arm of arms) {
  const runs = results.get(arm)!;
  console.log(
    `\n${arm}: claim CPU µs per 1,000 jobs ${per1000(median(runs.map((r) => r.claimNs)))}, complete ${per1000(median(runs.map((r) => r.completeNs)))} (medians of ${rounds})`,
  );
  console.log(`| statement | calls per 1,000 jobs | CPU µs per 1,000 jobs |`);
  console.log(`| --- | ---: | ---: |`);
  const keys = new Set(runs.flatMap((r) => [...r.statements.keys()]));
  const rows = [...keys].map((key) => ({
    key,
    calls: median(runs.map((r) => r.statements.get(key)?.calls ?? 0)),
    ns: median(runs.map((r) => Number(r.statements.get(key)?.ns ?? 0n))),
  }));
  for (const row of rows.sort((a, b) => b.ns - a.ns)) console.log(`| ${row.key} | ${fmt((row.calls / jobs) * 1000)} | ${per1000(row.ns)} |`);
}
