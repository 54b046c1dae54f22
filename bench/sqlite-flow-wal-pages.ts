/**
 * `npx tsx bench/sqlite-flow-wal-pages.ts [--jobs 20000] [--warm 200] [--cycles 10] [--tree <dir>]...`
 *
 * What a SQLite claim writes, page by page (docs/flow-control.md, "Seventh round (SQLite)"): the
 * loop of bench/flowctl-claim-loop.ts (claim 50, complete them; arms "plain" and "keyed" as there),
 * run --warm cycles so the rate windows fill (one second of claims), then --cycles more cycles run,
 * ten at a time with the WAL emptied (`wal_checkpoint(TRUNCATE)`) before each ten. Each transaction's frames in the WAL
 * are its distinct pages; each page is named by SQLite's dbstat table (the table or index it
 * belongs to). Prints pages per claim and per completion batch, by name. Exact whatever the
 * machine's load, unlike CPU time. With --tree (repeatable) it runs other checkouts' code too,
 * e.g. `--tree /work/main --tree .`.
 */
import Database from "better-sqlite3";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    warm: { type: "string", default: "200" },
    cycles: { type: "string", default: "10" },
    tree: { type: "string", multiple: true },
  },
});
const jobs = Number(values.jobs);
const warm = Number(values.warm);
const cycles = Number(values.cycles);
if ((warm + cycles) * 50 > jobs) throw new Error(`--jobs ${jobs} is fewer than (--warm + --cycles) x 50`);
const trees = (values.tree ?? ["."]).map((tree) => resolve(tree));
const dir = await mkdtemp(join(tmpdir(), "conveyor-wal-pages-"));

/** Distinct pages per transaction of a WAL (a commit frame ends each), as page numbers. */
function walTransactions(path: string): number[][] {
  const wal = readFileSync(`${path}-wal`);
  const pageSize = wal.readUInt32BE(8);
  const transactions: number[][] = [];
  let current = new Set<number>();
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    current.add(wal.readUInt32BE(at));
    // Frame header bytes 4-7: the database size after a commit, 0 for the other frames.
    if (wal.readUInt32BE(at + 4) !== 0) {
      transactions.push([...current]);
      current = new Set();
    }
  }
  return transactions;
}

try {
  let files = 0;
  for (const tree of trees) {
    const { openBackend } = (await import(join(tree, "src/backend/open.ts"))) as typeof import("../src/backend/open.js");
    const { Queue } = (await import(join(tree, "src/index.ts"))) as typeof import("../src/index.js");
    const lib = (await import(join(tree, "bench/lib.ts"))) as typeof import("./lib.js");
    for (const arm of ["plain", "keyed"] as const) {
      const path = join(dir, `f${files++}.db`);
      const backend = await openBackend(`sqlite:${path}`);
      try {
        await backend.migrate();
        const queue = new Queue("bench", { backend });
        if (arm === "keyed") await queue.setLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } });
        for (const [start, length] of lib.chunks(jobs, lib.FILL_CHUNK)) {
          await queue.addBulk(
            lib.noopJobs(start, length).map((job, k) => ({
              ...job,
              options:
                arm === "keyed"
                  ? { group: { key: `g${(start + k) % 10}`, concurrency: 10_000 }, limiter: { key: `k${(start + k) % 10}`, max: 1_000_000, durationMs: 1_000 } }
                  : {},
            })),
          );
        }
        const request = { queues: ["bench"], names: ["noop"], worker: { id: "loop", host: "bench", pid: process.pid }, limit: 50, leaseMs: 60_000 };
        const cycle = async () => {
          const claimed = await backend.claim(request);
          await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
        };
        const warmStart = Date.now();
        for (let i = 0; i < warm; i++) await cycle();
        const warmMs = Date.now() - warmStart;
        const side = new Database(path);
        try {
          // Read in groups of at most 10 cycles, the WAL emptied before each: more would reach the
          // backend's automatic checkpoint (1,000 pages), which starts the WAL again mid-group.
          const byKind = { claim: new Map<string, number>(), "completion batch": new Map<string, number>() };
          const totals = { claim: 0, "completion batch": 0 };
          for (let done = 0; done < cycles;) {
            const group = Math.min(10, cycles - done);
            side.pragma("wal_checkpoint(TRUNCATE)");
            for (let i = 0; i < group; i++) await cycle();
            done += group;
            const transactions = walTransactions(path);
            if (transactions.length !== 2 * group) throw new Error(`expected ${2 * group} transactions in the WAL, found ${transactions.length}`);
            const names = new Map(
              (side.prepare("SELECT pageno, name FROM dbstat").all() as Array<{ pageno: number; name: string }>).map((r) => [r.pageno, r.name]),
            );
            // Claims and completions alternate: even transactions are claims.
            transactions.forEach((pages, i) => {
              const kind = i % 2 === 0 ? "claim" : "completion batch";
              totals[kind] += pages.length;
              for (const page of pages) {
                const name = (names.get(page) ?? `page ${page}`).replace(/^conveyor_/, "");
                byKind[kind].set(name, (byKind[kind].get(name) ?? 0) + 1);
              }
            });
          }
          for (const kind of ["claim", "completion batch"] as const) {
            const parts = [...byKind[kind]].sort((a, b) => b[1] - a[1]).map(([name, n]) => `${name} ${(n / cycles).toFixed(1)}`);
            console.log(`${tree} | ${arm} | pages per ${kind} ${(totals[kind] / cycles).toFixed(1)} | ${parts.join(", ")}`);
          }
          console.log(`${tree} | ${arm} | warm-up ${warm} cycles in ${warmMs} ms`);
        } finally {
          side.close();
        }
      } finally {
        await backend.close();
      }
    }
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
