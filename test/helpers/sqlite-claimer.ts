/**
 * Child process of the SQLite multi-process test. Opens the database at argv[2] (creating and
 * migrating it if it is new, racing its siblings), prints "ready", waits for a line on stdin, then
 * claims from queue "shared" five at a time and completes each batch (after a 1 ms pause standing
 * in for the work) until nothing is left.
 * Finally prints one JSON line: every lease it was granted, as [{ "id": ..., "token": ... }].
 *
 * Usage: node --import tsx test/helpers/sqlite-claimer.ts <db path> <worker id>
 */
import { SqliteBackend } from "../../src/backend/sqlite/index.js";

const [path, workerId] = process.argv.slice(2);
if (!path || !workerId) throw new Error("usage: sqlite-claimer.ts <db path> <worker id>");

const backend = new SqliteBackend({ path, wakeups: false });
process.stdout.write("ready\n");
await new Promise((resolve) => process.stdin.once("data", resolve));
process.stdin.pause();

const worker = { id: workerId, host: "sqlite-claimer", pid: process.pid };
const granted: Array<{ id: string; token: number }> = [];
for (;;) {
  const batch = await backend.claim({ queues: ["shared"], names: ["job"], worker, limit: 5, leaseMs: 60_000 });
  if (batch.length === 0) break;
  for (const { lease } of batch) granted.push({ id: lease.jobId, token: lease.token });
  // Stand-in for the handlers' work. Without it one process drains the queue while the others
  // sleep in SQLite's busy handler, and the test would prove little about contention.
  await new Promise((resolve) => setTimeout(resolve, 1));
  await backend.complete(batch.map(({ lease }) => ({ lease, result: workerId })));
}
await backend.close();
process.stdout.write(`${JSON.stringify(granted)}\n`);
