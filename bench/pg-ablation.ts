/**
 * `npx tsx bench/pg-ablation.ts [--jobs 20000] [--runs 3] [--only 0,2,5] [--main <checkout of main>] [--phase processing|bulk|single]`
 *
 * The price of each piece of Conveyor's PostgreSQL processing path (docs/performance-postgres.md,
 * "Sixth pass"): the processing figure of bench/pg-statements.ts (one Worker, concurrency 10,
 * prefetch 500, `--jobs` no-op jobs) on schemas that each lack one trigger or index, interleaved
 * run by run on one throwaway server. Per variant, medians over `--runs`: jobs/s; the server's
 * CPU time per job (user + system time of every server process, from /proc: the figure that
 * least depends on what else the machine runs, since waiting for a CPU is not counted); its
 * execution time per job (every top-level statement of that schema, from pg_stat_statements:
 * the statements' triggers run inside them and are counted with them; waiting for a CPU is
 * counted); and WAL bytes per job (the WAL position before and after, nothing else running on the
 * server). `--main <dir>` adds main's backend as shipped (imported from that checkout, its own
 * migrations on its own schema) as the first row, so a change and the pieces it touches are
 * priced in one run.
 *
 * `--phase bulk` times one `addBulk` of `--jobs` jobs into an empty schema instead, and `--phase
 * single` `--jobs` sequential `add`s (the side-by-side bench's enqueue figures); both add the
 * client's CPU time per job (this process: building the specs and the statement's parameters), a
 * large part of a bulk enqueue.
 *
 * An ablation is not a design: a schema without its event triggers has no event log, one without
 * its count triggers has wrong stats(). Each row says what that piece costs, which is what a
 * redesign keeping the piece's contract can hope to win at most.
 */
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, conveyorProcessFilled, FILL_CHUNK, fmt, machineLine, median, noopJobs, rate, serverCpuMs } from "./lib.js";

/** A variant: the DDL run on its schema after the fill (`schema` quoted); main's backend when `main`. */
interface Variant {
  readonly name: string;
  readonly ddl: (schema: string) => string;
  readonly main?: true;
  readonly eventLogOff?: true;
  /** The jobs get ids from the caller (`jobId`), so the enqueue looks for stored ids (enqueue.sql). */
  readonly givenIds?: true;
}

const VARIANTS: readonly Variant[] = [
  { name: "as shipped", ddl: () => "" },
  { name: "event log off (eventLog: false)", ddl: () => "", eventLogOff: true },
  {
    name: "no event triggers",
    ddl: (s) => `DROP TRIGGER jobs_events_added ON ${s}.jobs; DROP TRIGGER jobs_events_changed ON ${s}.jobs;`,
  },
  {
    name: "no count triggers (fold kept)",
    ddl: (s) => `DROP TRIGGER jobs_counts_added ON ${s}.jobs; DROP TRIGGER jobs_counts_changed ON ${s}.jobs; DROP TRIGGER jobs_counts_removed ON ${s}.jobs;`,
  },
  { name: "no fold trigger", ddl: (s) => `DROP TRIGGER jobs_counts_then_fold ON ${s}.jobs;` },
  {
    name: "no statement triggers at all",
    ddl: (s) =>
      ["jobs_events_added", "jobs_events_changed", "jobs_counts_added", "jobs_counts_changed", "jobs_counts_removed", "jobs_counts_then_fold"]
        .map((t) => `DROP TRIGGER ${t} ON ${s}.jobs;`)
        .join(" "),
  },
  {
    name: "no statement triggers, transition tables still built",
    ddl: (s) =>
      ["jobs_events_added", "jobs_events_changed", "jobs_counts_added", "jobs_counts_changed", "jobs_counts_removed", "jobs_counts_then_fold"]
        .map((t) => `DROP TRIGGER ${t} ON ${s}.jobs;`)
        .join(" ") +
      ` CREATE FUNCTION ${s}.ablation_nothing() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
        CREATE TRIGGER ablation_capture AFTER UPDATE ON ${s}.jobs REFERENCING OLD TABLE AS o NEW TABLE AS n
          FOR EACH STATEMENT EXECUTE FUNCTION ${s}.ablation_nothing();`,
  },
  {
    name: "no flow row triggers",
    ddl: (s) => `DROP TRIGGER flow_child_settled ON ${s}.jobs; DROP TRIGGER flow_parent_cancelled ON ${s}.jobs;`,
  },
  {
    // jobs_finished took the place of jobs_done, jobs_dead and jobs_finished_at (migration 0015).
    name: "no finished-job indexes (finished, expires)",
    ddl: (s) => `DROP INDEX ${s}.jobs_finished; DROP INDEX ${s}.jobs_expires;`,
  },
  {
    name: "ids given by the caller (enqueue.sql's ON CONFLICT for every job)",
    ddl: () => "",
    givenIds: true,
  },
  { name: "no jobs_waiting_seq", ddl: (s) => `DROP INDEX ${s}.jobs_waiting_seq;` },
];

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "3" },
    only: { type: "string" },
    main: { type: "string" },
    direct: { type: "boolean", default: false },
    phase: { type: "string", default: "processing" },
  },
});
const direct = values.direct;
const phase = values.phase;
if (phase !== "processing" && phase !== "bulk" && phase !== "single") throw new Error(`--phase is processing, bulk or single, not ${phase}`);
const jobs = Number(values.jobs);
const runs = Number(values.runs);
const only = values.only?.split(",").map(Number);
const variants: Variant[] = [
  ...(values.main === undefined ? [] : [{ name: "main, as shipped", ddl: () => "", main: true as const }]),
  ...(only === undefined ? VARIANTS : VARIANTS.filter((_, i) => only.includes(i))),
];
type BackendClass = typeof PostgresBackend;
const mainBackend =
  values.main === undefined
    ? null
    : ((await import(pathToFileURL(`${values.main}/src/backend/postgres/index.ts`).href)) as { PostgresBackend: BackendClass }).PostgresBackend;

/** `--direct`: claim 500, then complete-and-claim each batch with the next, until none is left; jobs/s. */
async function processDirectly(backend: PostgresBackend, n: number): Promise<number> {
  const request = { queues: ["bench"], names: ["noop"], worker: { id: "w", host: "h", pid: 1 }, limit: 500, leaseMs: 600_000 };
  const started = performance.now();
  let batch = await backend.claim(request);
  let done = 0;
  while (batch.length > 0) {
    const { settled, claimed } = await backend.completeAndClaim(
      batch.map((c) => ({ lease: c.lease, result: null })),
      request,
    );
    done += settled.filter((r) => r === "applied").length;
    batch = claimed;
  }
  if (done !== n) throw new Error(`processed ${done} of ${n} jobs`);
  return n / ((performance.now() - started) / 1000);
}

const server = await startThrowawayPostgres({
  settings: {
    shared_preload_libraries: "pg_stat_statements",
    "pg_stat_statements.track": "top",
    jit: "off",
    ...(direct ? { autovacuum: "off" } : {}),
  },
});
const admin = new pg.Client({ connectionString: server.url });
try {
  await admin.connect();
  await admin.query("CREATE EXTENSION pg_stat_statements");
  const shape =
    phase === "bulk"
      ? "one addBulk into an empty schema"
      : phase === "single"
        ? "sequential adds into an empty schema"
        : direct
          ? "store calls alone (claim, then complete-and-claim of 500 each), autovacuum off"
          : "one Worker, concurrency 10, prefetch 500";
  console.log(`${jobs} jobs × ${runs} runs per variant, ${shape}, event log on unless said; start: ${machineLine()}\n`);
  const results = variants.map(() => ({ rate: [] as number[], cpu: [] as number[], client: [] as number[], us: [] as number[], wal: [] as number[] }));
  for (let run = 0; run < runs; run++) {
    // Each run starts one variant later, so none is always first (the first of a run meets a
    // server and a process that are still warming up: measured, the first variant's client CPU
    // per job was 40% above the last's with identical code).
    for (let k = 0; k < variants.length; k++) {
      const v = (run + k) % variants.length;
      const variant = variants[v]!;
      const schema = `abl_${v}_${run}`;
      const backend = new (variant.main ? mainBackend! : PostgresBackend)({
        connectionString: server.url,
        logger: silentLogger,
        schema,
        eventLog: !variant.eventLogOff,
      });
      try {
        await backend.migrate();
        const q = new Queue("bench", { backend });
        const withIds = (batch: ReturnType<typeof noopJobs>, start: number) =>
          variant.givenIds ? batch.map((job, k) => ({ ...job, options: { jobId: `given-${run}-${start + k}` } })) : batch;
        if (phase === "processing") for (const [start, length] of chunks(jobs, FILL_CHUNK)) await q.addBulk(withIds(noopJobs(start, length), start));
        // The enqueue phases: one job first, so the queue's row and the prepared statement exist
        // (the side-by-side bench's first add pays for them; a mean of 2,000 hides it).
        else await q.add("noop", { warm: true }, variant.givenIds ? { jobId: `given-${run}-warm` } : {});
        const ddl = variant.ddl(`"${schema}"`);
        if (ddl !== "") await admin.query(ddl);
        await admin.query("VACUUM ANALYZE " + `"${schema}".jobs`);
        await admin.query("CHECKPOINT");
        await admin.query("SELECT pg_stat_statements_reset()");
        const before = (await admin.query<{ lsn: string }>("SELECT pg_current_wal_lsn() AS lsn")).rows[0]!.lsn;
        const cpuBefore = await serverCpuMs(server.dataDir);
        const clientBefore = process.cpuUsage();
        const jobsPerSecond =
          phase === "bulk"
            ? await rate(jobs, () => q.addBulk(withIds(noopJobs(0, jobs), 0)))
            : phase === "single"
              ? await rate(jobs, async () => {
                  for (let i = 0; i < jobs; i++) await q.add("noop", { i }, variant.givenIds ? { jobId: `given-${run}-${i}` } : {});
                })
              : direct
                ? await processDirectly(backend, jobs)
                : await conveyorProcessFilled(backend, jobs, 10, 500);
        const client = process.cpuUsage(clientBefore);
        const cpuMs = (await serverCpuMs(server.dataDir)) - cpuBefore;
        const { rows } = await admin.query<{ wal: string; ms: number }>(
          `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS wal,
                  (SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements WHERE query LIKE '%' || $2 || '%') AS ms`,
          [before, `"${schema}"`],
        );
        results[v]!.rate.push(jobsPerSecond);
        results[v]!.cpu.push((cpuMs * 1000) / jobs);
        results[v]!.client.push((client.user + client.system) / jobs);
        results[v]!.us.push((rows[0]!.ms * 1000) / jobs);
        results[v]!.wal.push(Number(rows[0]!.wal) / jobs);
        process.stderr.write(`  .. run ${run + 1}, ${variant.name}: ${fmt(jobsPerSecond)} jobs/s\n`);
      } finally {
        await backend.close();
        await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
      }
    }
  }
  const base = results[0]!;
  console.log(`(differences against the first row, "${variants[0]!.name}")\n`);
  console.log(
    "| variant | jobs/s (median) | ÷ first | server CPU µs per job | − first | client CPU µs per job | − first | server exec µs per job | − first | WAL bytes per job | − first |",
  );
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const [v, variant] of variants.entries()) {
    const r = results[v]!;
    const [jobsPerSecond, cpu, client, us, wal] = [median(r.rate), median(r.cpu), median(r.client), median(r.us), median(r.wal)];
    console.log(
      `| ${variant.name} | ${fmt(jobsPerSecond)} | ${(jobsPerSecond / median(base.rate)).toFixed(2)}x | ${cpu.toFixed(1)} | ${(cpu - median(base.cpu)).toFixed(1)} | ${client.toFixed(1)} | ${(client - median(base.client)).toFixed(1)} | ${us.toFixed(1)} | ${(us - median(base.us)).toFixed(1)} | ${Math.round(wal)} | ${Math.round(wal - median(base.wal))} |`,
    );
  }
  console.log("\nEvery run (jobs/s; server CPU µs per job; client CPU µs per job; server exec µs per job):");
  for (const [v, variant] of variants.entries()) {
    const r = results[v]!;
    const list = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(" / ");
    console.log(`  ${variant.name}: ${r.rate.map(fmt).join(" / ")}; ${list(r.cpu)}; ${list(r.client)}; ${list(r.us)}`);
  }
  console.log(`\nend: ${machineLine()}`);
} finally {
  await admin.end();
  await server.stop();
}
