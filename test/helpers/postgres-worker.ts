/**
 * Child process of the PostgreSQL transactional-completion crash test. Runs a Worker on queue
 * "tx" of the given schema with one handler, "marker", which inserts (job id, attempt) into
 * `<schema>.markers` through `ctx.tx()` and returns, so the insert commits together with the
 * job's completion. Prints "ready" once the worker runs. Start it with
 * CONVEYOR_FAILPOINTS=after-handler to have it SIGKILL itself after the handler returned and
 * before that transaction commits.
 *
 * Usage: node --import tsx test/helpers/postgres-worker.ts <database url> <schema> <lease ms>
 */
import pg from "pg";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { silentLogger, Worker } from "../../src/index.js";

const [url, schema, leaseMs] = process.argv.slice(2);
if (!url || !schema || !leaseMs) throw new Error("usage: postgres-worker.ts <database url> <schema> <lease ms>");

const backend = new PostgresBackend({ connectionString: url, schema, logger: silentLogger });
await backend.migrate();
const markers = `${pg.escapeIdentifier(schema)}.markers`;
const worker = new Worker({
  backend,
  queues: "tx",
  leaseMs: Number(leaseMs),
  logger: silentLogger,
  maintenance: false,
  handleSignals: true,
  handlers: {
    marker: async (job, ctx) => {
      const tx = await ctx.tx();
      await tx.query(`INSERT INTO ${markers} (job_id, attempt) VALUES ($1, $2)`, [job.id, job.attempt]);
      return { wrote: job.attempt };
    },
  },
});
worker.on("worker:closed", () => void backend.close());
process.stdout.write("ready\n");
