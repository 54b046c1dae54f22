/**
 * Where a single `queue.add` on Redis spends its time, Conveyor beside BullMQ on one throwaway
 * Redis: each round runs, for every subject in turn, `--calls` sequential single adds (the whole
 * client path: `Queue.add`, the checking facade, the backend, ioredis) on a fresh key prefix and
 * reads, per add:
 * - jobs/s (wall time: what the caller sees, and what a loaded machine disturbs most);
 * - the client's CPU time (process.cpuUsage: validation, JSON, ids, argument building, ioredis);
 * - Redis' main-thread CPU time (INFO cpu) and the commands it ran (INFO commandstats): round
 *   trips (script calls and plain commands sent by the client) and the commands run inside scripts.
 * Rounds rotate the order of the subjects so load on a shared machine hits all alike; figures are
 * medians over `--rounds`, ratios are paired round by round (bench/lib.ts pairedRatio).
 *
 * `--base DIR` adds another checkout's Conveyor (e.g. `/work/main`, its src/ imported as is) as
 * a subject, for a before/after in one run.
 *
 * `npx tsx bench/redis-single.ts [--calls 2000] [--rounds 5] [--base /work/main]`
 */
import { createRequire } from "node:module";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { Queue as BullQueue, type ConnectionOptions } from "bullmq";
import { Redis } from "ioredis";
import { storedJobId } from "../src/backend/redis/codec.js";
import { loadScripts } from "../src/backend/redis/scripts.js";
import { newJobId } from "../src/core/ids.js";
import { deletePrefix, startThrowawayRedis } from "../testkit/servers/redis.js";
import { formatLoad, machineLine, median, ownModule, pairedRatio, peerVersions } from "./lib.js";
import { loadavg } from "node:os";

const { values } = parseArgs({
  options: {
    calls: { type: "string", default: "2000" },
    rounds: { type: "string", default: "5" },
    base: { type: "string" },
    commandstats: { type: "boolean" },
  },
});
const calls = Number(values.calls);
const rounds = Number(values.rounds);
if (!Number.isInteger(calls) || calls < 1 || !Number.isInteger(rounds) || rounds < 1) {
  console.error(`--calls ${values.calls} --rounds ${values.rounds}: expected whole numbers of at least 1`);
  process.exit(2);
}

/** Adds before each measurement, not counted: the first registers the queue, the rest warm the JIT. */
const WARM_UP = 200;

/** One subject's way of adding one job, on a prefix of its own; `close` ends its connections. */
interface Adder {
  add(i: number): Promise<unknown>;
  close(): Promise<void>;
}
interface Subject {
  name: string;
  open(url: string, prefix: string): Promise<Adder>;
}

interface ConveyorModules {
  RedisBackend: new (options: Record<string, unknown>) => { migrate(): Promise<void>; close(): Promise<void> };
  Queue: new (name: string, options: { backend: unknown }) => { add(name: string, data: unknown): Promise<unknown> };
  silentLogger: unknown;
}

/** Conveyor from this tree (`root` null: in the form this bench runs in, lib.ts ownModule) or from the checkout at `root` (its sources). */
async function conveyorFrom(name: string, root: string | null, eventLog: boolean): Promise<Subject> {
  const url = (path: string) => (root === null ? ownModule(path).href : pathToFileURL(resolve(root, `${path}.ts`)).href);
  const { RedisBackend } = (await import(url("src/backend/redis/index"))) as Pick<ConveyorModules, "RedisBackend">;
  const { Queue, silentLogger } = (await import(url("src/index"))) as Pick<ConveyorModules, "Queue" | "silentLogger">;
  return {
    name,
    open: async (connection, prefix) => {
      const backend = new RedisBackend({ connection, prefix, logger: silentLogger, eventLog });
      await backend.migrate();
      const q = new Queue("bench", { backend });
      // The first add registers the queue (one SADD, once per connection), and the warm-up lets
      // the JIT compile the path: both outside the measurement.
      for (let i = 0; i < WARM_UP; i++) await q.add("noop", { i: -1 - i });
      return { add: (i) => q.add("noop", { i }), close: () => backend.close() };
    },
  };
}

/** BullMQ with its defaults, as bench/redis.ts runs it. */
function bullmq(): Subject {
  return {
    name: "BullMQ",
    open: async (url, prefix) => {
      const parsed = new URL(url);
      const connection: ConnectionOptions = { host: parsed.hostname, port: Number(parsed.port), maxRetriesPerRequest: null };
      const q = new BullQueue("bench", { connection, prefix });
      await q.waitUntilReady();
      for (let i = 0; i < WARM_UP; i++) await q.add("noop", { i: -1 - i });
      return { add: (i) => q.add("noop", { i }), close: () => q.close() };
    },
  };
}

/**
 * The floor: the least any queue must do per job on this server, one round trip that stores the
 * payload (a plain RPUSH of the JSON from raw ioredis): what is left of a single add once every
 * queue feature is taken away.
 */
function floor(): Subject {
  return {
    name: "floor (RPUSH)",
    open: async (url, prefix) => {
      const client = new Redis(url);
      const key = `${prefix}:floor`;
      for (let i = 0; i < WARM_UP; i++) await client.rpush(key, JSON.stringify({ i: -1 - i }));
      return {
        add: (i) => client.rpush(key, JSON.stringify({ i })),
        close: async () => void (await client.quit()),
      };
    },
  };
}

/**
 * Conveyor's enqueue script called straight from raw ioredis with the arguments the backend sends
 * for one job (log on): the Redis side of an add without Conveyor's client code. With `script`
 * "return 0", the same EVALSHA and arguments running nothing: the cost of the call's shape.
 */
function rawEnqueue(name: string, script: "enqueue" | "return 0"): Subject {
  return {
    name,
    open: async (url, prefix) => {
      const client = new Redis(url);
      const source = script === "enqueue" ? loadScripts(true).get("enqueue")!.flagged.source : "#!lua\nreturn 0";
      const sha = String(await client.script("LOAD", source));
      const base = `${prefix}:{bench}:`;
      const add = (i: number) => {
        const id = newJobId();
        return client.evalsha(
          sha,
          script === "enqueue" ? 5 : 4,
          `${base}meta`,
          `${base}sched`,
          `${base}idx`,
          `${base}names`,
          // The ready index, which the enqueue script names last (scripts.ts, keepsReadyIndex).
          ...(script === "enqueue" ? [`${prefix}:ready`] : []),
          "",
          `${prefix}:wake`,
          "bench",
          "",
          0,
          id,
          "noop",
          JSON.stringify({ i }),
          0,
          "",
          0,
          "3|86400000|604800000||e1000,60000",
          "",
          "",
          storedJobId(id),
        );
      };
      for (let i = 0; i < WARM_UP; i++) await add(-1 - i);
      return { add, close: async () => void (await client.quit()) };
    },
  };
}

const subjects: Subject[] = [
  await conveyorFrom("Conveyor", null, true),
  await conveyorFrom("Conveyor log off", null, false),
  ...(values.base ? [await conveyorFrom("base", values.base, true), await conveyorFrom("base log off", values.base, false)] : []),
  rawEnqueue("enqueue script, raw ioredis", "enqueue"),
  rawEnqueue("EVALSHA return 0, same arguments", "return 0"),
  floor(),
  bullmq(),
];
const server = await startThrowawayRedis({ persistence: "none" });
const admin = new Redis(server.url);

/**
 * Commands the subjects' clients send (round trips: single adds are sequential), counted at
 * ioredis' `sendCommand` of every ioredis copy in play (this tree's, which BullMQ shares, and the
 * base's), the admin connection left out.
 */
let sentByClients = 0;
function countSends(root: string): void {
  type Send = (this: unknown, ...args: unknown[]) => unknown;
  const ioredis = createRequire(resolve(root, "package.json"))("ioredis") as { Redis: { prototype: { sendCommand: Send } } };
  const proto = ioredis.Redis.prototype;
  const original: Send = proto.sendCommand;
  if ((original as { counting?: boolean }).counting) return;
  const counting: Send = function (this: unknown, ...args: unknown[]) {
    if (this !== admin) sentByClients++;
    return original.apply(this, args);
  };
  proto.sendCommand = Object.assign(counting, { counting: true });
}
countSends(".");
if (values.base) countSends(values.base);

/** Redis main-thread CPU µs (INFO cpu: CPU time, less disturbed by a busy machine than wall time), and every command it ran. */
async function redisCounters(): Promise<{ cpuMicros: number; commands: number }> {
  const cpu = await admin.info("cpu");
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, "m").exec(cpu)?.[1] ?? NaN);
  let commands = 0;
  // Redis 7 counts the commands a script runs in commandstats too. The admin's own are left out.
  for (const m of (await admin.info("commandstats")).matchAll(/^cmdstat_([\w|]+):calls=(\d+),/gm)) {
    if (m[1] !== "info" && m[1] !== "config") commands += Number(m[2]);
  }
  return { cpuMicros: (field("used_cpu_user_main_thread") + field("used_cpu_sys_main_thread")) * 1e6, commands };
}

interface Figures {
  jobsPerSecond: number;
  clientMicros: number;
  redisMicros: number;
  sent: number;
  inner: number;
}

/** `--commandstats`: each subject's INFO commandstats after its last run (which commands a script runs, µs each). */
const lastCommandstats = new Map<string, string>();

let prefixCount = 0;
async function measure(subject: Subject): Promise<Figures> {
  const prefix = `single-${process.pid}-${prefixCount++}`;
  const adder = await subject.open(server.url, prefix);
  try {
    await admin.config("RESETSTAT");
    const before = await redisCounters();
    const sent0 = sentByClients;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) await adder.add(i);
    const elapsed = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const sent = sentByClients - sent0;
    const after = await redisCounters();
    if (values.commandstats) lastCommandstats.set(subject.name, await admin.info("commandstats"));
    return {
      jobsPerSecond: calls / (elapsed / 1000),
      clientMicros: (cpu.user + cpu.system) / calls,
      redisMicros: (after.cpuMicros - before.cpuMicros) / calls,
      sent: sent / calls,
      inner: (after.commands - before.commands - sent) / calls,
    };
  } finally {
    await adder.close();
    await deletePrefix(server.url, prefix);
  }
}

const loadStart = loadavg();
console.log(`Redis single add, ${calls} sequential adds per run; ${peerVersions(["bullmq"])}; ${machineLine()}\n`);
const runs: Figures[][] = subjects.map(() => []);
try {
  for (let r = 0; r < rounds; r++) {
    // Rotate who goes first, so no subject always runs right after another's teardown.
    for (let k = 0; k < subjects.length; k++) {
      const i = (r + k) % subjects.length;
      const f = await measure(subjects[i]!);
      runs[i]!.push(f);
      process.stderr.write(
        `  .. round ${r + 1}/${rounds} ${subjects[i]!.name}: ${Math.round(f.jobsPerSecond)} jobs/s, client ${f.clientMicros.toFixed(1)} µs, ` +
          `Redis ${f.redisMicros.toFixed(1)} µs, sent ${f.sent.toFixed(2)}, inside ${f.inner.toFixed(2)} per add\n`,
      );
    }
  }
} finally {
  await admin.quit();
  await server.stop();
}

const peer = subjects.length - 1;
const cpuTotal = (f: Figures) => f.clientMicros + f.redisMicros;
const columns: [string, (f: Figures) => number, number][] = [
  ["jobs/s", (f) => f.jobsPerSecond, 0],
  ["client CPU µs/add", (f) => f.clientMicros, 1],
  ["Redis CPU µs/add", (f) => f.redisMicros, 1],
  ["client + Redis CPU µs/add", cpuTotal, 1],
  ["round trips/add", (f) => f.sent, 2],
  ["commands in scripts/add", (f) => f.inner, 2],
];
const ratio = (i: number, j: number, of: (f: Figures) => number) => `${pairedRatio(runs[i]!.map(of), runs[j]!.map(of)).toFixed(2)}x`;
console.log(`Medians of ${rounds} rounds; ÷ BullMQ paired round by round. A sequential add waits for both processes in turn, so the`);
console.log(`CPU the two spend per add bounds its rate; on a loaded machine it moves far less than the rate itself.\n`);
console.log(`| subject | ${columns.map(([c]) => c).join(" | ")} | jobs/s ÷ BullMQ | client + Redis CPU ÷ BullMQ | Redis CPU ÷ BullMQ |`);
console.log(`| --- |${columns.map(() => " ---: |").join("")} ---: | ---: | ---: |`);
for (const [i, s] of subjects.entries()) {
  const cells = columns.map(([, of, digits]) => median(runs[i]!.map(of)).toFixed(digits));
  console.log(
    `| ${s.name} | ${cells.join(" | ")} | ${ratio(i, peer, (f) => f.jobsPerSecond)} | ${ratio(i, peer, cpuTotal)} | ${ratio(i, peer, (f) => f.redisMicros)} |`,
  );
}
if (values.base) {
  const at = (name: string) => subjects.findIndex((s) => s.name === name);
  console.log(`\nThis tree ÷ base, paired round by round:`);
  for (const [mine, theirs] of [
    ["Conveyor", "base"],
    ["Conveyor log off", "base log off"],
  ] as const) {
    const [i, j] = [at(mine), at(theirs)];
    console.log(
      `  ${mine}: jobs/s ${ratio(i, j, (f) => f.jobsPerSecond)}, client CPU ${ratio(i, j, (f) => f.clientMicros)}, ` +
        `Redis CPU ${ratio(i, j, (f) => f.redisMicros)}, client + Redis CPU ${ratio(i, j, cpuTotal)}`,
    );
  }
}
console.log(`\nLoad average (1/5/15 min) at start ${formatLoad(loadStart)}, at end ${formatLoad(loadavg())}.`);

if (values.commandstats) {
  for (const [name, info] of lastCommandstats) {
    console.log(`\n${name}, INFO commandstats of its last run (calls and µs per call of every command, those inside scripts included):`);
    for (const m of info.matchAll(/^cmdstat_([\w|]+):calls=(\d+),usec=\d+,usec_per_call=([\d.]+)/gm)) {
      if (m[1] !== "info" && m[1] !== "config")
        console.log(`  ${m[1]!.padEnd(12)} ${(Number(m[2]) / calls).toFixed(2).padStart(6)} per add  ${m[3]!.padStart(7)} µs per call`);
    }
  }
}
