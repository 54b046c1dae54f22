/**
 * `npx tsx bench/flowctl-profile.ts [--backend sqlite|postgres|redis] [--jobs 5000] [--runs 2] [--limits-only] [--commandstats]`
 *
 * Where the flow path's time goes (docs/flow-control.md, "Where the overhead went"): the
 * overhead run of bench/flowctl.ts (one Worker, concurrency 50, no-op jobs; limits that never
 * bind, ten groups, ten limiter keys) with every claim counted and timed, both arms
 * interleaved on fresh stores (one unreported round of each first, for the JIT; the arms' order
 * turning each round), and at the end the issue's figure, with ÷ without per round and its
 * median, for throughput and for CPU per job. Per run: claims per run, jobs per claim, the mean and p50/p90 time of one
 * claim call, and the CPU time per 1,000 jobs of this process (worker and, for SQLite, the store)
 * and of the server (PostgreSQL: the postmaster and its backends, from /proc; Redis: INFO cpu).
 * CPU per job hardly moves with the machine's load, unlike jobs/s: on a shared machine it is
 * the figure to compare. --limits-only adds a third arm: the same queue limits, jobs without
 * group or limiter key (no lanes). --commandstats (Redis): after each arm, the commands Redis ran
 * for it (INFO commandstats, scripts' own calls included), per 1,000 jobs: calls (exact, whatever
 * the load) and microseconds (Redis' own timing, which a loaded machine inflates). A diagnostic,
 * not a figure of the issue. --statements (PostgreSQL): after each arm, the statements the server ran
 * during its timed run (pg_stat_statements, trigger statements included): calls and execution µs
 * per 1,000 jobs, rows per call, shared buffers per call, and how often the server planned it and how long that
 * took (track_planning: a statement planned on every call runs a custom plan each time); a diagnostic like --commandstats.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { openBackend } from "../src/backend/open.js";
import { Queue, silentLogger, Worker, type Backend } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRedis } from "../testkit/servers/redis.js";
import { readFileSync, readdirSync } from "node:fs";
import { Redis } from "ioredis";
import pg from "pg";
import { chunks, dropStoreSchema, FILL_CHUNK, fmt, median, noopJobs, onFreshStore, percentile } from "./lib.js";

/** CPU ms used so far by a process and its children (reaped and live), from /proc (clock ticks of 10 ms). */
function treeCpuMs(pid: number): number {
  const fields = (p: string) =>
    readFileSync(`/proc/${p}/stat`, "utf8")
      .replace(/^.*\) /, "")
      .split(" ");
  const own = fields(String(pid));
  // After "pid (comm) ": state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based here.
  let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const f = fields(entry);
      if (Number(f[1]) === pid) ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks * 10;
}

const { values } = parseArgs({
  options: {
    backend: { type: "string", default: "sqlite" },
    jobs: { type: "string", default: "5000" },
    runs: { type: "string", default: "2" },
    "limits-only": { type: "boolean", default: false },
    commandstats: { type: "boolean", default: false },
    statements: { type: "boolean", default: false },
  },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);

interface Profile {
  jobsPerSecond: number;
  clientCpuMsPer1000: number;
  serverCpuMsPer1000: number | null;
  claims: number;
  jobsPerClaim: number;
  claimMsMean: number;
  claimMsP50: number;
  claimMsP90: number;
  /** --commandstats: Redis' command statistics before and after the timed run. */
  commands: { before: CommandStats; after: CommandStats } | null;
  /** --statements: what pg_stat_statements counted during the timed run, table rows. */
  statements: string[];
}

type CommandStats = Map<string, { calls: number; usec: number }>;

type Arm = "no limits" | "limits only" | "limits + groups + keys";

async function profile(url: string, arm: Arm, serverCpuMs: () => Promise<number | null>): Promise<Profile> {
  const backend = await openBackend(url);
  try {
    await backend.migrate();
    const q = new Queue("bench", { backend });
    if (arm !== "no limits") await q.setLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } });
    for (const [start, length] of chunks(jobs, FILL_CHUNK)) {
      await q.addBulk(
        noopJobs(start, length).map((job, k) => ({
          ...job,
          options:
            arm === "limits + groups + keys"
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
    const commands0 = values.commandstats ? await commandStats() : null;
    await statementStats.reset();
    const server0 = await serverCpuMs();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      worker = new Worker({ backend: counted, queues: "bench", concurrency: 50, logger: silentLogger, maintenance: false, handlers: { noop: () => null } });
      worker.on("job:completed", () => {
        if (++completed === jobs) resolve();
      });
    });
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const server1 = await serverCpuMs();
    const commands1 = values.commandstats ? await commandStats() : null;
    const statements = await statementStats.read(arm);
    await worker?.close();
    return {
      jobsPerSecond: jobs / seconds,
      clientCpuMsPer1000: ((cpu.user + cpu.system) / 1000 / jobs) * 1000,
      serverCpuMsPer1000: server0 === null || server1 === null ? null : ((server1 - server0) / jobs) * 1000,
      claims: times.length,
      jobsPerClaim: claimedJobs / times.length,
      claimMsMean: times.reduce((a, b) => a + b, 0) / times.length,
      claimMsP50: percentile(times, 50),
      claimMsP90: percentile(times, 90),
      commands: commands0 !== null && commands1 !== null ? { before: commands0, after: commands1 } : null,
      statements,
    };
  } finally {
    await backend.close();
  }
}

/** The commands Redis ran during an arm's timed run, most time first. */
function commandTable(arm: Arm, before: CommandStats, after: CommandStats): string[] {
  const used = [...after].map(([command, s]) => ({
    command,
    calls: s.calls - (before.get(command)?.calls ?? 0),
    usec: s.usec - (before.get(command)?.usec ?? 0),
  }));
  return used
    .filter((u) => u.calls > 0 && !u.command.startsWith("info"))
    .sort((a, b) => b.usec - a.usec)
    .map((u) => `| ${arm} | ${u.command} | ${fmt((u.calls / jobs) * 1000)} | ${fmt((u.usec / jobs) * 1000)} |`);
}
const commandRows: string[] = [];
const statementRows: string[] = [];

let n = 0;
let fresh: () => Promise<string>;
let close: () => Promise<void>;
let serverCpuMs: () => Promise<number | null> = async () => null;
/**
 * Removes an arm's store once measured. PostgreSQL: its schema, whose finished jobs (--jobs)
 * autovacuum would otherwise still be vacuuming while the next arms run, on the same cores and
 * inside the server CPU this bench reads (the postmaster's children include autovacuum's workers).
 */
let discard: (store: string) => Promise<void> = async () => {};
/** One arm profiled on a fresh store, discarded afterwards whatever the outcome. */
const profileOnFreshStore = (arm: Arm, serverCpu: () => Promise<number | null>): Promise<Profile> =>
  onFreshStore(fresh, discard, (store) => profile(store, arm, serverCpu));
/** Redis INFO commandstats: command -> { calls, usec } so far (null on other stores). */
let commandStats: () => Promise<CommandStats | null> = async () => null;
/** --statements: pg_stat_statements reset before an arm's timed run and read after it. */
const statementStats: { reset: () => Promise<void>; read: (arm: Arm) => Promise<string[]> } = { reset: async () => {}, read: async () => [] };
if (values.backend === "sqlite") {
  const dir = await mkdtemp(join(tmpdir(), "conveyor-flowprof-"));
  fresh = async () => `sqlite:${join(dir, `s${n++}.db`)}`;
  close = () => rm(dir, { recursive: true, force: true });
} else if (values.backend === "postgres") {
  const server = await startThrowawayPostgres({
    database: "bench",
    settings: values.statements
      ? { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "all", "pg_stat_statements.track_planning": "on" }
      : {},
  });
  if (values.statements) {
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query("CREATE EXTENSION pg_stat_statements");
    statementStats.reset = async () => {
      await admin.query("SELECT pg_stat_statements_reset()");
    };
    statementStats.read = async (arm) => {
      const { rows } = await admin.query<{ calls: string; plans: string; plan_ms: number; rows: string; ms: number; buffers: string; query: string }>(
        `SELECT calls, plans, total_plan_time AS plan_ms, rows, total_exec_time AS ms, shared_blks_hit + shared_blks_read AS buffers,
                regexp_replace(query, '\\s+', ' ', 'g') AS query
         FROM pg_stat_statements WHERE calls > 0 AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 16`,
      );
      return rows.map((r) => {
        // A statement's own comment names it (-- claim: …); trigger statements start with their SQL.
        const name = (/^-- ([\w-]+):/.exec(r.query)?.[1] ?? r.query.replace(/"prof_\d+"\./g, "")).slice(0, 60);
        const calls = Number(r.calls);
        return `| ${arm} | ${name} | ${fmt((calls / jobs) * 1000)} | ${(Number(r.rows) / calls).toFixed(1)} | ${fmt(((r.ms * 1000) / jobs) * 1000)} | ${(Number(r.buffers) / calls).toFixed(0)} | ${fmt((Number(r.plans) / jobs) * 1000)} | ${fmt(((r.plan_ms * 1000) / jobs) * 1000)} |`;
      });
    };
    close = async () => {
      await admin.end();
      await server.stop();
    };
  } else close = () => server.stop();
  const postmaster = Number(readFileSync(`${server.dataDir}/postmaster.pid`, "utf8").split("\n")[0]);
  serverCpuMs = async () => treeCpuMs(postmaster);
  fresh = async () => `${server.url}?schema=prof_${n++}`;
  discard = (store) => dropStoreSchema(server.url, store);
} else {
  const server = await startThrowawayRedis({ persistence: "none" });
  const info = new Redis(server.url);
  serverCpuMs = async () => {
    const text = await info.info("cpu");
    const used = (field: string) => Number(new RegExp(`${field}:([\\d.]+)`).exec(text)![1]);
    return (used("used_cpu_user") + used("used_cpu_sys")) * 1000;
  };
  commandStats = async () => {
    const stats: CommandStats = new Map();
    for (const line of (await info.info("commandstats")).split("\n")) {
      const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line.trim());
      if (m) stats.set(m[1]!, { calls: Number(m[2]), usec: Number(m[3]) });
    }
    return stats;
  };
  fresh = async () => `${server.url}?prefix=prof_${n++}`;
  close = async () => {
    info.disconnect();
    await server.stop();
  };
}
try {
  console.log(`| arm | jobs/s | claims | jobs/claim | claim ms mean | p50 | p90 | CPU ms per 1,000 jobs: this process | server |`);
  console.log(`| --- | --- | --- | --- | --- | --- | --- | --- | --- |`);
  const arms: Arm[] = values["limits-only"] ? ["no limits", "limits only", "limits + groups + keys"] : ["no limits", "limits + groups + keys"];
  // One round of every arm first, not reported: the first round ran on code not yet optimised by
  // the JIT and read slower in both arms. Then the arms' order turns each round, so neither always
  // runs first.
  for (const arm of arms) await profileOnFreshStore(arm, async () => null);
  const measured = new Map<Arm, Profile[]>();
  for (let i = 0; i < runs; i++) {
    for (const arm of [...arms.slice(i % arms.length), ...arms.slice(0, i % arms.length)]) {
      const p = await profileOnFreshStore(arm, serverCpuMs);
      measured.set(arm, [...(measured.get(arm) ?? []), p]);
      if (p.commands !== null) commandRows.push(...commandTable(arm, p.commands.before, p.commands.after));
      statementRows.push(...p.statements);
      console.log(
        `| ${arm} | ${fmt(p.jobsPerSecond)} | ${p.claims} | ${p.jobsPerClaim.toFixed(2)} | ${p.claimMsMean.toFixed(2)} | ${p.claimMsP50.toFixed(2)} | ${p.claimMsP90.toFixed(2)} | ${fmt(p.clientCpuMsPer1000)} | ${p.serverCpuMsPer1000 === null ? "(in process)" : fmt(p.serverCpuMsPer1000)} |`,
      );
    }
  }
  // The issue's figure: with ÷ without, round by round (throughput, and the CPU per job without ÷ with).
  const plain = measured.get("no limits")!;
  const keyed = measured.get("limits + groups + keys")!;
  const cpu = (p: Profile) => p.clientCpuMsPer1000 + (p.serverCpuMsPer1000 ?? 0);
  const throughput = keyed.map((k, i) => k.jobsPerSecond / plain[i]!.jobsPerSecond);
  const cpuRatio = keyed.map((k, i) => cpu(plain[i]!) / cpu(k));
  const list = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(", ");
  console.log(`\nlimits + groups + keys ÷ no limits, per round: throughput ${list(throughput)} (median ${median(throughput).toFixed(2)});`);
  console.log(
    `CPU per job (this process${values.backend === "sqlite" ? "" : " + server"}), no limits ÷ limits + groups + keys: ${list(cpuRatio)} (median ${median(cpuRatio).toFixed(2)})`,
  );
  if (commandRows.length > 0) {
    console.log(`\n| arm | command (scripts' calls included) | calls per 1,000 jobs | Redis usec per 1,000 jobs |`);
    console.log(`| --- | --- | --- | --- |`);
    for (const row of commandRows) console.log(row);
  }
  if (statementRows.length > 0) {
    console.log(
      `\n| arm | statement | calls per 1,000 jobs | rows per call | server µs per 1,000 jobs | buffers per call | plans per 1,000 jobs | planning µs per 1,000 jobs |`,
    );
    console.log(`| --- | --- | --- | --- | --- | --- | --- | --- |`);
    for (const row of statementRows) console.log(row);
  }
} finally {
  await close();
}
