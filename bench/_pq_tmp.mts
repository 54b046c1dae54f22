import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { SqliteBackend } from "../src/backend/sqlite/index.ts";
import { fillQueues, queueNames } from "./queues.ts";
for (const n of [1, 1000]) {
  const dir = mkdtempSync(join(tmpdir(), "pqt-"));
  const backend = new SqliteBackend({ path: join(dir, "b.db") });
  await backend.migrate();
  const names = queueNames(n);
  await fillQueues(backend, names, 5000, true);
  const worker = { id: "w", host: "h", pid: 1 };
  for (let r = 0; r < 3; r++) {
    const t = performance.now();
    const c0 = process.cpuUsage();
    for (let i = 0; i < 300; i++) await backend.claim({ queues: names, names: ["noop"], worker, limit: 5, leaseMs: 600000 });
    const c = process.cpuUsage(c0);
    console.log(n, "ms/claim", ((performance.now() - t) / 300).toFixed(3), "cpu µs", ((c.user + c.system) / 300).toFixed(1));
  }
  await backend.close();
}
