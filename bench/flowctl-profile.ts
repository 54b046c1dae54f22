/**
 * `npx tsx bench/flowctl-profile.ts [--backend sqlite|postgres|redis] [--jobs 5000] [--runs 2]`
 *
 * Where the flow path's time goes (docs/flow-control.md, "Where the overhead went"): the
 * overhead run of bench/flowctl.ts (one Worker, concurrency 50, no-op jobs; limits that never
 * bind, ten groups, ten limiter keys) with every claim counted and timed, both arms
 * interleaved on fresh stores: claims per run, jobs per claim, and the mean and p50/p90 time of
 * one claim call. A diagnostic, not a figure of the issue.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { openBackend } from "../src/backend/open.js";
import { Queue, silentLogger, Worker, type Backend } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRedis } from "../testkit/servers/redis.js";
import { chunks, FILL_CHUNK, fmt, noopJobs, percentile } from "./lib.js";

const { values } = parseArgs({
  options: {
    backend: { type: "string", default: "sqlite" },
    jobs: { type: "string", default: "5000" },
    runs: { type: "string", default: "2" },
  },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);

interface Profile {
  jobsPerSecond: number;
  claims: number;
  jobsPerClaim: number;
  claimMsMean: number;
  claimMsP50: number;
  claimMsP90: number;
}

async function profile(url: string, limited: boolean): Promise<Profile> {
  const backend = await openBackend(url);
  try {
    await backend.migrate();
    const q = new Queue("bench", { backend });
    if (limited) await q.setLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } });
    for (const [start, length] of chunks(jobs, FILL_CHUNK)) {
      await q.addBulk(
        noopJobs(start, length).map((job, k) => ({
          ...job,
          options: limited
            ? { group: { key: `g${(start + k) % 10}`, concurrency: 10_000 }, limiter: { key: `k${(start + k) % 10}`, max: 1_000_000, durationMs: 1_000 } }
            : {},
        })),
      );
    }
    const times: number[] = [];
    let claimedJobs = 0;
    const counted = Object.create(backend) as Backend;
    counted.claim = async (request) => {
      const t = performance.now();
      const got = await backend.claim(request);
      times.push(performance.now() - t);
      claimedJobs += got.length;
      return got;
    };
    let completed = 0;
    let worker: Worker | undefined;
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      worker = new Worker({ backend: counted, queues: "bench", concurrency: 50, logger: silentLogger, maintenance: false, handlers: { noop: () => null } });
      worker.on("job:completed", () => {
        if (++completed === jobs) resolve();
      });
    });
    const seconds = (performance.now() - t0) / 1000;
    await worker?.close();
    return {
      jobsPerSecond: jobs / seconds,
      claims: times.length,
      jobsPerClaim: claimedJobs / times.length,
      claimMsMean: times.reduce((a, b) => a + b, 0) / times.length,
      claimMsP50: percentile(times, 50),
      claimMsP90: percentile(times, 90),
    };
  } finally {
    await backend.close();
  }
}

let n = 0;
let fresh: () => Promise<string>;
let close: () => Promise<void>;
if (values.backend === "sqlite") {
  const dir = await mkdtemp(join(tmpdir(), "conveyor-flowprof-"));
  fresh = async () => `sqlite:${join(dir, `s${n++}.db`)}`;
  close = () => rm(dir, { recursive: true, force: true });
} else if (values.backend === "postgres") {
  const server = await startThrowawayPostgres({ database: "bench" });
  fresh = async () => `${server.url}?schema=prof_${n++}`;
  close = () => server.stop();
} else {
  const server = await startThrowawayRedis({ persistence: "none" });
  fresh = async () => `${server.url}?prefix=prof_${n++}`;
  close = () => server.stop();
}
try {
  console.log(`| arm | jobs/s | claims | jobs/claim | claim ms mean | p50 | p90 |`);
  console.log(`| --- | --- | --- | --- | --- | --- | --- |`);
  for (let i = 0; i < runs; i++) {
    for (const limited of [false, true]) {
      const p = await profile(await fresh(), limited);
      console.log(
        `| ${limited ? "limits + groups + keys" : "no limits"} | ${fmt(p.jobsPerSecond)} | ${p.claims} | ${p.jobsPerClaim.toFixed(2)} | ${p.claimMsMean.toFixed(2)} | ${p.claimMsP50.toFixed(2)} | ${p.claimMsP90.toFixed(2)} |`,
      );
    }
  }
} finally {
  await close();
}
