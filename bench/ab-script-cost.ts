/**
 * A/B of the Redis scripts' own cost: this checkout against another (`--base DIR`, a copy of an
 * older tree with node_modules linked), on one throwaway Redis. Each round runs, for each tree in
 * turn, `--calls` single-job transitions (enqueue one job, claim it, complete it: one script call
 * each) and reads Redis' own main-thread CPU time per script call (INFO cpu) and the commands
 * each call ran inside it (INFO commandstats), so the client and the network are left out. Rounds alternate base and this so load on a shared machine hits both
 * alike; the figures are medians over `--rounds`, and the ratio is the median of per-round ratios.
 * Made to price a check added to every script (the layout guard: one HGET).
 *
 * `nice -n 10 npx tsx bench/ab-script-cost.ts --base /tmp/base [--calls 2000] [--rounds 9]`
 */
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { Redis } from "ioredis";
import { deletePrefix, startThrowawayRedis } from "../testkit/servers/redis.js";

const { values } = parseArgs({ options: { base: { type: "string" }, calls: { type: "string", default: "2000" }, rounds: { type: "string", default: "9" } } });
if (!values.base) {
  console.error("--base DIR: the other checkout to compare with (its src/ is imported as is)");
  process.exit(2);
}
const calls = Number(values.calls);
const rounds = Number(values.rounds);

interface Lease {
  lease: unknown;
}
interface Backend {
  enqueue(specs: unknown[]): Promise<unknown>;
  claim(request: Record<string, unknown>): Promise<Lease[]>;
  complete(results: { lease: unknown; result: null }[]): Promise<unknown>;
  migrate(): Promise<void>;
  close(): Promise<void>;
}
interface Tree {
  label: string;
  open(url: string, prefix: string): Backend;
  spec(id: string): unknown;
}

async function load(label: string, root: string): Promise<Tree> {
  const url = (path: string) => pathToFileURL(resolve(root, path)).href;
  const { RedisBackend } = (await import(url("src/backend/redis/index.ts"))) as { RedisBackend: new (options: Record<string, unknown>) => Backend };
  const { silentLogger } = (await import(url("src/index.ts"))) as { silentLogger: unknown };
  const { buildJobSpec } = (await import(url("src/core/spec.ts"))) as { buildJobSpec: (input: Record<string, unknown>) => unknown };
  return {
    label,
    open: (connection, prefix) => new RedisBackend({ connection, prefix, logger: silentLogger }),
    spec: (id) => buildJobSpec({ queue: "q", name: "job", data: { id }, options: { jobId: id } }),
  };
}

const trees = [await load("base", values.base), await load("this", ".")];
const server = await startThrowawayRedis();
const admin = new Redis(server.url);
const WORKER = { id: "w", host: "h", pid: 1 };

/**
 * Redis' main-thread CPU time in µs (INFO cpu: time on the CPU, not wall time, so a busy machine
 * preempting Redis inflates it less than commandstats' usec), and the commands it ran: the script
 * calls, and the commands those scripts ran inside them (commandstats counts both).
 */
async function redisCounters(): Promise<{ cpuMicros: number; scripts: number; inner: number }> {
  const cpu = await admin.info("cpu");
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, "m").exec(cpu)?.[1] ?? NaN);
  const cpuMicros = (field("used_cpu_user_main_thread") + field("used_cpu_sys_main_thread")) * 1e6;
  let scripts = 0;
  let inner = 0;
  for (const m of (await admin.info("commandstats")).matchAll(/^cmdstat_([\w|]+):calls=(\d+),/gm)) {
    if (m[1] === "evalsha" || m[1] === "eval") scripts += Number(m[2]);
    else if (!["info", "config", "select", "client|setinfo", "ping"].includes(m[1]!)) inner += Number(m[2]);
  }
  return { cpuMicros, scripts, inner };
}

interface Round {
  /** Redis main-thread CPU µs per script call. */
  cpu: number;
  /** Commands a script call ran inside it, on average. */
  inner: number;
}

/** Per script call over `calls` enqueue + claim + complete transitions of one job each. */
async function round(tree: Tree, r: number): Promise<Round> {
  const prefix = `ab-cost-${tree.label}-${process.pid}-${r}`;
  const backend = tree.open(server.url, prefix);
  await backend.migrate();
  try {
    await admin.config("RESETSTAT");
    const before = await redisCounters();
    for (let i = 0; i < calls; i++) {
      await backend.enqueue([tree.spec(`j${i}`)]);
      const claimed = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
      await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
    }
    const after = await redisCounters();
    const scripts = after.scripts - before.scripts;
    return { cpu: (after.cpuMicros - before.cpuMicros) / scripts, inner: (after.inner - before.inner) / scripts };
  } finally {
    await backend.close();
    await deletePrefix(server.url, prefix);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const results: Record<string, Round[]> = { base: [], this: [] };
const ratios: number[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? trees : [...trees].reverse();
    for (const tree of order) results[tree.label]!.push(await round(tree, r));
    const [a, b] = [results.base!.at(-1)!, results.this!.at(-1)!];
    ratios.push(b.cpu / a.cpu);
    console.log(
      `  .. round ${r + 1}/${rounds}: Redis CPU per script call base ${a.cpu.toFixed(2)} µs, this ${b.cpu.toFixed(2)} µs; ` +
        `commands inside a call base ${a.inner.toFixed(2)}, this ${b.inner.toFixed(2)}`,
    );
  }
  const cpu = (label: string) => median(results[label]!.map((x) => x.cpu)).toFixed(2);
  const inner = (label: string) => median(results[label]!.map((x) => x.inner)).toFixed(2);
  console.log(
    `\nPer script call (enqueue, claim, complete of one job each; ${calls} of each per round), medians of ${rounds} interleaved rounds\n` +
      `Redis main-thread CPU   base ${cpu("base")} µs  this ${cpu("this")} µs  this/base ${median(ratios).toFixed(3)}x\n` +
      `commands run inside     base ${inner("base")}  this ${inner("this")}`,
  );
} finally {
  await admin.quit();
  await server.stop();
}
