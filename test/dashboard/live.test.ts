/**
 * The dashboard's LiveHub on a store with an event log: a topic is read when an event concerns
 * it (through the process's one EventTail), not on a timer; events of other queues cost it
 * nothing.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { LiveHub } from "../../src/dashboard/live.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { EventTail } from "../../src/producer/event-tail.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});
afterAll(() => temp.removeAll());

it("reads a topic when an event of its queue is logged, once per interval at most, and not for other queues' events nor while idle", async () => {
  const backend = new SqliteBackend({ path: await temp.file("db.sqlite") });
  await backend.migrate();
  cleanups.push(() => backend.close());
  let logReads = 0;
  const counted = Object.assign(Object.create(backend) as SqliteBackend, {
    readEvents: (cursor: string, limit: number) => {
      logReads++;
      return backend.readEvents(cursor, limit);
    },
  });
  // A long idle refresh: every read below is caused by an event.
  const tail = EventTail.of(counted, { pollIntervalMs: 20 });
  const hub = new LiveHub(
    { intervalMs: 50, idleRefreshMs: 600_000, heartbeatMs: 60_000, maxStreams: 10 },
    (error) => {
      throw error;
    },
    tail,
  );
  let reads = 0;
  const server: Server = createServer((req, res) => {
    hub.open(
      req,
      res,
      "queue:q",
      async () => {
        reads++;
        const [stats] = await backend.stats("q");
        return { waiting: stats?.counts.waiting ?? 0 };
      },
      {},
      (event) => event.queue === "q",
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  cleanups.push(() => hub.close());

  const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  let text = "";
  const snapshots = () => [...text.matchAll(/data: (\{.*\})\n/g)].map((m) => JSON.parse(m[1]!) as { waiting: number });
  void (async () => {
    for (;;) {
      const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
      if (done) return;
      text += new TextDecoder().decode(value);
    }
  })();
  cleanups.unshift(() => reader.cancel().catch(() => {}));

  await waitFor(() => snapshots().length === 1, { description: "the first snapshot" });
  expect(snapshots()[0]).toEqual({ waiting: 0 });
  await waitFor(() => tail!.size > 0, { description: "the hub listening to the tail" });
  // Idle: ten reads of the log later, the topic was read no more than at its start and once
  // when the tail began (the read that closes the gap between the two).
  const idleFrom = logReads;
  await waitFor(() => logReads >= idleFrom + 10, { description: "ten reads of the event log" });
  const readsWhenIdle = reads;
  expect(readsWhenIdle).toBeLessThanOrEqual(2);
  const startLogReads = logReads;
  await waitFor(() => logReads >= startLogReads + 10, { description: "ten more reads of the event log" });
  expect(reads).toBe(readsWhenIdle);

  // Another queue's event: nothing to read.
  await backend.enqueue([buildJobSpec({ queue: "other", name: "n", data: null })]);
  const afterOther = logReads;
  await waitFor(() => logReads >= afterOther + 5, { description: "the log read past the other queue's event" });
  expect(reads).toBe(readsWhenIdle);

  // This queue's events: read, and the new snapshot sent.
  await backend.enqueue([buildJobSpec({ queue: "q", name: "n", data: null })]);
  await waitFor(() => snapshots().some((s) => s.waiting === 1), { description: "a snapshot with the new job" });
  expect(reads).toBeGreaterThan(readsWhenIdle);
  // Five events at once: read at most once per interval, not five times.
  const before = reads;
  await backend.enqueue(Array.from({ length: 5 }, () => buildJobSpec({ queue: "q", name: "n", data: null })));
  await waitFor(() => snapshots().some((s) => s.waiting === 6), { description: "a snapshot with six jobs" });
  expect(reads - before).toBeLessThanOrEqual(2);
});
