/**
 * `npm run bench -- --backend postgres --wal-breakdown [--jobs 10000]`
 *
 * Where the WAL of a job's life goes, per relation (table or index) and record type: bulk-enqueues
 * `--jobs` no-op jobs and processes them with one worker (concurrency 10, prefetch 500, maintenance
 * off), a CHECKPOINT before each phase, then reads that phase's WAL back with pg_walinspect
 * (PostgreSQL 15+, contrib) and sums record and full-page-image bytes per relation. One run each
 * with the event log on and off (PostgresBackendOptions.eventLog). Needs a superuser (the
 * throwaway server's, unless DATABASE_URL).
 */
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, conveyorProcessFilled, FILL_CHUNK, fmt, noopJobs } from "./lib.js";
import { freshDatabase } from "./pg-scale.js";

interface WalRow {
  relation: string;
  record_type: string;
  records: string;
  bytes: string;
  fpi_bytes: string;
}

async function lsn(c: pg.Client): Promise<string> {
  await c.query("CHECKPOINT");
  return (await c.query<{ lsn: string }>("SELECT pg_current_wal_lsn() AS lsn")).rows[0]!.lsn;
}

/** The WAL between `from` and now, summed per relation (by its relfilenode in the first block reference) and record type. */
async function breakdown(c: pg.Client, from: string): Promise<WalRow[]> {
  const { rows } = await c.query<WalRow>(
    `WITH r AS (
       SELECT resource_manager || '/' || split_part(record_type, ' ', 1) AS record_type, record_length, fpi_length,
              substring(block_ref from 'rel \\d+/\\d+/(\\d+)')::oid AS node
       FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_lsn())
     )
     SELECT coalesce(c.relname, CASE WHEN r.node IS NULL THEN '(no relation)' ELSE 'other' END) AS relation, r.record_type,
            count(*) AS records, sum(r.record_length) AS bytes, sum(r.fpi_length) AS fpi_bytes
     FROM r LEFT JOIN pg_class AS c ON c.relfilenode = r.node
     GROUP BY 1, 2 ORDER BY sum(r.record_length) DESC`,
    [from],
  );
  return rows;
}

function print(title: string, rows: WalRow[], jobs: number): void {
  const total = rows.reduce((s, r) => s + Number(r.bytes), 0);
  console.log(`\n${title}: ${fmt(total / jobs)} WAL bytes per job\n`);
  console.log("| relation | record | records per job | bytes per job | of which full-page images |\n| --- | --- | ---: | ---: | ---: |");
  for (const r of rows) {
    if (Number(r.bytes) / jobs < 1) continue;
    console.log(
      `| ${r.relation} | ${r.record_type} | ${(Number(r.records) / jobs).toFixed(2)} | ${fmt(Number(r.bytes) / jobs)} | ${fmt(Number(r.fpi_bytes) / jobs)} |`,
    );
  }
}

export async function main(options: { jobs: number }): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  try {
    for (const eventLog of [true, false]) {
      const db = await freshDatabase(url, "wal");
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      const b = new PostgresBackend({ connectionString: db.url, logger: silentLogger, eventLog });
      try {
        await c.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect");
        await b.migrate();
        const q = new Queue("bench", { backend: b });
        const n = options.jobs;
        let from = await lsn(c);
        for (const [start, length] of chunks(n, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
        print(`event log ${eventLog ? "on" : "off"}, bulk enqueue of ${n}`, await breakdown(c, from), n);
        from = await lsn(c);
        await conveyorProcessFilled(b, n, 10, 500);
        print(`event log ${eventLog ? "on" : "off"}, processing of ${n} (concurrency 10, prefetch 500)`, await breakdown(c, from), n);
      } finally {
        await b.close();
        await c.end();
        await db.drop();
      }
    }
  } finally {
    await server?.stop();
  }
}
