/**
 * The RabbitMQ backend under faults, on a private broker this file may stop: the broker restarted
 * mid-run, every connection closed from the server side (rabbitmqctl), a worker
 * process SIGKILLed holding jobs, and a poison message that kills every worker that takes it.
 * In each, every job confirmed at enqueue runs to completion (or, the poison pill, ends in the
 * dead queue with the reason): none is lost.
 */
import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { connect } from "amqplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AmqpBackend } from "../../src/backend/amqp/index.js";
import { bucketOf, declareDelay, Names } from "../../src/backend/amqp/topology.js";
import { silentLogger } from "../../src/core/logger.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { Worker } from "../../src/runtime/worker.js";
import { ROOT } from "../helpers/cli.js";
import { findRabbitServer, rabbitName, startThrowawayRabbit, type ThrowawayRabbit } from "../helpers/rabbitmq.js";
import { waitFor } from "../helpers/wait-for.js";

let broker: ThrowawayRabbit;
beforeAll(async () => {
  if (findRabbitServer() === null) throw new Error("no rabbitmq-server installed (apt-get install rabbitmq-server)");
  broker = await startThrowawayRabbit();
}, 120_000);
afterAll(async () => {
  await broker?.stop();
});

const closeAfter: Array<{ close(): Promise<unknown> }> = [];
afterAll(async () => {
  for (const c of closeAfter.reverse()) await c.close();
});

function jobs(queue: string, name: string, count: number) {
  return Array.from({ length: count }, (_, i) =>
    buildJobSpec({ queue, name, data: { i }, options: { attempts: 10, backoff: { type: "fixed", delayMs: 50 } } }),
  );
}

/** A worker counting completions per job id (a job may run twice after a fault, never zero times). */
/** `hold`, when given, is awaited by every handler before it works (a test holds jobs across a fault with it). */
function countingWorker(backend: AmqpBackend, queue: string, handlerMs: number, hold?: () => Promise<void>) {
  const done = new Map<string, number>();
  const worker = new Worker({
    backend,
    queues: queue,
    concurrency: 10,
    logger: silentLogger,
    maintenance: false,
    pollIntervalMs: 200,
    handlers: {
      job: async () => {
        await hold?.();
        await new Promise((r) => setTimeout(r, handlerMs));
      },
    },
  });
  worker.on("job:completed", ({ job }) => done.set(job.id, (done.get(job.id) ?? 0) + 1));
  closeAfter.push(worker);
  return { worker, done };
}

describe("RabbitMQ faults", () => {
  // A restart, not a SIGKILL: RabbitMQ 3.10 here loses messages it confirmed within the last moments
  // before a SIGKILL of its node (seen with plain amqplib too; see docs/amqp.md), which no client can help.
  it("broker restarted mid-run: every confirmed job still completes", { timeout: 90_000 }, async () => {
    const backend = new AmqpBackend({ url: broker.url, prefix: rabbitName("restart"), logger: silentLogger, heartbeatSeconds: 2 });
    closeAfter.push(backend);
    const ids = (await backend.enqueue(jobs("restart", "job", 300))).map((r) => r.id);
    const { done } = countingWorker(backend, "restart", 5);
    await waitFor(() => done.size >= 50, { timeoutMs: 20_000 });
    await broker.terminate();
    await broker.start();
    await waitFor(() => ids.every((id) => done.has(id)), { timeoutMs: 60_000, description: "every job completed after the restart" });
    expect(done.size).toBe(300);
  });

  it("every connection closed by the server (rabbitmqctl close_all_connections) mid-run: reconnects, nothing lost", { timeout: 60_000 }, async () => {
    // Records how many jobs were done when the backend saw its session go.
    const lostAt: number[] = [];
    let done = new Map<string, number>();
    const logger = { ...silentLogger, warn: (_fields: object, message: string) => void (message.includes("session lost") && lostAt.push(done.size)) };
    const backend = new AmqpBackend({ url: broker.url, prefix: rabbitName("close"), logger });
    closeAfter.push(backend);
    const ids = (await backend.enqueue(jobs("close", "job", 500))).map((r) => r.id);
    // Jobs after the first 20 wait until the session is gone, so the close always lands mid-run
    // (on a loaded machine rabbitmqctl alone can take longer than the 500 jobs).
    let release!: () => void;
    const closed = new Promise<void>((resolve) => (release = resolve));
    ({ done } = countingWorker(backend, "close", 20, () => (done.size >= 20 ? closed : Promise.resolve())));
    await waitFor(() => done.size >= 20, { timeoutMs: 20_000 });
    await broker.ctl(["close_all_connections", "conveyor fault test"]);
    await waitFor(() => lostAt.length >= 1, { timeoutMs: 20_000, description: "the backend saw its session go" });
    release();
    await waitFor(() => ids.every((id) => done.has(id)), { timeoutMs: 40_000, description: "every job completed after the close" });
    expect(lostAt.length).toBeGreaterThanOrEqual(1);
    expect(lostAt[0]).toBeLessThan(500);
  });

  it("a worker SIGKILLed holding jobs: the broker redelivers them to another worker", { timeout: 60_000 }, async () => {
    const prefix = rabbitName("kill");
    const backend = new AmqpBackend({ url: broker.url, prefix, logger: silentLogger });
    closeAfter.push(backend);
    const ids = (await backend.enqueue(jobs("faults", "slow", 8))).map((r) => r.id);
    const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/amqp-worker.ts", broker.url, prefix, "20"], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    await waitFor(() => (out.match(/started/g) ?? []).length >= 4, { timeoutMs: 30_000, description: "the child started 4 jobs" });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
    const done = new Set<string>();
    const worker = new Worker({
      backend,
      queues: "faults",
      concurrency: 8,
      logger: silentLogger,
      maintenance: false,
      handlers: { slow: async () => undefined },
    });
    closeAfter.push(worker);
    worker.on("job:completed", ({ job }) => done.add(job.id));
    await waitFor(() => ids.every((id) => done.has(id)), { timeoutMs: 20_000, description: "the killed worker's jobs ran elsewhere" });
  });

  it("a process stopped while the broker closes its connection starts none of that session's deliveries when it resumes", { timeout: 90_000 }, async () => {
    const prefix = rabbitName("silent");
    const total = 6;
    const backend = new AmqpBackend({ url: broker.url, prefix, logger: silentLogger });
    closeAfter.push(backend);
    await backend.enqueue(jobs("silent", "job", total));
    const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/amqp-silent-claimer.ts", broker.url, prefix, String(total)], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    try {
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      await waitFor(() => out.includes("ready"), { timeoutMs: 30_000, description: "the child holds one job and buffers the rest" });
      child.kill("SIGSTOP");
      const stoppedAt = Date.now();
      // The broker closes every connection (the child's too) while the child cannot read; as the
      // chaos harness's cut does, asynchronously on the node, so the stopped peer cannot hold it up.
      const closed = await broker.ctl([
        "eval",
        'Ps = rabbit_networking:connections(), [spawn(fun() -> rabbit_networking:close_connection(P, "test: closed while its client was stopped") end) || P <- Ps], timer:sleep(500), Ps.',
      ]);
      expect(closed).toMatch(/<\d+\.\d+\.\d+>/);
      // The child starts draining when it sees a gap of 1.5 s in its own ticks: on an idle machine
      // rabbitmqctl can answer sooner than that, so the stop lasts at least 2.5 s.
      await sleep(Math.max(0, stoppedAt + 2_500 - Date.now()));
      child.kill("SIGCONT");
      await waitFor(() => /applied \d+ stale \d+/.test(out), { timeoutMs: 45_000, description: "the child's report" });
      // Every job completed once, on the new session; none handed out of the closed one (those
      // would settle stale: the broker took them back with the close and delivers them again).
      expect(out).toMatch(new RegExp(`applied ${total} stale 0 distinct ${total}`));
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
  });

  it("a poison message that SIGKILLs every worker taking it is dead-lettered after x-delivery-limit, with the reason", { timeout: 60_000 }, async () => {
    const prefix = rabbitName("poison");
    const deliveryLimit = 1;
    const backend = new AmqpBackend({ url: broker.url, prefix, deliveryLimit, logger: silentLogger, queues: ["faults"] });
    closeAfter.push(backend);
    const [{ id }] = (await backend.enqueue(jobs("faults", "poison", 1))) as unknown as [{ id: string }];
    // Each child takes the job and dies with it; after deliveryLimit + 1 deliveries the broker
    // dead-letters the message instead of delivering it again.
    for (let run = 0; run <= deliveryLimit; run++) {
      const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/amqp-worker.ts", broker.url, prefix, String(deliveryLimit)], {
        cwd: ROOT,
        stdio: ["ignore", "ignore", "inherit"],
      });
      const signal = await new Promise((resolve) => child.once("exit", (_code, sig) => resolve(sig)));
      expect(signal).toBe("SIGKILL");
    }
    const dead = await waitFor(() => backend.list({ queue: "faults", state: "dead" }).then((l) => l[0]), { timeoutMs: 10_000 });
    expect(dead).toMatchObject({ id, state: "dead", name: "poison", error: { name: "LeaseExpiredError" } });
    expect(dead.error!.message).toContain("x-delivery-limit");
  });

  it("settle order: when the broker refuses the retry copy, the original is not acked and the job is kept", { timeout: 60_000 }, async () => {
    const prefix = rabbitName("order");
    const backend = new AmqpBackend({ url: broker.url, prefix, logger: silentLogger, claimWaitMs: 2_000, confirmTimeoutMs: 5_000 });
    closeAfter.push(backend);
    await backend.enqueue(jobs("order", "job", 1));
    const [claimed] = await backend.claim({ queues: ["order"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 30_000 });
    // The delay queue of a 5 s retry is full (max-length 0, and the queue rejects publishes): the
    // broker nacks the retry copy while the channels stay open.
    // (A quorum queue rejects once it is over its limit, so it holds one filler message first.)
    const admin = await connect(broker.url);
    const adminChannel = await admin.createConfirmChannel();
    await declareDelay(adminChannel, new Names(prefix), "order", bucketOf(5_000));
    adminChannel.sendToQueue(new Names(prefix).delay("order", bucketOf(5_000)), Buffer.from("filler"), { persistent: true });
    await adminChannel.waitForConfirms();
    await admin.close();
    await broker.ctl(["set_policy", "--apply-to", "queues", "full-delay", `^${prefix}~order~delay~`, '{"max-length":0}']);
    try {
      await expect(backend.fail([{ lease: claimed!.lease, error: { name: "E", message: "x", stack: null }, retryDelayMs: 5_000 }])).rejects.toThrow();
    } finally {
      await broker.ctl(["clear_policy", "full-delay"]);
    }
    // Not acked: closing the connection hands the delivery back, and the job is in its queue.
    await backend.close();
    const connection = await connect(broker.url);
    try {
      const channel = await connection.createChannel();
      await waitFor(async () => (await channel.checkQueue(`${prefix}~order`)).messageCount === 1, {
        timeoutMs: 10_000,
        description: "the job back in its work queue",
      });
    } finally {
      await connection.close();
    }
  });
});
