/**
 * Crashed workers never leak flow-control slots: a worker process holding a queue's only running
 * slot (maxRunning 1) is killed with SIGKILL; its slot stays taken while its lease is merely
 * expired, and comes back with the lease rescue, on every backend.
 */
import { spawn } from "node:child_process";
import { afterAll, describe, expect, inject, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { normalizeQueueLimits } from "../../src/core/flow.js";
import type { Backend } from "../../src/index.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { ROOT } from "../helpers/cli.js";
import { dropSchemas, randomSchema, requireDatabase } from "../helpers/postgres.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
const pgUrl = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const redisUrl = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const schema = randomSchema("flowcrash");
const prefix = testPrefix("flowcrash");
afterAll(async () => {
  await temp.removeAll();
  await dropSchemas(pgUrl, [schema]);
  await deletePrefix(redisUrl, prefix);
});

const stores: Array<[string, () => Promise<string>]> = [
  ["sqlite", async () => `sqlite:${await temp.file("jobs.db")}`],
  ["postgres", async () => `${pgUrl}${pgUrl.includes("?") ? "&" : "?"}schema=${schema}`],
  ["redis", async () => `${redisUrl}${redisUrl.includes("?") ? "&" : "?"}prefix=${prefix}`],
];

const WORKER = { id: "survivor", host: "test", pid: 1 };

describe.each(stores)("%s: a SIGKILLed worker's slot", (_name, storeUrl) => {
  it("stays taken until the rescue, which gives it back", async () => {
    const url = await storeUrl();
    const backend: Backend = await openBackend(url);
    try {
      await backend.migrate();
      await backend.setQueueLimits("limited", normalizeQueueLimits({ maxRunning: 1 }));
      await backend.enqueue([0, 1].map((i) => buildJobSpec({ queue: "limited", name: "job", data: { i } })));
      const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/flow-slot-holder.ts", url, "limited"], {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "inherit"],
      });
      let output = "";
      child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
      const exited = new Promise((resolve) => child.once("exit", resolve));
      try {
        await waitFor(() => output.includes("started "), { timeoutMs: 30_000 });
      } finally {
        child.kill("SIGKILL");
        await exited;
      }
      const held = output.match(/started (\S+)/)![1]!;
      // The store still shows the dead process's job running: its lease holds the one slot.
      const active = await backend.list({ queue: "limited", state: "active" });
      expect(active.map((j) => j.id)).toEqual([held]);
      expect(active[0]!.lease!.worker.pid).toBe(child.pid);
      expect(await backend.claim({ queues: ["limited"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 30_000 })).toEqual([]);
      // Once the lease expires (1 s), the rescue frees the slot and a survivor can start a job.
      await waitFor(async () => (await backend.rescueExpired()).some((r) => r.id === held), { timeoutMs: 30_000, intervalMs: 100 });
      const claimed = await backend.claim({ queues: ["limited"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 30_000 });
      expect(claimed).toHaveLength(1);
      expect(await backend.claim({ queues: ["limited"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 30_000 })).toEqual([]);
    } finally {
      await backend.close();
    }
  });
});
