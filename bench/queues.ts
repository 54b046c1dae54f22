/**
 * `npm run bench -- --queues [--backend postgres,sqlite,redis] [--runs 3] [--claims 300] [--main /work/main]`
 *
 * Many queues (issue #12): does a claim's cost grow with the number of EMPTY queues a worker
 * names? One worker claims 5 jobs at a time (nothing completed in between, so every claim finds
 * the same shape) in three cells per store:
 * - "1 queue × 5,000": one queue, named alone;
 * - "1 queue × 5,000 + 999 empty": the same busy queue and 999 empty queues the store knows
 *   (each had a job once), all 1,000 named in every claim;
 * - "1,000 queues × 5": 1,000 busy queues of 5 jobs, all named (reference: busy queues cost).
 * Per cell: the median ms per claim and, since times move with the load of a shared machine,
 * figures that do not: the store server's CPU per claim (PostgreSQL: the backend processes of the
 * bench's database, Redis: redis-server, both from /proc/<pid>/schedstat, ns on a CPU), this
 * process's CPU per claim (SQLite runs here, so that is its whole cost; on the others it is the
 * client side: the checking facade, building the parameters), Redis' script calls per claim
 * (`INFO commandstats`), and PostgreSQL's shared buffers of one claim (`EXPLAIN (ANALYZE,
 * BUFFERS)` of the backend's own claim statement, rolled back). Runs are interleaved (cell by
 * cell, variant by variant, run by run), each on a fresh store; medians of `--runs`.
 * `--main DIR` adds that tree's backends (e.g. /work/main) as variant "main" beside "this".
 * The load average at start and end is printed: read ratios, not absolute times.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import pg from "pg";
import type { Backend } from "../src/backend/contract.js";
import { textArray } from "../src/backend/postgres/arrays.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRedis, testPrefix } from "../testkit/servers/redis.js";
import { fmt, formatLoad, machineLine, median } from "./lib.js";

const CLAIM = 5;
const WARMUP_CLAIMS = 50;
const WORKER = { id: "queues-bench", host: "bench", pid: process.pid };

export interface QueuesCell {
  readonly label: string;
  readonly queues: number;
  readonly perQueue: number;
  /** All queues but the first are known to the store and empty. */
  readonly onlyFirstFilled: boolean;
}

export const CELLS: readonly QueuesCell[] = [
  { label: "1 queue × 5,000", queues: 1, perQueue: 5_000, onlyFirstFilled: false },
  { label: "1 queue × 5,000 + 999 empty", queues: 1_000, perQueue: 5_000, onlyFirstFilled: true },
  { label: "1,000 queues × 5", queues: 1_000, perQueue: 5, onlyFirstFilled: false },
];

export const queueNames = (n: number): string[] => Array.from({ length: n }, (_, i) => `q${String(i).padStart(4, "0")}`);

/**
 * Fills `names`: the first (or every) queue gets `perQueue` no-op jobs; with onlyFirstFilled the
 * others are made known to the store (a job added, cancelled, removed) and left empty.
 */
export async function fillQueues(backend: Backend, names: readonly string[], perQueue: number, onlyFirstFilled: boolean): Promise<void> {
  for (const [i, name] of names.entries()) {
    const q = new Queue(name, { backend });
    if (onlyFirstFilled && i > 0) {
      const [added] = await q.addBulk([{ name: "noop", data: null }]);
      await backend.cancel(added!.id);
      await backend.remove(added!.id);
    } else {
      for (let k = 0; k < perQueue; k += 1_000) {
        await q.addBulk(Array.from({ length: Math.min(1_000, perQueue - k) }, (_, j) => ({ name: "noop", data: { k: k + j } })));
      }
    }
  }
}

/** One fresh store of one backend, filled by the bench. */
interface OpenStore {
  readonly backend: Backend;
  /** After the fill (PostgreSQL: VACUUM ANALYZE). */
  settle?(): Promise<void>;
  /** ns the store's server processes spent on a CPU so far, or null for an in-process store. */
  serverCpuNs(): Promise<number | null>;
  /** Store counters whose growth per claim is reported (Redis: script calls). */
  counters?(): Promise<Record<string, number>>;
  /** Per-claim figures read once after the timed claims (PostgreSQL: buffers of one claim). */
  probe?(queues: readonly string[]): Promise<Record<string, number>>;
  drop(): Promise<void>;
}

interface StoreKind {
  readonly name: string;
  start(): Promise<void>;
  open(variant: Variant): Promise<OpenStore>;
  stop(): Promise<void>;
}

interface Variant {
  readonly name: string;
  /** The tree whose backends are measured: "" for this one. */
  readonly dir: string;
}

async function backendModule<T>(variant: Variant, store: string): Promise<T> {
  const path = variant.dir === "" ? `../src/backend/${store}/index.js` : pathToFileURL(`${variant.dir}/src/backend/${store}/index.ts`).href;
  return (await import(path)) as T;
}

/** ns on a CPU of process `pid` (first field of /proc/<pid>/schedstat); 0 once it is gone. */
function schedNs(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]);
  } catch {
    return 0;
  }
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function postgresKind(): StoreKind {
  let server: Awaited<ReturnType<typeof startThrowawayPostgres>> | null = null;
  let base = process.env.DATABASE_URL ?? "";
  let counter = 0;
  return {
    name: "postgres",
    async start() {
      if (base !== "") return;
      server = await startThrowawayPostgres({ database: "bench" });
      base = server.url;
    },
    async open(variant) {
      const { PostgresBackend } = await backendModule<typeof import("../src/backend/postgres/index.js")>(variant, "postgres");
      const name = `queues_${process.pid}_${counter++}`;
      await withClient(base, (c) => c.query(`CREATE DATABASE ${name}`));
      const url = new URL(base);
      url.pathname = `/${name}`;
      const backend = new PostgresBackend({ connectionString: url.toString(), logger: silentLogger });
      await backend.migrate();
      const sql = (backend as unknown as { sql: Record<string, string> }).sql;
      const pids = (c: pg.Client) =>
        c
          .query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", [name])
          .then((r) => r.rows.map((x) => x.pid));
      return {
        backend,
        settle: () => withClient(url.toString(), (c) => c.query("VACUUM ANALYZE")).then(() => undefined),
        serverCpuNs: () => withClient(base, pids).then((ps) => ps.reduce((sum, p) => sum + schedNs(p), 0)),
        async probe(queues) {
          return withClient(url.toString(), async (c) => {
            await c.query("BEGIN");
            try {
              const params: unknown[] = [null, textArray(queues), textArray(["noop"]), CLAIM, 60_000, WORKER.id, WORKER.host, WORKER.pid, false, null];
              // This tree's claim.sql takes the queues' range as $11/$12 (main's, before the fifth pass, does not).
              if (sql.claim!.includes("$12")) params.push(queues[0], queues[queues.length - 1]);
              const rows = await c.query<{ "QUERY PLAN": string }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) ${sql.claim}`, params);
              const text = rows.rows.map((r) => r["QUERY PLAN"]).join("\n");
              // The first Buffers line belongs to the root node: the whole execution's buffers.
              const m = /Buffers: shared hit=(\d+)(?: read=(\d+))?(?: dirtied=(\d+))?/.exec(text);
              const time = /Execution Time: ([\d.]+) ms/.exec(text);
              return { "buffers per claim": Number(m?.[1] ?? 0) + Number(m?.[2] ?? 0), "EXPLAIN execution ms": Number(time?.[1] ?? NaN) };
            } finally {
              await c.query("ROLLBACK");
            }
          });
        },
        async drop() {
          await backend.close();
          await withClient(base, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
        },
      };
    },
    async stop() {
      await server?.stop();
    },
  };
}

function sqliteKind(): StoreKind {
  const dirs: string[] = [];
  return {
    name: "sqlite",
    async start() {},
    async open(variant) {
      const { SqliteBackend } = await backendModule<typeof import("../src/backend/sqlite/index.js")>(variant, "sqlite");
      const dir = mkdtempSync(join(tmpdir(), "conveyor-queues-"));
      dirs.push(dir);
      const backend = new SqliteBackend({ path: join(dir, "bench.db") });
      await backend.migrate();
      return {
        backend,
        serverCpuNs: async () => null,
        async drop() {
          await backend.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
    async stop() {
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}

function redisKind(): StoreKind {
  let server: Awaited<ReturnType<typeof startThrowawayRedis>> | null = null;
  let admin: Redis | null = null;
  let serverPid = 0;
  return {
    name: "redis",
    async start() {
      server = await startThrowawayRedis();
      admin = new Redis(server.url);
      serverPid = Number(/process_id:(\d+)/.exec(await admin.info("server"))![1]);
    },
    async open(variant) {
      const { RedisBackend } = await backendModule<typeof import("../src/backend/redis/index.js")>(variant, "redis");
      const prefix = testPrefix("queues");
      const backend = new RedisBackend({ connection: server!.url, prefix, logger: silentLogger });
      await backend.migrate();
      return {
        backend,
        serverCpuNs: async () => schedNs(serverPid),
        async counters() {
          const stats = await admin!.info("commandstats");
          let calls = 0;
          for (const m of stats.matchAll(/cmdstat_(evalsha|eval|fcall):calls=(\d+)/g)) calls += Number(m[2]);
          return { "script calls per claim": calls };
        },
        async drop() {
          await backend.close();
          await admin!.flushall();
        },
      };
    },
    async stop() {
      admin?.disconnect();
      await server?.stop();
    },
  };
}

interface Sample {
  ms: number;
  clientCpuUs: number;
  serverCpuUs: number | null;
  extra: Record<string, number>;
}

async function measure(store: OpenStore, cell: QueuesCell, claims: number): Promise<Sample> {
  const names = queueNames(cell.queues);
  await fillQueues(store.backend, names, cell.perQueue, cell.onlyFirstFilled);
  await store.settle?.();
  const claim = () => store.backend.claim({ queues: names, names: ["noop"], worker: WORKER, limit: CLAIM, leaseMs: 600_000 });
  // Warm-up: prepared statements, PostgreSQL's generic plan (after five executions), caches.
  for (let i = 0; i < WARMUP_CLAIMS; i++) await claim();
  const counters0 = (await store.counters?.()) ?? {};
  const server0 = await store.serverCpuNs();
  const cpu0 = process.cpuUsage();
  const times: number[] = [];
  for (let i = 0; i < claims; i++) {
    const t0 = performance.now();
    const got = await claim();
    times.push(performance.now() - t0);
    if (got.length !== CLAIM) throw new Error(`${cell.label}: claim ${i} got ${got.length} jobs, not ${CLAIM}`);
  }
  const cpu = process.cpuUsage(cpu0);
  const server1 = await store.serverCpuNs();
  const counters1 = (await store.counters?.()) ?? {};
  const extra: Record<string, number> = {};
  for (const [k, v] of Object.entries(counters1)) extra[k] = (v - (counters0[k] ?? 0)) / claims;
  Object.assign(extra, (await store.probe?.(names)) ?? {});
  return {
    ms: median(times),
    clientCpuUs: (cpu.user + cpu.system) / claims,
    serverCpuUs: server0 === null || server1 === null ? null : (server1 - server0) / 1_000 / claims,
    extra,
  };
}

export async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    strict: false,
    options: {
      backend: { type: "string", default: "postgres,sqlite,redis" },
      runs: { type: "string", default: "3" },
      claims: { type: "string", default: "300" },
      main: { type: "string", default: "" },
    },
  });
  const runs = Number(values.runs);
  const claims = Number(values.claims);
  if (claims * CLAIM + WARMUP_CLAIMS * CLAIM > 5_000) throw new Error("--claims: at most 950 (every cell holds 5,000 jobs and nothing is completed)");
  const variants: Variant[] = [{ name: "this", dir: "" }];
  if (typeof values.main === "string" && values.main !== "") variants.unshift({ name: "main", dir: values.main });
  const kinds = { postgres: postgresKind, sqlite: sqliteKind, redis: redisKind } as const;
  const chosen = String(values.backend)
    .split(",")
    .map((b) => {
      const make = kinds[b.trim() as keyof typeof kinds];
      if (!make) throw new Error(`--backend: one or more of ${Object.keys(kinds).join(", ")}; got ${b}`);
      return make();
    });
  const { loadavg } = await import("node:os");
  const loadStart = loadavg();
  const started = new Date().toISOString();
  console.log(`# Many queues: claim of ${CLAIM}, ${claims} claims per cell after ${WARMUP_CLAIMS} warm-up, medians of ${runs} runs\n${machineLine()}`);
  for (const kind of chosen) {
    await kind.start();
    const samples = new Map<string, Sample[]>();
    try {
      for (let run = 0; run < runs; run++) {
        for (const cell of CELLS) {
          for (const variant of variants) {
            const store = await kind.open(variant);
            try {
              const s = await measure(store, cell, claims);
              const key = `${variant.name}\u0000${cell.label}`;
              samples.set(key, [...(samples.get(key) ?? []), s]);
            } finally {
              await store.drop();
            }
          }
        }
      }
    } finally {
      await kind.stop();
    }
    printStore(kind.name, variants, samples);
  }
  console.log(`\nStarted ${started}, ended ${new Date().toISOString()}; load average at start ${formatLoad(loadStart)}, at end ${formatLoad(loadavg())}`);
}

function printStore(store: string, variants: readonly Variant[], samples: Map<string, Sample[]>): void {
  console.log(`\n## ${store}\n`);
  const figures: Array<[string, (s: Sample) => number | null]> = [
    ["ms per claim", (s) => s.ms],
    ["client CPU µs per claim", (s) => s.clientCpuUs],
    ["server CPU µs per claim", (s) => s.serverCpuUs],
  ];
  const extraKeys = new Set<string>();
  for (const list of samples.values()) for (const s of list) for (const k of Object.keys(s.extra)) extraKeys.add(k);
  for (const k of extraKeys) figures.push([k, (s) => s.extra[k] ?? null]);
  const rows: string[] = [
    "| variant | figure | " + CELLS.map((c) => c.label).join(" | ") + " | empty ÷ one |",
    "| --- | --- |" + " ---: |".repeat(CELLS.length + 1),
  ];
  const every: string[] = [];
  for (const variant of variants) {
    for (const [figure, read] of figures) {
      const medians = CELLS.map((cell) => {
        const values = (samples.get(`${variant.name}\u0000${cell.label}`) ?? []).map(read).filter((v): v is number => v !== null && !Number.isNaN(v));
        if (values.length > 0) every.push(`${variant.name}, ${figure}, ${cell.label}: ${values.map(fmt).join(" / ")}`);
        return values.length === 0 ? null : median(values);
      });
      if (medians.every((m) => m === null)) continue;
      const ratio = medians[0] && medians[1] !== null ? `${(medians[1]! / medians[0]).toFixed(2)}x` : "";
      rows.push(`| ${variant.name} | ${figure} | ${medians.map((m) => (m === null ? "" : fmt(m))).join(" | ")} | ${ratio} |`);
    }
  }
  console.log(rows.join("\n"));
  console.log("\n```\nEvery run:\n  " + every.join("\n  ") + "\n```");
}
