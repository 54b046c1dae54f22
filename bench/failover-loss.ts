/**
 * `npm run bench:failover -- [--trials N] [--seconds S] [--concurrency C]`
 *
 * What a failover loses, and what not losing it costs (issue 19; docs/failover.md):
 *
 * 1. Loss on promotion. Producers add jobs as fast as they can (C adds in flight), each add's
 *    acknowledgement recorded; after 1 s the primary is killed (Redis: SIGKILL; PostgreSQL:
 *    `pg_ctl stop -m immediate`) and its replica promoted (Sentinel; `pg_ctl promote`). Then every
 *    acknowledged job is looked up on the new primary: the ones missing were acknowledged and
 *    never replicated. Per setting: Redis without and with `waitForReplicas: { replicas: 1 }`
 *    (WAIT after each script), PostgreSQL with an asynchronous and a synchronous standby
 *    (synchronous_commit on). N trials each, the topology put back between trials.
 * 2. The cost: adds per second (C in flight, S seconds) and the add's median latency with each
 *    setting, on a healthy pair, the settings interleaved, 3 runs each, medians and ratios.
 */
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { openBackend } from "../src/backend/open.js";
import { Queue, type Backend } from "../src/index.js";
import { startPostgresPair, type PostgresPair } from "../testkit/servers/postgres-standby.js";
import { startThrowawaySentinel, type ThrowawaySentinel } from "../testkit/servers/redis-topology.js";
import { fmt, machineLine, median, percentile, sleep } from "./lib.js";

const { values } = parseArgs({
  options: {
    trials: { type: "string", default: "5" },
    seconds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "32" },
  },
});
const TRIALS = Number(values.trials);
const SECONDS = Number(values.seconds);
const CONCURRENCY = Number(values.concurrency);

interface Load {
  acked: string[];
  latencies: number[];
  errors: number;
  /** Adds still unsettled 30 s after the stop (a call that hangs): reported, never waited for. */
  hung: number;
  stop(): Promise<void>;
}

/** C loops adding one job at a time until stopped; acknowledged ids and latencies recorded. */
function load(queue: Queue): Load {
  const acked: string[] = [];
  const latencies: number[] = [];
  let errors = 0;
  let running = true;
  let hung = 0;
  let settledLoops = 0;
  const loops = Array.from({ length: CONCURRENCY }, async () => {
    while (running) {
      const id = randomUUID();
      const t0 = performance.now();
      try {
        await queue.add("probe", { id }, { jobId: id });
        latencies.push(performance.now() - t0);
        acked.push(id);
      } catch {
        errors++;
        await sleep(20);
      }
    }
    settledLoops++;
  });
  return {
    acked,
    latencies,
    get errors() {
      return errors;
    },
    get hung() {
      return hung;
    },
    async stop() {
      running = false;
      await Promise.race([Promise.all(loops), sleep(30_000)]);
      hung = CONCURRENCY - settledLoops;
    },
  };
}

async function missing(backend: Backend, ids: readonly string[]): Promise<number> {
  let n = 0;
  for (const id of ids) if ((await backend.get(id)) === null) n++;
  return n;
}

interface Setting {
  name: string;
  /** Opens a backend on the healthy topology. */
  open(): Promise<Backend>;
  /** Opens a backend to read what the promoted replica has (no WAIT: it has no replica yet). */
  openReader(): Promise<Backend>;
  /** Kills the primary and resolves once the replica is promoted. */
  failover(): Promise<void>;
  /** Puts the topology back (old primary as a replica, in sync). */
  restore(): Promise<void>;
}

async function lossTrials(setting: Setting): Promise<{ acked: number[]; lost: number[]; hung: number[] }> {
  const out = { acked: [] as number[], lost: [] as number[], hung: [] as number[] };
  for (let trial = 0; trial < TRIALS; trial++) {
    console.error(`  ${setting.name}: trial ${trial + 1} starting`);
    const backend = await setting.open();
    const queue = new Queue(`loss-${trial}`, { backend });
    const running = load(queue);
    await sleep(1_000);
    const t0 = Date.now();
    await setting.failover();
    const promotedMs = Date.now() - t0;
    await sleep(500);
    await running.stop();
    out.hung.push(running.hung);
    await Promise.race([backend.close(), sleep(10_000)]);
    const checker = await setting.openReader();
    out.acked.push(running.acked.length);
    out.lost.push(await missing(checker, running.acked));
    await checker.close();
    await setting.restore();
    console.log(
      `  ${setting.name}: trial ${trial + 1}: ${running.acked.length} acknowledged, ${out.lost.at(-1)} missing after the promotion (promoted after ${promotedMs} ms)${running.hung ? `, ${running.hung} add(s) never settled` : ""}`,
    );
  }
  return out;
}

async function cost(setting: Setting): Promise<{ perSec: number; p50: number; p99: number }> {
  const backend = await setting.open();
  const queue = new Queue(`cost-${randomUUID().slice(0, 8)}`, { backend });
  const running = load(queue);
  await sleep(SECONDS * 1000);
  await running.stop();
  await backend.close();
  return { perSec: running.acked.length / SECONDS, p50: percentile(running.latencies, 50), p99: percentile(running.latencies, 99) };
}

function redisSettings(topology: ThrowawaySentinel, prefix: string): Setting[] {
  let old: Awaited<ReturnType<ThrowawaySentinel["killPrimary"]>> | null = null;
  const make = (name: string, wait: string): Setting => ({
    name,
    open: () => openBackend(`${topology.url}?prefix=${prefix}${wait}`),
    openReader: () => openBackend(`${topology.url}?prefix=${prefix}`),
    async failover() {
      old = await topology.killPrimary();
      await topology.waitForFailover(old);
    },
    async restore() {
      if (old) await topology.restart(old);
      old = null;
    },
  });
  return [make("Redis, asynchronous replica", ""), make("Redis, waitForReplicas 1 (WAIT, 5 s timeout)", "&wait_replicas=1&wait_timeout_ms=5000")];
}

function postgresSetting(name: string, pair: PostgresPair): Setting {
  return {
    name,
    open: () => openBackend(`${pair.url}&schema=bench_loss`),
    openReader: () => openBackend(`${pair.url}&schema=bench_loss`),
    async failover() {
      await pair.crashPrimary();
      await pair.promote();
    },
    restore: () => pair.rebuildStandby(),
  };
}

async function main(): Promise<void> {
  console.log(`failover loss and cost: ${TRIALS} trials, ${CONCURRENCY} adds in flight, cost over ${SECONDS} s x 3\n${machineLine()}\n`);
  const rows: string[] = [];
  const costRows: Array<{ name: string; perSec: number[]; p50: number[]; p99: number[] }> = [];

  const sentinel = await startThrowawaySentinel();
  const pgAsync = await startPostgresPair({ database: "bench", synchronous: false });
  const pgSync = await startPostgresPair({ database: "bench", synchronous: true });
  try {
    const settings = [
      ...redisSettings(sentinel, `loss-${randomUUID().slice(0, 6)}`),
      postgresSetting("PostgreSQL, asynchronous standby", pgAsync),
      postgresSetting("PostgreSQL, synchronous standby", pgSync),
    ];
    // The cost first, on healthy topologies, interleaved.
    for (const s of settings) costRows.push({ name: s.name, perSec: [], p50: [], p99: [] });
    for (let run = 0; run < 3; run++) {
      for (const [i, s] of settings.entries()) {
        const c = await cost(s);
        costRows[i]!.perSec.push(c.perSec);
        costRows[i]!.p50.push(c.p50);
        costRows[i]!.p99.push(c.p99);
      }
    }
    for (const s of settings) {
      const r = await lossTrials(s);
      const total = r.lost.reduce((a, b) => a + b, 0);
      rows.push(
        `| ${s.name} | ${TRIALS} | ${fmt(median(r.acked))} | ${r.lost.join(", ")} | ${total} of ${r.acked.reduce((a, b) => a + b, 0)} | ${r.hung.reduce((a, b) => a + b, 0)} |`,
      );
    }
  } finally {
    await sentinel.stop();
    await pgAsync.stop();
    await pgSync.stop();
  }
  console.log("\nLoss on promotion (acknowledged adds missing on the promoted replica):\n");
  console.log("| setting | trials | adds acknowledged per trial (median) | missing per trial | missing in all | adds that never settled |");
  console.log("| --- | ---: | ---: | --- | ---: | ---: |");
  for (const row of rows) console.log(row);
  console.log(`\nCost on a healthy pair (${CONCURRENCY} adds in flight, medians of 3 runs of ${SECONDS} s):\n`);
  console.log("| setting | adds/s | vs. without | add p50, ms | add p99, ms |");
  console.log("| --- | ---: | ---: | ---: | ---: |");
  for (const [i, r] of costRows.entries()) {
    const base = costRows[i % 2 === 0 ? i : i - 1]!;
    console.log(
      `| ${r.name} | ${fmt(median(r.perSec))} | ${(median(r.perSec) / median(base.perSec)).toFixed(2)} | ${fmt(median(r.p50))} | ${fmt(median(r.p99))} |`,
    );
  }
  console.log(`\n${machineLine()}`);
}

await main();
