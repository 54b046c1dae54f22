/**
 * `npx tsx bench/flowctl-claim-loop.ts [--jobs 20000] [--rounds 5] [--tree <dir>]...`
 *
 * The store's own cost of the flow path on SQLite, without a Worker: one process claims 50 jobs
 * and completes them, until the backlog is gone, and reports its CPU time per 1,000 jobs (medians
 * of --rounds, every run listed). Arms as in bench/flowctl-profile.ts: "plain" (no limits, no
 * keys) and "keyed" (queue limits that never bind, ten groups, ten limiter keys), each on a fresh
 * file. With --tree (repeatable) it runs the code of other checkouts of Conveyor too, every arm of
 * every tree interleaved round by round (a before/after comparison in one process and one run of
 * the machine's load): e.g. `--tree /tmp/base --tree .`. A diagnostic of docs/flow-control.md
 * ("Fifth round"), not a figure of the issue: the issue's figure is flowctl-profile's.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { median } from "./lib.js";

const { values } = parseArgs({
  options: { jobs: { type: "string", default: "20000" }, rounds: { type: "string", default: "5" }, tree: { type: "string", multiple: true } },
});
const jobs = Number(values.jobs);
const rounds = Number(values.rounds);
const trees = (values.tree ?? ["."]).map((tree) => resolve(tree));

interface TreeModules {
  tree: string;
  openBackend: (url: string) => Promise<import("../src/index.js").Backend>;
  Queue: typeof import("../src/index.js").Queue;
  lib: typeof import("./lib.js");
}

const loaded: TreeModules[] = [];
for (const tree of trees) {
  const open = (await import(join(tree, "src/backend/open.ts"))) as typeof import("../src/backend/open.js");
  const index = (await import(join(tree, "src/index.ts"))) as typeof import("../src/index.js");
  loaded.push({
    tree,
    openBackend: (url) => open.openBackend(url),
    Queue: index.Queue,
    lib: (await import(join(tree, "bench/lib.ts"))) as typeof import("./lib.js"),
  });
}

const dir = await mkdtemp(join(tmpdir(), "conveyor-claim-loop-"));
let files = 0;
const arms = ["plain", "keyed"] as const;

async function run(m: TreeModules, arm: (typeof arms)[number]): Promise<number> {
  const backend = await m.openBackend(`sqlite:${join(dir, `f${files++}.db`)}`);
  try {
    await backend.migrate();
    const queue = new m.Queue("bench", { backend });
    if (arm === "keyed") await queue.setLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } });
    for (const [start, length] of m.lib.chunks(jobs, m.lib.FILL_CHUNK)) {
      await queue.addBulk(
        m.lib.noopJobs(start, length).map((job, k) => ({
          ...job,
          options:
            arm === "keyed"
              ? { group: { key: `g${(start + k) % 10}`, concurrency: 10_000 }, limiter: { key: `k${(start + k) % 10}`, max: 1_000_000, durationMs: 1_000 } }
              : {},
        })),
      );
    }
    const request = { queues: ["bench"], names: ["noop"], worker: { id: "loop", host: "bench", pid: process.pid }, limit: 50, leaseMs: 60_000 };
    const cpu0 = process.cpuUsage();
    for (let done = 0; done < jobs;) {
      const claimed = await backend.claim(request);
      if (claimed.length === 0) throw new Error(`${arm}: a claim found nothing with ${jobs - done} jobs left`);
      await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
      done += claimed.length;
    }
    const cpu = process.cpuUsage(cpu0);
    return ((cpu.user + cpu.system) / 1000 / jobs) * 1000;
  } finally {
    await backend.close();
  }
}

const results = new Map<string, number[]>();
try {
  for (let round = 0; round < rounds; round++) {
    for (const m of loaded) {
      for (const arm of arms) {
        const key = `${m.tree} | ${arm}`;
        results.set(key, [...(results.get(key) ?? []), await run(m, arm)]);
      }
    }
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
console.log(`| tree | arm | CPU ms per 1,000 jobs (median of ${rounds}) | runs |`);
console.log(`| --- | --- | --- | --- |`);
for (const [key, runs] of results) console.log(`| ${key} | ${median(runs).toFixed(1)} | ${runs.map((r) => r.toFixed(1)).join(", ")} |`);
for (const m of loaded) {
  const ratio = median(results.get(`${m.tree} | plain`)!) / median(results.get(`${m.tree} | keyed`)!);
  console.log(`${m.tree}: CPU per job, plain ÷ keyed ${ratio.toFixed(2)}`);
}
