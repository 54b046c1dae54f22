/**
 * Child process of bench/sqlite.ts: an idle worker on the given SQLite file reporting each start
 * time. Arguments: the file, then optionally the module URL to take SqliteBackend from (`--ab`
 * races main's backend; default this tree's), then optionally `off` for a file whose event log is
 * off (SqliteBackendOptions.eventLog).
 */
import type { SqliteBackend as SqliteBackendClass } from "../src/backend/sqlite/index.js";
import { silentLogger, Worker } from "../src/index.js";
import { ownModule } from "./lib.js";

const backendModule = process.argv[3] ?? ownModule("src/backend/sqlite/index").href;
const { SqliteBackend } = (await import(backendModule)) as { SqliteBackend: typeof SqliteBackendClass };
const backend = new SqliteBackend({ path: process.argv[2]!, ...(process.argv[4] === "off" ? { eventLog: false } : {}) });
const worker = new Worker({
  backend,
  queues: "bench",
  concurrency: 10,
  logger: silentLogger,
  maintenance: false,
  pollIntervalMs: 5_000,
  handlers: { noop: () => void process.send!(performance.timeOrigin + performance.now()) },
});
process.on(
  "SIGTERM",
  () =>
    void worker
      .close()
      .then(() => backend.close())
      .then(() => process.exit(0)),
);
process.send!("ready");
