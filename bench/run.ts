/**
 * `npm run bench [-- --backend sqlite|postgres|redis|rabbitmq] [--jobs 20000] [--single 2000] [--samples 300] [--runs 5]`
 * `npm run bench -- --backend redis --event-log both` (Conveyor with its event log on and off beside BullMQ; default on)
 * `npm run bench -- --metrics [--db URL] [--jobs 20000] [--runs 5]` (bench/metrics.ts: metrics and tracing on vs off)
 * `npm run bench -- --http [--backend sqlite|postgres|redis] [--connections 50] [--duration 10]` (bench/http.ts)
 * `npm run bench -- --flowctl [--backend sqlite|postgres|redis] [--jobs 5000] [--runs 3] [--rate 100] [--window 10] [--minute] [--big 20000] [--million] [--accuracy-only]` (bench/flowctl.ts)
 * `npm run bench -- --outbox [--events 20000] [--samples 200] [--runs 3]` (bench/outbox.ts: the outbox relay)
 * `npm run bench -- --kafka [--events 20000] [--jobs 10000] [--runs 3]` (bench/kafka.ts: mock broker, not Kafka)
 * `npm run bench -- --backend postgres --soak [--minutes 10] [--rate 2000]` (bench/pg-soak.ts: table bloat)
 * `npm run bench -- --backend postgres|sqlite|redis --scale [--sizes 10000,100000,1000000] [--runs 3] [--samples 100] [--retained N] [--only conveyor]`
 *   (bench/pg-scale.ts, sqlite-scale.ts, redis-scale.ts over bench/scale.ts: growth with the backlog; `--retained` PostgreSQL and SQLite)
 * `npm run bench -- --queues [--backend postgres,sqlite,redis] [--runs 3] [--claims 300] [--main /work/main]` (bench/queues.ts: claim cost with 999 empty queues named)
 * `npm run bench -- --backend postgres --explain [--backlog 100000] [--jobs 20000]` (bench/pg-explain.ts: plans, WAL per job)
 * `npm run bench -- --backend postgres --ab [--main /work/main] [--jobs 20000] [--runs 3]` (bench/pg-ab.ts: main's backend against this tree's)
 * `npm run bench -- --backend sqlite --ab [--main /work/main] [--runs 3]` (bench/sqlite.ts: main's SqliteBackend beside this tree's)
 * `npm run bench -- --backend sqlite --ab --cpu [--main /work/main] [--jobs 20000] [--runs 5]` (bench/sqlite-cpu.ts: CPU seconds per job)
 * `npm run bench -- --backend postgres --event-log-cost [--jobs 20000] [--runs 5]` (bench/pg-event-log.ts: trigger cost)
 * `npm run bench -- --backend postgres --wal-breakdown [--jobs 10000]` (bench/pg-wal-breakdown.ts: WAL per relation)
 * `npm run bench -- --backend postgres --retain-processed [--retained 10000000] [--runs 3] [--samples 100] [--fillers 2]`
 *   (bench/pg-retain.ts: claims with 10,000 waiting, before and after that many jobs processed and kept, one database)
 *
 * Throughput and latency of Conveyor, one process, no-op jobs. SQLite (the default) measures
 * Conveyor alone; postgres races graphile-worker and pg-boss, redis races BullMQ, rabbitmq races raw amqplib and BullMQ, side by side on
 * one server, and prints the ratio Conveyor/peer per figure. Each figure is the median of `--runs`
 * runs (default 5) per subject, the subjects' runs interleaved (A, B, C, A, B, C, ...) so load
 * from other processes lands on all of them alike; the output ends with every run and the load
 * average at start and end (bench/lib.ts). Not part of `npm test`: timings belong here, never in
 * assertions.
 */
import { parseArgs } from "node:util";
import type { BenchSizes } from "./lib.js";
import type { ScaleOptions } from "./scale.js";

// What metrics and tracing cost (bench/metrics.ts), with options of its own.
if (process.argv.includes("--metrics")) await import("./metrics.js").then(() => process.exit(process.exitCode ?? 0));
// Many queues (bench/queues.ts): claim cost with 999 empty queues named, with options of its own.
if (process.argv.includes("--queues")) {
  await import("./queues.js").then((m) => m.main(process.argv.slice(2).filter((a) => a !== "--queues")));
  process.exit(process.exitCode ?? 0);
}
// Retention of processed jobs on PostgreSQL (bench/pg-retain.ts), with options of its own.
if (process.argv.includes("--retain-processed")) {
  if (!process.argv.includes("postgres")) {
    console.error("--retain-processed measures PostgreSQL: use it with --backend postgres");
    process.exit(2);
  }
  const { values: retain } = parseArgs({
    options: {
      backend: { type: "string" },
      "retain-processed": { type: "boolean" },
      retained: { type: "string", default: "10000000" },
      runs: { type: "string", default: "3" },
      samples: { type: "string", default: "100" },
      fillers: { type: "string", default: "2" },
    },
  });
  const { main } = await import("./pg-retain.js");
  await main({ retained: Number(retain.retained), runs: Number(retain.runs), samples: Number(retain.samples), fillers: Number(retain.fillers) });
  process.exit(process.exitCode ?? 0);
}
// Flow control (bench/flowctl.ts): overhead of limits, rate accuracy, queries while limited.
if (process.argv.includes("--flowctl")) await import("./flowctl.js").then(() => process.exit(process.exitCode ?? 0));
// The outbox relay benchmark has options of its own (bench/outbox.ts).
if (process.argv.includes("--outbox")) {
  await import("./outbox.js");
  process.exit(process.exitCode ?? 0);
}

// Kafka (against librdkafka's mock cluster, not Kafka) has options of its own (bench/kafka.ts).
if (process.argv.includes("--kafka")) {
  await import("./kafka.js");
  process.exit(process.exitCode ?? 0);
}

// The HTTP benchmark has options of its own: hand it the command line without --http.
if (process.argv.includes("--http")) {
  process.argv = process.argv.filter((a) => a !== "--http");
  await import("./http.js");
  process.exit(process.exitCode ?? 0);
}

const { values } = parseArgs({
  options: {
    backend: { type: "string", default: "sqlite" },
    jobs: { type: "string", default: "20000" },
    single: { type: "string", default: "2000" },
    samples: { type: "string", default: "300" },
    runs: { type: "string", default: "5" },
    soak: { type: "boolean", default: false },
    minutes: { type: "string", default: "10" },
    rate: { type: "string", default: "2000" },
    explain: { type: "boolean", default: false },
    scale: { type: "boolean", default: false },
    "event-log-cost": { type: "boolean", default: false },
    "wal-breakdown": { type: "boolean", default: false },
    sizes: { type: "string", default: "10000,100000,1000000" },
    retained: { type: "string", default: "0" },
    only: { type: "string", default: "" },
    backlog: { type: "string", default: "100000" },
    ab: { type: "boolean", default: false },
    cpu: { type: "boolean", default: false },
    main: { type: "string", default: "/work/main" },
    "event-log": { type: "string", default: "on" },
  },
});
/** Whether option `name` was given, so a bench whose own default differs from the table's above can tell `--runs 5` from nothing. */
const given = (name: string): boolean => process.argv.some((arg) => arg === `--${name}` || arg.startsWith(`--${name}=`));

if (values.soak) {
  if (values.backend !== "postgres") {
    console.error("--soak measures PostgreSQL table bloat: use it with --backend postgres");
    process.exit(2);
  }
  const { main } = await import("./pg-soak.js");
  await main({ minutes: Number(values.minutes), rate: Number(values.rate) });
  process.exit(process.exitCode ?? 0);
}

if (values.explain) {
  if (values.backend !== "postgres") {
    console.error("--explain shows PostgreSQL statement plans and WAL per job: use it with --backend postgres");
    process.exit(2);
  }
  const { main } = await import("./pg-explain.js");
  await main({ backlog: Number(values.backlog), jobs: Number(values.jobs) });
  process.exit(process.exitCode ?? 0);
}

if (values["event-log-cost"]) {
  if (values.backend !== "postgres") {
    console.error("--event-log-cost measures PostgreSQL's event-log triggers: use it with --backend postgres");
    process.exit(2);
  }
  const { main } = await import("./pg-event-log.js");
  await main({ jobs: Number(values.jobs), runs: Number(values.runs) });
  process.exit(process.exitCode ?? 0);
}

if (values.ab && values.backend === "sqlite" && values.cpu) {
  const { main } = await import("./sqlite-cpu.js");
  await main({ mainDir: values.main, jobs: Number(values.jobs), runs: given("runs") ? Number(values.runs) : 5 });
  process.exit(process.exitCode ?? 0);
}

if (values.ab && values.backend === "sqlite") {
  const { main } = await import("./sqlite.js");
  // 3 runs unless --runs is given (the general default of 5 is for one subject per backend).
  const runs = given("runs") ? Number(values.runs) : 3;
  await main({ jobs: Number(values.jobs), single: Number(values.single), samples: Number(values.samples), runs }, { abMain: values.main });
  process.exit(process.exitCode ?? 0);
}

if (values["wal-breakdown"]) {
  if (values.backend !== "postgres") {
    console.error("--wal-breakdown reads PostgreSQL's WAL per relation: use it with --backend postgres");
    process.exit(2);
  }
  const { main } = await import("./pg-wal-breakdown.js");
  await main({ jobs: values.jobs === "20000" ? 10_000 : Number(values.jobs) });
  process.exit(process.exitCode ?? 0);
}

if (values.ab) {
  if (values.backend !== "postgres") {
    console.error("--ab compares main's backend with this tree's: use it with --backend postgres or sqlite");
    process.exit(2);
  }
  const { main } = await import("./pg-ab.js");
  await main({ mainDir: values.main, jobs: Number(values.jobs), runs: given("runs") ? Number(values.runs) : 3 });
  process.exit(process.exitCode ?? 0);
}

if (values.scale) {
  const sizes = values.sizes.split(",").map(Number);
  if (sizes.some((n) => !Number.isInteger(n) || n < 1)) {
    console.error(`--sizes ${values.sizes}: expected whole numbers separated by commas, e.g. 10000,100000,1000000`);
    process.exit(2);
  }
  const retained = Number(values.retained);
  if (!Number.isInteger(retained) || retained < 0) {
    console.error(`--retained ${values.retained}: expected a whole number of finished jobs to keep beside each backlog, e.g. 1000000 (0: none)`);
    process.exit(2);
  }
  const scaleBenches: Record<string, () => Promise<{ main: (options: ScaleOptions & { svgPath: string }) => Promise<void> }>> = {
    postgres: () => import("./pg-scale.js"),
    sqlite: () => import("./sqlite-scale.js"),
    redis: () => import("./redis-scale.js"),
  };
  const load = scaleBenches[values.backend];
  if (!load) {
    console.error(`--scale measures growth on postgres, sqlite or redis; got --backend ${values.backend}`);
    process.exit(2);
  }
  const { main } = await load();
  await main({
    sizes,
    runs: given("runs") ? Number(values.runs) : 3,
    samples: given("samples") ? Number(values.samples) : 100,
    retained,
    only: values.only ? values.only.split(",") : [],
    svgPath: `docs/performance-${values.backend}-scale.svg`,
  });
  process.exit(process.exitCode ?? 0);
}

// Imported lazily so each backend only loads its own drivers (and peers).
const backends: Record<string, () => Promise<{ main(sizes: BenchSizes): Promise<void> }>> = {
  sqlite: () => import("./sqlite.js"),
  postgres: () => import("./postgres.js"),
  redis: () => import("./redis.js"),
  rabbitmq: () => import("./amqp.js"),
};
const load = backends[values.backend];
if (load === undefined) {
  console.error(`--backend ${values.backend}: expected one of ${Object.keys(backends).join(", ")}`);
  process.exit(2);
}
const sizes: BenchSizes = {
  jobs: Number(values.jobs),
  single: Number(values.single),
  samples: Number(values.samples),
  runs: Number(values.runs),
};
for (const [option, value] of Object.entries(sizes)) {
  if (!Number.isInteger(value) || value < 1) {
    console.error(`--${option} ${String(values[option as keyof typeof values])}: expected a whole number of at least 1`);
    process.exit(2);
  }
}
if (values.backend === "redis") {
  // --event-log on|off|both: Conveyor with its Redis event log on, off, or both beside BullMQ (bench/redis.ts).
  const eventLog = values["event-log"];
  if (eventLog !== "on" && eventLog !== "off" && eventLog !== "both") {
    console.error(`--event-log ${eventLog}: expected on, off or both`);
    process.exit(2);
  }
  const { main } = await import("./redis.js");
  await main(sizes, { eventLog });
} else await (await load()).main(sizes);
