/**
 * A child's settle and its parent's release are one atomic step: a process that dies after the
 * statement that settles the child, before its transaction commits, leaves neither applied (no
 * child completed with its parent still waiting, no parent released by a child still running).
 * The crash is real: the PostgreSQL connection is terminated by the server, the SQLite writer is
 * a separate process killed with SIGKILL. Then the ordinary recovery (lease expiry, rescue, a
 * second attempt) completes the child and releases the parent.
 *
 * Redis is not here: a script cannot be interrupted between two of its commands (Redis runs it
 * whole, and replicates and persists its effects as one MULTI/EXEC), so there is no point between
 * the child's settle and the parent's release to crash in.
 */
import { spawn } from "node:child_process";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { FakeClock } from "../../src/core/clock.js";
import type { FlowNodeSpec } from "../../src/core/job.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { ROOT } from "../helpers/cli.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { TempDirs } from "../helpers/temp.js";

const stores = postgresTestStores({ poolSize: 2 });
const { url, admin } = stores;
const temp = new TempDirs("conveyor-flows-crash-");
afterAll(() => temp.removeAll());

const WORKER = { id: "w", host: "h", pid: 1 };
const LEASE_MS = 30_000;

function flow(): FlowNodeSpec[] {
  const spec = (jobId: string, name: string) => buildJobSpec({ queue: "q", name, data: null, options: { jobId, attempts: 2 } });
  return [
    { spec: spec("p", "parent"), parent: null, onChildFailure: "fail" },
    { spec: spec("c", "child"), parent: 0, onChildFailure: "fail" },
  ];
}

/** After the crash: the child's lease runs out, the rescuer retries it, a second worker completes it, and the parent runs. */
async function recover(b: Backend, clock: FakeClock): Promise<void> {
  expect((await b.get("c"))!.state).toBe("active");
  expect((await b.get("p"))!.state).toBe("waiting-children");
  clock.advance(LEASE_MS + 1);
  expect((await b.rescueExpired()).map((r) => [r.id, r.state])).toEqual([["c", "waiting"]]);
  const [again] = await b.claim({ queues: ["q"], names: ["child"], worker: WORKER, limit: 1, leaseMs: LEASE_MS });
  expect(await b.complete([{ lease: again!.lease, result: "second attempt" }])).toEqual(["applied"]);
  const [parent] = await b.claim({ queues: ["q"], names: ["parent"], worker: WORKER, limit: 1, leaseMs: LEASE_MS });
  expect(parent?.job.id).toBe("p");
  expect((await b.flow("p"))!.children.map((c) => [c.state, c.result])).toEqual([["completed", "second attempt"]]);
}

describe("flows: a crash between a child's settle and its parent's release", () => {
  it("PostgreSQL: the connection dies after complete.sql ran, before COMMIT: neither the child nor the parent changed", async () => {
    const clock = new FakeClock();
    const b = await stores.open({ clock });
    const schema = b.schema;
    await b.enqueueFlow(flow());
    const [claimed] = await b.claim({ queues: ["q"], names: ["child"], worker: WORKER, limit: 1, leaseMs: LEASE_MS });

    // The real settle statement as this backend renders it (schema, columns, event log switch),
    // in a transaction of its own connection.
    const sql = (b as unknown as { sql: Record<string, string> }).sql.complete!;
    const worker = new pg.Client({ connectionString: url });
    worker.on("error", () => {});
    await worker.connect();
    const {
      rows: [me],
    } = await worker.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    await worker.query("BEGIN");
    const settled = await worker.query(sql, [clock.now(), [claimed!.lease.jobId], [claimed!.lease.token], ['"first attempt"']]);
    expect(settled.rowCount).toBe(1);
    // Inside that transaction the statement already released the parent: one step.
    const { rows: inside } = await worker.query<{ id: string; state: string }>(`SELECT id, state FROM ${pg.escapeIdentifier(schema)}.jobs ORDER BY id`);
    expect(inside).toEqual([
      { id: "c", state: "completed" },
      { id: "p", state: "scheduled" },
    ]);
    // The process dies before COMMIT: the server ends the connection and rolls back.
    await admin.query("SELECT pg_terminate_backend($1)", [me!.pid]);
    await worker.query("COMMIT").catch(() => {});
    await worker.end().catch(() => {});

    await recover(b, clock);
  });

  it("SQLite: a writer process SIGKILLed after the settle UPDATE, before COMMIT: neither the child nor the parent changed", async () => {
    const clock = new FakeClock();
    const path = await temp.file("crash.db");
    const b = new SqliteBackend({ path, clock });
    stores.closeAfterTest(b);
    await b.enqueueFlow(flow());
    const [claimed] = await b.claim({ queues: ["q"], names: ["child"], worker: WORKER, limit: 1, leaseMs: LEASE_MS });

    // Another process settles the child the way the backend does (fenced UPDATE to completed),
    // reports what it sees inside its transaction, and is killed before it commits.
    const script = `
      import Database from "better-sqlite3";
      const db = new Database(${JSON.stringify(path)});
      db.exec("BEGIN IMMEDIATE");
      db.prepare("UPDATE conveyor_jobs SET state = 'completed', result = '1', finished_at = ? WHERE id = 'c' AND lease_token = ? AND state = 'active'")
        .run(${clock.now()}, ${claimed!.lease.token});
      const seen = db.prepare("SELECT id, state FROM conveyor_jobs ORDER BY id").all();
      process.stdout.write(JSON.stringify(seen) + "\\n", () => process.kill(process.pid, "SIGKILL"));
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const signal = await new Promise<NodeJS.Signals | null>((resolve) => child.on("exit", (_code, s) => resolve(s)));
    expect(signal, err).toBe("SIGKILL");
    expect(JSON.parse(out.trim())).toEqual([
      { id: "c", state: "completed" },
      { id: "p", state: "scheduled" },
    ]);

    await recover(b, clock);
  });
});
