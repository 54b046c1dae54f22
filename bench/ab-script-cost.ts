/**
 * A/B of the Redis scripts' own cost: this checkout against another (`--base DIR`, a copy of an
 * older tree with node_modules linked), on one throwaway Redis. Each round runs, for each tree in
 * turn, `--calls` single-job transitions (enqueue one job, claim it, complete it: one script call
 * each) and reads Redis' own time per call of EVALSHA from INFO commandstats, so the client and
 * the network are left out. Rounds alternate base and this so load on a shared machine hits both
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

/** Redis' microseconds and calls of EVALSHA since the last CONFIG RESETSTAT. */
async function evalsha(): Promise<{ usec: number; calls: number }> {
  const m = /^cmdstat_evalsha:calls=(\d+),usec=(\d+),/m.exec(await admin.info("commandstats"));
  return { calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) };
}

/** µs of Redis time per script call over `calls` enqueue + claim + complete transitions. */
async function round(tree: Tree, r: number): Promise<number> {
  const prefix = `ab-cost-${tree.label}-${process.pid}-${r}`;
  const backend = tree.open(server.url, prefix);
  await backend.migrate();
  try {
    await admin.config("RESETSTAT");
    for (let i = 0; i < calls; i++) {
      await backend.enqueue([tree.spec(`j${i}`)]);
      const claimed = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
      await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
    }
    const { usec, calls: n } = await evalsha();
    return usec / n;
  } finally {
    await backend.close();
    await deletePrefix(server.url, prefix);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const perCall: Record<string, number[]> = { base: [], this: [] };
const ratios: number[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? trees : [...trees].reverse();
    for (const tree of order) perCall[tree.label]!.push(await round(tree, r));
    ratios.push(perCall.this!.at(-1)! / perCall.base!.at(-1)!);
    console.log(`  .. round ${r + 1}/${rounds}: base ${perCall.base!.at(-1)!.toFixed(2)} µs, this ${perCall.this!.at(-1)!.toFixed(2)} µs per script call`);
  }
  console.log(
    `\nRedis time per script call (enqueue, claim, complete of one job each; ${calls} of each per round), medians of ${rounds} interleaved rounds\n` +
      `base ${median(perCall.base!).toFixed(2)} µs  this ${median(perCall.this!).toFixed(2)} µs  this/base ${median(ratios).toFixed(3)}x`,
  );
} finally {
  await admin.quit();
  await server.stop();
}
