/**
 * Where a processed job's cost goes on SQLite, in figures that do not move with the machine's load
 * (or move less than throughput): one store of `--jobs` no-op jobs drained the way a Worker at
 * concurrency 10 without prefetch drains it (claims of 10, completions of 20), calling the backend
 * directly, and per job:
 * - statement calls and the CPU inside each prepared statement of the backend (its `run`, `get`
 *   and `all` wrapped with `process.cpuUsage()`), and the CPU of the whole claim() and complete()
 *   calls (the rest is BEGIN/COMMIT and JavaScript);
 * - WAL frames (4 KiB pages) each kind of transaction appends, by the b-tree the page belongs to
 *   (each frame header names its page; `dbstat` names the page's b-tree). Automatic checkpoints
 *   are off while it counts, and the WAL is truncated before each counted transaction, so every
 *   frame after it is that transaction's.
 * `--main DIR` runs that checkout's SqliteBackend beside this tree's, rounds interleaved.
 *
 * `npx tsx bench/sqlite-statements.ts [--main /work/main] [--jobs 20000] [--runs 3]`
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import type { Backend } from "../src/backend/contract.js";
import type { Lease } from "../src/core/job.js";
import type { SqliteBackend as SqliteBackendClass } from "../src/backend/sqlite/index.js";
import { Queue } from "../src/index.js";
import { chunks, FILL_CHUNK, fmt, formatLoad, machineLine, median, noopJobs, ownModule } from "./lib.js";

const { values } = parseArgs({
  options: { main: { type: "string" }, jobs: { type: "string", default: "20000" }, runs: { type: "string", default: "3" } },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);
const CLAIM = 10;
const COMPLETE = 20;
const WORKER = { id: "statements-bench", host: "bench", pid: process.pid };
/** A WAL frame: a 24-byte header, then one page (the backend keeps SQLite's default 4096). */
const PAGE = 4096;
const FRAME = 24 + PAGE;

type Backends = { name: string; SqliteBackend: typeof SqliteBackendClass };
const load = async (name: string, dir: string | undefined): Promise<Backends> => {
  const url = dir === undefined ? ownModule("src/backend/sqlite/index").href : pathToFileURL(`${dir}/src/backend/sqlite/index.ts`).href;
  return { name, ...((await import(url)) as { SqliteBackend: typeof SqliteBackendClass }) };
};
const variants = [await load("this tree", undefined), ...(values.main === undefined ? [] : [await load("main", values.main)])];

/** What the bench reaches inside a SqliteBackend (not part of its API): its connection and its prepared statements. */
interface Internals {
  db: import("better-sqlite3").Database;
  s: Record<string, { run?: unknown; get?: unknown; all?: unknown }>;
}

const cpuSince = (start: NodeJS.CpuUsage): number => {
  const used = process.cpuUsage(start);
  return used.user + used.system;
};

interface Drain {
  claimUs: number;
  completeUs: number;
  /** Per statement: µs of CPU and calls, per job. */
  statements: Map<string, { us: number; calls: number }>;
}

/** Drains `jobs` jobs (claims of 10, completions of 20) with every statement's CPU counted. */
async function drain(variant: Backends): Promise<Drain> {
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-statements-"));
  const backend = new variant.SqliteBackend({ path: join(dir, "bench.db") }) as unknown as Backend & Internals;
  try {
    const q = new Queue("bench", { backend });
    for (const [start, length] of chunks(jobs, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
    const statements = new Map<string, { us: number; calls: number }>();
    for (const [name, statement] of Object.entries(backend.s)) {
      for (const method of ["run", "get", "all"] as const) {
        const original = statement[method];
        if (typeof original !== "function") continue;
        statement[method] = (...args: unknown[]) => {
          const start = process.cpuUsage();
          try {
            return (original as (...a: unknown[]) => unknown).apply(statement, args);
          } finally {
            const entry = statements.get(name) ?? { us: 0, calls: 0 };
            entry.us += cpuSince(start);
            entry.calls += 1;
            statements.set(name, entry);
          }
        };
      }
    }
    let claimUs = 0;
    let completeUs = 0;
    let done = 0;
    let pending: { lease: Lease; result: null }[] = [];
    for (;;) {
      let start = process.cpuUsage();
      const claimed = await backend.claim({ queues: ["bench"], names: ["noop"], limit: CLAIM, leaseMs: 600_000, worker: WORKER });
      claimUs += cpuSince(start);
      done += claimed.length;
      pending.push(...claimed.map((c) => ({ lease: c.lease, result: null })));
      if (pending.length >= COMPLETE || (claimed.length === 0 && pending.length > 0)) {
        start = process.cpuUsage();
        await backend.complete(pending);
        completeUs += cpuSince(start);
        pending = [];
      }
      if (claimed.length === 0) break;
    }
    for (const entry of statements.values()) {
      entry.us /= done;
      entry.calls /= done;
    }
    return { claimUs: claimUs / done, completeUs: completeUs / done, statements };
  } finally {
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** WAL frames per transaction by b-tree: 200 claims of 10 and the 100 completions of 20 between them. */
async function frames(variant: Backends): Promise<{ claim: Map<string, number>; complete: Map<string, number> }> {
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-frames-"));
  const file = join(dir, "bench.db");
  const backend = new variant.SqliteBackend({ path: file }) as unknown as Backend & Internals;
  try {
    backend.db.pragma("wal_autocheckpoint = 0");
    const q = new Queue("bench", { backend });
    for (const [start, length] of chunks(4_000, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
    const claim = new Map<string, number>();
    const complete = new Map<string, number>();
    /** Runs `fn` as the only writer since a truncated WAL, then adds its frames to `into` by b-tree. */
    const counted = async (into: Map<string, number>, fn: () => Promise<unknown>): Promise<void> => {
      backend.db.pragma("wal_checkpoint(TRUNCATE)");
      const btreeOf = new Map(
        (backend.db.prepare("SELECT pageno, name FROM dbstat").all() as { pageno: number; name: string }[]).map((r) => [r.pageno, r.name]),
      );
      const from = statSync(`${file}-wal`).size || 32;
      await fn();
      const wal = readFileSync(`${file}-wal`);
      for (let offset = Math.max(from, 32); offset + FRAME <= wal.length; offset += FRAME) {
        const page = wal.readUInt32BE(offset);
        // A page the file did not have before the transaction: the b-tree grew (or the freelist gave it).
        const name = btreeOf.get(page) ?? "(new pages)";
        into.set(name, (into.get(name) ?? 0) + 1);
      }
    };
    let pending: { lease: Lease; result: null }[] = [];
    for (let i = 0; i < 200; i++) {
      let claimed: Awaited<ReturnType<Backend["claim"]>> = [];
      await counted(claim, async () => {
        claimed = await backend.claim({ queues: ["bench"], names: ["noop"], limit: CLAIM, leaseMs: 600_000, worker: WORKER });
      });
      pending.push(...claimed.map((c) => ({ lease: c.lease, result: null })));
      if (pending.length >= COMPLETE) {
        const batch = pending;
        pending = [];
        await counted(complete, () => backend.complete(batch));
      }
    }
    for (const [k, v] of claim) claim.set(k, v / 200);
    for (const [k, v] of complete) complete.set(k, v / 100);
    return { claim, complete };
  } finally {
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const loadStart = loadavg();
console.log(`SQLite statements and WAL frames per job; ${jobs} jobs, claims of ${CLAIM}, completions of ${COMPLETE}; ${machineLine()}\n`);
const drains = new Map<string, Drain[]>(variants.map((v) => [v.name, []]));
await drain(variants[0]!); // JIT warm-up, discarded
for (let r = 0; r < runs; r++) {
  for (const v of r % 2 === 0 ? variants : [...variants].reverse()) drains.get(v.name)!.push(await drain(v));
}
const fmt2 = (x: number): string => (x < 100 ? x.toFixed(2) : fmt(x));
for (const v of variants) {
  const ds = drains.get(v.name)!;
  console.log(`## ${v.name}: CPU per job (medians of ${runs} drains)\n`);
  console.log("| where | µs per job | calls per job |\n| --- | ---: | ---: |");
  console.log(`| claim() (whole call) | ${fmt2(median(ds.map((d) => d.claimUs)))} | ${(1 / CLAIM).toFixed(3)} |`);
  console.log(`| complete() (whole call) | ${fmt2(median(ds.map((d) => d.completeUs)))} | ${(1 / COMPLETE).toFixed(3)} |`);
  const names = [...new Set(ds.flatMap((d) => [...d.statements.keys()]))];
  const rows = names.map((name) => ({
    name,
    us: median(ds.map((d) => d.statements.get(name)?.us ?? 0)),
    calls: median(ds.map((d) => d.statements.get(name)?.calls ?? 0)),
  }));
  for (const row of rows.sort((a, b) => b.us - a.us)) console.log(`| statement ${row.name} | ${fmt2(row.us)} | ${row.calls.toFixed(3)} |`);
  console.log("");
}
for (const v of variants) {
  const f = await frames(v);
  const total = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);
  const list = (m: Map<string, number>): string =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `${k} ${n.toFixed(2)}`)
      .join(", ");
  console.log(`## ${v.name}: WAL frames per transaction (${PAGE}-byte pages)\n`);
  console.log(`- claim of ${CLAIM}: ${total(f.claim).toFixed(2)} (${list(f.claim)})`);
  console.log(`- completion of ${COMPLETE}: ${total(f.complete).toFixed(2)} (${list(f.complete)})`);
  console.log(`- per job processed: ${(total(f.claim) / CLAIM + total(f.complete) / COMPLETE).toFixed(3)} frames\n`);
}
console.log(`Load average at start ${formatLoad(loadStart)}, at end ${formatLoad(loadavg())}.`);
