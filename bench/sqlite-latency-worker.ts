/** Child process of bench/sqlite.ts: an idle worker on the given SQLite file reporting each start time. */
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { silentLogger, Worker } from "../src/index.js";

const backend = new SqliteBackend({ path: process.argv[2]! });
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
