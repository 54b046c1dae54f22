/**
 * `npx tsx bench/pg-statements.ts [--jobs 20000] [--runs 3] [--event-log on|off] [--plans-over-ms N]`
 *
 * Where PostgreSQL's time goes in Conveyor's processing run (docs/performance-postgres.md, "Fifth
 * pass"): the side-by-side bench's processing figure (one Worker, concurrency 10, prefetch 500,
 * `--jobs` no-op jobs) on a throwaway server with `pg_stat_statements` tracking every statement,
 * the ones the event and count triggers run inside included. Per statement: calls, rows, and the
 * server's execution time and WAL bytes per job processed, summed over `--runs` runs (each on a
 * fresh schema; the first run's statements are planned afresh, later runs reuse nothing).
 * Execution times count time spent waiting for a CPU on a loaded machine; the shares between
 * statements and the WAL bytes (exact) are the figures to compare.
 *
 * `--plans-over-ms N` also logs, through `auto_explain`, the plan a statement actually ran with
 * (the generic plan a pooled prepared statement keeps after five executions, which EXPLAIN of a
 * statement with its values written in does not show) for a fifth of the statements slower than
 * N ms, with buffers and trigger times, to `--plans-log` (default /tmp/conveyor-pg-plans.log).
 */
import { writeFile, readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { conveyorProcessing, fmt, machineLine } from "./lib.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "3" },
    "event-log": { type: "string", default: "on" },
    "plans-over-ms": { type: "string" },
    "plans-log": { type: "string", default: "/tmp/conveyor-pg-plans.log" },
  },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);
if (values["event-log"] !== "on" && values["event-log"] !== "off") throw new Error(`--event-log is on or off, not ${values["event-log"]}`);
const eventLog = values["event-log"] === "on";
const plansOverMs = values["plans-over-ms"];

const server = await startThrowawayPostgres({
  settings: {
    shared_preload_libraries: plansOverMs === undefined ? "pg_stat_statements" : "pg_stat_statements,auto_explain",
    "pg_stat_statements.track": "all",
    jit: "off",
    ...(plansOverMs === undefined
      ? {}
      : {
          "auto_explain.log_min_duration": `${Number(plansOverMs)}ms`,
          "auto_explain.log_analyze": "on",
          "auto_explain.log_buffers": "on",
          "auto_explain.log_triggers": "on",
          "auto_explain.sample_rate": "0.2",
        }),
  },
});
const admin = new pg.Client({ connectionString: server.url });
try {
  await admin.connect();
  await admin.query("CREATE EXTENSION pg_stat_statements");
  console.log(`${jobs} jobs × ${runs} runs, event log ${values["event-log"]}; ${machineLine()}\n`);
  const rates: number[] = [];
  // Every schema migrated first, so the statistics hold the runs' statements only.
  const backends: PostgresBackend[] = [];
  for (let run = 0; run < runs; run++) {
    const backend = new PostgresBackend({ connectionString: server.url, logger: silentLogger, eventLog, schema: `run${run}` });
    await backend.migrate();
    backends.push(backend);
  }
  await admin.query("SELECT pg_stat_statements_reset()");
  for (const backend of backends) {
    // The fill (bulk enqueues) is tracked too: its statements are rows of their own below.
    rates.push(await conveyorProcessing(backend, jobs, 10, 500));
    await backend.close();
  }
  const processed = jobs * runs;
  const { rows } = await admin.query<{ calls: string; rows: string; ms: number; wal: string; query: string }>(
    `SELECT calls, rows, total_exec_time AS ms, wal_bytes AS wal, regexp_replace(query, '\\s+', ' ', 'g') AS query
     FROM pg_stat_statements WHERE total_exec_time > 0 ORDER BY total_exec_time DESC LIMIT 20`,
  );
  console.log(`processing: ${rates.map((r) => fmt(r)).join(" / ")} jobs/s\n`);
  console.log("| statement (first words; the enqueue fill included) | calls | rows | µs per job | WAL bytes per job |");
  console.log("| --- | ---: | ---: | ---: | ---: |");
  for (const r of rows) {
    // A statement's own comment names it (-- claim: …); trigger statements start with their SQL.
    const name = (/^-- ([\w-]+):/.exec(r.query)?.[1] ?? r.query.replace(/"run\d+"\./g, "")).slice(0, 70);
    console.log(`| ${name} | ${r.calls} | ${r.rows} | ${((r.ms * 1000) / processed).toFixed(2)} | ${Math.round(Number(r.wal) / processed)} |`);
  }
  if (plansOverMs !== undefined) {
    await writeFile(values["plans-log"], await readFile(join(dirname(server.dataDir), "server.log")));
    console.log(`\nplans of statements over ${plansOverMs} ms (a fifth of them): ${values["plans-log"]}`);
  }
} finally {
  await admin.end();
  await server.stop();
}
