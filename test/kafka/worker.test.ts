/**
 * The Kafka consumer transport against librdkafka's mock cluster (a Kafka-protocol TEST BROKER
 * started by kcat, not Kafka): per-partition concurrency and per-key order, retries through the
 * retry topic, poison messages to the dead-letter topic with the forensics headers, graceful
 * shutdown that commits before leaving, rebalances when a worker joins and when one is SIGKILLed
 * (nothing lost; duplicates only of messages whose offsets were not committed), and the lag.
 */
import { spawn } from "node:child_process";
import { hostname } from "node:os";
import { Kafka, logLevel, type Producer } from "kafkajs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { defineJob } from "../../src/core/define.js";
import { RetryLater, UnrecoverableError } from "../../src/core/errors.js";
import type { PayloadSchema } from "../../src/core/define.js";
import { KafkaWorker, type KafkaWorkerOptions } from "../../src/kafka/index.js";
import { ConveyorMetrics } from "../../src/observability/index.js";
import { silentLogger } from "../../src/core/logger.js";
import { ROOT } from "../helpers/cli.js";
import { freePort } from "../helpers/ports.js";
import { kafkaBrokers, kafkaName, readTopic, requireKafka } from "../helpers/kafka.js";
import { waitFor } from "../helpers/wait-for.js";

const url = requireKafka(inject("kafkaUrl"), inject("kafkaUnavailable"));
const kafka = new Kafka({ brokers: kafkaBrokers(url), logLevel: logLevel.NOTHING });
let producer: Producer;
beforeAll(async () => {
  producer = kafka.producer();
  await producer.connect();
});
afterAll(() => producer.disconnect());

async function topicWith(count: number, keys: number, label = "w"): Promise<{ topic: string; ids: string[] }> {
  // The mock creates a topic on first use with 4 partitions (its CreateTopics needs a controller
  // that kafkajs cannot find in the mock's metadata: docs/kafka.md).
  const topic = kafkaName(label);
  const ids: string[] = [];
  const messages = Array.from({ length: count }, (_, n) => {
    ids.push(`m${n}`);
    return { key: `k${n % keys}`, value: JSON.stringify({ n, key: `k${n % keys}` }), headers: { "outbox-id": `m${n}` } };
  });
  for (let i = 0; i < messages.length; i += 100) await producer.send({ topic, acks: -1, messages: messages.slice(i, i + 100) });
  return { topic, ids };
}

/** A worker closed when its test ends (the tests run concurrently: each cleans up its own). */
function worker(
  onTestFinished: (fn: () => Promise<void>) => void,
  options: Partial<KafkaWorkerOptions> & Pick<KafkaWorkerOptions, "topic" | "handlers">,
): KafkaWorker {
  const w = new KafkaWorker({ url, groupId: `${options.topic}-g`, heartbeatIntervalMs: 500, sessionTimeoutMs: 6_000, shutdownGraceMs: 10_000, ...options });
  onTestFinished(async () => void (await w.close()));
  return w;
}

const orderSchema: PayloadSchema<{ n: number; key: string }> = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: (value) => {
      const v = value as { n?: unknown; key?: unknown };
      return typeof v?.n === "number" && typeof v.key === "string" ? { value: { n: v.n, key: v.key } } : { issues: [{ message: "n and key required" }] };
    },
  },
};

// Concurrent: most of each test is the broker's group timing (the mock delays a group's first
// join by ~3 s, a SIGKILLed member is noticed after its session timeout), not work.
describe.concurrent("KafkaWorker (mock broker, not Kafka)", () => {
  it("runs a defined job's handler per message, partitions concurrently, each key in order; commits, so the lag drains to 0", async ({ onTestFinished }) => {
    const { topic, ids } = await topicWith(200, 8);
    const order = new Map<string, number[]>();
    let concurrent = 0;
    let maxConcurrent = 0;
    const def = defineJob(topic, orderSchema);
    const w = worker(onTestFinished, {
      topic,
      concurrency: 4,
      handlers: [
        def.handle(async (job) => {
          concurrent++;
          maxConcurrent = Math.max(maxConcurrent, concurrent);
          await new Promise((resolve) => setTimeout(resolve, 2));
          order.set(job.data.key, [...(order.get(job.data.key) ?? []), job.data.n]);
          concurrent--;
        }),
      ],
    });
    const seen: string[] = [];
    w.on("job:completed", ({ job }) => seen.push(job.id));
    // The Worker's event map: the Prometheus metrics observe a KafkaWorker as they do a Worker.
    const metrics = new ConveyorMetrics();
    const unobserve = metrics.observe(w);
    onTestFinished(async () => unobserve());
    await waitFor(() => seen.length >= 200, { timeoutMs: 30_000, description: "200 messages handled" });
    expect(new Set(seen)).toEqual(new Set(ids));
    const completed = (await metrics.registry.getSingleMetric("conveyor_jobs_completed_total")!.get()).values.filter((v) => v.labels.name === topic);
    expect(completed.reduce((n, v) => n + v.value, 0)).toBe(200);
    for (const [key, ns] of order) expect(ns).toEqual([...ns].sort((a, b) => a - b).filter((n) => `k${n % 8}` === key));
    expect(maxConcurrent).toBeGreaterThan(1);
    expect(maxConcurrent).toBeLessThanOrEqual(4);
    const lag = await waitFor(
      async () => {
        const l = await w.lag();
        return l.filter((p) => p.topic === topic).reduce((n, p) => n + p.lag, 0) === 0 ? l : null;
      },
      { timeoutMs: 15_000, description: "the lag drained to 0" },
    );
    expect(
      lag
        .filter((p) => p.topic === topic)
        .map((p) => p.partition)
        .sort(),
    ).toEqual([0, 1, 2, 3]);
    expect(lag.filter((p) => p.topic === topic).reduce((n, p) => n + p.highWatermark, 0)).toBe(200);
  });

  it("reports the lag per partition of what is produced and not yet committed", async ({ onTestFinished }) => {
    const { topic } = await topicWith(40, 4, "lag");
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const w = worker(onTestFinished, { topic, concurrency: 4, handlers: { [topic]: () => gate } });
    await waitFor(() => w.busySlotCount > 0, { timeoutMs: 20_000 });
    const lag = await w.lag();
    expect(lag.filter((p) => p.topic === topic).reduce((n, p) => n + p.lag, 0)).toBe(40);
    release();
    await waitFor(async () => (await w.lag()).filter((p) => p.topic === topic).every((p) => p.lag === 0), { timeoutMs: 20_000 });
  });

  it("retries a failing message through the retry topic with the job's backoff, then it succeeds", async ({ onTestFinished }) => {
    const { topic } = await topicWith(1, 1, "retry");
    const attempts: number[] = [];
    const w = worker(onTestFinished, {
      topic,
      attempts: 3,
      backoff: { type: "exponential", delayMs: 200, maxDelayMs: 400 },
      handlers: {
        [topic]: async (job) => {
          attempts.push(job.attempt);
          if (job.attempt < 3) throw new Error(`flaky ${job.attempt}`);
          return { ok: true };
        },
      },
    });
    const delays: number[] = [];
    w.on("job:retry-scheduled", ({ delayMs }) => delays.push(delayMs));
    const done = new Promise<number>((resolve) => w.once("job:completed", ({ job }) => resolve(job.attempt)));
    expect(await done).toBe(3);
    expect(attempts).toEqual([1, 2, 3]);
    // Full jitter: each delay within [0, min(max, base·2^(attempt−1))].
    expect(delays[0]).toBeLessThanOrEqual(200);
    expect(delays[1]).toBeLessThanOrEqual(400);
    const copies = await readTopic(url, `${topic}.retry`);
    expect(copies.map((r) => r.headers["conveyor-attempt"])).toEqual(["2", "3"]);
    expect(copies[0]!.headers).toMatchObject({ "conveyor-error-message": "flaky 1", "conveyor-source-topic": topic, "outbox-id": "m0" });
    expect(Number(copies[0]!.headers["conveyor-not-before"])).toBeGreaterThanOrEqual(Number(copies[0]!.headers["conveyor-failed-at"]));
  });

  it("sends a poison message to the dead-letter topic with the forensics headers, and the rest of the partition goes on", async ({ onTestFinished }) => {
    const { topic } = await topicWith(12, 1, "dlq");
    const handled: number[] = [];
    const w = worker(onTestFinished, {
      topic,
      attempts: 2,
      backoff: { type: "fixed", delayMs: 50 },
      handlers: {
        [topic]: async (job) => {
          const { n } = job.data as { n: number };
          if (n === 3) throw new TypeError("poison: cannot charge");
          if (n === 5) throw new UnrecoverableError("card declined");
          if (n === 7) throw new RetryLater(10);
          handled.push(n);
        },
      },
    });
    const dead: string[] = [];
    w.on("job:dead", ({ job }) => dead.push(job.id));
    await producer.send({ topic, acks: -1, messages: [{ key: "k0", value: "{not json", headers: { "outbox-id": "garbage" } }] });
    await waitFor(() => dead.length >= 4 && handled.length >= 9, { timeoutMs: 30_000, description: "3 dead, the rest handled" });
    expect(handled.sort((a, b) => a - b)).toEqual([0, 1, 2, 4, 6, 8, 9, 10, 11]);
    const letters = await readTopic(url, `${topic}.dead`);
    const byId = new Map(letters.map((r) => [r.headers["outbox-id"], r]));
    expect([...byId.keys()].sort()).toEqual(["garbage", "m3", "m5", "m7"]);
    const poison = byId.get("m3")!;
    expect(poison.key).toBe("k0");
    expect(JSON.parse(poison.payload!)).toEqual({ n: 3, key: "k0" });
    expect(poison.headers).toMatchObject({
      "conveyor-job": topic,
      "conveyor-attempt": "2",
      "conveyor-max-attempts": "2",
      "conveyor-dead-reason": "attempts-exhausted",
      "conveyor-error-name": "TypeError",
      "conveyor-error-message": "poison: cannot charge",
      "conveyor-source-topic": topic,
      "conveyor-host": hostname(),
      "conveyor-pid": String(process.pid),
      "conveyor-worker-id": w.id,
    });
    expect(poison.headers["conveyor-error-stack"]).toMatch(/TypeError: poison: cannot charge\n\s+at /);
    expect(Number(poison.headers["conveyor-first-attempt-at"])).toBeLessThanOrEqual(Number(poison.headers["conveyor-last-started-at"]));
    expect(Number(poison.headers["conveyor-last-started-at"])).toBeLessThanOrEqual(Number(poison.headers["conveyor-failed-at"]));
    expect(poison.headers["conveyor-source-partition"]).toMatch(/^\d$/);
    expect(poison.headers["conveyor-source-offset"]).toMatch(/^\d+$/);
    expect(byId.get("m5")!.headers).toMatchObject({
      "conveyor-attempt": "1",
      "conveyor-dead-reason": "unrecoverable",
      "conveyor-error-name": "UnrecoverableError",
    });
    expect(byId.get("m7")!.headers).toMatchObject({ "conveyor-attempt": "2", "conveyor-dead-reason": "attempts-exhausted" });
    expect(byId.get("garbage")!.headers["conveyor-error-message"]).toMatch(/not JSON/);
  });

  it("graceful shutdown lets running handlers finish and commits them before leaving: the next worker of the group sees none again", async ({
    onTestFinished,
  }) => {
    const { topic, ids } = await topicWith(60, 6, "drain");
    const first: string[] = [];
    const a = worker(onTestFinished, {
      topic,
      concurrency: 4,
      handlers: { [topic]: async (job) => void (await new Promise((r) => setTimeout(r, 30)), first.push(job.id)) },
    });
    await waitFor(() => first.length >= 10, { timeoutMs: 20_000 });
    expect(await a.close()).toEqual({ drained: true });
    const second: string[] = [];
    worker(onTestFinished, { topic, handlers: { [topic]: async (job) => void second.push(job.id) } });
    await waitFor(() => first.length + second.length >= 60, { timeoutMs: 30_000, description: "the rest handled by the next worker" });
    expect(new Set([...first, ...second])).toEqual(new Set(ids));
    expect(first.filter((id) => second.includes(id))).toEqual([]);
  });

  it("a handler still running when the grace ends is aborted with ShutdownError and its message stays uncommitted for the next worker", async ({
    onTestFinished,
  }) => {
    const { topic } = await topicWith(1, 1, "grace");
    let reason: unknown = null;
    const a = worker(onTestFinished, {
      topic,
      handlers: {
        [topic]: (_job, ctx) =>
          new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject((reason = ctx.signal.reason as Error)), { once: true })),
      },
    });
    await waitFor(() => a.busySlotCount === 1, { timeoutMs: 20_000 });
    expect(await a.close({ graceMs: 200 })).toEqual({ drained: false });
    expect((reason as Error).name).toBe("ShutdownError");
    const again: number[] = [];
    worker(onTestFinished, { topic, handlers: { [topic]: async (job) => void again.push(job.attempt) } });
    // Delivered again, as attempt 1: a shutdown is not a failed attempt.
    await waitFor(() => again.length === 1, { timeoutMs: 20_000, description: "the aborted message delivered again" });
    expect(again).toEqual([1]);
  });

  it("refuses incomplete options, and a broker it cannot reach fails start() (which may be tried again) without hanging close()", async () => {
    expect(() => new KafkaWorker({ url, topic: "", groupId: "g", handlers: { a: () => null } })).toThrow(/needs \{ topic, groupId, handlers \}/);
    expect(() => new KafkaWorker({ url, topic: "t", groupId: "", handlers: { a: () => null } })).toThrow(/groupId/);
    expect(() => new KafkaWorker({ url, topic: "t", groupId: "g", handlers: {} })).toThrow(/needs \{ handlers \}/);
    expect(() => new KafkaWorker({ url, topic: "t", groupId: "g", retryTopic: "t", handlers: { a: () => null } })).toThrow(/three different topics/);
    expect(() => new KafkaWorker({ url: "kafka://nohost", topic: "t", groupId: "g", handlers: { a: () => null } })).toThrow(/host:port/);
    const port = await freePort();
    const w = new KafkaWorker({ url: `kafka://127.0.0.1:${port}`, topic: "t", groupId: "g", handlers: { t: () => null }, autostart: false });
    await expect(w.start()).rejects.toThrow(/Connection error|ECONNREFUSED|connect/i);
    await expect(w.start()).rejects.toThrow(/Connection error|ECONNREFUSED|connect/i);
    expect(await w.close()).toEqual({ drained: true });
  });

  it("rebalances when a second worker joins: both work, every message is handled", { timeout: 60_000 }, async ({ onTestFinished }) => {
    const { topic, ids } = await topicWith(300, 12, "join");
    const byWorker = { a: [] as string[], b: [] as string[] };
    const handler = (who: "a" | "b") => async (job: { id: string }) => {
      await new Promise((r) => setTimeout(r, 15));
      byWorker[who].push(job.id);
    };
    worker(onTestFinished, { topic, concurrency: 4, handlers: { [topic]: handler("a") } });
    await waitFor(() => byWorker.a.length >= 20, { timeoutMs: 20_000 });
    worker(onTestFinished, { topic, concurrency: 4, handlers: { [topic]: handler("b") } });
    await waitFor(() => new Set([...byWorker.a, ...byWorker.b]).size === 300, { timeoutMs: 50_000, description: "all 300 handled" });
    expect(new Set([...byWorker.a, ...byWorker.b])).toEqual(new Set(ids));
    expect(byWorker.b.length).toBeGreaterThan(0);
  });

  it(
    "rebalances when a worker process is SIGKILLed: the survivor takes its partitions, nothing is lost, and it runs again only what was uncommitted at the kill",
    { timeout: 60_000 },
    async ({ onTestFinished }) => {
      const { topic, ids } = await topicWith(300, 12, "kill");
      const groupId = `${topic}-g`;
      const child = spawn(process.execPath, ["--import", "tsx", "test/fixtures/kafka-worker.ts", url, topic, groupId, "60"], {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "pipe"],
      });
      onTestFinished(async () => void child.kill("SIGKILL"));
      /** What the child finished: id → where the message was. */
      const byChild = new Map<string, { partition: number; offset: number }>();
      const childAssignments: Array<Record<string, number[]>> = [];
      /** The ledger of the child's acknowledged commits: partition → highest committed offset. */
      const childCommits = new Map<number, number>();
      let out = "";
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        const lines = out.split("\n");
        out = lines.pop()!;
        for (const line of lines) {
          const [kind, ...rest] = line.split(" ");
          if (kind === "done") byChild.set(rest[0]!, { partition: Number(rest[1]), offset: Number(rest[2]) });
          if (kind === "commit") childCommits.set(Number(rest[0]), Math.max(childCommits.get(Number(rest[0])) ?? 0, Number(rest[1])));
          if (kind === "assigned" && rest[0] !== "{}") childAssignments.push(JSON.parse(rest.join(" ")) as Record<string, number[]>);
        }
      });
      await waitFor(() => byChild.size >= 40, { timeoutMs: 30_000, description: "the child worked a while" });
      const bySurvivor: Array<{ id: string; partition: number; offset: number }> = [];
      const kafkaLog: string[] = [];
      const logTo = (level: string) => (fields: unknown, msg?: string) => void kafkaLog.push(`${level} ${msg ?? ""} ${JSON.stringify(fields).slice(0, 400)}`);
      const survivor = worker(onTestFinished, {
        topic,
        groupId,
        logger: { ...silentLogger, warn: logTo("warn"), error: logTo("error") },
        concurrency: 4,
        handlers: {
          [topic]: async (job) => {
            await new Promise((r) => setTimeout(r, 5));
            const { partition, offset } = job.meta!.kafka as { partition: number; offset: string };
            bySurvivor.push({ id: job.id, partition, offset: Number(offset) });
          },
        },
      });
      const survivorErrors: string[] = [];
      survivor.on("worker:error", ({ error, during }) => survivorErrors.push(`${during}: ${error.message}`));
      await waitFor(() => bySurvivor.length > 0 && childAssignments.length >= 2, {
        timeoutMs: 30_000,
        description: "the rebalance split the partitions between the child and the second worker",
      }).catch((error: unknown) => {
        throw new Error(
          `${String(error)}; survivor ran ${bySurvivor.length}, child assignments ${JSON.stringify(childAssignments)}, child finished ${byChild.size}, survivor errors ${JSON.stringify(survivorErrors)}, survivor assignment ${JSON.stringify(survivor.assignment)}\n${kafkaLog.join("\n")}`,
        );
      });
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGKILL");
      await exited;
      // The child is dead: what the group has committed for its partitions can no longer move
      // until the survivor is given them (after the session timeout). Read it from the brokers now.
      const heldAtKill = childAssignments.at(-1)![topic] ?? [];
      expect(heldAtKill.length).toBeGreaterThan(0);
      const admin = kafka.admin();
      await admin.connect();
      const committed = new Map((await admin.fetchOffsets({ groupId, topics: [topic] }))[0]!.partitions.map((p) => [p.partition, Number(p.offset)]));
      await admin.disconnect();
      // Killed with work outstanding: the survivor has partitions to take over.
      expect(new Set([...byChild.keys(), ...bySurvivor.map((s) => s.id)]).size).toBeLessThan(300);
      await waitFor(() => new Set([...byChild.keys(), ...bySurvivor.map((s) => s.id)]).size === 300, {
        timeoutMs: 45_000,
        description: "every message handled by one or the other",
      });
      expect(new Set([...byChild.keys(), ...bySurvivor.map((s) => s.id)])).toEqual(new Set(ids));
      // The survivor runs nothing twice itself, unless its own consumer crashed and a new one
      // fetched again from its last commit (the mock can answer a racing SyncGroup with
      // INVALID_REQUEST; the worker then rejoins with a new consumer: at least once, as promised).
      if (survivorErrors.length === 0) expect(new Set(bySurvivor.map((s) => s.id)).size).toBe(bySurvivor.length);
      // The brokers' committed offsets of the partitions the child held at the kill are what its
      // ledger says (or one commit further, acknowledged as it died and never printed).
      for (const p of heldAtKill) expect(committed.get(p) ?? -1, `partition ${p}`).toBeGreaterThanOrEqual(childCommits.get(p) ?? -1);
      // Duplicates ⊆ what the child left uncommitted: each at or after the last offset it committed
      // in that partition (on a partition it held at the kill: the brokers' committed offset then;
      // one that moved when the survivor joined: the child's last commit before the move).
      const duplicates = bySurvivor.filter((s, i) => byChild.has(s.id) && bySurvivor.findIndex((t) => t.id === s.id) === i);
      const floor = (p: number) => (heldAtKill.includes(p) ? Math.max(committed.get(p) ?? 0, 0) : (childCommits.get(p) ?? 0));
      const outside = duplicates.filter((d) => d.offset < floor(d.partition));
      expect(
        outside,
        `committed at the kill: ${JSON.stringify([...committed])}, child held ${JSON.stringify(heldAtKill)}, its ledger ${JSON.stringify([...childCommits])}`,
      ).toEqual([]);
      // Each duplicate is the same record (partition and offset) the child finished.
      for (const d of duplicates) expect(byChild.get(d.id)).toEqual({ partition: d.partition, offset: d.offset });
    },
  );
});
